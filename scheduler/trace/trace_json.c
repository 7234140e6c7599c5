/* trace_json.c - traces as Chrome Trace Event JSON, written and read with
 * jansson (see disco/trace.h).
 *
 * Layout: one process; thread 0 is the controller, thread w + 1 worker w.
 * A worker slice ("X") carries args {seq, cmd, queue_us}; a controller
 * slice runs from enqueue to the reply (or to the end of issuing) and
 * carries {seq, cmd, fn, issued_us, reply_us}; flow events ("s" on the
 * controller at the enqueue, "f" on the worker at its start) draw the
 * arrows. Slices and flows share the category "disco": Chrome DevTools
 * binds a flow only to a slice of the flow's own category (Perfetto does
 * not care). A worker's waits are "X" slices named "spin" or "parked" in
 * the category "wait" (no flow binds to them); a watchdog report is an
 * instant ("i") named "watchdog" on the controller's track, its text in
 * args.report. An in-worker collective (disco_trace_coll_t) is an "X"
 * slice of the category "comm" on its worker's track, named "ctx_" and its
 * kind ("ctx_allreduce"), nested in its command's slice, with args {seq,
 * index, group, members}; flows of the same category link the members of
 * one collective: from the member that arrived last (the one the others
 * waited for) at its start, to each other member at its start ("s" and
 * "f" with "bp": "e", ids above COLL_FLOW_BASE, apart from the enqueue
 * flows' seq * 1024 + worker). A send or receive is a "ctx_send" or
 * "ctx_recv" slice of the same category, its args also naming the peer
 * ({seq, index, group: -1, members: 2, peer}); a flow named "sent" goes
 * from each send at its start to the receive that took it (same seq and
 * index, each the other's peer) at the later of the two starts (inside
 * the receive: it cannot end before the send began). Everything the
 * summary needs is in those args, so a file read back gives the same
 * summary. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "disco/trace.h"
#include "scheduler/trace/trace_data.h"

#define CAT            "disco" /* every slice and flow: see the top */
#define CAT_COMM       "comm"  /* in-worker collectives and their flows */
#define COLL_FLOW_BASE ((json_int_t)1 << 52)

static int add(json_t *arr, json_t *ev)
{
    return ev == NULL ? -1 : json_array_append_new(arr, ev);
}

static int meta(json_t *arr, int tid, const char *name)
{
    return add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M",
                              "pid", 1, "tid", tid, "args", "name", name));
}

/* Whether a and b are members of one collective (sends and receives are
 * none: they pair by p2p_pair). */
static bool same_coll(const disco_trace_coll_t *a, const disco_trace_coll_t *b)
{
    return a->peer < 0 && b->peer < 0 && a->seq == b->seq && a->index == b->index &&
           a->group == b->group;
}

/* Whether r is the receive that took send s (trace_ring.h, Nested
 * records): index 0 is a call that failed before a post was made or taken. */
static bool p2p_pair(const disco_trace_coll_t *s, const disco_trace_coll_t *r)
{
    return s->peer >= 0 && r->peer == s->worker && s->peer == r->worker && s->seq == r->seq &&
           s->index != 0 && s->index == r->index && strcmp(s->name, "send") == 0 &&
           strcmp(r->name, "recv") == 0;
}

/* The flow from send c to the receive that took it, if it is in t. */
static int p2p_flow(const disco_trace_t *t, const disco_trace_coll_t *c, json_int_t *flow,
                    json_t *arr)
{
    for (size_t j = 0; j < t->ncolls; j++) {
        const disco_trace_coll_t *o = &t->colls[j];
        if (!p2p_pair(c, o))
            continue;
        double at = o->start_us > c->start_us ? o->start_us : c->start_us;
        ++*flow;
        int rc = add(arr, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", "sent", "cat",
                                    CAT_COMM, "ph", "s", "id", *flow, "ts", c->start_us, "pid", 1,
                                    "tid", c->worker + 1));
        return rc | add(arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", "sent",
                                       "cat", CAT_COMM, "ph", "f", "bp", "e", "id", *flow, "ts", at,
                                       "pid", 1, "tid", o->worker + 1));
    }
    return 0;
}

/* The in-worker collectives: a slice each, and the flows from the last
 * member to arrive to the others. colls are by worker, then time, so the
 * members of one collective are found by a scan (members are few; the
 * scan is bounded by the trace's size, and runs only when writing a file). */
