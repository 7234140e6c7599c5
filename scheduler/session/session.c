/* session.c - the Disco session API on the controller (see session.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/text.h"
#include "shm/wait_internal.h"
#include "workers/data/tensor_impl.h"
#include "disco/dtype.h"
#include "scheduler/session/session_impl.h"

#define HEALTH_EVERY 64u

disco_session_config_t disco_session_config_default(int num_workers)
{
    disco_session_config_t c = {.num_workers = num_workers};
    return c;
}

int disco_session_num_workers(const disco_session_t *s)
{
    return s->world;
}

disco_status_t disco_session_health(const disco_session_t *s)
{
    return s->state;
}

const disco_plan_t *disco_session_plan(const disco_session_t *s)
{
    return s->plan;
}

disco_status_t disco_session_heap_stats(const disco_session_t *s, disco_heap_stats_t *out)
{
    *out = (disco_heap_stats_t){0};
    if (s->heap.sh == NULL)
        return disco_set_error(DISCO_E_INVAL, "this session has no shared heap");
    return disco_heap_stats(&s->heap, out);
}

int disco_session_worker_pid(const disco_session_t *s, int worker)
{
    if (worker == 0)
        return (int)getpid();
    if (worker < 0 || worker >= s->world)
        return -1;
    return (int)s->pid[worker];
}

disco_status_t disco__session_break(struct disco_session *s, disco_status_t status, const char *fmt,
                                    ...)
{
    if (s->state == DISCO_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
        s->state = status;
        /* Release: why is written before a worker acts on the word (workers
         * only exit on it, but keep the pairing honest). */
        atomic_store_explicit(&s->ctl->broken, status, memory_order_release);
        if (s->chan.kind == DISCO_CHAN_RING && s->world > 1)
            disco_ring_wake_all(&s->chan.cmd);
    }
    return disco_set_error(status, "%s", s->why);
}

static disco_status_t usable(struct disco_session *s)
{
    if (s->state == DISCO_OK)
        return DISCO_OK;
    if (s->state == DISCO_E_SHUTDOWN)
        return disco_set_error(DISCO_E_SHUTDOWN, "session is shut down");
    return disco_set_error(DISCO_E_BROKEN, "session is broken: %s", s->why);
}

/* The wait for one call: the config's spin, the call timeout (counted from
 * when the wait starts waiting), worker checks. */
static const disco_wait_t *call_wait(struct disco_session *s)
{
    s->wait.deadline_ns = 0;
    s->wait.timeout_ns = (int64_t)s->cfg.call_timeout_ms * 1000000;
    return &s->wait;
}

/* ---- registers ---- */

static disco_status_t reg_alloc(struct disco_session *s, uint64_t *reg_out)
{
    if (s->nfree == 0 && s->next_reg >= s->reg_cap) {
        /* Every id ever issued must fit in the free list and the tables, so
         * that freeing never needs memory. */
        uint64_t cap = s->reg_cap ? s->reg_cap * 2 : 64;
        const struct disco__func **f = realloc(s->reg_func, cap * sizeof *f);
        if (f != NULL)
            s->reg_func = f;
        bool *live = realloc(s->reg_live, cap * sizeof *live);
        if (live != NULL)
            s->reg_live = live;
        uint64_t *fr = realloc(s->free_regs, cap * sizeof *fr);
        if (fr != NULL)
            s->free_regs = fr;
        if (f == NULL || live == NULL || fr == NULL)
            return disco_set_error(DISCO_E_NOMEM, "register table of %llu",
                                   (unsigned long long)cap);
        memset(s->reg_func + s->reg_cap, 0, (cap - s->reg_cap) * sizeof *f);
        memset(s->reg_live + s->reg_cap, 0, (cap - s->reg_cap) * sizeof *live);
        s->reg_cap = cap;
    }
    uint64_t r = s->nfree != 0 ? s->free_regs[--s->nfree] : s->next_reg++;
    s->reg_live[r] = true;
    s->reg_func[r] = NULL;
    *reg_out = r;
    return DISCO_OK;
}

