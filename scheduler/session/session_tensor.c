/* session_tensor.c - the session's tensor calls (see disco/tensor.h):
 * copies between host memory and worker 0, and empty tensors on every
 * worker. They build on the command path of session.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/text.h"
#include "workers/data/arena.h"
#include "workers/data/tensor_impl.h"
#include "disco/dtype.h"
#include "scheduler/session/session_impl.h"

/* Device types a session tensor may be on besides the CPU. */
static bool is_gpu(DLDeviceType type)
{
    return type == kDLCUDA || type == kDLExtDev;
}

static disco_status_t check_host(const DLTensor *t, const char *what)
{
    if (t == NULL || (t->device.device_type != kDLCPU && !is_gpu(t->device.device_type)))
        return disco_set_error(DISCO_E_INVAL,
                               "%s: host tensor must be in CPU memory or on a cuda or sim device",
                               what);
    size_t nbytes; /* the size first: a compactness check multiplies the shape too */
    disco_status_t st = disco_shape_nbytes(t->shape, t->ndim, t->dtype, &nbytes);
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        return disco_set_error(st, "%s: %s", what, why);
    }
    if (!disco_tensor_is_compact(t))
        return disco_set_error(DISCO_E_INVAL, "%s: host tensor must be compact", what);
    return DISCO_OK;
}

static disco_status_t api_copy_to_worker0(disco_session_t *s, const DLTensor *host,
                                          disco_dref_t *reg_out)
{
    disco_status_t st = disco__session_usable(s);
    if (st != DISCO_OK || (st = check_host(host, "copy to worker 0")) != DISCO_OK)
        return st;
    DLTensor *t;
    DLDeviceType type = host->device.device_type;
    if (type == kDLCPU)
        st = disco__tensor_new(&s->heap, 0, host->shape, host->ndim, host->dtype, &t);
    else if (s->w0.threaded)
        st = disco_set_error(DISCO_E_UNSUPPORTED,
                             "copy to worker 0: device tensors (device type %d) are not supported "
                             "in a threaded session",
                             (int)type);
    else if ((st = disco__arena_ensure(&s->w0.arena, s->w0.dev_area, 0, type)) == DISCO_OK)
        st = disco__tensor_new_device(s->w0.arena, host->shape, host->ndim, host->dtype, &t);
    if (st != DISCO_OK)
        return st;
    if ((st = disco__tensor_copy_in(t, host)) != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        disco__tensor_release(t);
        return disco_set_error(st, "copy to worker 0: %s", why);
    }
    /* The other workers' copy of a fresh register is already null (new ids
     * are, and freeing clears them), so no command needs to go out. */
    uint64_t reg;
    disco_value_t v = disco_value_tensor(t);
    if ((st = disco__regs_alloc(&s->regs, &reg)) == DISCO_OK &&
        (st = disco__worker_set_reg(&s->w0, reg, &v)) != DISCO_OK)
        disco__regs_release(&s->regs, reg);
    disco__tensor_release(t);
    if (st == DISCO_OK)
        *reg_out = reg;
    return st;
}

/* Worker 0's tensor in register reg, checked against host's layout; what
 * names the call. */
static disco_status_t w0_tensor(disco_session_t *s, disco_dref_t reg, const DLTensor *host,
                                const char *what, DLTensor **t_out)
{
    disco_status_t st = disco__session_usable(s);
    if (st != DISCO_OK || (st = check_host(host, what)) != DISCO_OK)
        return st;
    if (!disco__regs_ok(&s->regs, reg))
        return disco__regs_bad(&s->regs, reg);
    const disco_value_t *v = disco__worker_get_reg(&s->w0, reg);
    if (v == NULL || v->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "register %llu on worker 0 holds %s, not a tensor",
                               (unsigned long long)reg, disco_type_name(v ? v->type : 0));
    DLTensor *t = v->v.tensor;
    if (!disco_tensor_same_layout(t, host)) {
        char a[32], b[32];
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: register holds %s with %d dims (%lld...), host "
                               "tensor is %s with %d dims (%lld...)",
                               what, disco_dtype_str(t->dtype, a, sizeof a), t->ndim,
                               t->ndim ? (long long)t->shape[0] : 0LL,
                               disco_dtype_str(host->dtype, b, sizeof b), host->ndim,
                               host->ndim ? (long long)host->shape[0] : 0LL);
    }
    DLDeviceType rt = t->device.device_type, ht = host->device.device_type;
    if (rt != ht && rt != kDLCPU && ht != kDLCPU)
        return disco_set_error(DISCO_E_MISMATCH,
                               "%s: register %llu is on worker 0's device (type %d, id %d), the "
                               "tensor on device type %d: no copy joins them",
                               what, (unsigned long long)reg, (int)rt, t->device.device_id,
                               (int)ht);
    *t_out = t;
    return DISCO_OK;
}

