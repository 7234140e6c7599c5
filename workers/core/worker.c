/* worker.c - the register file and command execution (see worker.h). */
#include "workers/core/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/wait_internal.h"
#include "workers/core/registry.h"
#include "workers/data/arena.h"
#include "workers/data/collective.h"
#include "workers/data/tensor_impl.h"

static const char *const cmd_names[DISCO_CMD_COUNT] = {
    [DISCO_CMD_SHUTDOWN] = "shutdown",
    [DISCO_CMD_KILL_REG] = "kill register",
    [DISCO_CMD_GET_FUNC] = "get global function",
    [DISCO_CMD_CALL] = "call packed",
    [DISCO_CMD_SYNC] = "sync worker",
    [DISCO_CMD_DEBUG_GET] = "debug get from remote",
    [DISCO_CMD_DEBUG_SET] = "debug set register",
    [DISCO_CMD_CALL_SYNC] = "call packed and sync",
};

const char *disco__cmd_name(uint32_t code)
{
    return code < DISCO_CMD_COUNT && cmd_names[code] != NULL ? cmd_names[code] : "unknown command";
}

disco_status_t disco__worker_init(disco_worker_t *w, int id, int world, struct disco__errbox *box,
                                  disco_heap_t *heap, struct disco__coll_area *coll,
                                  const disco_wait_t *wait)
{
    memset(w, 0, sizeof *w);
    w->id = id;
    w->world = world;
    w->gworld = world;
    w->errbox = box;
    w->heap = heap;
    w->coll = coll;
    w->wait = wait;
    return DISCO_OK;
}

void disco__worker_fini(disco_worker_t *w)
{
    for (uint64_t i = 0; i < w->nregs; i++)
        disco_value_clear(&w->regs[i]);
    free(w->regs);
    w->regs = NULL;
    w->nregs = 0;
    disco__arena_destroy(w->arena); /* after the registers: they held its blocks */
    w->arena = NULL;
    free(w->fwd_count);
    w->fwd_count = NULL;
}

void disco__worker_drop_device(disco_worker_t *w)
{
    for (uint64_t i = 0; i < w->nregs; i++)
        if (w->regs[i].type == DISCO_T_TENSOR && disco__tensor_is_device(w->regs[i].v.tensor))
            disco_value_clear(&w->regs[i]);
    disco__arena_destroy(w->arena); /* after its tensors: they held its blocks */
    w->arena = NULL;
}

void disco__worker_post_error(disco_worker_t *w, int code, const char *func, const char *msg)
{
    struct disco__errbox *b = w->errbox;
    /* Acquire: pairs with the controller's release clear, so it has finished
     * reading the previous report before we overwrite it. */
    if (atomic_load_explicit(&b->full, memory_order_acquire)) {
        /* Relaxed: a counter read only after the box is seen full. */
        atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
        return;
    }
    b->code = code;
    b->seq = w->seq;
    snprintf(b->func, sizeof b->func, "%s", func);
    snprintf(b->msg, sizeof b->msg, "%s", msg);
    /* Release: the fields above are written before the controller sees full. */
    atomic_store_explicit(&b->full, 1, memory_order_release);
}

/* ---- registers ---- */

static disco_status_t reg_slot(disco_worker_t *w, uint64_t reg, disco_value_t **slot_out)
{
    if (reg == 0 || reg >= DISCO_REG_LIMIT)
        return disco_set_error(DISCO_E_BAD_REG, "register %llu is out of range",
                               (unsigned long long)reg);
    if (reg >= w->nregs) {
        uint64_t n = w->nregs ? w->nregs : 16;
        while (n <= reg)
            n *= 2;
        disco_value_t *p = realloc(w->regs, n * sizeof *p);
        if (p == NULL)
            return disco_set_error(DISCO_E_NOMEM, "register file of %llu", (unsigned long long)n);
        memset(p + w->nregs, 0, (n - w->nregs) * sizeof *p);
        w->regs = p;
        w->nregs = n;
    }
    *slot_out = &w->regs[reg];
    return DISCO_OK;
}

