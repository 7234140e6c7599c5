/* report.c - the watchdog's report of a view (disco/observe.h): each
 * worker's last finished and current command, then who waits for whom.
 *
 * Every worker runs every command, in order, so a worker inside command S
 * has finished S - 1, and one whose last command is below the one the
 * controller (or a collective) waits on has not arrived there yet: those
 * are the ones named as holding the others up. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "disco/observe.h"

#define DISCO_MAX_WORKERS_VIEW 256 /* more than a node holds (DISCO_MAX_WORKERS) */

/* "3.1 s", "12 ms", "?" */
static void dur(char *buf, size_t size, double s)
{
    if (s < 0)
        snprintf(buf, size, "?");
    else if (s >= 1.0)
        snprintf(buf, size, "%.1f s", s);
    else
        snprintf(buf, size, "%.0f ms", s * 1e3);
}

/* The command the controller's wait is about: its number and a name. */
static uint64_t target(const disco_session_view_t *v, const char **name)
{
    uint64_t seq = v->wait != DISCO_VIEW_WAIT_NONE ? v->wait_seq : v->issued;
    *name = NULL;
    for (int i = 0; i < v->world; i++)
        if (v->workers[i].seq == seq && v->workers[i].name[0] != '\0')
            *name = v->workers[i].name;
    return seq;
}

static void worker_line(FILE *out, const disco_worker_view_t *w)
{
    char d[32];
    fprintf(out, "  worker %d (pid %d): ", w->worker, w->pid);
    if (w->seq == 0) {
        fprintf(out, "%s, no command yet\n", disco_worker_state_name(w->state));
        return;
    }
    if (w->state == DISCO_WORKER_BUSY) {
        dur(d, sizeof d, w->in_cmd_s);
        fprintf(out, "%s into %s (command #%llu); last finished #%llu", d, w->name,
                (unsigned long long)w->seq, (unsigned long long)(w->seq - 1));
    } else {
        fprintf(out, "%s; last finished #%llu (%s)", disco_worker_state_name(w->state),
                (unsigned long long)w->seq, w->name);
    }
    fprintf(out, "; %llu done, %llu queued\n", (unsigned long long)w->done,
            (unsigned long long)w->queued);
}

/* ---- device kernels ---- */

const char *disco_kernel_phase_name(int phase)
{
    static const char *const names[] = {"START", "MID", "END"};
    return phase >= 0 && phase < 3 ? names[phase] : "?";
}

/* Whether pieces a and b stand alike (one group of the line). */
static bool alike(const disco_piece_view_t *a, const disco_piece_view_t *b)
{
    return a->state == b->state && a->phase == b->phase && a->member == b->member &&
           a->flag_set == b->flag_set && (!a->flag_set || a->flag_coll == b->flag_coll);
}

/* snprintf at the end of what buf holds so far (*n: the length it would
 * have, uncut). */
#define APPEND(buf, size, n, ...)                                                                  \
    do {                                                                                           \
        size_t at_ = *(n) < (size) ? *(n) : (size);                                                \
        int k_ = snprintf((buf) + at_, (size)-at_, __VA_ARGS__);                                   \
        *(n) += k_ > 0 ? (size_t)k_ : 0;                                                           \
    } while (0)

/* The group of pieces alike to piece first (from first on: an earlier one
 * alike would have taken first into its own group), as "piece 5" or
 * "pieces 0-4, 6"; marks them done. Returns how many. */
static int piece_list(const disco_kernel_view_t *k, int first, bool *done, char *buf, size_t size,
                      size_t *n)
{
    bool in[DISCO_VIEW_PIECES] = {false};
    int count = 0;
    for (int b = first; b < k->pieces; b++)
        if (alike(&k->piece[first], &k->piece[b]))
            in[b] = done[b] = true, count++;
    APPEND(buf, size, n, "%s", count > 1 ? "pieces " : "piece ");
    bool sep = false;
    for (int b = first; b < k->pieces; b++) {
        if (!in[b])
            continue;
        int e = b;
        while (e + 1 < k->pieces && in[e + 1])
            e++;
        APPEND(buf, size, n, sep ? ", %d" : "%d", b);
        if (e > b)
            APPEND(buf, size, n, "-%d", e);
        sep = true;
        b = e;
    }
    return count;
}

