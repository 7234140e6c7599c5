/* demo_device.h - the MLP's device path (demo_device.c), used by
 * demo_mlp.c: the weights and the step's tensors on sim or CUDA devices. */
#ifndef DISCO_TOOLS_DEMO_DEVICE_H
#define DISCO_TOOLS_DEMO_DEVICE_H

#include "disco/session.h"
#include "disco/tensor.h"
#include "tools/demo/demo.h"

/* The registers of the device path: the sharded weights, x on worker 0 and
 * each worker's partial, made once and reused by every step. */
typedef struct demo_dev {
    DLDevice dev;
    disco_dref_t f_part; /* demo.mlp_partial_into */
    disco_dref_t w1, w2; /* [d_model, f], [f, d_model]; f: the largest share */
    disco_dref_t x;      /* [batch, d_model] on worker 0's device */
    disco_dref_t part;   /* [batch, d_model] on every worker's device */
} demo_dev_t;

/** Bytes each worker's device arena needs for the MLP of o (its tensors
 *  and the collectives' results, with room to spare). */
uint64_t demo_dev_arena_bytes(const demo_mlp_opts_t *o);

/** Makes d's registers on o->device in session s (the demo library
 *  loaded) and fills the weights. Not thread-safe (one session). Returns
 *  DISCO_OK or the failing call's status (its error set); on failure the
 *  registers made so far stay in d, for demo_dev_free. */
disco_status_t demo_dev_setup(disco_session_t *s, const demo_mlp_opts_t *o, demo_dev_t *d);

/** One step: hx (host) into x on worker 0's device, broadcast, each
 *  worker's partial, allreduce, y back into hy (host), worker 0 synced.
 *  Returns DISCO_OK or the failing call's status. */
disco_status_t demo_dev_step(disco_session_t *s, const demo_dev_t *d, const DLTensor *hx,
                             DLTensor *hy);

/** Frees d's registers (the zero ones are skipped). */
void demo_dev_free(disco_session_t *s, demo_dev_t *d);

#endif