static disco_status_t reg_set(disco_worker_t *w, uint64_t reg, const disco_value_t *v)
{
    disco_value_t *slot, copy;
    disco_status_t st = reg_slot(w, reg, &slot);
    if (st == DISCO_OK && (st = disco_value_copy(v, &copy)) == DISCO_OK) {
        disco_value_clear(slot);
        *slot = copy;
    }
    return st;
}

disco_status_t disco__worker_set_reg(disco_worker_t *w, uint64_t reg, const disco_value_t *v)
{
    return reg_set(w, reg, v);
}

const disco_value_t *disco__worker_get_reg(const disco_worker_t *w, uint64_t reg)
{
    return reg != 0 && reg < w->nregs ? &w->regs[reg] : NULL;
}

/* ---- commands ---- */

/* Frees register r (0, or one never set here: nothing to do). */
static void kill_reg(disco_worker_t *w, uint64_t r)
{
    if (r != 0 && r < w->nregs)
        disco_value_clear(&w->regs[r]);
}

static void fail_cmd(disco_worker_t *w, const char *what)
{
    disco__worker_post_error(w, DISCO_E_BAD_REG, what, disco_last_error());
}

static void exec_get_func(disco_worker_t *w, const disco_value_t *args)
{
    uint64_t handle;
    disco_value_t *slot;
    if (reg_slot(w, args[0].v.reg, &slot) != DISCO_OK) {
        fail_cmd(w, "get global function");
        return;
    }
    disco_value_clear(slot);
    if (disco__func_find(args[1].v.str, &handle) != DISCO_OK) {
        disco__worker_post_error(w, DISCO_E_NO_FUNC, args[1].v.str, disco_last_error());
        return;
    }
    slot->type = DISCO_T_FUNC;
    slot->v.handle = handle;
}

/* Resolves DRef arguments to the register values on this worker. */
static disco_status_t resolve_args(disco_worker_t *w, const disco_value_t *in, int n,
                                   disco_value_t *out)
{
    for (int i = 0; i < n; i++) {
        if (in[i].type != DISCO_T_DREF) {
            out[i] = in[i];
            continue;
        }
        uint64_t r = in[i].v.reg;
        if (r == 0)
            return disco_set_error(DISCO_E_BAD_REG, "argument %d: register 0", i);
        /* The controller checked that the register is live; a register this
         * worker never wrote (say, one copied to worker 0 only) holds null
         * here. Refusing it would make this worker skip a collective the
         * others wait in. */
        out[i] = r < w->nregs ? w->regs[r] : disco_value_null();
    }
    return DISCO_OK;
}

/* Calls the function in register fr with the n arguments args into
 * register res. */
static void exec_call(disco_worker_t *w, uint64_t res, uint64_t fr, const disco_value_t *args,
                      int n)
{
    disco_value_t *slot;
    if (reg_slot(w, res, &slot) != DISCO_OK) {
        fail_cmd(w, "call packed");
        return;
    }
    disco_value_clear(slot);
    if (fr == 0 || fr >= w->nregs || w->regs[fr].type != DISCO_T_FUNC) {
        disco_set_error(DISCO_E_BAD_REG, "register %llu holds no function", (unsigned long long)fr);
        fail_cmd(w, "call packed");
        return;
    }
    const struct disco__func *f = disco__func_at(w->regs[fr].v.handle);
    disco_value_t real[DISCO_MAX_ARGS];
    disco_status_t st = resolve_args(w, args, n, real);
    if (st == DISCO_OK)
        st = disco__sig_check(f, real, n, 0);
    if (st != DISCO_OK) {
        disco__worker_post_error(w, st, f->name, disco_last_error());
        return;
    }
    /* A worker thread's user C function may be cancelled (at its own
     * cancellation points: sleep, read, poll...) when the controller gives
     * it up at a deadline (threads.c); disco's builtins ("disco." names,
     * Python's trampoline among them) never are: they hold locks and
     * shared state. test_threaded's hang_times_out holds it. */
    bool cancellable = w->threaded && strncmp(f->name, "disco.", 6) != 0;
    int was = 0;
    if (cancellable)
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &was);
    st = disco__func_run(f, w, real, n, slot);
    if (cancellable)
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &was);
    if (st != DISCO_OK)
        disco__worker_post_error(w, st, f->name, disco_last_error());
}

