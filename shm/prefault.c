/* prefault.c - see prefault.h. */
#include "shm/prefault.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older C headers lack the name */
#endif

int disco__populate(void *p, size_t len, char **end_out)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(page - 1);
    uintptr_t b = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    if (madvise((void *)a, (size_t)(b - a), MADV_POPULATE_WRITE) != 0)
        return errno;
    *end_out = (char *)b;
    return 0;
}

int disco__prefault(void *p, size_t len)
{
    if (len == 0)
        return 0;
    char *end;
    int e = disco__populate(p, len, &end);
    if (e != EINVAL)
        return e;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* No MADV_POPULATE_WRITE: a write fault per page, inside [p, p + len)
     * only (the bytes around it may be someone else's). */
    for (uintptr_t q = (uintptr_t)p; q < (uintptr_t)p + len; q = (q & ~(page - 1)) + page)
        /* Relaxed: an or of 0 changes nothing; it is a store only to
         * make the page present and writable. */
        __atomic_fetch_or((unsigned char *)q, 0, __ATOMIC_RELAXED);
    return 0;
}

void *disco__hot_alloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* Both best effort: without them the memory works, only slower. */
    (void)madvise(p, len, MADV_DONTFORK);
    (void)disco__prefault(p, len);
    return p;
}

void disco__hot_free(void *p, size_t len)
{
    if (p != NULL)
        munmap(p, len);
}
