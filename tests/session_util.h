/* session_util.h - opening a session with the test library loaded on every
 * worker (shared by the session, tensor and rpc suites). */
#ifndef DISCO_TESTS_SESSION_UTIL_H
#define DISCO_TESTS_SESSION_UTIL_H

#include "disco/session.h"
#include "tests/testutil.h"

/* Opens a session with cfg and loads tests/testlib.c's library into every
 * worker (asserting each step). */
static inline disco_session_t *tu_open_with_testlib(const disco_session_config_t *cfg)
{
    disco_session_t *s;
    CK_OK(disco_session_open(cfg, &s));
    disco_dref_t r;
    disco_value_t path = disco_value_str(DISCO_TEST_LIB);
    CK_OK(disco_session_call_by_name(s, "disco.load_library", &path, 1, &r));
    for (int w = 0; w < cfg->num_workers; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, r));
    return s;
}

/* A session of n workers launched and connected as asked, with the call
 * timeout timeout_ms (0: the default) and tests/testlib.c loaded. */
static inline disco_session_t *tu_open_as(int n, disco_launch_t launch,
                                          disco_session_transport_t transport, uint32_t timeout_ms)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.launch = launch;
    cfg.transport = transport;
    cfg.call_timeout_ms = timeout_ms;
    cfg.worker_path = DISCO_TEST_WORKER;
    return tu_open_with_testlib(&cfg);
}

/* A register as an argument. */
static inline disco_value_t tu_dref(disco_dref_t r)
{
    disco_value_t v = {.type = DISCO_T_DREF, .v.reg = r};
    return v;
}

/* test.checksum (FNV-1a of the tensor's bytes) of register reg on worker w. */
static inline int64_t tu_checksum_on(disco_session_t *s, disco_dref_t reg, int w)
{
    disco_value_t a = tu_dref(reg), v;
    disco_dref_t c;
    CK_OK(disco_session_call_by_name(s, "test.checksum", &a, 1, &c));
    CK_OK(disco_session_debug_get(s, c, w, &v));
    CK_OK(disco_session_free_reg(s, c));
    return v.v.i;
}

#endif