static disco_status_t reply_ok(disco_worker_t *w, int64_t token, const disco_value_t *v,
                               void *reply, size_t cap, size_t *len)
{
    disco_value_t out[2] = {disco_value_int(token), v != NULL ? *v : disco_value_null()};
    disco_status_t st =
        disco_frame_encode(DISCO_REPLY_OK, w->seq, out, v != NULL ? 2 : 1, reply, cap, len);
    if (st == DISCO_OK)
        return DISCO_OK;
    /* The value does not fit in a reply: say so instead. */
    char msg[160];
    snprintf(msg, sizeof msg, "value too large for a reply: %s", disco_last_error());
    disco_value_t err[3] = {disco_value_int(token), disco_value_int(st), disco_value_str(msg)};
    return disco_frame_encode(DISCO_REPLY_ERROR, w->seq, err, 3, reply, cap, len);
}

static disco_status_t reply_error(disco_worker_t *w, int64_t token, disco_status_t code,
                                  void *reply, size_t cap, size_t *len)
{
    disco_value_t err[3] = {disco_value_int(token), disco_value_int(code),
                            disco_value_str(disco_last_error())};
    return disco_frame_encode(DISCO_REPLY_ERROR, w->seq, err, 3, reply, cap, len);
}

/* Copies device tensor t's bytes into a new host buffer (*staged_out, the
 * caller frees it) and points raw (t's bytes value) at it. */
static disco_status_t stage_device(disco_worker_t *w, const DLTensor *t, disco_value_t *raw,
                                   void **staged_out)
{
    void *buf = malloc(raw->len ? raw->len : 1);
    if (buf == NULL)
        return disco_set_error(DISCO_E_NOMEM, "worker %d: %u bytes to stage a device tensor",
                               disco__worker_gid(w), raw->len);
    disco_status_t st = disco__tensor_to_host(t, buf);
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        free(buf);
        return disco_set_error(st, "worker %d: reading a tensor on device type %d, id %d: %s",
                               disco__worker_gid(w), (int)t->device.device_type,
                               t->device.device_id, why);
    }
    raw->v.bytes = buf;
    *staged_out = buf;
    return DISCO_OK;
}

/* debug_set of a register holding a device tensor with a bytes value of
 * the tensor's size fills the tensor (its bytes cannot be set any other
 * way from the host). DISCO_E_AGAIN: not that case, set the register. */
static disco_status_t fill_device(disco_worker_t *w, uint64_t reg, const disco_value_t *v)
{
    const disco_value_t *cur = disco__worker_get_reg(w, reg);
    if (cur == NULL || cur->type != DISCO_T_TENSOR || !disco__tensor_is_device(cur->v.tensor) ||
        v->type != DISCO_T_BYTES)
        return DISCO_E_AGAIN;
    DLTensor *t = cur->v.tensor;
    size_t n = disco_tensor_nbytes(t);
    if (v->len != n)
        return disco_set_error(DISCO_E_MISMATCH,
                               "worker %d: register %llu holds a device tensor of %zu bytes; "
                               "%u bytes cannot fill it",
                               disco__worker_gid(w), (unsigned long long)reg, n, v->len);
    disco_status_t st = disco__tensor_from_host(t, v->v.bytes);
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        return disco_set_error(st, "worker %d: filling a tensor on device type %d, id %d: %s",
                               disco__worker_gid(w), (int)t->device.device_type,
                               t->device.device_id, why);
    }
    return DISCO_OK;
}

/* Checks a command's fixed arguments: count and types; a call's head
 * (protocol.h) is a bytes value of its exact size with its zero word 0,
 * and is read into *hd. */
