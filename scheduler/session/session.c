/* session.c - the Disco session API on the controller (see session.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/wait_internal.h"
#include "workers/data/tensor_impl.h"
#include "disco/dtype.h"
#include "scheduler/node/node.h"
#include "scheduler/session/session_impl.h"

disco_session_config_t disco_session_config_default(int num_workers)
{
    disco_session_config_t c = {.num_workers = num_workers};
    return c;
}

int disco_session_num_workers(const disco_session_t *s)
{
    return s->gworld;
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
    if (worker < 0 || worker >= s->world) /* another node's: not a pid here */
        return -1;
    return (int)s->procs.pid[worker];
}

static disco_status_t usable(struct disco_session *s)
{
    if (s->state == DISCO_OK)
        return DISCO_OK;
    if (s->state == DISCO_E_SHUTDOWN)
        return disco_set_error(DISCO_E_SHUTDOWN, "session is shut down");
    return disco_set_error(DISCO_E_BROKEN, "session is broken: %s", s->why);
}

/* ---- registers ---- */

/* ---- issuing commands ---- */

/* A broadcast that failed with st: a full channel past the deadline is
 * blamed on the worker that does not read, which is killed. */
disco_status_t disco__session_bcast_failed(struct disco_session *s, disco_status_t st)
{
    if (st == DISCO_E_TIMEOUT) {
        /* The worker that does not read: the ring's slowest reader, or the
         * one whose pipe stayed full. */
        uint32_t slow = s->chan.kind == DISCO_TRANSPORT_RING
                            ? disco_ring_slowest_reader(&s->chan.cmd)
                            : UINT32_MAX;
        int w = s->chan.kind == DISCO_TRANSPORT_PIPE ? s->chan.stuck
                : slow != UINT32_MAX                 ? (int)slow + 1
                                                     : 0;
        if (w <= 0)
            return disco__session_break(s, DISCO_E_TIMEOUT,
                                        "the command channel stayed full for %u ms",
                                        s->cfg.call_timeout_ms);
        disco__session_kill(s, w);
        return disco__session_break(s, DISCO_E_TIMEOUT,
                                    "worker %d took no command for %u ms; it was killed",
                                    w + s->gid_base, s->cfg.call_timeout_ms);
    }
    return st;
}

disco_status_t disco__session_ready(struct disco_session *s)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    /* Waits look at the workers as they wait; commands that never wait
     * look every HEALTH_EVERY commands, so a death is noticed without a
     * syscall on every call. */
    if (++s->issued % HEALTH_EVERY == 0 && (st = disco__session_check(s)) != DISCO_OK)
        return st;
    return DISCO_OK;
}

disco_status_t disco__session_deliver(struct disco_session *s, const disco_frame_hdr_t *h,
                                      const disco_value_t *args, const void *frame, size_t len,
                                      const char *name, size_t *w0_len)
{
    uint64_t t_enq = 0; /* stamped by the broadcast as it publishes (trace_impl.h) */
    /* Relaxed, the status words: a monitor's (workers/core/wstat.h). */
    atomic_store_explicit(&s->stat->wait_what, DISCO_CW_ROOM, memory_order_relaxed);
    atomic_store_explicit(&s->stat->wait_seq, h->seq, memory_order_relaxed);
    disco_status_t st =
        disco__chan_bcast(&s->chan, frame, (uint32_t)len, disco__session_call_wait(s),
                          disco__trace_slot(&s->trace, &t_enq));
    if (st != DISCO_OK)
        return disco__session_bcast_failed(s, st);
    atomic_store_explicit(&s->stat->issued, h->seq, memory_order_relaxed);
    if (s->node != NULL && (st = disco__node_post(s->node, frame, len)) != DISCO_OK)
        return disco__session_node_failed(s, st);
    uint64_t func = disco__trace_func(h, args);
    uint64_t key =
        func != 0 && func < s->regs.cap && s->regs.func[func] != NULL ? s->regs.func[func]->key : 0;
    disco__wstat_begin(&s->w0_stat, h->seq, h->code, key, t_enq, 0);
    disco__worker_exec(&s->w0, h, args, s->reply, DISCO_REPLY_MAX, w0_len);
    /* Worker 0 ran inline right after the broadcast: the command's record is
     * its slice too, from the enqueue stamp to this one (trace.c). */
    uint64_t t_done = disco__trace_cmd_issued(&s->trace, h->seq, h->code, name, t_enq);
    disco__wstat_end(&s->w0_stat, key, t_done != 0 && t_enq != 0 ? t_done - t_enq : 0);
    if (s->state != DISCO_OK) /* worker 0 found a dead worker (in a collective) */
        return disco_set_error(s->state, "%s", s->why);
    return DISCO_OK;
}

