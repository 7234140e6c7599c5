/* cli_top.c - "disco top PID": a live view of a running session from
 * another terminal, and "disco dump PID": the watchdog's report of it now.
 *
 * Both attach with disco_observer_open (the session's control segment,
 * reached through /proc/PID/fd and mapped read-only: the session is not
 * told, and pays nothing). A frame's rates are the differences between two
 * views taken --interval apart (cli_top_print.c prints it). Live mode stops
 * on SIGINT or SIGTERM, after --count frames, or when the session ends: it
 * is shut down, every worker has left its loop, or the process is gone. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "disco/clock.h"
#include "tools/cli/cli.h"
#include "tools/cli/cli_top.h"

typedef enum { OUT_TEXT, OUT_JSON, OUT_PROMETHEUS } top_out_t;

typedef struct top_opts {
    int pid;
    int session;
    long interval_ms; /* 0: the default (1000; 500 with --once) */
    long count;       /* frames; 0: until the session ends */
    bool once;
    top_out_t out;
} top_opts_t;

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static void usage_top(FILE *out)
{
    fprintf(out,
            "usage: disco top PID [--session K] [--interval MS] [--once] [--count N]\n"
            "                     [--json | --prometheus]\n"
            "Shows, refreshed live, what the disco session of process PID is doing (same user;\n"
            "read-only: the session is not slowed down): per worker its pid, CPU, state, the\n"
            "command it is in and for how long, commands done and per second, commands queued,\n"
            "and the shares of time busy, spinning and parked; per function calls per second\n"
            "and mean time; the session's health and what the controller waits for.\n"
            "  --session K    the process's K-th session (from 0; default 0)\n"
            "  --interval MS  time between the two views a frame compares (default 1000;\n"
            "                 500 with --once)\n"
            "  --once         print one frame and exit (same as --count 1)\n"
            "  --count N      print N frames and exit\n"
            "  --json         each frame as one JSON object on one line\n"
            "  --prometheus   each frame in the Prometheus text exposition format\n"
            "Stops on Ctrl-C or when the session ends. Exit status 1: cannot attach.\n");
}

static void usage_dump(FILE *out)
{
    fprintf(out, "usage: disco dump PID [--session K]\n"
                 "Prints the watchdog's report of the disco session of process PID now: each\n"
                 "worker's last finished and current command and for how long, and who waits\n"
                 "for whom (same user; read-only).\n"
                 "  --session K   the process's K-th session (from 0; default 0)\n");
}

/* A whole number in lo..hi from v, or -1. */
static long number(const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = v != NULL ? strtol(v, &end, 10) : 0;
    if (v == NULL || *v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi)
        return -1;
    return x;
}

/* Parses argv into o; returns -1 to go on, else the exit status (help: 0,
 * a bad option: 2). dump: only PID and --session are accepted. */
static int parse(int argc, char **argv, bool dump, top_opts_t *o)
{
    const char *cmd = dump ? "dump" : "top";
    void (*usage)(FILE *) = dump ? usage_dump : usage_top;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--session") == 0 && (x = number(v, 0, 1 << 20)) >= 0) {
            o->session = (int)x, i++;
        } else if (!dump && strcmp(a, "--interval") == 0 && (x = number(v, 1, 3600000)) > 0) {
            o->interval_ms = x, i++;
        } else if (!dump && strcmp(a, "--count") == 0 && (x = number(v, 1, 1L << 30)) > 0) {
            o->count = x, i++;
        } else if (!dump && strcmp(a, "--once") == 0) {
            o->once = true;
        } else if (!dump && strcmp(a, "--json") == 0 && o->out != OUT_PROMETHEUS) {
            o->out = OUT_JSON;
        } else if (!dump && strcmp(a, "--prometheus") == 0 && o->out != OUT_JSON) {
            o->out = OUT_PROMETHEUS;
        } else if (o->pid == 0 && (x = number(a, 1, 1L << 30)) > 0) {
            o->pid = (int)x;
        } else {
            fprintf(stderr, "disco %s: unknown, repeated or incomplete argument \"%s\"\n", cmd, a);
            usage(stderr);
            return 2;
        }
    }
    if (o->pid == 0) {
        fprintf(stderr, "disco %s: which process? (a PID)\n", cmd);
        usage(stderr);
        return 2;
    }
    if (o->once)
        o->count = 1;
    if (o->interval_ms == 0)
        o->interval_ms = o->once ? 500 : 1000;
    return -1;
}

/* Whether process pid is gone: no /proc entry, or a zombie. */
static bool process_gone(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and ')' */
    return p == NULL || p[1] == '\0' || p[2] == 'Z' || p[2] == 'X';
}

