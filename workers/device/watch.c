/* watch.c - the thread's watch over blocking device syncs (see watch.h). */
#include "workers/device/watch.h"

#include <stdatomic.h>

#include "disco/clock.h"

static _Thread_local const disco_wait_t *t_watch;
static _Thread_local disco_status_t t_fired;

const disco_wait_t *disco__device_watch(const disco_wait_t *w)
{
    const disco_wait_t *old = t_watch;
    t_watch = w;
    t_fired = DISCO_OK;
    return old;
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
