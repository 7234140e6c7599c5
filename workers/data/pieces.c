/* pieces.c - a first-fit free list of byte ranges (see pieces.h). */
#include "workers/data/pieces.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_CAP 16u

bool disco__pieces_init(struct disco__pieces *p, uint64_t off, uint64_t len)
{
    struct disco__piece *at = malloc(FIRST_CAP * sizeof *at);
    if (at == NULL)
        return false;
    *p = (struct disco__pieces){.at = at, .n = 0, .cap = FIRST_CAP};
    if (len > 0)
        p->at[p->n++] = (struct disco__piece){off, len};
    return true;
}

/* Room for one more piece: true, or false when the list cannot grow. */
static bool grow(struct disco__pieces *p)
{
    if (p->n < p->cap)
        return true;
    struct disco__piece *at = realloc(p->at, p->cap * 2 * sizeof *at);
    if (at == NULL)
        return false;
    p->at = at;
    p->cap *= 2;
    return true;
}

bool disco__pieces_take(struct disco__pieces *p, uint64_t want, uint64_t *off_out,
                        uint64_t *largest_out)
{
    assert(want > 0);
    uint64_t largest = 0;
    for (size_t i = 0; i < p->n; i++) {
        struct disco__piece *q = &p->at[i];
        if (q->len < want) {
            largest = q->len > largest ? q->len : largest;
            continue;
        }
        *off_out = q->off;
        q->off += want;
        q->len -= want;
        if (q->len == 0) {
            memmove(q, q + 1, (p->n - i - 1) * sizeof *q);
            p->n--;
        }
        return true;
    }
    *largest_out = largest;
    return false;
}

bool disco__pieces_give(struct disco__pieces *p, uint64_t off, uint64_t len)
{
    assert(len > 0);
    size_t i = 0;
    while (i < p->n && p->at[i].off < off)
        i++;
    bool left = i > 0 && p->at[i - 1].off + p->at[i - 1].len == off;
    bool right = i < p->n && off + len == p->at[i].off;
    if (left && right) {
        p->at[i - 1].len += len + p->at[i].len;
        memmove(&p->at[i], &p->at[i + 1], (p->n - i - 1) * sizeof *p->at);
        p->n--;
    } else if (left) {
        p->at[i - 1].len += len;
    } else if (right) {
        p->at[i].off = off;
        p->at[i].len += len;
    } else if (grow(p)) {
        memmove(&p->at[i + 1], &p->at[i], (p->n - i) * sizeof *p->at);
        p->at[i] = (struct disco__piece){off, len};
        p->n++;
    } else {
        /* No memory for the list: the piece is lost until the list
         * goes (the caller decides what its counts say of it). */
        return false;
    }
    return true;
}

void disco__pieces_destroy(struct disco__pieces *p)
{
    free(p->at);
    *p = (struct disco__pieces){0};
}