static void reg_release(struct disco_session *s, uint64_t r)
{
    s->reg_live[r] = false;
    s->reg_func[r] = NULL;
    s->free_regs[s->nfree++] = r; /* room: reg_cap > every id issued */
}

static bool reg_ok(const struct disco_session *s, uint64_t r)
{
    return r != 0 && r < s->reg_cap && s->reg_live[r];
}

static disco_status_t bad_reg(uint64_t r)
{
    return disco_set_error(DISCO_E_BAD_REG, "register %llu is not a live register of this session",
                           (unsigned long long)r);
}

/* ---- issuing commands ---- */

/* Broadcasts a command and runs it on worker 0. *w0_reply_len is worker 0's
 * reply in s->reply, if the command asked it for one. */
static disco_status_t issue(struct disco_session *s, uint32_t code, const disco_value_t *args,
                            uint32_t nargs, size_t *w0_reply_len)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    /* Waits look at the workers as they wait; commands that never wait
     * look every HEALTH_EVERY commands, so a death is noticed without a
     * syscall on every call. */
    if (++s->issued % HEALTH_EVERY == 0 && (st = disco__procs_check(s)) != DISCO_OK)
        return st;
    /* The command slot's cache line is last held by the readers: start
     * taking it now, so the fetch overlaps the encoding instead of stalling
     * the broadcast's stores. */
    disco__chan_prepare_bcast(&s->chan);
    size_t len;
    disco_frame_hdr_t h = {.code = code, .nargs = nargs, .seq = ++s->seq};
    st = disco_frame_encode(code, h.seq, args, nargs, s->buf, s->chan.max_msg, &len);
    if (st != DISCO_OK)
        return st;
    /* The enqueue stamp is read by the broadcast as it publishes the frame,
     * where the clock read overlaps the publishing stores' wait for their
     * cache line instead of adding to the path. */
    uint64_t t_enq = 0;
    st = disco__chan_bcast(&s->chan, s->buf, (uint32_t)len, call_wait(s),
                           s->trace.rec != NULL ? &t_enq : NULL);
    if (st == DISCO_E_TIMEOUT) {
        /* The worker that does not read: the ring's slowest reader, or the
         * one whose pipe stayed full. */
        uint32_t slow =
            s->chan.kind == DISCO_CHAN_RING ? disco_ring_slowest_reader(&s->chan.cmd) : UINT32_MAX;
        int w = s->chan.kind == DISCO_CHAN_PIPE ? s->chan.stuck
                : slow != UINT32_MAX            ? (int)slow + 1
                                                : 0;
        if (w <= 0)
            return disco__session_break(s, DISCO_E_TIMEOUT,
                                        "the command channel stayed full for %u ms",
                                        s->cfg.call_timeout_ms);
        disco__procs_kill(s, w);
        return disco__session_break(s, DISCO_E_TIMEOUT,
                                    "worker %d took no command for %u ms; it was killed", w,
                                    s->cfg.call_timeout_ms);
    }
    if (st != DISCO_OK)
        return st;
    /* The record is written after the broadcast: its stores (a fresh line
     * every command or so) would otherwise sit before the broadcast's fence
     * and delay the command. */
    struct disco__ctl_rec *tr = NULL;
    if (s->trace.rec != NULL)
        tr = disco__trace_enqueue(&s->trace, h.seq, code, t_enq,
                                  code == DISCO_CMD_CALL ? s->reg_func[args[1].v.reg]->name
                                                         : disco__cmd_name(code));
    size_t rlen = 0;
    disco__worker_exec(&s->w0, &h, args, s->reply, DISCO_REPLY_MAX, &rlen);
    /* Worker 0 runs inline right after the broadcast: this record is its
     * slice too, from the enqueue stamp to this one (scheduler/trace/trace.c). */
    if (tr != NULL)
        tr->t_issued = disco__ticks();
    if (s->state != DISCO_OK) /* worker 0 found a dead worker (in a collective) */
        return disco_set_error(s->state, "%s", s->why);
    if (w0_reply_len != NULL)
        *w0_reply_len = rlen;
    return DISCO_OK;
}

