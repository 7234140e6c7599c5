/* rpc_worker.c - a Disco worker seen as an RPC session, over the Disco
 * session's shared-memory rings (see disco_rpc_from_worker in rpc.h).
 *
 * Functions are Disco function registers; a call runs the Disco way (every
 * worker runs it) and answers with this worker's result. Memory is a byte
 * tensor register; its bytes are in the shared heap, which the controller
 * maps too, so copies are one memcpy with no trip through the rings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/rpc.h"
#include "disco/tensor.h"
#include "scheduler/rpc/rpc_impl.h"
#include "scheduler/session/session_impl.h"

struct span {
    disco_rpc_handle_t reg;
    uint64_t off; /* heap offset of the bytes; 0 until asked */
    uint64_t size;
};

struct wview {
    disco_rpc_t base;
    disco_session_t *s;
    int worker;
    struct span *spans; /* memory handles already located */
    size_t nspans;
};

static struct wview *view(disco_rpc_t *r)
{
    return (struct wview *)r;
}

static disco_status_t w_get_func(disco_rpc_t *r, const char *name, disco_rpc_handle_t *out)
{
    return disco_session_get_func(view(r)->s, name, out);
}

static disco_status_t w_call(disco_rpc_t *r, disco_rpc_handle_t f, const disco_value_t *args,
                             int nargs, disco_value_t *ret)
{
    struct wview *v = view(r);
    disco_dref_t res;
    disco_status_t st = disco_session_call(v->s, f, args, nargs, &res);
    if (st != DISCO_OK)
        return st;
    st = disco_session_debug_get(v->s, res, v->worker, ret);
    /* The call completes on every worker before it answers, so its failures
     * on other workers are reported here, not by some later op. */
    char why[DISCO_ERR_MSG_MAX] = "";
    if (st != DISCO_OK)
        snprintf(why, sizeof why, "%s", disco_last_error());
    for (int w = 0; w < disco_session_num_workers(v->s); w++) {
        disco_status_t wst = disco_session_sync(v->s, w);
        if (st == DISCO_OK && wst != DISCO_OK) {
            st = wst;
            snprintf(why, sizeof why, "%s", disco_last_error());
        }
    }
    disco_status_t fst = disco_session_free_reg(v->s, res);
    if (st != DISCO_OK) {
        if (ret->type != DISCO_T_NULL)
            disco_value_clear(ret);
        return disco_set_error(st, "%s", why);
    }
    return fst;
}

/* Where the bytes of memory handle h are, in the controller's mapping. Only
 * memory this view allocated is reachable (a freed register id may already
 * name something else). The heap offset is asked of the worker once. */
static disco_status_t locate(struct wview *v, disco_rpc_handle_t h, uint64_t off, uint64_t n,
                             char **p_out)
{
    struct span *sp = NULL;
    for (size_t i = 0; i < v->nspans && sp == NULL; i++)
        if (v->spans[i].reg == h)
            sp = &v->spans[i];
    if (sp == NULL)
        return disco_set_error(DISCO_E_BAD_REG, "handle %llu is not memory of this session",
                               (unsigned long long)h);
    if (sp->off == 0) {
        disco_value_t arg = {.type = DISCO_T_DREF, .v.reg = h}, got;
        disco_dref_t res;
        disco_status_t st = disco_session_call_by_name(v->s, "disco.tensor_span", &arg, 1, &res);
        if (st != DISCO_OK)
            return st;
        st = disco_session_debug_get(v->s, res, v->worker, &got);
        disco_session_free_reg(v->s, res);
        if (st != DISCO_OK)
            return st;
        /* The worker's answer is checked before it is used as an address:
         * the whole allocation must lie in the heap's blocks, whatever the
         * worker says. */
        const disco_heap_t *hp = &v->s->heap;
        bool ok = got.type == DISCO_T_SHAPE && got.len == 2 && got.v.shape[0] > 0 &&
                  (uint64_t)got.v.shape[0] >= hp->arena_off &&
                  (uint64_t)got.v.shape[0] <= hp->arena_end &&
                  sp->size <= hp->arena_end - (uint64_t)got.v.shape[0] &&
                  (uint64_t)got.v.shape[1] >= sp->size;
        sp->off = ok ? (uint64_t)got.v.shape[0] : 0;
        disco_value_clear(&got);
        if (!ok)
            return disco_set_error(DISCO_E_PROTOCOL,
                                   "worker %d: no span for %llu, or one outside the shared heap",
                                   v->worker, (unsigned long long)h);
    }
    if (off > sp->size || n > sp->size - off)
        return disco_set_error(DISCO_E_INVAL, "bytes [%llu, %llu) of a %llu-byte allocation",
                               (unsigned long long)off, (unsigned long long)(off + n),
                               (unsigned long long)sp->size);
    *p_out = (char *)disco_heap_ptr(&v->s->heap, sp->off) + off;
    return DISCO_OK;
}

static disco_status_t w_copy_to(disco_rpc_t *r, const void *src, disco_rpc_handle_t dst,
                                uint64_t off, uint64_t n)
{
    struct wview *v = view(r);
    char *p = NULL;
    /* The sync orders the copy after every command that may still use the
     * bytes on the worker; commands after it see them (the rings publish
     * with release). */
    disco_status_t st = disco_session_sync(v->s, v->worker);
    if (st == DISCO_OK && (st = locate(v, dst, off, n, &p)) == DISCO_OK && n != 0)
        memcpy(p, src, n);
    return st;
}

