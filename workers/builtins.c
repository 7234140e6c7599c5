/* builtins.c - functions every worker has: library loading, identity, echo. */
#include <dlfcn.h>
#include <pthread.h>

#include "collective.h"
#include "registry.h"
#include "worker.h"

/* disco.load_library(path): dlopen the library in this worker; its
 * DISCO_FUNC constructors register its functions. Libraries stay loaded. */
static disco_status_t load_library(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                   disco_value_t *ret)
{
    (void)nargs;
    (void)ret;
    if (dlopen(args[0].v.str, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        disco_ctx_fail(ctx, "cannot load %s: %s", args[0].v.str, dlerror());
        return DISCO_E_LIBRARY;
    }
    return DISCO_OK;
}

static disco_status_t worker_id(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    *ret = disco_int(disco_ctx_worker_id(ctx));
    return DISCO_OK;
}

static disco_status_t world_size(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                 disco_value_t *ret)
{
    (void)args;
    (void)nargs;
    *ret = disco_int(disco_ctx_world_size(ctx));
    return DISCO_OK;
}

/* disco.echo(v, ...): returns its first argument (null without one). */
static disco_status_t echo(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                           disco_value_t *ret)
{
    (void)ctx;
    *ret = nargs > 0 ? args[0] : disco_null();
    return DISCO_OK;
}

/* disco.noop(...): does nothing; the benchmarks' call. */
static disco_status_t noop(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                           disco_value_t *ret)
{
    (void)ctx;
    (void)args;
    (void)nargs;
    (void)ret;
    return DISCO_OK;
}

static void register_all(void)
{
    disco_register_func("disco.load_library", "s", load_library);
    disco_register_func("disco.worker_id", "", worker_id);
    disco_register_func("disco.world_size", "", world_size);
    disco_register_func("disco.echo", NULL, echo);
    disco_register_func("disco.noop", NULL, noop);
    disco__coll_register();
}

void disco__builtins_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_all);
}