static disco_status_t check_shape(const disco_frame_hdr_t *h, const disco_value_t *args,
                                  struct disco__call_head *hd)
{
    static const char *const want[DISCO_CMD_COUNT] = {
        [DISCO_CMD_SHUTDOWN] = "",      [DISCO_CMD_KILL_REG] = "r",  [DISCO_CMD_GET_FUNC] = "rs",
        [DISCO_CMD_CALL] = "h",         [DISCO_CMD_SYNC] = "ii",     [DISCO_CMD_DEBUG_GET] = "rii",
        [DISCO_CMD_DEBUG_SET] = "rii?", [DISCO_CMD_CALL_SYNC] = "h",
    };
    if (h->code >= DISCO_CMD_COUNT || want[h->code] == NULL)
        return disco_set_error(DISCO_E_PROTOCOL, "unknown command code %u", h->code);
    const char *s = want[h->code];
    size_t n = strlen(s);
    bool call = disco__cmd_is_call(h->code);
    if (call ? h->nargs < n : h->nargs != n)
        return disco_set_error(DISCO_E_ARG_COUNT, "%s with %u arguments", disco__cmd_name(h->code),
                               h->nargs);
    for (size_t i = 0; i < n; i++) {
        uint32_t t = s[i] == 'r'   ? DISCO_T_DREF
                     : s[i] == 'i' ? DISCO_T_INT
                     : s[i] == 's' ? DISCO_T_STR
                     : s[i] == 'h' ? DISCO_T_BYTES
                                   : args[i].type;
        if (args[i].type != t)
            return disco_set_error(DISCO_E_BAD_TYPE, "%s argument %zu: %s, expected %s",
                                   disco__cmd_name(h->code), i, disco_type_name(args[i].type),
                                   disco_type_name(t));
    }
    if (call && (!disco__call_head_read(h->code, args, h->nargs, hd) || hd->zero != 0))
        return disco_set_error(
            DISCO_E_BAD_TYPE, "%s: its head is %u bytes%s, expected %zu with its zero word 0",
            disco__cmd_name(h->code), args[0].len,
            args[0].len == sizeof *hd ? " with its zero word set" : "", sizeof *hd);
    return DISCO_OK;
}

disco_status_t disco__worker_exec(disco_worker_t *w, const disco_frame_hdr_t *h,
                                  const disco_value_t *args, void *reply, size_t reply_cap,
                                  size_t *reply_len)
{
    *reply_len = 0;
    w->seq = h->seq;
    w->cmd_coll = w->cmd_phase = 0;
    if (disco__worker_multinode(w)) /* the forwarder's deadline counts from it (comm_fwd.h) */
        w->cmd_start_ns = disco_now_ns();
    struct disco__call_head hd; /* a call's: check_shape reads it */
    disco_status_t st = check_shape(h, args, &hd);
    if (st != DISCO_OK) {
        disco__worker_post_error(w, st, disco__cmd_name(h->code), disco_last_error());
        return DISCO_OK;
    }
    switch (h->code) {
    case DISCO_CMD_SHUTDOWN:
        return DISCO_E_SHUTDOWN;
    case DISCO_CMD_KILL_REG:
        kill_reg(w, args[0].v.reg);
        return DISCO_OK;
    case DISCO_CMD_GET_FUNC:
        exec_get_func(w, args);
        return DISCO_OK;
    case DISCO_CMD_CALL:
    case DISCO_CMD_CALL_SYNC:
        kill_reg(w, hd.kill);
        exec_call(w, hd.result, hd.func, args + 1, (int)h->nargs - 1);
        disco__coll_done(w); /* members still waiting in this command see it */
        /* A call's failure is posted as any call's (the errbox); the answer
         * to a CALL_SYNC only says that it ran, as a sync's does. */
        return h->code == DISCO_CMD_CALL_SYNC
                   ? reply_ok(w, hd.token, NULL, reply, reply_cap, reply_len)
                   : DISCO_OK;
    case DISCO_CMD_SYNC:
        if (args[0].v.i == disco__worker_gid(w) || args[0].v.i == DISCO_SYNC_ALL)
            return reply_ok(w, args[1].v.i, NULL, reply, reply_cap, reply_len);
        return DISCO_OK;
    case DISCO_CMD_DEBUG_GET: {
        if (args[1].v.i != disco__worker_gid(w))
            return DISCO_OK;
        uint64_t r = args[0].v.reg;
        if (r == 0 || r >= w->nregs) {
            disco_set_error(DISCO_E_BAD_REG, "worker %d: register %llu is not set",
                            disco__worker_gid(w), (unsigned long long)r);
            return reply_error(w, args[2].v.i, DISCO_E_BAD_REG, reply, reply_cap, reply_len);
        }
        const disco_value_t *v = &w->regs[r];
        disco_value_t raw;
        void *staged = NULL;
        if (v->type == DISCO_T_TENSOR) { /* a tensor answers with its bytes */
            /* Its size is checked, never cut to the 32 bits of a bytes
             * length: 4 GiB or more is DISCO_E_OVERFLOW
             * (test_bounds.c, test_debug_get_4gib). */
            if ((st = disco__tensor_bytes_value(v->v.tensor, &raw)) != DISCO_OK)
                return reply_error(w, args[2].v.i, st, reply, reply_cap, reply_len);
            /* A device tensor's bytes are staged in host memory first. */
            if (disco__tensor_is_device(v->v.tensor) &&
                (st = stage_device(w, v->v.tensor, &raw, &staged)) != DISCO_OK)
                return reply_error(w, args[2].v.i, st, reply, reply_cap, reply_len);
            v = &raw;
        }
        st = reply_ok(w, args[2].v.i, v, reply, reply_cap, reply_len);
        free(staged);
        return st;
    }
    case DISCO_CMD_DEBUG_SET:
        if (args[1].v.i != disco__worker_gid(w))
            return DISCO_OK;
        if ((st = fill_device(w, args[0].v.reg, &args[3])) == DISCO_E_AGAIN)
            st = reg_set(w, args[0].v.reg, &args[3]);
        if (st != DISCO_OK)
            return reply_error(w, args[2].v.i, st, reply, reply_cap, reply_len);
        return reply_ok(w, args[2].v.i, NULL, reply, reply_cap, reply_len);
    default: /* check_shape refused every other code */
        return DISCO_OK;
    }
}

