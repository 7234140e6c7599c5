/* regs.c - growing and freeing a session's register table (regs.h). */
#include <stdlib.h>
#include <string.h>

#include "scheduler/session/regs.h"

disco_status_t disco__regs_grow(struct disco__regs *t)
{
    uint64_t cap = t->cap ? t->cap * 2 : 64;
    const struct disco__func **f = realloc(t->func, cap * sizeof *f);
    if (f != NULL)
        t->func = f;
    bool *live = realloc(t->live, cap * sizeof *live);
    if (live != NULL)
        t->live = live;
    bool *lost = realloc(t->lost, cap * sizeof *lost);
    if (lost != NULL)
        t->lost = lost;
    uint64_t *fr = realloc(t->free, cap * sizeof *fr);
    if (fr != NULL)
        t->free = fr;
    if (f == NULL || live == NULL || lost == NULL || fr == NULL)
        return disco_set_error(DISCO_E_NOMEM, "register table of %llu", (unsigned long long)cap);
    memset(t->func + t->cap, 0, (cap - t->cap) * sizeof *f);
    memset(t->live + t->cap, 0, (cap - t->cap) * sizeof *live);
    memset(t->lost + t->cap, 0, (cap - t->cap) * sizeof *lost);
    t->cap = cap;
    return DISCO_OK;
}

disco_status_t disco__regs_bad(const struct disco__regs *t, uint64_t r)
{
    if (disco__regs_lost(t, r))
        return disco_set_error(DISCO_E_BAD_REG,
                               "register %llu was lost in a recovery of the session (its value is "
                               "gone on every worker; make it again)",
                               (unsigned long long)r);
    return disco_set_error(DISCO_E_BAD_REG, "register %llu is not a live register of this session",
                           (unsigned long long)r);
}

uint64_t disco__regs_lose_all(struct disco__regs *t)
{
    uint64_t n = 0;
    for (uint64_t r = 1; r < t->next; r++) {
        if (!t->live[r])
            continue;
        t->live[r] = false;
        t->func[r] = NULL;
        t->lost[r] = true;
        n++;
    }
    t->nlost += n;
    return n;
}

void disco__regs_fini(struct disco__regs *t)
{
    free(t->free);
    free(t->func);
    free(t->live);
    free(t->lost);
    *t = (struct disco__regs){0};
}
