/* ticks.c - the trace clock's choice (see ticks.h), and disco_now_ns. */
#include <stdio.h>
#include <string.h>

#include "shm/ticks.h"

#include "disco/clock.h"

bool disco__tick_tsc;

/* The public clock (disco/clock.h) lives with the trace clock, so that the
 * two conversions between them need no other file. */
int64_t disco_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The TSC is one time base for every core and process only where the kernel
 * trusts it as its clock source (it checks that the TSC is invariant and
 * synchronized across CPUs); anywhere else we read CLOCK_MONOTONIC. */
__attribute__((constructor)) static void decide(void)
{
#if defined(__x86_64__)
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
    char buf[32] = "";
    if (f != NULL) {
        if (fgets(buf, sizeof buf, f) == NULL)
            buf[0] = '\0';
        fclose(f);
    }
    disco__tick_tsc = strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == '\0');
#endif
}

double disco__ns_per_tick(uint64_t t0, int64_t ns0)
{
    if (!disco__tick_tsc)
        return 1.0;
    int64_t ns;
    uint64_t ticks;
    do {
        ns = disco_now_ns();
        ticks = disco__ticks();
    } while (ns - ns0 < 2000000);
    return ticks > t0 ? (double)(ns - ns0) / (double)(ticks - t0) : 1.0;
}
