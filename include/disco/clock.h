/*
 * disco/clock.h - the one time base of disco: deadlines (transport, RPC,
 * waits) and trace stamps are disco_now_ns() values.
 */
#ifndef DISCO_CLOCK_H
#define DISCO_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** CLOCK_MONOTONIC in nanoseconds: one time base for every process. Out of
 *  line, so this header builds under plain -std=c11 (no POSIX feature
 *  macros needed by users); the call costs ~2 ns beside the clock's ~20.
 *  Thread-safe. */
int64_t disco_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
