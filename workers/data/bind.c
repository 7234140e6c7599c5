/* bind.c - binding a worker to its CPUs and NUMA nodes. The plan comes from
 * hwloc (scheduler/place/placement.c); binding needs no topology, only the sets,
 * so a worker does not pay for loading one (about 3 ms here): the kernel
 * calls are the ones hwloc itself makes on Linux. */
#include <errno.h>
#include <hwloc.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "workers/data/bind.h"
#include "disco/placement.h"

#define NODE_WORDS 16 /* node masks: up to 1024 nodes */

static disco_status_t parse(const char *what, const char *list, hwloc_bitmap_t set)
{
    if (hwloc_bitmap_list_sscanf(set, list) != 0 || hwloc_bitmap_iszero(set) ||
        hwloc_bitmap_weight(set) < 0)
        return disco_set_error(DISCO_E_INVAL, "%s \"%s\": not a finite list of indexes", what,
                               list);
    return DISCO_OK;
}

static disco_status_t bind_cpus(const char *list)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return disco_set_error(DISCO_E_NOMEM, "cpuset");
    disco_status_t st = parse("cpus", list, set);
    if (st == DISCO_OK) {
        int ncpu = hwloc_bitmap_last(set) + 1;
        cpu_set_t *cs = CPU_ALLOC((size_t)ncpu);
        size_t sz = CPU_ALLOC_SIZE((size_t)ncpu);
        if (cs == NULL) {
            st = disco_set_error(DISCO_E_NOMEM, "cpu_set_t");
        } else {
            CPU_ZERO_S(sz, cs);
            for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
                CPU_SET_S((unsigned)i, sz, cs);
            if (sched_setaffinity(0, sz, cs) != 0)
                st = disco_set_error(DISCO_E_SYS, "sched_setaffinity(%s): %s", list,
                                     strerror(errno));
            CPU_FREE(cs);
        }
    }
    hwloc_bitmap_free(set);
    return st;
}

static disco_status_t bind_nodes(const char *list)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return disco_set_error(DISCO_E_NOMEM, "nodeset");
    disco_status_t st = parse("nodes", list, set);
    if (st == DISCO_OK) {
        unsigned long mask[NODE_WORDS] = {0};
        unsigned maxnode = sizeof mask * 8;
        for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
            if ((unsigned)i < maxnode)
                mask[i / 64] |= 1UL << (i % 64);
        if (syscall(SYS_set_mempolicy, MPOL_BIND, mask, (unsigned long)maxnode) != 0)
            st = disco_set_error(DISCO_E_SYS, "set_mempolicy(bind, %s): %s", list, strerror(errno));
    }
    hwloc_bitmap_free(set);
    return st;
}

disco_status_t disco__bind_self(const char *cpus, const char *nodes)
{
    disco_status_t st = DISCO_OK;
    if (cpus[0] != '\0')
        st = bind_cpus(cpus);
    if (st == DISCO_OK && nodes[0] != '\0')
        st = bind_nodes(nodes);
    return st;
}

disco_status_t disco__bind_save(bool mem, struct disco__bind_saved *out)
{
    struct disco__bind_saved v = {.tid = (pid_t)syscall(SYS_gettid), .mem = mem};
    if (sched_getaffinity(0, sizeof v.cpus, (cpu_set_t *)(void *)v.cpus) != 0)
        return disco_set_error(DISCO_E_SYS, "sched_getaffinity: %s", strerror(errno));
    if (mem && syscall(SYS_get_mempolicy, &v.mem_mode, v.nodes, (unsigned long)sizeof v.nodes * 8,
                       NULL, 0UL) != 0)
        return disco_set_error(DISCO_E_SYS, "get_mempolicy: %s", strerror(errno));
    *out = v;
    return DISCO_OK;
}