/* Reports (and clears) every worker's pending error: the first code, with
 * all of them in the detail. */
static disco_status_t collect_errors(struct disco_session *s)
{
    disco_status_t first = DISCO_OK;
    char detail[512];
    size_t used = 0;
    detail[0] = '\0';
    for (int i = 0; i < s->world; i++) {
        struct disco__errbox *b = &s->errbox[i];
        /* Acquire: pairs with the worker's release of full. */
        if (!atomic_load_explicit(&b->full, memory_order_acquire))
            continue;
        /* The box is the worker's to write: its text is copied within its
         * fields (a terminator forced, control bytes escaped) and its code
         * must be an error of ours. */
        char func[sizeof b->func], msg[sizeof b->msg];
        disco__text_safe(func, sizeof func, b->func, sizeof b->func);
        disco__text_safe(msg, sizeof msg, b->msg, sizeof b->msg);
        int32_t code = b->code;
        bool bad = !disco__status_is_error(code);
        if (first == DISCO_OK)
            first = bad ? DISCO_E_PROTOCOL : (disco_status_t)code;
        uint32_t more = atomic_exchange_explicit(&b->dropped, 0, memory_order_relaxed);
        if (used < sizeof detail) {
            int n = snprintf(detail + used, sizeof detail - used, "%sworker %d: %s: %s%s",
                             used ? "; " : "", i, func,
                             bad ? "(its status is not an error status) " : "", msg);
            used += n > 0 ? (size_t)n : 0;
            if (more != 0 && used < sizeof detail) {
                n = snprintf(detail + used, sizeof detail - used, " (and %u more)", more);
                used += n > 0 ? (size_t)n : 0;
            }
        }
        /* Release: our reads of the box are done before the worker reuses it. */
        atomic_store_explicit(&b->full, 0, memory_order_release);
    }
    if (first == DISCO_OK)
        return DISCO_OK;
    return disco_set_error(first, "%s", detail);
}

/* Receives worker's reply to token; value_out (optional) gets a copy of the
 * replied value. */
static disco_status_t wait_reply(struct disco_session *s, int worker, int64_t token,
                                 const char *what, size_t w0_len, disco_value_t *value_out)
{
    uint32_t len = (uint32_t)w0_len;
    uint64_t seen = 0; /* with tracing: when the wait found the reply (0: it did not wait) */
    if (worker != 0) {
        const disco_wait_t *w = call_wait(s);
        disco__wait_set_found_at(&s->wait, s->trace.rec != NULL ? &seen : NULL);
        disco_status_t st =
            disco__chan_recv_reply(&s->chan, worker, s->reply, DISCO_REPLY_MAX, &len, w);
        disco__wait_set_found_at(&s->wait, NULL);
        if (st == DISCO_E_TIMEOUT) {
            disco__procs_kill(s, worker);
            return disco__session_break(s, DISCO_E_TIMEOUT,
                                        "worker %d did not answer %s within %u ms; it was killed",
                                        worker, what, s->cfg.call_timeout_ms);
        }
        if (st == DISCO_E_CLOSED || st == DISCO_E_TRUNCATED) {
            /* A pipe closed: the worker is dying; wait for the kernel to say how. */
            for (int i = 0; i < 100 && s->state == DISCO_OK; i++) {
                if (disco__procs_check(s) != DISCO_OK)
                    break;
                usleep(10000);
            }
            if (s->state == DISCO_OK)
                disco__session_break(s, st, "worker %d closed its channel", worker);
            return disco_set_error(s->state, "%s", s->why);
        }
        if (st != DISCO_OK)
            return st;
    }
    if (s->trace.rec != NULL) /* the reply answers the last command issued */
        s->trace.rec[s->seq % DISCO_TRACE_CAP].t_reply = seen != 0 ? seen : disco__ticks();
    disco_frame_hdr_t h;
    disco_value_t v[3];
    disco_status_t st = disco_frame_decode(s->reply, len, &h, v, 3);
    if (st != DISCO_OK || h.nargs < 1 || v[0].type != DISCO_T_INT || v[0].v.i != token)
        return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: bad reply to %s", worker,
                                    what);
    if (h.code == DISCO_REPLY_ERROR && h.nargs == 3 && v[1].type == DISCO_T_INT &&
        v[2].type == DISCO_T_STR) {
        /* The worker's words: bounded, escaped, and a code of ours. */
        char msg[DISCO_ERR_MSG_MAX];
        disco__text_safe(msg, sizeof msg, v[2].v.str, (size_t)v[2].len + 1);
        if (!disco__status_is_error(v[1].v.i))
            return disco__session_break(s, DISCO_E_PROTOCOL,
                                        "worker %d: error reply with status %lld: %s", worker,
                                        (long long)v[1].v.i, msg);
        return disco_set_error((disco_status_t)v[1].v.i, "worker %d: %s", worker, msg);
    }
    if (h.code != DISCO_REPLY_OK)
        return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: reply code %u to %s", worker,
                                    h.code, what);
    if (value_out != NULL) {
        if (h.nargs != 2)
            return disco__session_break(s, DISCO_E_PROTOCOL, "worker %d: no value in reply",
                                        worker);
        return disco_value_copy(&v[1], value_out);
    }
    return DISCO_OK;
}

