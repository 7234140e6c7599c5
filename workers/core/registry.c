/* registry.c - named functions, looked up once and then called by handle. */
#include "workers/core/registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "disco/dtype.h"

/* Entries are appended under the lock and never move or disappear, so a
 * handle (an index) stays valid for the life of the process. */
static struct disco__func table[DISCO_FUNC_MAX];
static _Atomic uint32_t count; /* entries published */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char sig_letters[] = "nbifsySdthoT?*";

static int sig_letter_type(char c)
{
    switch (c) {
    case 'n':
        return DISCO_T_NULL;
    case 'b':
        return DISCO_T_BOOL;
    case 'i':
        return DISCO_T_INT;
    case 'f':
        return DISCO_T_FLOAT;
    case 's':
        return DISCO_T_STR;
    case 'y':
        return DISCO_T_BYTES;
    case 'S':
        return DISCO_T_SHAPE;
    case 't':
        return DISCO_T_DTYPE;
    case 'd':
        return DISCO_T_DEVICE;
    case 'h':
        return DISCO_T_FUNC;
    case 'o':
        return DISCO_T_OPAQUE;
    case 'T':
        return DISCO_T_TENSOR;
    default:
        return -1; /* '?' and '*' */
    }
}

static struct disco__func *find_locked(const char *name)
{
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed); /* under the lock */
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

static disco_status_t register_entry(const char *name, const char *sig, disco_func_t fn, void *user,
                                     _Bool needs_worker)
{
    if (name == NULL || name[0] == '\0' || strlen(name) >= DISCO_FUNC_NAME_MAX || fn == NULL)
        return disco_set_error(DISCO_E_INVAL, "function name must be 1..%d bytes, fn non-NULL",
                               DISCO_FUNC_NAME_MAX - 1);
    if (sig != NULL) {
        size_t n = strlen(sig);
        if (n >= DISCO_FUNC_SIG_MAX || strspn(sig, sig_letters) != n ||
            (strchr(sig, '*') != NULL && strchr(sig, '*') != sig + n - 1))
            return disco_set_error(DISCO_E_INVAL, "function %s: bad signature \"%s\"", name, sig);
    }
    struct disco__binding *b = malloc(sizeof *b);
    if (b == NULL)
        return disco_set_error(DISCO_E_NOMEM, "function %s: no memory for its binding", name);
    b->fn = fn;
    b->user = user;
    pthread_mutex_lock(&lock);
    struct disco__func *f = find_locked(name);
    if (f == NULL) {
        uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
        if (n == DISCO_FUNC_MAX) {
            pthread_mutex_unlock(&lock);
            free(b);
            return disco_set_error(DISCO_E_NOMEM, "function table full (%d)", DISCO_FUNC_MAX);
        }
        f = &table[n];
        strcpy(f->name, name);
        f->key = disco__func_key(name);
        /* Release: the name is written before a reader can see the entry. */
        atomic_store_explicit(&count, n + 1, memory_order_release);
    }
    /* A replacement publishes sig before the flag and the binding; readers
     * that race with re-registration of a name see either binding, each
     * whole (fn with its own user). Relaxed: the lock orders this load
     * against the previous registration's store. */
    b->prev = atomic_load_explicit(&f->bound, memory_order_relaxed);
    strcpy(f->sig, sig != NULL ? sig : "");
    atomic_store_explicit(&f->has_sig, sig != NULL, memory_order_release);
    /* Release, as has_sig: a reader that sees the new binding sees its flag. */
    atomic_store_explicit(&f->needs_worker, needs_worker, memory_order_release);
    /* Release: pairs with the acquire in disco__func_run; the binding's
     * fields are written before a caller can load its address. */
    atomic_store_explicit(&f->bound, b, memory_order_release);
    pthread_mutex_unlock(&lock);
    return DISCO_OK;
}

disco_status_t disco_register_func(const char *name, const char *sig, disco_func_t fn)
{
    return register_entry(name, sig, fn, NULL, 0);
}

disco_status_t disco_register_func_ex(const char *name, const char *sig, disco_func_t fn,
                                      void *user)
{
    return register_entry(name, sig, fn, user, 0);
}

disco_status_t disco__register_session_func(const char *name, const char *sig, disco_func_t fn)
{
    return register_entry(name, sig, fn, NULL, 1);
}

disco_status_t disco__registry_find(const char *name, uint64_t *handle_out)
{
    pthread_mutex_lock(&lock);
    struct disco__func *f = find_locked(name);
    pthread_mutex_unlock(&lock);
    if (f == NULL)
        return disco_set_error(DISCO_E_NO_FUNC, "no function named \"%s\"", name);
    *handle_out = (uint64_t)(f - table);
    return DISCO_OK;
}

const struct disco__func *disco__func_at(uint64_t handle)
{
    /* Acquire: pairs with the release of count in register_entry. */
    if (handle >= atomic_load_explicit(&count, memory_order_acquire))
        return NULL;
    return &table[handle];
}

disco_status_t disco__sig_check(const struct disco__func *f, const disco_value_t *args, int nargs,
                                _Bool dref_any)
{
    if (!atomic_load_explicit(&f->has_sig, memory_order_acquire))
        return DISCO_OK;
    const char *sig = f->sig;
    int i = 0;
    for (; sig[i] != '\0' && sig[i] != '*'; i++) {
        if (i >= nargs)
            return disco_set_error(DISCO_E_ARG_COUNT, "%s takes %zu arguments (\"%s\"), got %d",
                                   f->name, strlen(sig), sig, nargs);
        int want = sig_letter_type(sig[i]);
        if (want >= 0 && args[i].type != (uint32_t)want &&
            !(dref_any && args[i].type == DISCO_T_DREF))
            return disco_set_error(DISCO_E_BAD_TYPE, "%s argument %d: expected %s, got %s", f->name,
                                   i, disco_type_name((uint32_t)want),
                                   disco_type_name(args[i].type));
    }
    if (sig[i] != '*' && nargs != i)
        return disco_set_error(DISCO_E_ARG_COUNT, "%s takes %d arguments (\"%s\"), got %d", f->name,
                               i, sig, nargs);
    return DISCO_OK;
}

disco_status_t disco__sig_coerce(const struct disco__func *f, disco_value_t *args, int nargs)
{
    if (!atomic_load_explicit(&f->has_sig, memory_order_acquire))
        return DISCO_OK;
    const char *sig = f->sig;
    for (int i = 0; i < nargs && sig[i] != '\0' && sig[i] != '*'; i++) {
        if (sig[i] != 't' || args[i].type != DISCO_T_STR)
            continue;
        DLDataType t;
        if (!disco_dtype_parse(args[i].v.str, &t))
            return disco_set_error(DISCO_E_BAD_TYPE, "%s argument %d: \"%.64s\" is not a dtype",
                                   f->name, i, args[i].v.str);
        args[i] = disco_value_dtype(t);
    }
    return DISCO_OK;
}
