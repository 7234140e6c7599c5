/* watch.c - the thread's watch over blocking device syncs (see watch.h). */
#include "workers/device/watch.h"

#include "disco/clock.h"

static _Thread_local const disco_wait_t *t_watch;

const disco_wait_t *disco__device_watch(const disco_wait_t *w)
{
    const disco_wait_t *old = t_watch;
    t_watch = w;
    return old;
}

const disco_wait_t *disco__device_watching(void)
{
    return t_watch;
}

disco_status_t disco__device_watch_check(void)
{
    return t_watch == NULL ? DISCO_OK : disco_wait_check(t_watch, disco_now_ns());
}