/* The copy's own failure, named for the caller. */
static disco_status_t copy_failed(disco_status_t st, const char *what)
{
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    return disco_set_error(st, "%s: worker 0: %s", what, why);
}

/* A read of a worker's tensor first reports the errors the workers posted
 * and nobody has returned yet (worker 0's, which ran inline, is there
 * already; any other worker's that has landed): bytes that a failed
 * command left stale are never returned as if it had succeeded
 * (test_read_reports_pending_errors). The README's "the next sync / debug
 * get" holds for every read, not only those that send a command. */
static disco_status_t pending_errors(struct disco_session *s, const char *what)
{
    disco_status_t st = disco__session_collect_errors(s);
    if (st == DISCO_OK)
        return DISCO_OK;
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    return disco_set_error(st, "%s: an earlier command failed: %s", what, why);
}

static disco_status_t api_copy_from_worker0(disco_session_t *s, disco_dref_t reg, DLTensor *host)
{
    DLTensor *t;
    disco_status_t st = w0_tensor(s, reg, host, "copy from worker 0", &t);
    if (st == DISCO_OK)
        st = pending_errors(s, "copy from worker 0");
    if (st == DISCO_OK && (st = disco__tensor_copy_out(t, host)) != DISCO_OK)
        st = copy_failed(st, "copy from worker 0");
    return st;
}

static disco_status_t api_copy_into_worker0(disco_session_t *s, const DLTensor *src,
                                            disco_dref_t reg)
{
    DLTensor *t;
    disco_status_t st = w0_tensor(s, reg, src, "copy into worker 0", &t);
    if (st == DISCO_OK && (st = disco__tensor_copy_in(t, src)) != DISCO_OK)
        st = copy_failed(st, "copy into worker 0");
    return st;
}

/* Refuses, before anything is sent, count tensors of nbytes that the heap
 * could never hold at once (each worker's tensor is a block of the one
 * shared heap). */
static disco_status_t fits_heap(const struct disco_session *s, size_t nbytes, int count)
{
    uint64_t cap = s->heap.arena_end - s->heap.arena_off;
    /* No overflow: nbytes <= DISCO_TENSOR_MAX_BYTES (2^62). */
    uint64_t one =
        DISCO_HEAP_BLOCK_HDR + DISCO_TENSOR_BLOCK_HDR + ((uint64_t)nbytes + 63) / 64 * 64;
    uint64_t all;
    if (!__builtin_mul_overflow(one, (uint64_t)count, &all) && all <= cap)
        return DISCO_OK;
    return disco_set_error(DISCO_E_HEAP_EXHAUSTED,
                           "disco.empty: %d tensor%s of %zu bytes (one per worker, %llu bytes "
                           "with headers) cannot fit in the shared heap of %llu bytes "
                           "(heap_bytes)",
                           count, count == 1 ? "" : "s", nbytes, (unsigned long long)one,
                           (unsigned long long)cap);
}

/* Worker 0 ran the call in register reg inline, so its failure is known
 * now: it is taken from worker 0's mailbox (where it is this call's, by its
 * sequence number) and returned, and the register is freed. Other workers'
 * failures stay for the next sync. */
