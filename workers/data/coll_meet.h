/*
 * coll_meet.h - what collective.c (barriers, giving up) and
 * collective_meet.c (the meeting) share of one collective call (internal
 * to the two; the steps are in coll_call.h, the protocol in collective.h).
 * The arrow points one way: collective_meet.c uses collective.c.
 *
 * Thread safety: as coll_call.h (a call belongs to one worker thread).
 */
#ifndef DISCO_WORKERS_COLL_MEET_H
#define DISCO_WORKERS_COLL_MEET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "disco/status.h"
#include "shm/text.h"
#include "workers/data/coll_call.h"
#include "workers/data/collective.h"

/* Member rank's slot of the call's slot set (disco__coll_slot's, from the
 * set's start that disco__coll_begin found: the slots of a set are one
 * array, collective.h). */
static inline struct disco__coll_slot *disco__coll_member(struct disco__coll_call *c, int rank)
{
    return &c->set[c->base + rank];
}

/* The call's tag (collective.h, DISCO__COLL_TAG). */
static inline uint64_t disco__coll_tag(const struct disco__coll_call *c)
{
    return DISCO__COLL_TAG(c->w->seq, c->index);
}

/* Whether member r stored this call's arrive word (either flag); the word
 * read in *word_out. */
static inline bool disco__coll_has_arrived(struct disco__coll_call *c, int r, uint64_t *word_out)
{
    /* Acquire: pairs with the member's release store in disco__coll_meet,
     * after its post (and inline bytes). */
    uint64_t v = atomic_load_explicit(&disco__coll_member(c, r)->arrive, memory_order_acquire);
    *word_out = v;
    return v >> 1 == disco__coll_tag(c);
}

/* A status a member posted: one of ours (an error), else DISCO_E_PROTOCOL. */
static inline disco_status_t disco__coll_posted_status(int32_t st)
{
    return disco__status_is_error(st) ? (disco_status_t)st : DISCO_E_PROTOCOL;
}

/* The late, by how the call is given up: everyone (device work), the
 * members not yet arrived at an inline meeting (arrived), or those whose
 * marks are older than this barrier's. */
enum disco__late_by { DISCO__LATE_MARKS, DISCO__LATE_EVERYONE, DISCO__LATE_ARRIVED };

/* Gives the call up (A2, A3 of collective.h) with st: the late members,
 * as by says, go to the worker's abandon hook. Returns the hook's status
 * (else st). */
disco_status_t disco__coll_abandon_by(struct disco__coll_call *c, disco_status_t st,
                                      enum disco__late_by by);

/* DISCO_E_MISMATCH for a call that member id left without calling it,
 * naming why (its own failure, read from its error box, bounded). */
disco_status_t disco__coll_gone_error(const struct disco__coll_call *c, int id);

/* Device ordering (coll_call.h): this member's stream waits for the last
 * record of every other member with an arena. Returns DISCO_OK or the
 * first wait's failure. */
disco_status_t disco__coll_wait_members(struct disco__coll_call *c);

/* The error member r posted with status st (a failed post or go): its
 * message, another process's words, bounded and escaped, after "worker
 * R: ". */
disco_status_t disco__coll_posted_error(struct disco__coll_call *c, int r, int32_t st);

/* The name of kind k (read from another process's slot: bounded). */
const char *disco__coll_kind_name(uint32_t k);

#endif