static disco_status_t check_worker(const struct disco_session *s, int worker)
{
    if (worker < 0 || worker >= s->world)
        return disco_set_error(DISCO_E_INVAL, "no worker %d in a session of %d", worker, s->world);
    return DISCO_OK;
}

/* A debug command's preconditions: a real worker, a usable session, a live
 * register. */
static disco_status_t check_reg_on(struct disco_session *s, disco_dref_t reg, int worker)
{
    disco_status_t st = check_worker(s, worker);
    if (st == DISCO_OK)
        st = usable(s);
    if (st == DISCO_OK && !reg_ok(s, reg))
        st = bad_reg(reg);
    return st;
}

/* ---- the API ---- */

static disco_status_t api_sync(disco_session_t *s, int worker)
{
    disco_status_t st = check_worker(s, worker);
    if (st != DISCO_OK)
        return st;
    int64_t token = ++s->token;
    disco_value_t args[2] = {disco_value_int(worker), disco_value_int(token)};
    size_t w0_len;
    if ((st = issue(s, DISCO_CMD_SYNC, args, 2, &w0_len)) != DISCO_OK)
        return st;
    if ((st = wait_reply(s, worker, token, "sync", w0_len, NULL)) != DISCO_OK)
        return st;
    return collect_errors(s);
}

static disco_status_t api_get_func(disco_session_t *s, const char *name, disco_dref_t *func_out)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    uint64_t handle, reg;
    if (disco__func_find(name, &handle) != DISCO_OK)
        return disco_set_error(DISCO_E_NO_FUNC, "worker 0: no function named \"%s\"", name);
    if ((st = reg_alloc(s, &reg)) != DISCO_OK)
        return st;
    disco_value_t args[2] = {{.type = DISCO_T_DREF, .v.reg = reg}, disco_value_str(name)};
    if ((st = issue(s, DISCO_CMD_GET_FUNC, args, 2, NULL)) != DISCO_OK) {
        reg_release(s, reg);
        return st;
    }
    s->reg_func[reg] = disco__func_at(handle);
    *func_out = reg;
    return DISCO_OK;
}