static int write_colls(const disco_trace_t *t, json_t *arr)
{
    int rc = 0;
    json_int_t flow = COLL_FLOW_BASE;
    for (size_t i = 0; i < t->ncolls && rc == 0; i++) {
        const disco_trace_coll_t *c = &t->colls[i];
        char name[DISCO_TRACE_NAME_MAX + 8];
        snprintf(name, sizeof name, "ctx_%s", c->name);
        json_t *args = json_pack("{s:I, s:i, s:i, s:i}", "seq", (json_int_t)c->seq, "index",
                                 (int)c->index, "group", c->group, "members", c->members);
        if (args != NULL && c->peer >= 0)
            rc |= json_object_set_new(args, "peer", json_integer(c->peer));
        rc |= add(arr,
                  json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name, "cat",
                            CAT_COMM, "ph", "X", "ts", c->start_us, "dur", c->end_us - c->start_us,
                            "pid", 1, "tid", c->worker + 1, "args", args));
        if (c->peer >= 0) {
            rc |= p2p_flow(t, c, &flow, arr);
            continue;
        }
        /* c is the latest arrival of its collective: the first such member in
         * the list where starts tie */
        bool last = true;
        for (size_t j = 0; j < t->ncolls && last; j++) {
            const disco_trace_coll_t *o = &t->colls[j];
            bool later = o->start_us > c->start_us || (o->start_us == c->start_us && j < i);
            if (j != i && same_coll(c, o) && later)
                last = false;
        }
        for (size_t j = 0; j < t->ncolls && last && rc == 0; j++) {
            const disco_trace_coll_t *o = &t->colls[j];
            if (j == i || !same_coll(c, o))
                continue;
            flow++;
            rc |= add(arr, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", "waited for",
                                     "cat", CAT_COMM, "ph", "s", "id", flow, "ts", c->start_us,
                                     "pid", 1, "tid", c->worker + 1));
            rc |= add(arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name",
                                     "waited for", "cat", CAT_COMM, "ph", "f", "bp", "e", "id",
                                     flow, "ts", o->start_us, "pid", 1, "tid", o->worker + 1));
        }
    }
    return rc;
}

static int write_events(const disco_trace_t *t, json_t *arr)
{
    int rc = add(arr, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M",
                                "pid", 1, "args", "name", "disco session"));
    rc |= meta(arr, 0, "controller");
    for (int w = 0; w < t->world; w++) {
        char name[32];
        snprintf(name, sizeof name, "worker %d", w);
        rc |= meta(arr, w + 1, name);
    }
    for (size_t i = 0; i < t->ncmds && rc == 0; i++) {
        const disco_trace_cmd_t *c = &t->cmds[i];
        double end = c->reply_us > c->issued_us ? c->reply_us : c->issued_us;
        rc |= add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:I, s:i, s:s, s:f, "
                                 "s:f}}",
                                 "name", c->name, "cat", CAT, "ph", "X", "ts", c->enqueue_us, "dur",
                                 end - c->enqueue_us, "pid", 1, "tid", 0, "args", "seq",
                                 (json_int_t)c->seq, "cmd", (int)c->cmd, "fn", c->name, "issued_us",
                                 c->issued_us, "reply_us", c->reply_us));
    }
    for (size_t i = 0; i < t->nslices && rc == 0; i++) {
        const disco_trace_slice_t *s = &t->slices[i];
        json_int_t id = (json_int_t)(s->seq * 1024 + (uint64_t)s->worker);
        rc |= add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:I, s:i, s:f}}", "name",
                                 s->name, "cat", CAT, "ph", "X", "ts", s->start_us, "dur",
                                 s->end_us - s->start_us, "pid", 1, "tid", s->worker + 1, "args",
                                 "seq", (json_int_t)s->seq, "cmd", (int)s->cmd, "queue_us",
                                 s->start_us - s->enqueue_us));
        rc |=
            add(arr, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", "enqueue", "cat", CAT,
                               "ph", "s", "id", id, "ts", s->enqueue_us, "pid", 1, "tid", 0));
        rc |= add(arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", "enqueue",
                                 "cat", CAT, "ph", "f", "bp", "e", "id", id, "ts", s->start_us,
                                 "pid", 1, "tid", s->worker + 1));
    }
    for (size_t i = 0; i < t->nwaits && rc == 0; i++) {
        const disco_trace_wait_t *w = &t->waits[i];
        rc |= add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name",
                                 w->parked ? "parked" : "spin", "cat", "wait", "ph", "X", "ts",
                                 w->start_us, "dur", w->end_us - w->start_us, "pid", 1, "tid",
                                 w->worker + 1));
    }
    if (rc == 0)
        rc |= write_colls(t, arr);
    for (size_t i = 0; i < t->nmarks && rc == 0; i++)
        rc |= add(arr, json_pack("{s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:{s:s}}", "name", "watchdog",
                                 "cat", CAT, "ph", "i", "s", "t", "ts", t->marks[i].at_us, "pid", 1,
                                 "tid", 0, "args", "report", t->marks[i].text));
    return rc;
}