static disco_status_t w0_outcome(struct disco_session *s, disco_dref_t reg)
{
    const disco_value_t *v = disco__worker_get_reg(&s->w0, reg);
    if (v != NULL && v->type == DISCO_T_TENSOR)
        return DISCO_OK;
    struct disco__errbox *b = &s->errbox[0];
    char msg[DISCO_ERR_MSG_MAX];
    disco_status_t st = DISCO_E_REMOTE;
    /* Acquire: pairs with the release of full in disco__worker_post_error
     * (written by this very thread, as worker 0; kept for the pairing). */
    if (atomic_load_explicit(&b->full, memory_order_acquire) && b->seq == s->seq) {
        disco__text_safe(msg, sizeof msg, b->msg, sizeof b->msg);
        if (disco__status_is_error(b->code))
            st = (disco_status_t)b->code;
        /* Release: our reads of the box are done before it is reused. */
        atomic_store_explicit(&b->full, 0, memory_order_release);
    } else {
        snprintf(msg, sizeof msg,
                 "made no tensor (its error came after an earlier one, which the next sync "
                 "reports)");
    }
    (void)disco__session_free_reg(s, reg);
    return disco_set_error(st, "worker 0: disco.empty: %s", msg);
}

/* Refuses, before anything is sent, a device tensor larger than a
 * worker's whole arena. */
static disco_status_t fits_arena(const struct disco_session *s, size_t nbytes, DLDevice dev)
{
    if (!is_gpu(dev.device_type))
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "disco.empty: device type %d: tensors are made on cpu, cuda or sim "
                               "(kDLExtDev) only",
                               (int)dev.device_type);
    if ((uint64_t)nbytes <= s->cfg.device_arena_bytes)
        return DISCO_OK;
    return disco_set_error(DISCO_E_NOMEM,
                           "disco.empty: a tensor of %zu bytes cannot fit in a worker's device "
                           "arena of %llu bytes (cfg.device_arena_bytes)",
                           nbytes, (unsigned long long)s->cfg.device_arena_bytes);
}

static disco_status_t api_empty(disco_session_t *s, const int64_t *shape, int ndim,
                                DLDataType dtype, DLDevice dev, bool worker0_only,
                                disco_dref_t *reg_out)
{
    /* Every size is checked here, before a command goes out, so that an
     * overflowing shape never wraps to a few bytes (test_bounds). */
    size_t nbytes;
    disco_status_t st = disco_shape_nbytes(shape, ndim, dtype, &nbytes);
    if (st != DISCO_OK || (st = disco__session_usable(s)) != DISCO_OK)
        return st;
    st = dev.device_type == kDLCPU ? fits_heap(s, nbytes, worker0_only ? 1 : s->world)
                                   : fits_arena(s, nbytes, dev);
    if (st != DISCO_OK)
        return st;
    disco_value_t args[4] = {disco_value_shape(shape, (uint32_t)ndim), disco_value_dtype(dtype),
                             disco_value_device(dev), disco_value_bool(worker0_only)};
    disco_dref_t f, reg;
    if ((st = disco__session_get_func(s, "disco.empty", &f)) != DISCO_OK)
        return st;
    st = disco__session_call(s, f, args, 4, &reg);
    if (st == DISCO_OK)
        st = w0_outcome(s, reg);
    disco_status_t fst = disco__session_free_reg(s, f);
    if (st == DISCO_OK && fst != DISCO_OK) {
        (void)disco__session_free_reg(s, reg);
        st = fst;
    }
    if (st == DISCO_OK)
        *reg_out = reg;
    return st;
}

/* ---- views (disco_session_tensor_view) ---- */

/* A view and what it holds: a heap reference (ref) or a host copy (copy). */
struct view {
    DLManagedTensor m;
    int64_t shape[DISCO_MAX_NDIM];
    DLTensor *ref;
    void *copy;
};

static void view_delete(DLManagedTensor *m)
{
    struct view *v = m->manager_ctx;
    disco__tensor_release(v->ref);
    free(v->copy);
    free(v);
}

/* A view of shape and dtype: over ref's bytes (taking it), or, with ref
 * NULL, over a new host buffer of its size for the caller to fill. */