static disco_status_t api_call(disco_session_t *s, disco_dref_t func, const disco_value_t *args,
                               int nargs, disco_dref_t *result_out)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    if (!reg_ok(s, func) || s->reg_func[func] == NULL)
        return disco_set_error(DISCO_E_BAD_REG, "register %llu holds no function",
                               (unsigned long long)func);
    if (nargs < 0 || nargs > DISCO_MAX_ARGS - 2)
        return disco_set_error(DISCO_E_ARG_COUNT, "%d arguments; at most %d", nargs,
                               DISCO_MAX_ARGS - 2);
    for (int i = 0; i < nargs; i++)
        if (args[i].type == DISCO_T_DREF && !reg_ok(s, args[i].v.reg))
            return bad_reg(args[i].v.reg);
    if ((st = disco__sig_check(s->reg_func[func], args, nargs, 1)) != DISCO_OK)
        return st;
    uint64_t res;
    if ((st = reg_alloc(s, &res)) != DISCO_OK)
        return st;
    disco_value_t frame[DISCO_MAX_ARGS];
    frame[0] = (disco_value_t){.type = DISCO_T_DREF, .v.reg = res};
    frame[1] = (disco_value_t){.type = DISCO_T_DREF, .v.reg = func};
    if (nargs > 0)
        memcpy(frame + 2, args, (size_t)nargs * sizeof *args);
    if ((st = issue(s, DISCO_CMD_CALL, frame, (uint32_t)nargs + 2, NULL)) != DISCO_OK) {
        reg_release(s, res);
        return st;
    }
    *result_out = res;
    return DISCO_OK;
}

static disco_status_t api_free(disco_session_t *s, disco_dref_t reg);

static disco_status_t api_call_by_name(disco_session_t *s, const char *name,
                                       const disco_value_t *args, int nargs,
                                       disco_dref_t *result_out)
{
    disco_dref_t f;
    disco_status_t st = api_get_func(s, name, &f);
    if (st != DISCO_OK)
        return st;
    st = api_call(s, f, args, nargs, result_out);
    disco_status_t fst = api_free(s, f);
    return st != DISCO_OK ? st : fst;
}

static disco_status_t api_free(disco_session_t *s, disco_dref_t reg)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    if (!reg_ok(s, reg))
        return bad_reg(reg);
    disco_value_t args[1] = {{.type = DISCO_T_DREF, .v.reg = reg}};
    if ((st = issue(s, DISCO_CMD_KILL_REG, args, 1, NULL)) != DISCO_OK)
        return st;
    reg_release(s, reg);
    return DISCO_OK;
}

static disco_status_t api_alloc_reg(disco_session_t *s, disco_dref_t *reg_out)
{
    disco_status_t st = usable(s);
    return st != DISCO_OK ? st : reg_alloc(s, reg_out);
}

static disco_status_t api_debug_get(disco_session_t *s, disco_dref_t reg, int worker,
                                    disco_value_t *value_out)
{
    disco_status_t st = check_reg_on(s, reg, worker);
    if (st != DISCO_OK)
        return st;
    int64_t token = ++s->token;
    disco_value_t args[3] = {
        {.type = DISCO_T_DREF, .v.reg = reg}, disco_value_int(worker), disco_value_int(token)};
    size_t w0_len;
    if ((st = issue(s, DISCO_CMD_DEBUG_GET, args, 3, &w0_len)) != DISCO_OK)
        return st;
    disco_value_t v;
    if ((st = wait_reply(s, worker, token, "debug get", w0_len, &v)) != DISCO_OK)
        return st;
    if ((st = collect_errors(s)) != DISCO_OK) {
        disco_value_clear(&v);
        return st;
    }
    *value_out = v;
    return DISCO_OK;
}

