/* liveness_util.h - helpers shared by the liveness and shm_lies suites:
 * a session with the test library, tensors of floats, register values. */
#ifndef DISCO_TESTS_LIVENESS_UTIL_H
#define DISCO_TESTS_LIVENESS_UTIL_H

#include <stdlib.h>

#include "disco/session.h"
#include "tests/session_util.h"

#define F32 ((DLDataType){kDLFloat, 32, 1})

static inline disco_session_t *open_cfg(int n, disco_session_transport_t tr, uint32_t timeout_ms)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.transport = tr;
    cfg.call_timeout_ms = timeout_ms;
    cfg.worker_path = DISCO_TEST_WORKER;
    return tu_open_with_testlib(&cfg);
}

/* Copies a host tensor of n floats (value base + i) to worker 0. */
static inline disco_status_t copy_floats(disco_session_t *s, int64_t n, float base,
                                         disco_dref_t *out)
{
    float *buf = malloc((size_t)n * sizeof *buf);
    for (int64_t i = 0; i < n; i++)
        buf[i] = base + (float)i;
    DLTensor host = {.data = buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &n};
    disco_status_t st = disco_session_copy_to_worker0(s, &host, out);
    free(buf);
    return st;
}

/* A register as a call argument. */
static inline disco_value_t dref(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

#endif