static disco_status_t view_make(const int64_t *shape, int ndim, DLDataType dtype, DLTensor *ref,
                                struct view **out)
{
    size_t nbytes;
    disco_status_t st = disco_shape_nbytes(shape, ndim, dtype, &nbytes);
    struct view *v = st == DISCO_OK ? calloc(1, sizeof *v) : NULL;
    if (st == DISCO_OK &&
        (v == NULL || (ref == NULL && (v->copy = malloc(nbytes ? nbytes : 1)) == NULL)))
        st = disco_set_error(DISCO_E_NOMEM, "tensor view of %zu bytes", nbytes);
    if (st != DISCO_OK) {
        disco__tensor_release(ref);
        free(v);
        return st;
    }
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    v->ref = ref;
    v->m.manager_ctx = v;
    v->m.deleter = view_delete;
    v->m.dl_tensor =
        (DLTensor){.data = ref != NULL ? (char *)ref->data + ref->byte_offset : v->copy,
                   .device = {kDLCPU, 0},
                   .ndim = ndim,
                   .dtype = dtype,
                   .shape = v->shape};
    *out = v;
    return DISCO_OK;
}

/* Worker 0's register: its tensor is in this process. */
static disco_status_t view_w0(disco_session_t *s, disco_dref_t reg, struct view **out)
{
    const disco_value_t *val = disco__worker_get_reg(&s->w0, reg);
    if (val == NULL || val->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "register %llu on worker 0 holds %s, not a tensor",
                               (unsigned long long)reg, disco_type_name(val ? val->type : 0));
    DLTensor *t = val->v.tensor, *ref = NULL;
    disco_status_t st;
    if (!disco__tensor_is_device(t) && (st = disco__tensor_ref(t, &ref)) != DISCO_OK)
        return st;
    if ((st = view_make(t->shape, t->ndim, t->dtype, ref, out)) != DISCO_OK || ref != NULL)
        return st;
    if ((st = disco__tensor_to_host(t, (*out)->copy)) != DISCO_OK)
        view_delete(&(*out)->m);
    return st;
}

/* Another worker's register: disco.tensor_meta on every worker says what
 * it holds (builtins.c), debug get fetches worker's answer; a heap tensor
 * is then referenced here by its block, which the worker keeps alive until
 * a later command of ours frees it. */
static disco_status_t view_remote(disco_session_t *s, disco_dref_t reg, int worker,
                                  struct view **out)
{
    disco_dref_t f, r;
    disco_value_t arg = {.type = DISCO_T_DREF, .v.reg = reg}, meta = disco_value_null();
    disco_status_t st = disco__session_get_func(s, "disco.tensor_meta", &f);
    if (st != DISCO_OK)
        return st;
    if ((st = disco__session_call(s, f, &arg, 1, &r)) == DISCO_OK) {
        st = disco__session_debug_get(s, r, worker, &meta);
        disco_status_t fst = disco__session_free_reg(s, r);
        st = st != DISCO_OK ? st : fst;
    }
    disco_status_t fst = disco__session_free_reg(s, f);
    st = st != DISCO_OK ? st : fst;
    const int64_t *m = meta.v.shape;
    if (st == DISCO_OK && (meta.type != DISCO_T_SHAPE || meta.len < 2))
        st = disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: bad tensor_meta answer", worker);
    else if (st == DISCO_OK && m[0] == 0)
        st = disco_set_error(DISCO_E_BAD_TYPE, "register %llu on worker %d holds %s, not a tensor",
                             (unsigned long long)reg, worker, disco_type_name((uint32_t)m[1]));
    else if (st == DISCO_OK &&
             (meta.len < 6 || m[5] < 0 || m[5] > DISCO_MAX_NDIM || meta.len != 6 + (uint32_t)m[5]))
        st = disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: bad tensor_meta answer", worker);
    if (st != DISCO_OK) {
        disco_value_clear(&meta);
        return st;
    }
    DLDataType dt = {(uint8_t)m[4], (uint8_t)(m[4] >> 8), (uint16_t)(m[4] >> 16)};
    DLTensor *ref = NULL;
    if (m[1] == kDLCPU) /* checked against the heap's blocks before use */
        st = disco__tensor_from_block(&s->heap, (uint64_t)m[2], (uint64_t)m[3], m + 6, (int)m[5],
                                      dt, false, &ref);
    if (st == DISCO_OK)
        st = view_make(m + 6, (int)m[5], dt, ref, out);
    disco_value_clear(&meta);
    if (st != DISCO_OK || ref != NULL)
        return st;
    disco_value_t raw; /* a device tensor: its bytes, staged by the worker */
    if ((st = disco__session_debug_get(s, reg, worker, &raw)) == DISCO_OK) {
        size_t n = disco_tensor_nbytes(&(*out)->m.dl_tensor);
        if (raw.type != DISCO_T_BYTES || raw.len != n)
            st = disco_set_error(DISCO_E_MISMATCH, "worker %d sent %u bytes for a tensor of %zu",
                                 worker, raw.len, n);
        else
            memcpy((*out)->copy, raw.v.bytes, n);
        disco_value_clear(&raw);
    }
    if (st != DISCO_OK)
        view_delete(&(*out)->m);
    return st;
}

