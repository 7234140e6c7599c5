/* rpc_local.c - the in-process RPC session: this process's functions and
 * memory. Handles are tagged: functions (1 << 62 | registry index) and
 * memory (2 << 62 | table index + 1), so a free knows what it frees.
 * "disco.load_library" runs only under the session's load policy
 * (disco_rpc_load_allowed), with the checked real path. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workers/core/registry.h"
#include "workers/core/worker.h"
#include "disco/rpc.h"
#include "disco/shm/segment.h"
#include "scheduler/rpc/rpc_impl.h"

#define TAG_FUNC (1ULL << 62)
#define TAG_MEM  (2ULL << 62)
#define TAG_MASK (3ULL << 62)

struct mem {
    void *p;
    uint64_t size; /* 0 with p NULL: free slot */
};

struct local {
    disco_rpc_t base;
    struct mem *mem;
    size_t nmem;
    char *allow_load_dir; /* NULL: loading refused */
};

static disco_status_t l_get_func(disco_rpc_t *s, const char *name, disco_rpc_handle_t *out)
{
    (void)s;
    uint64_t h;
    disco_status_t st = disco__func_find(name, &h);
    if (st == DISCO_OK)
        *out = TAG_FUNC | h;
    return st;
}

static disco_status_t l_call(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *args,
                             int nargs, disco_value_t *ret)
{
    const struct disco__func *fn =
        (f & TAG_MASK) == TAG_FUNC ? disco__func_at(f & ~TAG_MASK) : NULL;
    if (fn == NULL)
        return disco_set_error(DISCO_E_BAD_REG, "handle %#llx is not a function of this session",
                               (unsigned long long)f);
    for (int i = 0; i < nargs; i++)
        if (args[i].type == DISCO_T_DREF)
            return disco_set_error(DISCO_E_BAD_TYPE, "argument %d: a DRef has no meaning here", i);
    disco_status_t st = disco__sig_check(fn, args, nargs, 0);
    if (st != DISCO_OK)
        return st;
    if (strcmp(fn->name, "disco.load_library") == 0) {
        /* Loading code is a privilege: only under the allowed directory,
         * and what is loaded is the path that was checked. */
        char real[PATH_MAX];
        st = disco_rpc_load_allowed(((struct local *)s)->allow_load_dir, args[0].v.str, real,
                                    sizeof real);
        if (st != DISCO_OK)
            return st;
        disco_value_t checked = disco_value_str(real);
        return disco__func_run(fn, NULL, &checked, 1, ret);
    }
    return disco__func_run(fn, NULL, args, nargs, ret);
}

/* The allocation behind h, if [off, off + n) lies inside it. */
static disco_status_t find_mem(struct local *l, disco_rpc_handle_t h, uint64_t off, uint64_t n,
                               struct mem **out)
{
    uint64_t i = h & ~TAG_MASK;
    if ((h & TAG_MASK) != TAG_MEM || i == 0 || i > l->nmem || l->mem[i - 1].p == NULL)
        return disco_set_error(DISCO_E_BAD_REG, "handle %#llx is not memory of this session",
                               (unsigned long long)h);
    struct mem *m = &l->mem[i - 1];
    if (off > m->size || n > m->size - off)
        return disco_set_error(DISCO_E_INVAL, "bytes [%llu, %llu) of a %llu-byte allocation",
                               (unsigned long long)off, (unsigned long long)(off + n),
                               (unsigned long long)m->size);
    *out = m;
    return DISCO_OK;
}

static disco_status_t l_copy_to(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                uint64_t off, uint64_t n)
{
    struct mem *m = NULL;
    disco_status_t st = find_mem((struct local *)s, dst, off, n, &m);
    if (st == DISCO_OK && n != 0)
        memcpy((char *)m->p + off, src, n);
    return st;
}

static void *l_direct(disco_rpc_t *s, disco_rpc_handle_t h, uint64_t off, uint64_t n)
{
    struct mem *m = NULL;
    if (find_mem((struct local *)s, h, off, n, &m) != DISCO_OK)
        return NULL;
    return (char *)m->p + off;
}

static disco_status_t l_copy_from(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t off, void *dst,
                                  uint64_t n)
{
    struct mem *m = NULL;
    disco_status_t st = find_mem((struct local *)s, src, off, n, &m);
    if (st == DISCO_OK && n != 0)
        memcpy(dst, (const char *)m->p + off, n);
    return st;
}

