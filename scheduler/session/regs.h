/* regs.h - a session's register table (internal): which register ids are
 * live on the controller's side and which function each holds. Ids run
 * from 1; freed ids are reused last-in first-out. A recovery makes every
 * live id lost (disco__regs_lose_all): a lost id is not live, and is not
 * reused until the user frees it, so that an old DRef never names a new
 * value. Only the session's thread uses it. The lookups are on every call's path, so they are
 * static inline; growing the table is out of line (regs.c). */
#ifndef DISCO_SCHEDULER_REGS_H
#define DISCO_SCHEDULER_REGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "disco/status.h"
#include "workers/core/protocol.h"

struct disco__func;

struct disco__regs {
    uint64_t next;  /* the next never-issued id (starts at 1) */
    uint64_t *free; /* [cap]: freed ids */
    size_t nfree;
    const struct disco__func **func; /* [cap]: function held, or NULL */
    bool *live;                      /* [cap] */
    bool *lost;                      /* [cap]: live before a recovery, not freed since */
    uint64_t cap;
    uint64_t nlost; /* ids lost and not freed */
};

/** Doubles the table so that every id ever issued fits in the free list
 *  and the tables (freeing then never needs memory). Returns DISCO_OK,
 *  DISCO_E_NOMEM (the table is unchanged, still valid). */
disco_status_t disco__regs_grow(struct disco__regs *t);

/** Sets and returns DISCO_E_BAD_REG: r is not a live register; the
 *  message says when it was lost in a recovery. */
disco_status_t disco__regs_bad(const struct disco__regs *t, uint64_t r);

/** Makes every live id lost (a recovery). Returns how many. */
uint64_t disco__regs_lose_all(struct disco__regs *t);

/** Frees the table's memory. */
void disco__regs_fini(struct disco__regs *t);

/** Takes a free id into *reg_out, marks it live and holding no function.
 *  Ids stay below DISCO_REG_LIMIT (protocol.h: what workers take and a call
 *  head holds). Returns DISCO_OK, DISCO_E_NOMEM, DISCO_E_OVERFLOW (that
 *  many registers live). */
static inline disco_status_t disco__regs_alloc(struct disco__regs *t, uint64_t *reg_out)
{
    *reg_out = 0;
    if (t->nfree == 0 && t->next >= DISCO_REG_LIMIT)
        return disco_set_error(DISCO_E_OVERFLOW,
                               "every register id below %u is live or waiting to be freed",
                               DISCO_REG_LIMIT);
    if (t->nfree == 0 && t->next >= t->cap) {
        disco_status_t st = disco__regs_grow(t);
        if (st != DISCO_OK)
            return st;
    }
    uint64_t r = t->nfree != 0 ? t->free[--t->nfree] : t->next++;
    t->live[r] = true;
    t->func[r] = NULL;
    *reg_out = r;
    return DISCO_OK;
}

/** Returns live id r to the free list. */
static inline void disco__regs_release(struct disco__regs *t, uint64_t r)
{
    t->live[r] = false;
    t->func[r] = NULL;
    t->free[t->nfree++] = r; /* room: cap > every id issued */
}

/** Ends live id r without freeing it yet: it is not live (a use is
 *  DISCO_E_BAD_REG) and not reused until disco__regs_recycle, once the
 *  workers have been told to free it (session.c, free_next). */
static inline void disco__regs_retire(struct disco__regs *t, uint64_t r)
{
    t->live[r] = false;
    t->func[r] = NULL;
}

/** Returns retired id r to the free list. */
static inline void disco__regs_recycle(struct disco__regs *t, uint64_t r)
{
    t->free[t->nfree++] = r; /* room: cap > every id issued */
}

/** Whether r was lost in a recovery (and not freed since). */
static inline bool disco__regs_lost(const struct disco__regs *t, uint64_t r)
{
    return r != 0 && r < t->cap && t->lost[r];
}

/** Frees lost id r: it may be reused from now on. */
static inline void disco__regs_forget(struct disco__regs *t, uint64_t r)
{
    t->lost[r] = false;
    t->nlost--;
    t->free[t->nfree++] = r; /* room: cap > every id issued */
}

/** Whether r is a live register. */
static inline bool disco__regs_ok(const struct disco__regs *t, uint64_t r)
{
    return r != 0 && r < t->cap && t->live[r];
}

#endif
