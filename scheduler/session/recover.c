/* recover.c - bringing a broken session back without closing it
 * (disco_session_recover, session.h), and the libraries it loads again.
 *
 * The choice: every worker 1..N-1 is replaced, the survivors too. A
 * survivor cannot be kept safely: it left its loop when the session broke
 * (the broken word is its waits' abort word), or it is still inside a user
 * function or a collective's barrier that waits for the dead one, where
 * nothing can get it out but a kill; its cursor in the command ring, its
 * collective slot parity and its register file belong to the old run, and
 * the heap references it holds cannot be told apart from the dead one's.
 * Replacing them all leaves one state to reason about: nothing of the old
 * processes survives but what the controller's process holds (worker 0's
 * thread and the heap blocks its tensors and views reference), and every
 * worker starts as at open: same launch mode, transport, worker program
 * and placement plan (the bindings are written again from it).
 *
 * The steps (labels used below):
 *   R0 refused, nothing done, where new forked workers could not use a
 *      device (CUDA) this process has used since the old ones started.
 *   R1 SIGKILL every worker 1..N-1 at once and reap them all: from here no
 *      other process maps the segment, so it may be rewritten with plain
 *      stores, and starting the new workers (fork, spawn) publishes them.
 *   R2 every live register id becomes lost (regs.h): not reused until the
 *      user frees it; using it fails with DISCO_E_BAD_REG, "lost in a
 *      recovery".
 *   R3 worker 0 drops its registers and its device arena (the peers'
 *      imports go with it); then the heap's counts are rebuilt from the
 *      tensors this process still holds (views a user keeps): every other
 *      block, the dead workers' own and those only they held, is freed
 *      (disco__tensor_heap_rebuild). Not disco_heap_reclaim_owner: a view
 *      of a dead worker's tensor holds its block, which must outlive the
 *      worker. Taking the heap's lock recovers it if a dead worker held it.
 *   R4 the segment's shared state is formatted again (disco__session_format,
 *      the function open uses): the broken word, error boxes, bindings,
 *      the collective and device areas, the command and reply rings (their
 *      cursors, sequence numbers, dead-reader marks and waiter words). The
 *      trace rings are kept: their records stay valid (sequence numbers
 *      keep counting), a record a dead worker had claimed but not
 *      published is overwritten by the new one, and the controller's
 *      export goes on working. The pipes (pipe transport) are new.
 *   R5 worker 0 is set up again and workers 1..N-1 started; the session
 *      is healthy.
 *   R6 every library the session loaded is loaded again on every worker,
 *      in order, and every worker is synced: each new worker is up and has
 *      them (a forked one inherited them already; a spawned one needs it).
 * A failure after R1 leaves the session broken (the cause says the
 * recovery failed and may be tried again); a later call may recover it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workers/data/arena.h"
#include "workers/data/tensor_impl.h"
#include "workers/device/fork_rule.h"
#include "scheduler/session/session_impl.h"

/* A recovery that failed at step: the session stays broken with this as
 * its cause (whatever broke it before); the caller is told by the return. */
