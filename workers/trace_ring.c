/* trace_ring.c - the trace clock's choice (see trace_ring.h). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "trace_ring.h"

static bool tsc;
static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;

/* The TSC is one time base for every core and process only where the kernel
 * trusts it as its clock source (it checks that the TSC is invariant and
 * synchronized across CPUs); anywhere else we read CLOCK_MONOTONIC. */
static void decide(void)
{
#if defined(__x86_64__)
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    char buf[32] = "";
    if (f != NULL) {
        if (fgets(buf, sizeof buf, f) == NULL)
            buf[0] = '\0';
        fclose(f);
    }
    tsc = strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == '\0');
#endif
}

bool disco__ticks_are_tsc(void)
{
    pthread_once(&tsc_once, decide);
    return tsc;
}

bool disco__tick_tsc;

__attribute__((constructor)) static void decide_at_load(void)
{
    disco__tick_tsc = disco__ticks_are_tsc();
}