static disco_status_t api_debug_set(disco_session_t *s, disco_dref_t reg, int worker,
                                    const disco_value_t *value)
{
    disco_status_t st = check_reg_on(s, reg, worker);
    if (st != DISCO_OK)
        return st;
    if (value->type == DISCO_T_DREF || value->type == DISCO_T_FUNC)
        return disco_set_error(DISCO_E_BAD_TYPE, "debug set: a %s cannot be stored directly",
                               disco_type_name(value->type));
    int64_t token = ++s->token;
    disco_value_t args[4] = {{.type = DISCO_T_DREF, .v.reg = reg},
                             disco_value_int(worker),
                             disco_value_int(token),
                             *value};
    size_t w0_len;
    if ((st = issue(s, DISCO_CMD_DEBUG_SET, args, 4, &w0_len)) != DISCO_OK)
        return st;
    if ((st = wait_reply(s, worker, token, "debug set", w0_len, NULL)) != DISCO_OK)
        return st;
    return collect_errors(s);
}

/* ---- tensors (see tensor.h) ---- */

static disco_status_t check_host(const DLTensor *t, const char *what)
{
    if (t == NULL || t->device.device_type != kDLCPU)
        return disco_set_error(DISCO_E_INVAL, "%s: host tensor must be in CPU memory", what);
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
    disco_status_t st = usable(s);
    if (st != DISCO_OK || (st = check_host(host, "copy to worker 0")) != DISCO_OK)
        return st;
    DLTensor *t;
    if ((st = disco__tensor_new(&s->heap, 0, host->shape, host->ndim, host->dtype, &t)) != DISCO_OK)
        return st;
    memcpy(t->data, (const char *)host->data + host->byte_offset, disco_tensor_nbytes(t));
    /* The other workers' copy of a fresh register is already null (new ids
     * are, and freeing clears them), so no command needs to go out. */
    uint64_t reg;
    disco_value_t v = disco_value_tensor(t);
    if ((st = reg_alloc(s, &reg)) == DISCO_OK &&
        (st = disco__worker_set_reg(&s->w0, reg, &v)) != DISCO_OK)
        reg_release(s, reg);
    disco__tensor_release(t);
    if (st == DISCO_OK)
        *reg_out = reg;
    return st;
}

static disco_status_t api_copy_from_worker0(disco_session_t *s, disco_dref_t reg, DLTensor *host)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK || (st = check_host(host, "copy from worker 0")) != DISCO_OK)
        return st;
    if (!reg_ok(s, reg))
        return bad_reg(reg);
    const disco_value_t *v = disco__worker_get_reg(&s->w0, reg);
    if (v == NULL || v->type != DISCO_T_TENSOR)
        return disco_set_error(DISCO_E_BAD_TYPE, "register %llu on worker 0 holds %s, not a tensor",
                               (unsigned long long)reg, disco_type_name(v ? v->type : 0));
    const DLTensor *t = v->v.tensor;
    if (!disco_tensor_same_layout(t, host)) {
        char a[32], b[32];
        return disco_set_error(DISCO_E_MISMATCH,
                               "copy from worker 0: register holds %s with %d dims (%lld...), host "
                               "tensor is %s with %d dims (%lld...)",
                               disco_dtype_str(t->dtype, a, sizeof a), t->ndim,
                               t->ndim ? (long long)t->shape[0] : 0LL,
                               disco_dtype_str(host->dtype, b, sizeof b), host->ndim,
                               host->ndim ? (long long)host->shape[0] : 0LL);
    }
    memcpy((char *)host->data + host->byte_offset, t->data, disco_tensor_nbytes(t));
    return DISCO_OK;
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
    (void)api_free(s, reg);
    return disco_set_error(st, "worker 0: disco.empty: %s", msg);
}

