/* report.c - the watchdog's report of a view (disco/observe.h): each
 * worker's last finished and current command, then who waits for whom.
 *
 * Every worker runs every command, in order, so a worker inside command S
 * has finished S - 1, and one whose last command is below the one the
 * controller (or a collective) waits on has not arrived there yet: those
 * are the ones named as holding the others up. */
#include <stdio.h>
#include <string.h>

#include "disco/observe.h"

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
    if (v->wait != DISCO_VIEW_WAIT_NONE)
        summary(out, v);
    if (fflush(out) != 0 || ferror(out))
        return disco_set_error(DISCO_E_SYS, "writing the report failed");
    return DISCO_OK;
}