disco_status_t disco_trace_write_json(const disco_trace_t *t, FILE *out)
{
    json_t *arr = json_array();
    json_t *doc = json_pack("{s:o, s:s, s:{s:i, s:I}}", "traceEvents", arr, "displayTimeUnit", "ns",
                            "otherData", "workers", t->world, "dropped", (json_int_t)t->dropped);
    if (doc == NULL || write_events(t, arr) != 0) {
        json_decref(doc);
        return disco_set_error(DISCO_E_NOMEM, "trace JSON");
    }
    int rc = json_dumpf(doc, out, JSON_COMPACT);
    json_decref(doc);
    if (rc != 0 || fputc('\n', out) == EOF || fflush(out) != 0)
        return disco_set_error(DISCO_E_SYS, "writing the trace failed");
    return DISCO_OK;
}

/* ---- reading ---- */

static disco_status_t bad(const char *path, size_t i, const char *why)
{
    return disco_set_error(DISCO_E_PROTOCOL, "%s: event %zu: %s", path, i, why);
}

/* A watchdog mark: its text in args.report. */
static disco_status_t read_mark(const char *path, size_t i, double ts, json_t *args,
                                disco_trace_t *t)
{
    const char *text = NULL;
    if (args == NULL || json_unpack(args, "{s:s}", "report", &text) != 0)
        return bad(path, i, "a watchdog mark without its report");
    disco_trace_mark_t *m = &t->marks[t->nmarks++];
    m->at_us = ts;
    snprintf(m->text, sizeof m->text, "%s", text);
    return DISCO_OK;
}

/* A worker's wait: "spin" or "parked". */
static disco_status_t read_wait(const char *path, size_t i, const char *name, int tid, double ts,
                                double dur, disco_trace_t *t)
{
    if (name == NULL || tid < 1 || tid > t->world ||
        (strcmp(name, "spin") != 0 && strcmp(name, "parked") != 0))
        return bad(path, i, "a wait that is neither spin nor parked on a worker");
    t->waits[t->nwaits++] = (disco_trace_wait_t){
        .worker = tid - 1, .parked = name[0] == 'p', .start_us = ts, .end_us = ts + dur};
    return DISCO_OK;
}

/* An in-worker collective: "ctx_<kind>" on a worker's track. */
static disco_status_t read_coll(const char *path, size_t i, const char *name, int tid, double ts,
                                double dur, json_t *args, disco_trace_t *t)
{
    json_int_t seq = 0;
    int index = 0, group = 0, members = 0, peer = -1;
    if (name == NULL || strncmp(name, "ctx_", 4) != 0 || tid < 1 || tid > t->world ||
        args == NULL ||
        json_unpack(args, "{s:I, s:i, s:i, s:i, s?i}", "seq", &seq, "index", &index, "group",
                    &group, "members", &members, "peer", &peer) != 0 ||
        seq < 0 || index < 0 || peer < -1 || peer >= t->world)
        return bad(path, i, "a collective without ctx_ name, worker, seq, index, group or members");
    disco_trace_coll_t *c = &t->colls[t->ncolls++];
    *c = (disco_trace_coll_t){.seq = (uint64_t)seq,
                              .worker = tid - 1,
                              .index = (uint32_t)index,
                              .group = group,
                              .members = members,
                              .start_us = ts,
                              .end_us = ts + dur,
                              .peer = peer};
    snprintf(c->name, sizeof c->name, "%s", name + 4);
    return DISCO_OK;
}