static disco_status_t api_empty(disco_session_t *s, const int64_t *shape, int ndim,
                                DLDataType dtype, bool worker0_only, disco_dref_t *reg_out)
{
    /* Every size is checked here, before a command goes out: an overflowing
     * shape used to wrap to a few bytes and be allocated as such. */
    size_t nbytes;
    disco_status_t st = disco_shape_nbytes(shape, ndim, dtype, &nbytes);
    if (st != DISCO_OK || (st = usable(s)) != DISCO_OK ||
        (st = fits_heap(s, nbytes, worker0_only ? 1 : s->world)) != DISCO_OK)
        return st;
    disco_value_t args[4] = {disco_value_shape(shape, (uint32_t)ndim), disco_value_dtype(dtype),
                             disco_value_device((DLDevice){kDLCPU, 0}),
                             disco_value_bool(worker0_only)};
    disco_dref_t f, reg;
    if ((st = api_get_func(s, "disco.empty", &f)) != DISCO_OK)
        return st;
    st = api_call(s, f, args, 4, &reg);
    if (st == DISCO_OK)
        st = w0_outcome(s, reg);
    disco_status_t fst = api_free(s, f);
    if (st == DISCO_OK && fst != DISCO_OK) {
        (void)api_free(s, reg);
        st = fst;
    }
    if (st == DISCO_OK)
        *reg_out = reg;
    return st;
}

/* ---- the errors the API returns ---- */

/* Every public call returns through here. An error met while the session
 * looks healthy is first set against the workers: if one died, the death
 * (which caused it, or will fail the next call anyway) is what the caller
 * sees. And the first error returned after the session broke is its cause
 * (a death, a deadline), whatever call meets it and however the break was
 * found (a check inside a wait whose status an inner step dropped); later
 * calls get DISCO_E_BROKEN naming it. */
static disco_status_t tell(struct disco_session *s, disco_status_t st)
{
    if (st == DISCO_OK || s->state == DISCO_E_SHUTDOWN)
        return st;
    if (s->state == DISCO_OK && disco__procs_check(s) == DISCO_OK)
        return st; /* no death: the error stands, its detail untouched */
    if (s->state == DISCO_OK || s->told)
        return st;
    s->told = true;
    return disco_set_error(s->state, "%s", s->why);
}

disco_status_t disco_session_sync(disco_session_t *s, int worker)
{
    return tell(s, api_sync(s, worker));
}

disco_status_t disco_session_get_func(disco_session_t *s, const char *name, disco_dref_t *func_out)
{
    return tell(s, api_get_func(s, name, func_out));
}

disco_status_t disco_session_call(disco_session_t *s, disco_dref_t func, const disco_value_t *args,
                                  int nargs, disco_dref_t *result_out)
{
    return tell(s, api_call(s, func, args, nargs, result_out));
}

disco_status_t disco_session_call_by_name(disco_session_t *s, const char *name,
                                          const disco_value_t *args, int nargs,
                                          disco_dref_t *result_out)
{
    return tell(s, api_call_by_name(s, name, args, nargs, result_out));
}

disco_status_t disco_session_free_reg(disco_session_t *s, disco_dref_t reg)
{
    return tell(s, api_free(s, reg));
}

disco_status_t disco_session_alloc_reg(disco_session_t *s, disco_dref_t *reg_out)
{
    return tell(s, api_alloc_reg(s, reg_out));
}

disco_status_t disco_session_debug_get(disco_session_t *s, disco_dref_t reg, int worker,
                                       disco_value_t *value_out)
{
    return tell(s, api_debug_get(s, reg, worker, value_out));
}

disco_status_t disco_session_debug_set(disco_session_t *s, disco_dref_t reg, int worker,
                                       const disco_value_t *value)
{
    return tell(s, api_debug_set(s, reg, worker, value));
}

disco_status_t disco_session_copy_to_worker0(disco_session_t *s, const DLTensor *host,
                                             disco_dref_t *reg_out)
{
    return tell(s, api_copy_to_worker0(s, host, reg_out));
}

disco_status_t disco_session_copy_from_worker0(disco_session_t *s, disco_dref_t reg, DLTensor *host)
{
    return tell(s, api_copy_from_worker0(s, reg, host));
}

disco_status_t disco_session_empty(disco_session_t *s, const int64_t *shape, int ndim,
                                   DLDataType dtype, bool worker0_only, disco_dref_t *reg_out)
{
    return tell(s, api_empty(s, shape, ndim, dtype, worker0_only, reg_out));
}
