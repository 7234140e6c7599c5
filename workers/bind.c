/* bind.c - binding a worker to its CPUs and NUMA nodes. The plan comes from
 * hwloc (scheduler/placement.c); binding needs no topology, only the sets,
 * so a worker does not pay for loading one (about 3 ms here): the kernel
 * calls are the ones hwloc itself makes on Linux. */
#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bind.h"
#include "disco/placement.h"

#define MPOL_BIND_MODE 2 /* MPOL_BIND in <linux/mempolicy.h> */

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
        unsigned long mask[16] = {0}; /* up to 1024 nodes */
        unsigned maxnode = sizeof mask * 8;
        for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
            if ((unsigned)i < maxnode)
                mask[i / 64] |= 1UL << (i % 64);
        if (syscall(SYS_set_mempolicy, MPOL_BIND_MODE, mask, (unsigned long)maxnode) != 0)
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
