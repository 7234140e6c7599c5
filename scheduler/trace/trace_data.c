/* trace_data.c - allocating and freeing a disco_trace_t (trace_data.h,
 * disco/trace.h). */
#include <stdlib.h>

#include "scheduler/trace/trace_data.h"

disco_trace_t *disco__trace_alloc(size_t nslices, size_t ncmds, size_t nwaits, size_t nmarks,
                                  size_t ncolls)
{
    disco_trace_t *tr = calloc(1, sizeof *tr);
    if (tr != NULL) {
        tr->slices = calloc(nslices ? nslices : 1, sizeof *tr->slices);
        tr->cmds = calloc(ncmds ? ncmds : 1, sizeof *tr->cmds);
        tr->waits = calloc(nwaits ? nwaits : 1, sizeof *tr->waits);
        tr->marks = calloc(nmarks ? nmarks : 1, sizeof *tr->marks);
        tr->colls = calloc(ncolls ? ncolls : 1, sizeof *tr->colls);
    }
    if (tr == NULL || tr->slices == NULL || tr->cmds == NULL || tr->waits == NULL ||
        tr->marks == NULL || tr->colls == NULL) {
        disco_trace_free(tr);
        return NULL;
    }
    return tr;
}

void disco_trace_free(disco_trace_t *tr)
{
    if (tr == NULL)
        return;
    free(tr->slices);
    free(tr->cmds);
    free(tr->waits);
    free(tr->marks);
    free(tr->colls);
    free(tr);
}