size_t disco_kernel_view_format(const disco_worker_view_t *w, char *buf, size_t size)
{
    if (size > 0)
        buf[0] = '\0';
    const disco_kernel_view_t *k = &w->kernel;
    if (!k->active)
        return 0;
    size_t n = 0;
    int pieces = k->pieces < DISCO_VIEW_PIECES ? k->pieces : DISCO_VIEW_PIECES;
    APPEND(buf, size, &n, "worker %d in %s #%llu (device kernel, %s", w->worker, k->what,
           (unsigned long long)k->coll, k->two_shot ? "two-shot" : "one-shot");
    if (pieces > 1)
        APPEND(buf, size, &n, ", %d pieces", pieces);
    APPEND(buf, size, &n, "):");
    bool done[DISCO_VIEW_PIECES] = {false};
    bool any = false;
    disco_kernel_view_t c = *k;
    c.pieces = pieces;
    for (int b = 0; b < pieces; b++) {
        const disco_piece_view_t *p = &c.piece[b];
        if (done[b] || p->state == DISCO_PIECE_QUIET)
            continue;
        APPEND(buf, size, &n, "%s", any ? "; " : " ");
        int count = piece_list(&c, b, done, buf, size, &n);
        const char *phase = disco_kernel_phase_name(p->phase);
        if (p->state == DISCO_PIECE_WAITING) {
            APPEND(buf, size, &n, " wait%s at %s for worker %d", count > 1 ? "" : "s", phase,
                   p->member);
            if (p->flag_set)
                APPEND(buf, size, &n, " (flag holds #%llu)", (unsigned long long)p->flag_coll);
            else
                APPEND(buf, size, &n, " (flag never set)");
        } else {
            APPEND(buf, size, &n, " passed %s (waited for worker %d)", phase, p->member);
        }
        any = true;
    }
    if (!any)
        APPEND(buf, size, &n, " no piece has waited long yet");
    return n;
}

/* After the workers: each kernel's line, then the members the waiting
 * pieces wait for that wait for no one themselves (the stuck ones). */
static void kernels(FILE *out, const disco_session_view_t *v)
{
    char line[1024];
    bool awaited[DISCO_MAX_WORKERS_VIEW] = {false};
    int nk = 0;
    for (int i = 0; i < v->world; i++) {
        const disco_worker_view_t *w = &v->workers[i];
        if (disco_kernel_view_format(w, line, sizeof line) == 0)
            continue;
        fprintf(out, "  %s\n", line);
        nk++;
        for (int b = 0; b < w->kernel.pieces && b < DISCO_VIEW_PIECES; b++) {
            const disco_piece_view_t *p = &w->kernel.piece[b];
            int m = p->member - v->gid_base;
            if (p->state == DISCO_PIECE_WAITING && m >= 0 && m < v->world &&
                m < DISCO_MAX_WORKERS_VIEW)
                awaited[m] = true;
        }
    }
    for (int m = 0; m < v->world && m < DISCO_MAX_WORKERS_VIEW && nk > 0; m++) {
        if (!awaited[m])
            continue;
        const disco_worker_view_t *w = &v->workers[m];
        bool waits = false;
        for (int b = 0; b < w->kernel.pieces && b < DISCO_VIEW_PIECES; b++)
            waits = waits || w->kernel.piece[b].state == DISCO_PIECE_WAITING;
        if (!w->kernel.active)
            fprintf(out, "  => worker %d is awaited in the device kernel and is not in one\n",
                    w->worker);
        else if (!waits)
            fprintf(out,
                    "  => worker %d is awaited in the device kernel and waits for no one there "
                    "(stuck or slow inside it, or not started)\n",
                    w->worker);
    }
}