static disco_status_t issue(struct disco_session *s, uint32_t code, const disco_value_t *args,
                            uint32_t nargs, size_t *w0_reply_len);

/* Sends the kill of the register a free left for the next call on its
 * own, when the next command is not a call that can carry it. */
static disco_status_t free_alone(struct disco_session *s)
{
    disco_value_t kill = {.type = DISCO_T_DREF, .v.reg = s->free_next};
    s->free_next = 0;
    disco_status_t st = issue(s, DISCO_CMD_KILL_REG, &kill, 1, NULL);
    disco__regs_recycle(&s->regs, kill.v.reg);
    return st;
}

/* Encodes a command, broadcasts it and runs it on worker 0
 * (disco__session_deliver). *w0_reply_len is worker 0's reply in
 * s->reply, if the command asked it for one. A free waiting to be sent
 * (free_next) goes first: inside the command when it is a call (its head's
 * kill), else alone. */
static disco_status_t issue(struct disco_session *s, uint32_t code, const disco_value_t *args,
                            uint32_t nargs, size_t *w0_reply_len)
{
    disco_status_t st = disco__session_ready(s);
    if (st != DISCO_OK)
        return st;
    struct disco__call_head hd;
    bool call = disco__call_head_read(code, args, nargs, &hd);
    const struct disco__func *f = call ? s->regs.func[hd.func] : NULL;
    disco_value_t with_free[DISCO_MAX_ARGS];
    if (s->free_next != 0 && call) {      /* the free rides with this call */
        hd.kill = (uint32_t)s->free_next; /* below DISCO_REG_LIMIT (regs.h) */
        memcpy(with_free, args, nargs * sizeof *args);
        with_free[0] = disco__call_head_value(&hd);
        args = with_free;
    } else if (s->free_next != 0 && (st = free_alone(s)) != DISCO_OK) {
        return st;
    }
    /* The command slot's cache line is last held by the readers: start
     * taking it now, so the fetch overlaps the encoding instead of stalling
     * the broadcast's stores. */
    disco__chan_prepare_bcast(&s->chan);
    size_t len;
    disco_frame_hdr_t h = {.code = code, .nargs = nargs, .seq = ++s->seq};
    if ((st = disco_frame_encode(code, h.seq, args, nargs, s->buf, s->chan.max_msg, &len)) !=
        DISCO_OK) {
        s->seq--; /* nothing was sent: a free riding stays waiting */
        return st;
    }
    /* The freed id may be taken again from now on: any later command runs
     * after this one on every worker. */
    if (call && hd.kill != 0) {
        disco__regs_recycle(&s->regs, hd.kill);
        s->free_next = 0;
    }
    size_t rlen = 0;
    st = disco__session_deliver(s, &h, args, s->buf, len, f != NULL ? f->name : NULL, &rlen);
    if (st == DISCO_OK && f != NULL && f == s->load_fn) /* for a recovery to load it again */
        disco__libs_note(&s->libs, &args[1], &s->w0);
    if (st == DISCO_OK && w0_reply_len != NULL)
        *w0_reply_len = rlen;
    return st;
}

static disco_status_t check_worker(const struct disco_session *s, int worker)
{
    if (worker < 0 || worker >= s->gworld)
        return disco_set_error(DISCO_E_INVAL, "no worker %d in a session of %d", worker, s->gworld);
    return DISCO_OK;
}

/* A debug command's preconditions: a real worker, a usable session, a live
 * register. */
static disco_status_t check_reg_on(struct disco_session *s, disco_dref_t reg, int worker)
{
    disco_status_t st = check_worker(s, worker);
    if (st == DISCO_OK)
        st = usable(s);
    if (st == DISCO_OK && !disco__regs_ok(&s->regs, reg))
        st = disco__regs_bad(&s->regs, reg);
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
    if ((st = disco__session_wait_reply(s, worker, token, "sync", w0_len, NULL)) != DISCO_OK)
        return st;
    return disco__session_collect_errors(s);
}

