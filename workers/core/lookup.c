/* lookup.c - the built-in libraries, registered once before the first lookup
 * (see lookup.h). */
#include "workers/core/lookup.h"

#include <pthread.h>

#include "workers/core/builtins.h"
#include "workers/core/registry.h"
#include "workers/data/collective.h"
#include "workers/data/tvm_names.h"

/* The built-in libraries, in registration order. */
static void (*const builtin_libs[])(void) = {
    disco__builtins_register,
    disco__coll_register,
    disco__coll_into_register,
    disco__tvm_names_register,
};

static void register_builtin_libs(void)
{
    for (size_t i = 0; i < sizeof builtin_libs / sizeof builtin_libs[0]; i++)
        builtin_libs[i]();
}

void disco__builtins_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_builtin_libs);
}

disco_status_t disco__func_find(const char *name, uint64_t *handle_out)
{
    disco__builtins_init();
    return disco__registry_find(name, handle_out);
}
