/* libs.h - the libraries a session loaded (internal): every path that
 * "disco.load_library" loaded on worker 0, once each, in the order first
 * loaded, so that a recovery (recover.c) can load them again on new
 * workers. Only the session's thread uses it. */
#ifndef DISCO_SCHEDULER_LIBS_H
#define DISCO_SCHEDULER_LIBS_H

#include <stddef.h>

#include "disco/value.h"

struct disco_worker;

struct disco__libs {
    char **path;
    size_t n, cap;
};

/** Notes arg, the path "disco.load_library" just ran with on worker
 *  0, w0, in this process (a string, or a DRef to w0's register holding
 *  one): a path noted already, or one that is not loaded here (the load
 *  failed), is not noted; nor, without memory, is any (a recovery's
 *  spawned workers would then lack it). */
void disco__libs_note(struct disco__libs *l, const disco_value_t *arg,
                      const struct disco_worker *w0);

/** Frees the list. */
void disco__libs_fini(struct disco__libs *l);

#endif
