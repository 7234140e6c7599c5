/*
 * pieces.h - a first-fit free list of byte ranges (internal): the device
 * arena's sub-allocator (arena.c).
 *
 * The list holds the free pieces [off, off + len) of one range, sorted by
 * off, never empty (len > 0) and never adjacent: a piece given back is
 * merged with the free neighbours it touches (test_pieces.c,
 * test_random_against_bitmap). It deals in offsets only; alignment,
 * counters and errors are the caller's.
 *
 * Thread safety: none; the caller holds its own lock (the arena's) around
 * every call.
 */
#ifndef DISCO_WORKERS_PIECES_H
#define DISCO_WORKERS_PIECES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A free piece: [off, off + len). */
struct disco__piece {
    uint64_t off, len;
};

struct disco__pieces {
    struct disco__piece *at; /* sorted by off, never adjacent (merged), len > 0 */
    size_t n, cap;
};

/** Makes p a list of one free piece [off, off + len) (none when len is 0);
 *  off + len must not overflow. Returns true, or false when the list's
 *  memory cannot be had (p is then left untouched; the caller reports it). */
bool disco__pieces_init(struct disco__pieces *p, uint64_t off, uint64_t len);

/** Takes want bytes (want > 0) from the first piece that holds them, at that
 *  piece's start. Returns true with *off_out set; false when no piece holds
 *  want bytes, with *largest_out set to the largest free piece (0: none), for
 *  the caller's error message. */
bool disco__pieces_take(struct disco__pieces *p, uint64_t want, uint64_t *off_out,
                        uint64_t *largest_out);

/** Gives [off, off + len) (len > 0, taken earlier and not given back since)
 *  back, merged with the free neighbours it touches. Returns true; false
 *  when the piece touches no neighbour and the list cannot grow: the piece
 *  is then lost until the list goes (how to count it is the caller's). */
bool disco__pieces_give(struct disco__pieces *p, uint64_t off, uint64_t len);

/** Frees the list's memory; p is left empty. Harmless on an empty list. */
void disco__pieces_destroy(struct disco__pieces *p);

#endif