static disco_status_t failed(struct disco_session *s, disco_status_t st, const char *step)
{
    char why[DISCO_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", disco_last_error());
    s->state = DISCO_OK; /* so that the break below records this cause */
    /* The step's detail cut so that the advice at the end always fits. */
    st = disco__session_break(
        s, st, "recovery failed at %s: %.240s (disco_session_recover may be tried again)", step,
        why);
    s->told = true;
    return st;
}

/* R6: every noted library on every worker, then a sync of each. */
static disco_status_t reload(struct disco_session *s)
{
    disco_status_t st = DISCO_OK;
    disco_dref_t f = 0, r;
    if (s->libs.n != 0)
        st = disco__session_get_func(s, "disco.load_library", &f);
    for (size_t i = 0; i < s->libs.n && st == DISCO_OK; i++) {
        disco_value_t path = disco_value_str(s->libs.path[i]);
        if ((st = disco__session_call(s, f, &path, 1, &r)) == DISCO_OK)
            st = disco__session_free_reg(s, r);
    }
    if (f != 0 && st == DISCO_OK)
        st = disco__session_free_reg(s, f);
    for (int w = 1; w < s->world && st == DISCO_OK; w++)
        st = disco_session_sync(s, w);
    return st == DISCO_OK ? disco_session_sync(s, 0) : st;
}

unsigned disco_session_arenas_left(void)
{
    return disco__arena_left_count();
}

disco_status_t disco_session_recover(disco_session_t *s)
{
    if (s->state == DISCO_E_SHUTDOWN)
        return disco_set_error(DISCO_E_SHUTDOWN, "session is shut down");
    if (s->node != NULL)
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "disco_session_recover: a session across nodes cannot be recovered "
                               "(close it and open another)");
    /* R0. Workers forked now from a process that has used CUDA since the
     * last ones were could not use it (a forked child's CUDA calls fail),
     * yet the rest of the recovery would succeed: refused, nothing done.
     * Not respawned by spawn instead: a forked worker has what the
     * controller registered in its own process, a spawned one does not
     * (test_recover.c, test_fork_after_device_refused). */
    const char *spoiled = s->cfg.launch == DISCO_LAUNCH_FORK && !s->fork_spoiled_at_start
                              ? disco__device_fork_spoiled()
                              : NULL;
    if (spoiled != NULL)
        return disco_set_error(DISCO_E_UNSUPPORTED,
                               "disco_session_recover: this session's workers are forked "
                               "(DISCO_LAUNCH_FORK) and this process has used %s since they were "
                               "started (worker 0's device tensors, or the application): a worker "
                               "forked now could not use %s, which does not survive fork. Nothing "
                               "was done; close the session and open one with DISCO_LAUNCH_SPAWN",
                               spoiled, spoiled);
    /* R1. A worker that does not end (a frozen cgroup) cannot be replaced
     * yet: its entry stays, and the next try reaps it. */
    disco__procs_kill_all(&s->procs);
    for (int i = 1; i < s->world; i++)
        if (!s->procs.reaped[i] && s->procs.pid[i] > 0) {
            if (s->procs.threads) /* threads.c: told to stop, not at a cancellation point */
                disco_set_error(DISCO_E_TIMEOUT,
                                "worker %d (a thread) did not end when told to stop and "
                                "cancelled",
                                i + s->gid_base);
            else
                disco_set_error(DISCO_E_TIMEOUT, "worker %d (pid %d) did not end after SIGKILL",
                                i + s->gid_base, (int)s->procs.pid[i]);
            return failed(s, DISCO_E_TIMEOUT, "killing the workers");
        }
    disco__regs_lose_all(&s->regs); /* R2 */
    if (s->free_next != 0) {        /* a free waiting to ride: the workers' registers are gone */
        disco__regs_recycle(&s->regs, s->free_next);
        s->free_next = 0;
    }
    disco__worker_fini(&s->w0); /* R3 */
    disco_status_t st = disco__tensor_heap_rebuild(&s->heap, NULL);
    if (st != DISCO_OK)
        return failed(s, st, "rebuilding the heap");
    disco__session_close_pipes(s); /* R4 */
    if ((st = disco__session_format(s)) != DISCO_OK)
        return failed(s, st, "formatting the control segment");
    disco__session_init_w0(s); /* R5 */
    if ((st = disco__session_start_workers(s)) != DISCO_OK)
        return failed(s, st, "starting the workers");
    s->state = DISCO_OK;
    s->told = false;
    s->why[0] = '\0';
    if ((st = reload(s)) != DISCO_OK) { /* R6 */
        if (s->state == DISCO_OK)
            return failed(s, st, "loading the libraries again");
        s->told = true; /* a death or a deadline during R6: its cause, returned now */
        return disco_set_error(s->state, "recovery failed: %s", s->why);
    }
    s->recoveries++;
    return DISCO_OK;
}