static disco_status_t l_alloc(disco_rpc_t *s, DLDevice dev, uint64_t n, uint64_t align,
                              disco_rpc_handle_t *out)
{
    struct local *l = (struct local *)s;
    if (dev.device_type != kDLCPU)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "device type %d: this session has CPU memory only",
                               (int)dev.device_type);
    if (align == 0)
        align = 64;
    if ((align & (align - 1)) != 0 || align > 4096)
        return disco_set_error(DISCO_E_INVAL, "alignment %llu", (unsigned long long)align);
    /* A size the machine cannot back fails here, before the rounding below
     * could wrap and before the allocator sees it (found by fuzzing the RPC
     * endpoint: a client could ask for 2^62 bytes). */
    if (disco_memory_check(n, "allocation") != DISCO_OK)
        return disco_set_error(DISCO_E_NOMEM, "%s", disco_last_error());
    size_t i = 0;
    while (i < l->nmem && l->mem[i].p != NULL)
        i++;
    if (i == l->nmem) {
        struct mem *p = realloc(l->mem, (l->nmem + 1) * sizeof *p);
        if (p == NULL)
            return disco_set_error(DISCO_E_NOMEM, "allocation table");
        l->mem = p;
        l->nmem++;
    }
    void *p = aligned_alloc(align, (n + align - 1) / align * align + align);
    if (p == NULL)
        return disco_set_error(DISCO_E_NOMEM, "%llu bytes", (unsigned long long)n);
    l->mem[i] = (struct mem){p, n};
    *out = TAG_MEM | (i + 1);
    return DISCO_OK;
}

static disco_status_t l_free_handle(disco_rpc_t *s, disco_rpc_handle_t h)
{
    if ((h & TAG_MASK) == TAG_FUNC) /* functions stay registered */
        return disco__func_at(h & ~TAG_MASK) != NULL
                   ? DISCO_OK
                   : disco_set_error(DISCO_E_BAD_REG, "handle %#llx", (unsigned long long)h);
    struct mem *m = NULL;
    disco_status_t st = find_mem((struct local *)s, h, 0, 0, &m);
    if (st != DISCO_OK)
        return st;
    free(m->p);
    *m = (struct mem){NULL, 0};
    return DISCO_OK;
}

static disco_status_t l_dev_free(disco_rpc_t *s, DLDevice dev, disco_rpc_handle_t h)
{
    (void)dev;
    return l_free_handle(s, h);
}

static disco_status_t l_sync(disco_rpc_t *s, DLDevice dev)
{
    (void)s;
    return dev.device_type == kDLCPU
               ? DISCO_OK
               : disco_set_error(DISCO_E_NO_DEVICE, "device type %d", (int)dev.device_type);
}

static disco_status_t l_call_async(disco_rpc_t *s, disco_rpc_handle_t f, const disco_value_t *a,
                                   int n, disco_rpc_done_fn done, void *ctx)
{
    disco_value_t ret = disco_value_null();
    disco_status_t st = l_call(s, f, a, n, &ret);
    done(ctx, st, &ret);
    disco_value_clear(&ret);
    return DISCO_OK;
}

static disco_status_t l_wait(disco_rpc_t *s)
{
    (void)s;
    return DISCO_OK;
}

static void l_close(disco_rpc_t *s)
{
    struct local *l = (struct local *)s;
    for (size_t i = 0; i < l->nmem; i++)
        free(l->mem[i].p);
    free(l->mem);
    free(l->allow_load_dir);
    free(l);
}

static const disco_rpc_ops_t local_ops = {
    .kind = "local",
    .get_func = l_get_func,
    .call = l_call,
    .copy_to_remote = l_copy_to,
    .copy_from_remote = l_copy_from,
    .free_handle = l_free_handle,
    .dev_alloc = l_alloc,
    .dev_free = l_dev_free,
    .stream_sync = l_sync,
    .call_async = l_call_async,
    .wait = l_wait,
    .close = l_close,
    .direct = l_direct,
};

disco_status_t disco_rpc_local(disco_rpc_t **out)
{
    return disco_rpc_local_with(NULL, out);
}

disco_status_t disco_rpc_local_with(const disco_rpc_local_config_t *cfg, disco_rpc_t **out)
{
    char *dir = NULL;
    if (cfg != NULL && cfg->allow_load_dir != NULL) {
        dir = realpath(cfg->allow_load_dir, NULL);
        struct stat sb;
        if (dir == NULL || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            disco_status_t st = disco_set_error(DISCO_E_INVAL, "allowed library directory %s: %s",
                                                cfg->allow_load_dir,
                                                dir == NULL ? strerror(errno) : "not a directory");
            free(dir);
            return st;
        }
    }
    struct local *l = calloc(1, sizeof *l);
    if (l == NULL) {
        free(dir);
        return disco_set_error(DISCO_E_NOMEM, "local RPC session");
    }
    l->allow_load_dir = dir;
    l->base.ops = &local_ops;
    l->base.index = disco__rpc_next_index();
    *out = &l->base;
    return DISCO_OK;
}