/* Attaches to o's session; on failure prints why (exit status 1). */
static disco_observer_t *attach(const top_opts_t *o, const char *cmd)
{
    if (process_gone(o->pid)) {
        fprintf(stderr, "disco %s: no process %d\n", cmd, o->pid);
        return NULL;
    }
    disco_observer_t *obs = NULL;
    disco_status_t st = disco_observer_open(o->pid, o->session, NULL, &obs);
    if (st != DISCO_OK) {
        fprintf(stderr, "disco %s: cannot attach to process %d: %s\n", cmd, o->pid,
                disco_last_error());
        return NULL;
    }
    return obs;
}

/* Sleeps until ms have passed or a stop is asked. */
static void pause_ms(long ms)
{
    int64_t end = disco_now_ns() + (int64_t)ms * 1000000;
    for (;;) {
        int64_t left = end - disco_now_ns();
        if (left <= 0 || stop_asked)
            return;
        struct timespec ts = {left / 1000000000, left % 1000000000};
        nanosleep(&ts, NULL); /* EINTR: the loop looks at stop_asked */
    }
}

/* Whether the session has ended: shut down, or every worker out of its loop. */
static bool session_over(const disco_session_view_t *v)
{
    if (v->health == DISCO_E_SHUTDOWN)
        return true;
    for (int i = 0; i < v->world; i++)
        if (v->workers[i].state != DISCO_WORKER_EXITED)
            return false;
    return v->world > 0;
}

static int print_frame(const top_opts_t *o, const top_frame_t *f, bool redraw)
{
    switch (o->out) {
    case OUT_JSON:
        return top_print_json(f, stdout);
    case OUT_PROMETHEUS:
        return top_print_prometheus(f, stdout);
    case OUT_TEXT:
        break;
    }
    if (redraw)
        fputs("\033[H\033[2J", stdout); /* home, clear the screen */
    return top_print_text(f, stdout);
}

static int run_top(const top_opts_t *o, disco_observer_t *obs)
{
    struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART: the sleep ends */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    bool redraw = o->out == OUT_TEXT && !o->once && o->count != 1 && isatty(STDOUT_FILENO);
    disco_session_view_t prev = {0}, cur = {0};
    top_worker_t *workers = NULL;
    if (disco_observer_read(obs, &prev) != DISCO_OK)
        goto failed;
    workers = calloc((size_t)(prev.world > 0 ? prev.world : 1), sizeof *workers);
    if (workers == NULL) {
        fprintf(stderr, "disco top: out of memory\n");
        disco_view_free(&prev);
        return 1;
    }
    int rc = 0;
    for (long frame = 0; o->count == 0 || frame < o->count; frame++) {
        pause_ms(o->interval_ms);
        /* Gone before the read: then the read shows the session's last state. */
        bool gone = process_gone(o->pid);
        if (disco_observer_read(obs, &cur) != DISCO_OK)
            goto failed;
        if (cur.world != prev.world) { /* a session's world is fixed: not ours to trust */
            disco_set_error(DISCO_E_BAD_MAGIC, "its world changed from %d to %d", prev.world,
                            cur.world);
            goto failed;
        }
        top_frame_t f;
        top_frame_make(&prev, &cur, o->session, workers, &f);
        if (print_frame(o, &f, redraw) != 0 || fflush(stdout) != 0) {
            rc = 1; /* stdout closed: nobody is reading */
            break;
        }
        disco_view_free(&prev);
        prev = cur;
        cur = (disco_session_view_t){0};
        if (stop_asked || gone || session_over(&prev))
            break;
        if (o->count != 1 && o->out == OUT_TEXT && !redraw)
            fputc('\n', stdout); /* frames one after another */
    }
    if (session_over(&prev) || process_gone(o->pid))
        fprintf(stderr, "disco top: the session of process %d has ended\n", o->pid);
    disco_view_free(&prev);
    free(workers);
    return rc;
failed:
    fprintf(stderr, "disco top: reading the session of process %d: %s\n", o->pid,
            disco_last_error());
    disco_view_free(&prev);
    disco_view_free(&cur);
    free(workers);
    return 1;
}

int disco_cli_top(int argc, char **argv)
{
    top_opts_t o = {0};
    int rc = parse(argc, argv, false, &o);
    if (rc >= 0)
        return rc;
    disco_observer_t *obs = attach(&o, "top");
    if (obs == NULL)
        return 1;
    rc = run_top(&o, obs);
    disco_observer_close(obs);
    return rc;
}

int disco_cli_dump(int argc, char **argv)
{
    top_opts_t o = {0};
    int rc = parse(argc, argv, true, &o);
    if (rc >= 0)
        return rc;
    disco_observer_t *obs = attach(&o, "dump");
    if (obs == NULL)
        return 1;
    disco_session_view_t v;
    disco_status_t st = disco_observer_read(obs, &v);
    if (st == DISCO_OK) {
        st = disco_view_report(&v, stdout);
        disco_view_free(&v);
    }
    if (st != DISCO_OK)
        fprintf(stderr, "disco dump: process %d: %s\n", o.pid, disco_last_error());
    disco_observer_close(obs);
    return st == DISCO_OK ? 0 : 1;
}
