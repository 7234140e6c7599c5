/* demo.h - the parts of disco-demo (tools/disco-demo.c, tools/demo_*.c). */
#ifndef DISCO_TOOLS_DEMO_H
#define DISCO_TOOLS_DEMO_H

#include <stdbool.h>

/** Median of n values (sorts v). */
double demo_median(double *v, int n);

/** The session part: library calls on every worker, an error caught, and
 *  call latency over rings and pipes. True if everything checked out. */
bool demo_session(int n);

#endif
