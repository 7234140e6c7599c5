/* demo.h - the parts of disco-demo that its main (tools/demo/disco-demo.c)
 * calls: the session part (demo_session.c) and the MLP (demo_mlp.c). */
#ifndef DISCO_TOOLS_DEMO_H
#define DISCO_TOOLS_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct demo_mlp_opts {
    int workers;
    int64_t batch, d_model, d_ff;
    int steps;
    uint64_t seed;
    const char *trace_path; /* NULL: no trace file */
    const char *json_path;  /* NULL: no figures file */
} demo_mlp_opts_t;

/** The main part: the sharded MLP (demo_mlp.c), with the demo library at
 *  lib. True if the result matched the one-process reference. */
bool demo_mlp(const demo_mlp_opts_t *o, const char *lib);

/** Where the demo library is: ../lib beside this program's bin/. */
void demo_library_path(char *out, size_t cap);

/** The session part: library calls on every worker, an error caught, and
 *  call latency over rings and pipes. True if everything checked out. */
bool demo_session(int n);

#endif
