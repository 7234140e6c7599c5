/* demo_decoder_ref.h - the decoder of demo_decoder.h in one process, in
 * plain C (demo_decoder_ref.c): the reference that disco-demo checks every
 * sharded step against. Written apart from the workers' code: unsharded
 * weights, double accumulators. */
#ifndef DISCO_TOOLS_DEMO_DECODER_REF_H
#define DISCO_TOOLS_DEMO_DECODER_REF_H

#include "disco/status.h"
#include "tools/demo/demo_decoder.h"

typedef struct demo_dec_ref demo_dec_ref_t;

/** The model of shape s with the weights of src (the seed's, or a file's
 *  in memory; read now, src is not kept), and an empty KV cache of
 *  s->max_seq positions. Returns DISCO_OK and *ref_out, or DISCO_E_NOMEM
 *  (DISCO_E_INVAL for a shape demo_dec_shape_ok refuses with 1 worker). */
disco_status_t demo_dec_ref_new(const demo_dec_shape_t *s, const demo_dec_src_t *src,
                                demo_dec_ref_t **ref_out);

/** One step: token tok at position pos (the earlier positions stepped
 *  before, in order); its logits into logits [vocab]. */
void demo_dec_ref_step(demo_dec_ref_t *m, int64_t tok, int64_t pos, float *logits);

/** Frees m (NULL is harmless). */
void demo_dec_ref_free(demo_dec_ref_t *m);

#endif