static disco_status_t read_event(const char *path, size_t i, json_t *ev, disco_trace_t *t)
{
    const char *ph = NULL, *name = NULL, *cat = "";
    int tid = -1;
    double ts = 0, dur = 0;
    json_t *args = NULL;
    if (json_unpack(ev, "{s:s, s?s, s?s, s?i, s?F, s?F, s?o}", "ph", &ph, "name", &name, "cat",
                    &cat, "tid", &tid, "ts", &ts, "dur", &dur, "args", &args) != 0)
        return bad(path, i, "not a trace event");
    if (strcmp(ph, "i") == 0 && name != NULL && strcmp(name, "watchdog") == 0)
        return read_mark(path, i, ts, args, t);
    if (strcmp(ph, "X") != 0)
        return DISCO_OK; /* metadata and flows carry nothing the summary needs */
    if (strcmp(cat, "wait") == 0)
        return read_wait(path, i, name, tid, ts, dur, t);
    if (strcmp(cat, CAT_COMM) == 0)
        return read_coll(path, i, name, tid, ts, dur, args, t);
    json_int_t seq = 0;
    int cmd = 0;
    if (name == NULL || tid < 0 || args == NULL ||
        json_unpack(args, "{s:I, s:i}", "seq", &seq, "cmd", &cmd) != 0 || seq < 0)
        return bad(path, i, "a slice without name, tid, seq or cmd");
    if (tid == 0) {
        if ((size_t)t->ncmds == SIZE_MAX)
            return bad(path, i, "too many");
        disco_trace_cmd_t *c = &t->cmds[t->ncmds++];
        *c = (disco_trace_cmd_t){.seq = (uint64_t)seq, .cmd = (uint32_t)cmd, .enqueue_us = ts};
        snprintf(c->name, sizeof c->name, "%s", name);
        if (json_unpack(args, "{s:F, s:F}", "issued_us", &c->issued_us, "reply_us", &c->reply_us) !=
            0)
            return bad(path, i, "a controller slice without issued_us or reply_us");
        return DISCO_OK;
    }
    if (tid > t->world)
        return bad(path, i, "a thread beyond the workers");
    double queue = 0;
    if (json_unpack(args, "{s:F}", "queue_us", &queue) != 0)
        return bad(path, i, "a worker slice without queue_us");
    disco_trace_slice_t *s = &t->slices[t->nslices++];
    *s = (disco_trace_slice_t){.seq = (uint64_t)seq,
                               .worker = tid - 1,
                               .cmd = (uint32_t)cmd,
                               .start_us = ts,
                               .end_us = ts + dur,
                               .enqueue_us = ts - queue};
    snprintf(s->name, sizeof s->name, "%s", name);
    return DISCO_OK;
}

disco_status_t disco_trace_load_json(const char *path, disco_trace_t **out)
{
    json_error_t err;
    json_t *doc = json_load_file(path, 0, &err);
    if (doc == NULL)
        return disco_set_error(err.line < 0 ? DISCO_E_SYS : DISCO_E_PROTOCOL, "%s: line %d: %s",
                               path, err.line, err.text);
    json_t *events = json_object_get(doc, "traceEvents");
    int world = 0;
    disco_status_t st = DISCO_OK;
    if (!json_is_array(events) ||
        json_unpack(json_object_get(doc, "otherData"), "{s:i}", "workers", &world) != 0 ||
        world < 1)
        st = disco_set_error(DISCO_E_PROTOCOL,
                             "%s: not a disco trace (no traceEvents or "
                             "otherData.workers)",
                             path);
    size_t n = json_array_size(events);
    disco_trace_t *t = st == DISCO_OK ? disco__trace_alloc(n, n, n, n, n) : NULL;
    if (st == DISCO_OK && t == NULL)
        st = disco_set_error(DISCO_E_NOMEM, "trace of %zu events", n);
    if (t != NULL)
        t->world = world;
    for (size_t i = 0; i < n && st == DISCO_OK; i++)
        st = read_event(path, i, json_array_get(events, i), t);
    json_decref(doc);
    if (st != DISCO_OK) {
        disco_trace_free(t);
        return st;
    }
    *out = t;
    return DISCO_OK;
}
