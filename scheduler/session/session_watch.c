/* session_watch.c - the session's side of observation (disco/observe.h):
 * its status region's header, worker 0's status, the hooks that report the
 * controller's waits, the watchdog, and views of the session itself. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "disco/observe.h"
#include "scheduler/observe/view.h"
#include "scheduler/session/session_impl.h"

#define WATCHDOG_DEFAULT_MS 5000u

/* The threshold: the config's, else $DISCO_WATCHDOG_MS, else the smaller
 * of 5 s and half the call deadline (so that it speaks before the deadline
 * ends the wait). 0: off. */
static uint32_t threshold_ms(const disco_session_config_t *c)
{
    if (c->watchdog_ms == DISCO_WATCHDOG_OFF)
        return 0;
    if (c->watchdog_ms != 0)
        return c->watchdog_ms;
    const char *env = getenv("DISCO_WATCHDOG_MS");
    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end == '\0' && v < UINT32_MAX)
            return (uint32_t)v; /* "0": off */
        fprintf(stderr, "disco: DISCO_WATCHDOG_MS=%s is not a number of ms; ignored\n", env);
    }
    uint32_t half = c->call_timeout_ms / 2;
    return half < WATCHDOG_DEFAULT_MS ? half : WATCHDOG_DEFAULT_MS;
}

void disco__session_watch_init(struct disco_session *s)
{
    struct disco__stat_hdr *h = s->stat;
    h->magic = DISCO_STAT_MAGIC;
    h->world = (uint32_t)s->world;
    h->tick_tsc = disco__tick_tsc;
    h->tick0 = disco__ticks();
    h->ns0 = disco_now_ns();
    uint32_t ms = threshold_ms(&s->cfg);
    h->watchdog_ms = ms;
    s->watchdog_ns = (int64_t)ms * 1000000;
    s->w0_stat = (struct disco__wstat_writer){.w = disco__stat_worker(h, 0)};
    /* Relaxed: a monitor's words (wstat.h); nobody reads them yet anyway. */
    atomic_store_explicit(&s->w0_stat.w->pid, (int32_t)getpid(), memory_order_relaxed);
    atomic_store_explicit(&s->w0_stat.w->state, DISCO_WS_IDLE, memory_order_relaxed);
    s->wait_hook = (struct disco__wait_hook){.since = &h->wait_since};
    s->w0_hook = (struct disco__wait_hook){.since = &h->w0_since};
    disco__wait_set_hook(&s->wait, &s->wait_hook);
    disco__wait_set_hook(&s->w0_wait, &s->w0_hook);
}

static void view_src(struct disco_session *s, struct disco__view_src *src)
{
    *src = (struct disco__view_src){
        .ctl = s->ctl, .stat = s->stat, .world = s->world, .tracing = !s->cfg.trace_off};
}

disco_status_t disco__session_watchdog(struct disco_session *s)
{
    if (s->watchdog_ns == 0)
        return DISCO_OK;
    /* Relaxed: this thread wrote them (its own waits' hooks). */
    int64_t since = atomic_load_explicit(&s->stat->wait_since, memory_order_relaxed);
    if (since == 0)
        since = atomic_load_explicit(&s->stat->w0_since, memory_order_relaxed);
    if (since == 0 || since == s->watchdog_seen || disco_now_ns() - since < s->watchdog_ns)
        return DISCO_OK;
    s->watchdog_seen = since; /* one report a wait */
    struct disco__view_src src;
    view_src(s, &src);
    disco_session_view_t v;
    if (disco__view_take(&src, &v) != DISCO_OK)
        return DISCO_OK; /* no memory for a report: the wait goes on regardless */
    /* Relaxed: one writer, this thread. */
    atomic_store_explicit(&s->stat->reports,
                          atomic_load_explicit(&s->stat->reports, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    v.watchdog_reports++;
    disco_view_report(&v, stderr);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f != NULL) {
        disco_view_report(&v, f);
        fclose(f);
        disco__trace_mark(&s->trace, text);
    }
    free(text);
    disco_view_free(&v);
    return DISCO_OK;
}

disco_status_t disco_session_view(disco_session_t *s, disco_session_view_t *view_out)
{
    if (s == NULL || view_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_session_view: NULL argument");
    struct disco__view_src src;
    view_src(s, &src);
    return disco__view_take(&src, view_out);
}

disco_status_t disco_session_dump(disco_session_t *s, FILE *out)
{
    disco_session_view_t v;
    disco_status_t st = disco_session_view(s, &v);
    if (st != DISCO_OK)
        return st;
    st = disco_view_report(&v, out);
    disco_view_free(&v);
    return st;
}
