/* prefault.h - making memory present before the fast path touches it
 * (internal). */
#ifndef DISCO_SHM_PREFAULT_H
#define DISCO_SHM_PREFAULT_H

#include <stddef.h>

/** MADV_POPULATE_WRITE over the pages that [p, p + len) touches: present
 *  and writable in this process, allocated in a shared file's hole too.
 *  Sets *end_out to the end of the last of them. Returns 0, or an errno
 *  (EINVAL: the kernel lacks it, before Linux 5.14; ENOMEM). */
int disco__populate(void *p, size_t len, char **end_out);

/** Makes the pages of [p, p + len) present and writable in this process,
 *  allocating them in a shared file's hole too: MADV_POPULATE_WRITE, or on
 *  a kernel without it (before Linux 5.14) a store of each page's first
 *  byte back into it. Only for memory that no other thread or process
 *  writes meanwhile. Returns 0, or an errno (ENOMEM: the pages not made
 *  present fault in at first use, as they would have anyway). */
int disco__prefault(void *p, size_t len);

/** len zeroed bytes of private memory for a fast path to write, present
 *  now (disco__prefault) and not inherited by processes forked later
 *  (MADV_DONTFORK): after a fork, the first store to each page of
 *  ordinary memory copies it, a fault in the fast path. NULL when out of
 *  memory. Free it with disco__hot_free. */
void *disco__hot_alloc(size_t len);

/** Frees what disco__hot_alloc(len) returned (NULL: nothing). */
void disco__hot_free(void *p, size_t len);

#endif
