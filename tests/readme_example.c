/* readme_example.c - the program in README.md's "A tour of the API", kept
 * the same there and here; tests/install_test.sh builds it against an
 * installed copy, shared and static, with pkg-config, and runs it. */
#include <disco/func.h>
#include <disco/session.h>
#include <stdio.h>

/* A function every worker can run: registered by name when its library loads. */
static disco_status_t scale(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                            disco_value_t *ret)
{
    (void)nargs; /* the signature "i" has made sure it is one int */
    if (args[0].v.i < 0)
        return disco_ctx_fail(ctx, "negative input %lld", (long long)args[0].v.i);
    *ret = disco_value_int(args[0].v.i * (disco_ctx_worker_id(ctx) + 1));
    return DISCO_OK;
}
DISCO_FUNC("my.scale", "i", scale) /* signature: one int */

int main(void)
{
    disco_session_config_t cfg = disco_session_config_default(4); /* 4 workers */
    disco_session_t *s;
    if (disco_session_open(&cfg, &s) != DISCO_OK) {
        fprintf(stderr, "open: %s\n", disco_last_error());
        return 1;
    }
    disco_dref_t f, r;
    disco_session_get_func(s, "my.scale", &f); /* a DRef holding a function */
    disco_value_t arg = disco_value_int(10);
    disco_session_call(s, f, &arg, 1, &r);        /* asynchronous: returns a DRef */
    disco_status_t st = disco_session_sync(s, 3); /* wait for worker 3 */
    if (st != DISCO_OK)                           /* e.g. DISCO_E_REMOTE */
        fprintf(stderr, "%s: %s\n", disco_err_name(st), disco_last_error());
    disco_value_t v;
    if (disco_session_debug_get(s, r, 3, &v) == DISCO_OK) { /* an int: 40 */
        printf("worker 3 says %lld\n", (long long)v.v.i);
        disco_value_clear(&v);
    }
    disco_session_free_reg(s, r); /* frees the register everywhere */
    disco_session_free_reg(s, f);
    disco_session_close(s);
    return st == DISCO_OK ? 0 : 1;
}