/* The worker loop's state: its channel and buffers, and the waits it
 * receives with. (Its tracing is a local of its own, struct
 * disco__trace_writer: the stamped wait's found_at makes this struct's
 * address escape, and the writer's fields then could not stay in
 * registers.) */
struct loop {
    disco_chan_t *c;
    void *buf, *reply;
    uint32_t cap;
    disco_wait_t idle;    /* untraced: a wait for a command, reporting parks */
    disco_wait_t poll;    /* traced: a look for a command already waiting */
    disco_wait_t stamped; /* traced: a wait that stamps when it finds one */
    uint64_t found;       /* the stamped wait's stamp */
    struct disco__wait_hook hook, stamp_hook;
    _Atomic uint64_t *parked; /* the status's parked count, or NULL */
};

/* Receives the next command, stamping its start when traced (the overlap
 * rule in trace_ring.h says which stamp and why). */
static inline disco_status_t receive(struct loop *l, struct disco__trace_writer *tr, uint32_t *len)
{
    if (tr->ring == NULL)
        return disco__chan_recv_cmd(l->c, l->buf, l->cap, len, &l->idle);
    disco_status_t st;
    if (l->c->kind == DISCO_TRANSPORT_RING && tr->last_end != 0) {
        st = disco__chan_recv_cmd(l->c, l->buf, l->cap, len, &l->poll);
        if (st != DISCO_E_AGAIN) {
            disco__trace_start(tr, tr->last_end, 0);
            return st;
        }
    }
    disco__trace_flush(tr); /* idle: the held record goes into the ring */
    l->found = 0;
    uint64_t parked = l->parked != NULL ? atomic_load_explicit(l->parked, memory_order_relaxed) : 0;
    st = disco__chan_recv_cmd(l->c, l->buf, l->cap, len, &l->stamped);
    /* Relaxed: this thread's own count (the wait's hook adds to it). */
    if (l->parked != NULL)
        parked = atomic_load_explicit(l->parked, memory_order_relaxed) - parked;
    disco__trace_start(tr, l->found != 0 ? l->found : disco__ticks(), parked);
    return st;
}

/* The key (registry.h) of the function in register func, or 0. */
static inline uint64_t func_key(const disco_worker_t *w, uint64_t func)
{
    if (func == 0 || func >= w->nregs || w->regs[func].type != DISCO_T_FUNC)
        return 0;
    return disco__func_at(w->regs[func].v.handle)->key;
}

