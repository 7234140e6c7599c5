/* demo.h - the parts of disco-demo that its main (tools/demo/disco-demo.c)
 * calls: the decoder (demo_decoder.c, the main job), the MLP (demo_mlp.c)
 * and the session part (demo_session.c). */
#ifndef DISCO_TOOLS_DEMO_H
#define DISCO_TOOLS_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include <dlpack/dlpack.h>

#include "disco/status.h"

/* Runs call; on failure prints it with its status and detail, then does
 * on_fail (goto out, return false, ...). Each part wraps it as CHECK. */
#define DEMO_CHECK(call, on_fail)                                                                  \
    do {                                                                                           \
        disco_status_t st_ = (call);                                                               \
        if (st_ != DISCO_OK) {                                                                     \
            printf("  FAILED %s: %s (%s)\n", #call, disco_err_name(st_), disco_last_error());      \
            on_fail;                                                                               \
        }                                                                                          \
    } while (0)

typedef struct demo_mlp_opts {
    int workers;
    int64_t batch, d_model, d_ff;
    int steps;
    uint64_t seed;
    const char *trace_path; /* NULL: no trace file */
    const char *json_path;  /* NULL: no figures file */
    DLDeviceType device;    /* kDLCPU (default), kDLExtDev (sim) or kDLCUDA */
} demo_mlp_opts_t;

#define DEMO_DEC_MAX_PROMPT 64

typedef struct demo_dec_opts {
    int workers;
    int64_t vocab, d_model, layers, heads, d_ff;
    int64_t prompt[DEMO_DEC_MAX_PROMPT]; /* token ids */
    int nprompt;                         /* >= 1 */
    int tokens;                          /* generated greedily, >= 1 */
    uint64_t seed;
    const char *weights_path; /* NULL: the seed's weights; else read from this file */
    const char *save_path;    /* NULL; else the seed's weights are written there first */
    const char *trace_path;   /* NULL: no trace file */
    const char *json_path;    /* NULL: no figures file */
    DLDeviceType device;      /* kDLCPU, kDLExtDev (sim) or kDLCUDA */
    int workers_per_node;     /* > 0: a session across the mpirun job's nodes */
    double hold_s;            /* > 0: then go on stepping this long, or to SIGTERM/SIGINT */
    bool controller_driven;   /* the main form: a command per call and allreduce (else one
                                 command a step); the other runs after it for comparison */
} demo_dec_opts_t;

/** The main job: the tensor-parallel decoder (demo_decoder.c) generating
 *  o->tokens tokens from o->prompt, with the demo library at lib. True if
 *  every step's logits and every token matched the one-process reference. */
bool demo_decoder(const demo_dec_opts_t *o, const char *lib);

/** Whether a CUDA GPU is present (asked in a child process, so this one
 *  never touches CUDA): the default device is cuda then, else cpu. */
bool demo_cuda_present(void);

/** The device's name in the demo's options: "cpu", "sim" or "cuda". */
const char *demo_device_name(DLDeviceType type);

/** Readies device type for the MLP: sim: DISCO_SIM_GPUS set to workers
 *  when unset; cuda: at least one GPU, asked in a child process (this
 *  process must not touch CUDA before its session forks). False, with a
 *  message on stderr, when the device cannot be used. */
bool demo_device_ready(DLDeviceType type, int workers);

/** The main part: the sharded MLP (demo_mlp.c), with the demo library at
 *  lib. True if the result matched the one-process reference. */
bool demo_mlp(const demo_mlp_opts_t *o, const char *lib);

/** Where the demo library is: ../lib beside this program's bin/. */
void demo_library_path(char *out, size_t cap);

/** The session part: library calls on every worker, an error caught, and
 *  call latency over rings and pipes. True if everything checked out. */
bool demo_session(int n);

#endif
