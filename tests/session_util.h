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

#endif