static disco_status_t api_tensor_view(disco_session_t *s, disco_dref_t reg, int worker,
                                      DLManagedTensor **view_out)
{
    if (worker < 0 || worker >= s->world)
        return disco_set_error(DISCO_E_INVAL, "no worker %d in a session of %d", worker, s->world);
    disco_status_t st = disco__session_usable(s);
    if (st != DISCO_OK)
        return st;
    if (!disco__regs_ok(&s->regs, reg))
        return disco__regs_bad(&s->regs, reg);
    struct view *v = NULL;
    /* Worker 0's view sends no command: the pending errors are taken here.
     * Another worker's goes through debug get, which takes them after its
     * reply (so that worker's own failures before it are in too). */
    if (worker == 0 && (st = pending_errors(s, "tensor view")) != DISCO_OK)
        return st;
    st = worker == 0 ? view_w0(s, reg, &v) : view_remote(s, reg, worker, &v);
    if (st == DISCO_OK)
        *view_out = &v->m;
    return st;
}

disco_status_t disco_session_tensor_view(disco_session_t *s, disco_dref_t reg, int worker,
                                         DLManagedTensor **view_out)
{
    return disco__session_tell(s, api_tensor_view(s, reg, worker, view_out));
}

bool disco_tensor_view_is_copy(const DLManagedTensor *view)
{
    return view->deleter == view_delete && ((const struct view *)view->manager_ctx)->ref == NULL;
}

disco_status_t disco_session_copy_to_worker0(disco_session_t *s, const DLTensor *host,
                                             disco_dref_t *reg_out)
{
    return disco__session_tell(s, api_copy_to_worker0(s, host, reg_out));
}

disco_status_t disco_session_copy_from_worker0(disco_session_t *s, disco_dref_t reg, DLTensor *host)
{
    return disco__session_tell(s, api_copy_from_worker0(s, reg, host));
}

disco_status_t disco_session_empty(disco_session_t *s, const int64_t *shape, int ndim,
                                   DLDataType dtype, bool worker0_only, disco_dref_t *reg_out)
{
    return disco__session_tell(
        s, api_empty(s, shape, ndim, dtype, (DLDevice){kDLCPU, 0}, worker0_only, reg_out));
}

disco_status_t disco_session_empty_device(disco_session_t *s, const int64_t *shape, int ndim,
                                          DLDataType dtype, DLDevice device, bool worker0_only,
                                          disco_dref_t *reg_out)
{
    return disco__session_tell(s, api_empty(s, shape, ndim, dtype, device, worker0_only, reg_out));
}

disco_status_t disco_session_copy_into_worker0(disco_session_t *s, const DLTensor *src,
                                               disco_dref_t reg)
{
    return disco__session_tell(s, api_copy_into_worker0(s, src, reg));
}