/* Points the loop's waits' hooks at the worker's status words (wstat.h):
 * parks are reported as they happen. */
static void hook_status(struct loop *l, struct disco__wstat *ws)
{
    if (ws != NULL)
        l->hook = (struct disco__wait_hook){.state = &ws->state,
                                            .parked_state = DISCO_WS_PARKED,
                                            .awake_state = DISCO_WS_IDLE,
                                            .park_ns = &ws->park_ns};
    l->parked = ws != NULL ? &ws->park_ns : NULL;
    l->stamp_hook = l->hook;
    l->stamp_hook.found_at = &l->found;
    disco__wait_set_hook(&l->idle, &l->hook);
    disco__wait_set_hook(&l->stamped, &l->stamp_hook);
}

int disco__worker_loop(disco_worker_t *w, disco_chan_t *c, const disco_wait_t *wait)
{
    size_t cap = ((size_t)c->max_msg + 7u) & ~(size_t)7u; /* no wrap in 32 bits */
    struct loop l = {.c = c,
                     .buf = aligned_alloc(8, cap ? cap : 8),
                     .reply = aligned_alloc(8, DISCO_REPLY_MAX),
                     .cap = (uint32_t)cap,
                     .idle = *wait,
                     .poll = *wait,
                     .stamped = *wait};
    if (w->keep != NULL) { /* a worker thread: freed at its exit if it is cancelled */
        w->keep->loop_mem[0] = l.buf;
        w->keep->loop_mem[1] = l.reply;
    }
    struct disco__trace_writer tr = {.ring = w->trace};
    struct disco__wstat_writer ws = {.w = w->stat};
    l.poll.no_wait = true;
    hook_status(&l, w->stat);
    disco__wstat_state(&ws, DISCO_WS_IDLE);
    int rc = 1;
    if (l.buf == NULL || l.reply == NULL)
        goto out;
    for (;;) {
        uint32_t len;
        uint64_t prev_end = tr.last_end;
        disco_status_t st = receive(&l, &tr, &len);
        if (st != DISCO_OK)
            goto out; /* controller gone, session broken, or channel closed */
        disco_frame_hdr_t h;
        disco_value_t args[DISCO_MAX_ARGS];
        if ((st = disco_frame_decode(l.buf, len, &h, args, DISCO_MAX_ARGS)) != DISCO_OK) {
            /* The controller encoded it, so the channel is corrupt and a
             * reply the controller may be waiting for will never come: say
             * why and exit, which the controller notices at once. */
            disco__worker_post_error(w, st, "command frame", disco_last_error());
            rc = DISCO_WORKER_EXIT_PROTOCOL;
            goto out;
        }
        uint64_t func = disco__trace_func(&h, args), key = func_key(w, func);
        /* Times from the trace stamps only (wstat.h: no clock read of its own). */
        bool timed = tr.ring != NULL;
        disco__wstat_begin(&ws, h.seq, h.code, key, timed ? tr.t_start : 0,
                           timed && prev_end != 0 ? tr.t_start - prev_end : 0);
        size_t rlen;
        st = disco__worker_exec(w, &h, args, l.reply, DISCO_REPLY_MAX, &rlen);
        if (st == DISCO_E_SHUTDOWN) {
            rc = 0;
            goto out;
        }
        if (rlen != 0 && disco__chan_send_reply(c, l.reply, (uint32_t)rlen, wait) != DISCO_OK)
            goto out;
        if (timed) { /* stamp end (trace_ring.h: after the fetch began) */
            disco__chan_prepare_recv(c);
            disco__trace_end(&tr, h.seq, h.code, func, rlen != 0);
        }
        disco__wstat_end(&ws, key, timed ? tr.last_end - tr.t_start : 0);
    }
out:
    disco__wstat_state(&ws, DISCO_WS_EXITED);
    if (tr.ring != NULL)
        disco__trace_flush(&tr);
    if (w->keep != NULL)
        w->keep->loop_mem[0] = w->keep->loop_mem[1] = NULL;
    free(l.buf);
    free(l.reply);
    return rc;
}
