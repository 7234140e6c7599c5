/* watch.c - the thread's watch over blocking device syncs (see watch.h). */
#include "workers/device/watch.h"

#include <stdatomic.h>

#include "disco/clock.h"
#include "shm/wait_internal.h"

static _Thread_local const disco_wait_t *t_watch;
static _Thread_local disco_status_t t_fired;
/* The since word disco__device_watch_waiting set, to clear (NULL: none). */
static _Thread_local _Atomic int64_t *t_since;

const disco_wait_t *disco__device_watch(const disco_wait_t *w)
{
    const disco_wait_t *old = t_watch;
    if (t_since != NULL) /* Relaxed: a monitor's word (wait_internal.h). */
        atomic_store_explicit(t_since, 0, memory_order_relaxed);
    t_since = NULL;
    t_watch = w;
    t_fired = DISCO_OK;
    return old;
}

void disco__device_watch_waiting(void)
{
    const disco_wait_t *w = t_watch;
    struct disco__wait_hook *h = w != NULL ? disco__wait_hook(w) : NULL;
    if (t_since != NULL || h == NULL || h->since == NULL)
        return;
    /* Relaxed: a monitor's word, as the shm layer's waits store it
     * (wait_internal.h); only this thread writes it while it waits. One
     * that is set already belongs to an outer wait of this thread: kept. */
    if (atomic_load_explicit(h->since, memory_order_relaxed) != 0)
        return;
    atomic_store_explicit(h->since, disco_now_ns(), memory_order_relaxed);
    t_since = h->since;
}

const disco_wait_t *disco__device_watching(void)
{
    return t_watch;
}

disco_status_t disco__device_watch_check(void)
{
    const disco_wait_t *w = t_watch;
    if (w == NULL)
        return DISCO_OK;
    disco_status_t st = DISCO_OK;
    /* The exits one by one (as disco_wait_check), each with a message:
     * an abort word carries a status only. Acquire: whoever set the word
     * published its reason first. */
    int32_t a =
        w->abort_word != NULL ? atomic_load_explicit(w->abort_word, memory_order_acquire) : 0;
    int64_t now = disco_now_ns();
    if (a != 0)
        st = disco_set_error((disco_status_t)a, "the session was broken (%s)",
                             disco_err_name((disco_status_t)a));
    else if (w->deadline_ns != 0 && now >= w->deadline_ns)
        st = disco_set_error(DISCO_E_TIMEOUT, "the call's deadline passed");
    else if (w->check != NULL)
        st = w->check(w->check_ctx); /* its message stands */
    if (st != DISCO_OK && t_fired == DISCO_OK)
        t_fired = st;
    return st;
}

disco_status_t disco__device_watch_fired(void)
{
    return t_fired;
}