/* Every worker's answer to the command with token (one that all of them
 * answer), then the errors they reported. Worker 0's first: it is in
 * s->reply, which the others' overwrite. */
static disco_status_t wait_every_reply(struct disco_session *s, int64_t token, const char *what,
                                       size_t w0_len)
{
    for (int w = 0; w < s->world; w++) {
        disco_status_t st = disco__session_wait_reply(s, w, token, what, w0_len, NULL);
        if (st != DISCO_OK)
            return st;
    }
    return disco__session_collect_errors(s);
}

static disco_status_t api_sync_all(disco_session_t *s)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    if (s->node != NULL) { /* across nodes: the agents route one worker's sync */
        for (int w = 0; w < s->gworld; w++)
            if ((st = api_sync(s, w)) != DISCO_OK)
                return st;
        return DISCO_OK;
    }
    int64_t token = ++s->token;
    disco_value_t args[2] = {disco_value_int(DISCO_SYNC_ALL), disco_value_int(token)};
    size_t w0_len;
    if ((st = issue(s, DISCO_CMD_SYNC, args, 2, &w0_len)) != DISCO_OK)
        return st;
    return wait_every_reply(s, token, "sync", w0_len);
}

static disco_status_t api_get_func(disco_session_t *s, const char *name, disco_dref_t *func_out)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    uint64_t handle, reg;
    if (disco__func_find(name, &handle) != DISCO_OK)
        return disco_set_error(DISCO_E_NO_FUNC, "worker 0: no function named \"%s\"", name);
    if ((st = disco__regs_alloc(&s->regs, &reg)) != DISCO_OK)
        return st;
    disco_value_t args[2] = {{.type = DISCO_T_DREF, .v.reg = reg}, disco_value_str(name)};
    if ((st = issue(s, DISCO_CMD_GET_FUNC, args, 2, NULL)) != DISCO_OK) {
        disco__regs_release(&s->regs, reg);
        return st;
    }
    s->regs.func[reg] = disco__func_at(handle);
    disco__stat_name_set(s->stat, s->regs.func[reg]->key, s->regs.func[reg]->name);
    *func_out = reg;
    return DISCO_OK;
}

static disco_status_t api_free(disco_session_t *s, disco_dref_t reg);

/* A call on every worker: DISCO_CMD_CALL; or, when wait, DISCO_CMD_CALL_SYNC
 * and every worker's answer to it (disco_session_call_sync_all; across
 * nodes, where the agents route one worker's answer, a call and then
 * api_sync_all). */
static disco_status_t call_as(disco_session_t *s, disco_dref_t func, const disco_value_t *args,
                              int nargs, bool wait, disco_dref_t *result_out)
{
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    if (!disco__regs_ok(&s->regs, func))
        return disco__regs_bad(&s->regs, func);
    if (s->regs.func[func] == NULL)
        return disco_set_error(DISCO_E_BAD_REG, "register %llu holds no function",
                               (unsigned long long)func);
    bool fused = wait && s->node == NULL;
    if (nargs < 0 || nargs > DISCO_MAX_ARGS - 1) /* the head is the command's first */
        return disco_set_error(DISCO_E_ARG_COUNT, "%d arguments; at most %d", nargs,
                               DISCO_MAX_ARGS - 1);
    for (int i = 0; i < nargs; i++)
        if (args[i].type == DISCO_T_DREF && !disco__regs_ok(&s->regs, args[i].v.reg))
            return disco__regs_bad(&s->regs, args[i].v.reg);
    disco_value_t frame[DISCO_MAX_ARGS];
    if (nargs > 0)
        memcpy(frame + 1, args, (size_t)nargs * sizeof *args);
    /* A string where the signature wants a dtype becomes one ("float32"). */
    const struct disco__func *f = s->regs.func[func];
    if ((st = disco__sig_coerce(f, frame + 1, nargs)) != DISCO_OK ||
        (st = disco__sig_check(f, frame + 1, nargs, 1)) != DISCO_OK)
        return st;
    uint64_t res;
    if ((st = disco__regs_alloc(&s->regs, &res)) != DISCO_OK)
        return st;
    /* No free to carry yet (issue fills it in); ids below DISCO_REG_LIMIT. */
    struct disco__call_head hd = {
        .result = (uint32_t)res, .func = (uint32_t)func, .token = fused ? ++s->token : 0};
    frame[0] = disco__call_head_value(&hd);
    size_t w0_len = 0;
    if ((st = issue(s, fused ? DISCO_CMD_CALL_SYNC : DISCO_CMD_CALL, frame, (uint32_t)(nargs + 1),
                    fused ? &w0_len : NULL)) != DISCO_OK) {
        disco__regs_release(&s->regs, res);
        return st;
    }
    if (wait)
        st = fused ? wait_every_reply(s, hd.token, "call", w0_len) : api_sync_all(s);
    if (st != DISCO_OK) { /* nothing is left: the result goes (as a free does) */
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        api_free(s, res);
        return disco_set_error(st, "%s", why);
    }
    *result_out = res;
    return DISCO_OK;
}