/* Appends worker id to a "0, 1, 3" list. */
static void add_id(char *list, size_t size, int id)
{
    size_t n = strlen(list);
    if (n + 16 < size)
        snprintf(list + n, size - n, "%s%d", n ? ", " : "", id);
}

/* Who holds up whom: the workers behind the target command, then the rest. */
static void summary(FILE *out, const disco_session_view_t *v)
{
    const char *tname;
    uint64_t t = target(v, &tname);
    char waiting[1024] = "";
    int nwaiting = 0, nbehind = 0;
    for (int i = 0; i < v->world; i++) {
        const disco_worker_view_t *w = &v->workers[i];
        bool behind = w->seq < t || (w->seq == t && w->state == DISCO_WORKER_BUSY &&
                                     v->wait != DISCO_VIEW_WAIT_COLLECTIVE && i != 0);
        if (!behind) {
            add_id(waiting, sizeof waiting, w->worker);
            nwaiting++;
            continue;
        }
        char d[32];
        dur(d, sizeof d, w->in_cmd_s);
        if (w->state == DISCO_WORKER_BUSY)
            fprintf(out, "  => worker %d is %s into %s (command #%llu)", w->worker, d, w->name,
                    (unsigned long long)w->seq);
        else
            fprintf(out, "  => worker %d is %s after command #%llu", w->worker,
                    disco_worker_state_name(w->state), (unsigned long long)w->seq);
        fprintf(out, "%s\n", v->wait == DISCO_VIEW_WAIT_COLLECTIVE ? ": it has not arrived" : "");
        nbehind++;
    }
    if (nbehind == 0) {
        fprintf(out, "  => no worker is behind command #%llu\n", (unsigned long long)t);
        return;
    }
    if (nwaiting != 0)
        fprintf(out, "  => worker%s %s wait%s at %s #%llu\n", nwaiting > 1 ? "s" : "", waiting,
                nwaiting > 1 ? "" : "s", tname != NULL ? tname : "command", (unsigned long long)t);
}

disco_status_t disco_view_report(const disco_session_view_t *v, FILE *out)
{
    char d[32];
    dur(d, sizeof d, v->wait_s);
    fprintf(out, "disco watchdog: session of pid %d, %d workers, %llu commands issued", v->pid,
            v->world, (unsigned long long)v->issued);
    if (v->health != DISCO_OK)
        fprintf(out, "; %s: %s", disco_err_name(v->health), v->why);
    fprintf(out, "\n");
    switch (v->wait) {
    case DISCO_VIEW_WAIT_NONE:
        fprintf(out, "  the controller is not waiting\n");
        break;
    case DISCO_VIEW_WAIT_ROOM:
        fprintf(out, "  the controller has waited %s for room to broadcast command #%llu\n", d,
                (unsigned long long)v->wait_seq);
        break;
    case DISCO_VIEW_WAIT_REPLY:
        fprintf(out, "  the controller has waited %s for worker %d's reply to command #%llu\n", d,
                v->wait_worker, (unsigned long long)v->wait_seq);
        break;
    case DISCO_VIEW_WAIT_COLLECTIVE:
        fprintf(out, "  worker 0 has waited %s in %s (command #%llu) for its peers\n", d,
                v->workers[0].name, (unsigned long long)v->wait_seq);
        break;
    }
    for (int i = 0; i < v->world; i++)
        worker_line(out, &v->workers[i]);
    kernels(out, v);
    if (v->wait != DISCO_VIEW_WAIT_NONE)
        summary(out, v);
    if (fflush(out) != 0 || ferror(out))
        return disco_set_error(DISCO_E_SYS, "writing the report failed");
    return DISCO_OK;
}
