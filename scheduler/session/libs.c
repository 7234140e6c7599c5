/* libs.c - the libraries a session loaded (libs.h). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "workers/core/worker.h"
#include "scheduler/session/libs.h"

void disco__libs_note(struct disco__libs *l, const disco_value_t *arg,
                      const struct disco_worker *w0)
{
    if (arg->type == DISCO_T_DREF) /* the signature ("s") let a register through */
        arg = disco__worker_get_reg(w0, arg->v.reg);
    if (arg == NULL || arg->type != DISCO_T_STR)
        return;
    const char *path = arg->v.str;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->path[i], path) == 0)
            return;
    /* Worker 0 ran the load in this process just now: the library is here
     * if it loaded (RTLD_NOLOAD finds it without loading; the reference it
     * takes is given back). One that failed is not loaded again. */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return;
    dlclose(h);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->path, cap * sizeof *p);
        if (p == NULL)
            return;
        l->path = p;
        l->cap = cap;
    }
    char *copy = strdup(path);
    if (copy != NULL)
        l->path[l->n++] = copy;
}

void disco__libs_fini(struct disco__libs *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->path[i]);
    free(l->path);
    *l = (struct disco__libs){0};
}