static disco_status_t api_call(disco_session_t *s, disco_dref_t func, const disco_value_t *args,
                               int nargs, disco_dref_t *result_out)
{
    return call_as(s, func, args, nargs, false, result_out);
}

static disco_status_t api_call_sync_all(disco_session_t *s, disco_dref_t func,
                                        const disco_value_t *args, int nargs,
                                        disco_dref_t *result_out)
{
    return call_as(s, func, args, nargs, true, result_out);
}

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
    if (disco__regs_lost(&s->regs, reg)) { /* no worker has it: nothing to send */
        disco__regs_forget(&s->regs, reg);
        return DISCO_OK;
    }
    disco_status_t st = usable(s);
    if (st != DISCO_OK)
        return st;
    if (!disco__regs_ok(&s->regs, reg))
        return disco__regs_bad(&s->regs, reg);
    /* The kill rides with the next command when that is a call (issue):
     * a serving loop's call + free is one command instead of two (issue
     * 21). Until it is sent the id is retired, not reused: worker 0's
     * registers are also written without a command (copies, empty), and a
     * new value under the id would be freed by the kill. */
    if (s->free_next != 0 && (st = free_alone(s)) != DISCO_OK)
        return st;
    s->free_next = reg;
    disco__regs_retire(&s->regs, reg);
    return DISCO_OK;
}

static disco_status_t api_alloc_reg(disco_session_t *s, disco_dref_t *reg_out)
{
    disco_status_t st = usable(s);
    if (st == DISCO_OK && s->free_next != 0) /* the id freed last comes first */
        st = free_alone(s);
    return st != DISCO_OK ? st : disco__regs_alloc(&s->regs, reg_out);
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
    if ((st = disco__session_wait_reply(s, worker, token, "debug get", w0_len, &v)) != DISCO_OK)
        return st;
    if ((st = disco__session_collect_errors(s)) != DISCO_OK) {
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
    if ((st = disco__session_wait_reply(s, worker, token, "debug set", w0_len, NULL)) != DISCO_OK)
        return st;
    return disco__session_collect_errors(s);
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
    if (s->state == DISCO_OK && disco__session_check(s) == DISCO_OK)
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

disco_status_t disco_session_sync_all(disco_session_t *s)
{
    return tell(s, api_sync_all(s));
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

disco_status_t disco_session_call_sync_all(disco_session_t *s, disco_dref_t func,
                                           const disco_value_t *args, int nargs,
                                           disco_dref_t *result_out)
{
    return tell(s, api_call_sync_all(s, func, args, nargs, result_out));
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

/* ---- for the tensor calls (session_tensor.c) ---- */

disco_status_t disco__session_usable(struct disco_session *s)
{
    return usable(s);
}

disco_status_t disco__session_tell(struct disco_session *s, disco_status_t st)
{
    return tell(s, st);
}

disco_status_t disco__session_get_func(struct disco_session *s, const char *name,
                                       disco_dref_t *func_out)
{
    return api_get_func(s, name, func_out);
}

disco_status_t disco__session_call(struct disco_session *s, disco_dref_t func,
                                   const disco_value_t *args, int nargs, disco_dref_t *result_out)
{
    return api_call(s, func, args, nargs, result_out);
}

disco_status_t disco__session_free_reg(struct disco_session *s, disco_dref_t reg)
{
    return api_free(s, reg);
}

disco_status_t disco__session_debug_get(struct disco_session *s, disco_dref_t reg, int worker,
                                        disco_value_t *value_out)
{
    return api_debug_get(s, reg, worker, value_out);
}