static disco_status_t w_copy_from(disco_rpc_t *r, disco_rpc_handle_t src, uint64_t off, void *dst,
                                  uint64_t n)
{
    struct wview *v = view(r);
    char *p = NULL;
    disco_status_t st = disco_session_sync(v->s, v->worker);
    if (st == DISCO_OK && (st = locate(v, src, off, n, &p)) == DISCO_OK && n != 0)
        memcpy(dst, p, n);
    return st;
}

static disco_status_t w_free(disco_rpc_t *r, disco_rpc_handle_t h)
{
    struct wview *v = view(r);
    for (size_t i = 0; i < v->nspans; i++)
        if (v->spans[i].reg == h) {
            v->spans[i] = v->spans[--v->nspans];
            break;
        }
    return disco_session_free_reg(v->s, h);
}

static disco_status_t w_alloc(disco_rpc_t *r, DLDevice dev, uint64_t n, uint64_t align,
                              disco_rpc_handle_t *out)
{
    struct wview *v = view(r);
    if (dev.device_type != kDLCPU)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "device type %d: Disco workers hold CPU "
                               "tensors only so far",
                               (int)dev.device_type);
    if (align > 64)
        return disco_set_error(DISCO_E_INVAL, "alignment %llu: at most 64 in the shared heap",
                               (unsigned long long)align);
    if (n > DISCO_TENSOR_MAX_BYTES) /* (int64_t)n would turn negative past 2^63 */
        return disco_set_error(DISCO_E_OVERFLOW, "device alloc of %llu bytes: at most 2^62",
                               (unsigned long long)n);
    int64_t shape[1] = {(int64_t)n};
    disco_dref_t reg;
    disco_status_t st =
        disco_session_empty(v->s, shape, 1, (DLDataType){kDLUInt, 8, 1}, false, &reg);
    if (st == DISCO_OK && (st = disco_session_sync(v->s, v->worker)) != DISCO_OK) {
        /* It failed on every worker (SPMD): wait for all of them, so their
         * errors are reported here and not by the view's next op. */
        char why[512];
        snprintf(why, sizeof why, "%s", disco_last_error());
        for (int w = 0; w < disco_session_num_workers(v->s); w++)
            disco_session_sync(v->s, w);
        disco_session_free_reg(v->s, reg);
        return disco_set_error(st, "%s", why);
    }
    if (st != DISCO_OK)
        return st;
    struct span *grown = realloc(v->spans, (v->nspans + 1) * sizeof *grown);
    if (grown == NULL) {
        disco_session_free_reg(v->s, reg);
        return disco_set_error(DISCO_E_NOMEM, "span table");
    }
    v->spans = grown;
    v->spans[v->nspans++] = (struct span){reg, 0, n};
    *out = reg;
    return DISCO_OK;
}

static disco_status_t w_dev_free(disco_rpc_t *r, DLDevice dev, disco_rpc_handle_t h)
{
    (void)dev;
    return w_free(r, h);
}

static disco_status_t w_sync(disco_rpc_t *r, DLDevice dev)
{
    (void)dev;
    return disco_session_sync(view(r)->s, view(r)->worker);
}

static disco_status_t w_call_async(disco_rpc_t *r, disco_rpc_handle_t f, const disco_value_t *a,
                                   int n, disco_rpc_done_fn done, void *ctx)
{
    disco_value_t ret = disco_value_null();
    disco_status_t st = w_call(r, f, a, n, &ret);
    done(ctx, st, &ret); /* the result needs the worker's answer: completes here */
    disco_value_clear(&ret);
    return DISCO_OK;
}

static disco_status_t w_wait(disco_rpc_t *r)
{
    (void)r;
    return DISCO_OK;
}

static void w_close(disco_rpc_t *r)
{
    free(view(r)->spans);
    free(r);
}

static const disco_rpc_ops_t worker_ops = {
    .kind = "disco-worker",
    .get_func = w_get_func,
    .call = w_call,
    .copy_to_remote = w_copy_to,
    .copy_from_remote = w_copy_from,
    .free_handle = w_free,
    .dev_alloc = w_alloc,
    .dev_free = w_dev_free,
    .stream_sync = w_sync,
    .call_async = w_call_async,
    .wait = w_wait,
    .close = w_close,
};

disco_status_t disco_rpc_from_worker(disco_session_t *sess, int worker, disco_rpc_t **out)
{
    if (worker < 0 || worker >= disco_session_num_workers(sess))
        return disco_set_error(DISCO_E_INVAL, "no worker %d in a session of %d", worker,
                               disco_session_num_workers(sess));
    struct wview *v = calloc(1, sizeof *v);
    if (v == NULL)
        return disco_set_error(DISCO_E_NOMEM, "worker RPC view");
    v->base.ops = &worker_ops;
    v->base.index = disco__rpc_next_index();
    v->s = sess;
    v->worker = worker;
    *out = &v->base;
    return DISCO_OK;
}
