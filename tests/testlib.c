/* testlib.c - the functions the session tests drive, built as a shared
 * library (build/lib/libdisco_testlib.so) and loaded into every worker with
 * the "disco.load_library" builtin. Its disco symbols resolve against the
 * program that loads it (linked -rdynamic). */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "disco/func.h"

/* test.add(a, b) = a + b */
static disco_status_t add(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    *ret = disco_int(a[0].v.i + a[1].v.i);
    return DISCO_OK;
}
DISCO_FUNC("test.add", "ii", add)

/* test.echo(v) = v, for every value type */
static disco_status_t echo(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)ctx;
    (void)n;
    *ret = a[0];
    return DISCO_OK;
}
DISCO_FUNC("test.echo", "?", echo)

/* test.concat(a, b): a new string built in scratch memory */
static disco_status_t concat(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    char *p = disco_ctx_alloc(ctx, a[0].len + a[1].len + 1);
    if (p == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    memcpy(p, a[0].v.str, a[0].len);
    memcpy(p + a[0].len, a[1].v.str, a[1].len + 1);
    *ret = disco_str(p);
    return DISCO_OK;
}
DISCO_FUNC("test.concat", "ss", concat)

/* test.worker_id() = this worker's id */
static disco_status_t worker_id(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)a;
    (void)n;
    *ret = disco_int(disco_ctx_worker_id(ctx));
    return DISCO_OK;
}
DISCO_FUNC("test.worker_id", "", worker_id)

/* test.fail_on(worker, message): fails with message on that worker (-1: all) */
static disco_status_t fail_on(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == -1 || a[0].v.i == disco_ctx_worker_id(ctx))
        return disco_ctx_fail(ctx, "%s (worker %d)", a[1].v.str, disco_ctx_worker_id(ctx));
    return DISCO_OK;
}
DISCO_FUNC("test.fail_on", "is", fail_on)

/* test.segv(worker): dereferences NULL on that worker */
static disco_status_t segv(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx)) {
        signal(SIGSEGV, SIG_DFL); /* sanitizers would turn it into an exit */
        raise(SIGSEGV);
    }
    return DISCO_OK;
}
DISCO_FUNC("test.segv", "i", segv)

/* test.exit(worker, code): _exit(code) on that worker */
static disco_status_t do_exit(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx))
        _exit((int)a[1].v.i);
    return DISCO_OK;
}
DISCO_FUNC("test.exit", "ii", do_exit)

/* test.hang(worker): blocks forever on that worker (until killed) */
static disco_status_t hang(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    (void)ret;
    if (a[0].v.i == disco_ctx_worker_id(ctx))
        for (;;)
            pause();
    return DISCO_OK;
}
DISCO_FUNC("test.hang", "i", hang)