bool disco__bind_within(const struct disco__bind_saved *saved, const char *cpus)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL)
        return false;
    bool ok = cpus[0] != '\0' && hwloc_bitmap_list_sscanf(set, cpus) == 0 &&
              hwloc_bitmap_weight(set) > 0 && hwloc_bitmap_last(set) < (int)sizeof saved->cpus * 8;
    for (int i = ok ? hwloc_bitmap_first(set) : -1; ok && i >= 0; i = hwloc_bitmap_next(set, i))
        ok = CPU_ISSET_S((size_t)i, sizeof saved->cpus,
                         (const cpu_set_t *)(const void *)saved->cpus);
    hwloc_bitmap_free(set);
    return ok;
}

void disco__bind_restore(struct disco__bind_saved *v)
{
    if (v->tid == 0)
        return;
    pid_t self = (pid_t)syscall(SYS_gettid);
    /* Another thread restores the opener only while it is a thread of this
     * process (signal 0 checks without sending): a tid that ended may be
     * reused by another process. */
    if (v->tid == self || syscall(SYS_tgkill, getpid(), v->tid, 0) == 0)
        sched_setaffinity(v->tid == self ? 0 : v->tid, sizeof v->cpus,
                          (const cpu_set_t *)(const void *)v->cpus);
    if (v->mem && v->tid == self) {
        bool dflt = (v->mem_mode & ~(MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES)) == MPOL_DEFAULT;
        syscall(SYS_set_mempolicy, v->mem_mode, dflt ? NULL : v->nodes,
                dflt ? 0UL : (unsigned long)sizeof v->nodes * 8);
    }
    v->tid = 0;
}

disco_status_t disco__place_pages(void *addr, size_t len)
{
    int mode = MPOL_DEFAULT;
    unsigned long mask[NODE_WORDS] = {0};
    unsigned long maxnode = sizeof mask * 8;
    if (syscall(SYS_get_mempolicy, &mode, mask, maxnode, NULL, 0UL) != 0)
        return disco_set_error(DISCO_E_SYS, "get_mempolicy: %s", strerror(errno));
    if (mode != MPOL_BIND)
        return DISCO_OK; /* not bound to nodes: the pages stay where they are */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)addr + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)addr + len) & ~(page - 1);
    if (hi <= lo)
        return DISCO_OK; /* no whole page: it shares its pages with other blocks */
    /* The pages exist (the segment is backed at creation), but a move only
     * sees pages mapped into this process: a read maps each one here. */
    for (uintptr_t p = lo; p < hi; p += page)
        (void)*(volatile const char *)p;
    /* EIO: some pages could not be moved (another process maps them too);
     * they stay where they are, which is all "where possible" promises. */
    if (syscall(SYS_mbind, (void *)lo, (unsigned long)(hi - lo), MPOL_BIND, mask, maxnode,
                (unsigned)MPOL_MF_MOVE) != 0 &&
        errno != EIO)
        return disco_set_error(DISCO_E_SYS, "mbind(%zu bytes): %s", (size_t)(hi - lo),
                               strerror(errno));
    return DISCO_OK;
}

disco_status_t disco_place_current_cpus(char *buf, size_t cap)
{
    cpu_set_t *cs = CPU_ALLOC(CPU_SETSIZE * 16);
    size_t sz = CPU_ALLOC_SIZE(CPU_SETSIZE * 16);
    if (cs == NULL)
        return disco_set_error(DISCO_E_NOMEM, "cpu_set_t");
    disco_status_t st = DISCO_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL) {
        st = disco_set_error(DISCO_E_NOMEM, "cpuset");
    } else if (sched_getaffinity(0, sz, cs) != 0) {
        st = disco_set_error(DISCO_E_SYS, "sched_getaffinity: %s", strerror(errno));
    } else {
        for (int i = 0; i < CPU_SETSIZE * 16; i++)
            if (CPU_ISSET_S(i, sz, cs))
                hwloc_bitmap_set(set, (unsigned)i);
        int n = hwloc_bitmap_list_snprintf(buf, cap, set);
        if (n < 0 || (size_t)n >= cap)
            st = disco_set_error(DISCO_E_BUF_TOO_SMALL, "%d bytes of cpu list", n);
    }
    hwloc_bitmap_free(set);
    CPU_FREE(cs);
    return st;
}
