/*
 * ticks.h - the trace clock (internal): one time base for every core and
 * process, cheap enough to read on every command.
 *
 * Ticks are TSC cycles (rdtsc on x86-64 where the kernel's clock source is
 * the TSC, so every core and process shares one time base) or, elsewhere,
 * CLOCK_MONOTONIC nanoseconds. The controller converts them to nanoseconds
 * when it exports a trace (scheduler/trace/trace.c).
 */
#ifndef DISCO_SHM_TICKS_H
#define DISCO_SHM_TICKS_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/** Whether ticks are TSC cycles (else nanoseconds): decided by a
 *  constructor at load (before any thread starts; read-only afterwards),
 *  so the clock read costs no call. */
extern bool disco__tick_tsc;

/** The trace clock: see the top of the file. */
static inline uint64_t disco__ticks(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(disco__tick_tsc, 1))
        return __builtin_ia32_rdtsc();
    /** Nanoseconds per tick, measured against CLOCK_MONOTONIC from a pair
     *  (t0 ticks, ns0 ns) read together earlier: at least 2 ms of it, spun
     *  here if the pair is younger. 1.0 when ticks are nanoseconds. */
    double disco__ns_per_tick(uint64_t t0, int64_t ns0);

#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** Nanoseconds per tick, measured against CLOCK_MONOTONIC from a pair
 *  (t0 ticks, ns0 ns) read together earlier: at least 2 ms of it, spun
 *  here if the pair is younger. 1.0 when ticks are nanoseconds. */
double disco__ns_per_tick(uint64_t t0, int64_t ns0);

#endif
