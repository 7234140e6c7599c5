/* placement.c - placement plans with hwloc (see disco/placement.h). */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disco/placement.h"

static const char *const policy_names[] = {"default", "none", "spread", "compact", "gpu", "list"};

const char *disco_place_policy_name(disco_place_policy_t p)
{
    return (unsigned)p < sizeof policy_names / sizeof policy_names[0] ? policy_names[p] : "?";
}

disco_status_t disco_place_policy_parse(const char *name, disco_place_policy_t *out)
{
    for (size_t i = 0; i < sizeof policy_names / sizeof policy_names[0]; i++)
        if (name != NULL && strcmp(name, policy_names[i]) == 0) {
            *out = (disco_place_policy_t)i;
            return DISCO_OK;
        }
    return disco_set_error(DISCO_E_INVAL,
                           "placement policy \"%s\": want none, spread, compact, gpu or list",
                           name ? name : "(null)");
}

/* ---- topologies ---- */

/* This machine's topology, loaded once per process (about 3 ms here; with
 * I/O devices, for GPUs, about 13 ms) and never changed afterwards, so it
 * can be read from any thread. */
static hwloc_topology_t machine[2]; /* [1]: with I/O devices (GPUs) */
static int machine_err[2];
static pthread_once_t machine_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void load_machine_io(int io)
{
    if (hwloc_topology_init(&machine[io]) != 0) {
        machine_err[io] = errno ? errno : EINVAL;
        return;
    }
    if (io)
        hwloc_topology_set_io_types_filter(machine[io], HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(machine[io]) != 0) {
        machine_err[io] = errno ? errno : EINVAL;
        hwloc_topology_destroy(machine[io]);
    }
}

static void load_machine(void)
{
    load_machine_io(0);
}

static void load_machine_with_io(void)
{
    load_machine_io(1);
}

static disco_status_t get_topology(const disco_place_config_t *cfg, bool io, hwloc_topology_t *out,
                                   bool *owned)
{
    *owned = cfg->synthetic != NULL || cfg->xml != NULL;
    if (!*owned) {
        pthread_once(&machine_once[io], io ? load_machine_with_io : load_machine);
        if (machine_err[io] != 0)
            return disco_set_error(DISCO_E_SYS, "hwloc: loading this machine's topology: %s",
                                   strerror(machine_err[io]));
        *out = machine[io];
        return DISCO_OK;
    }
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return disco_set_error(DISCO_E_SYS, "hwloc_topology_init: %s", strerror(errno));
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    int rc = cfg->synthetic != NULL ? hwloc_topology_set_synthetic(t, cfg->synthetic)
                                    : hwloc_topology_set_xml(t, cfg->xml);
    if (rc != 0 || hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return disco_set_error(DISCO_E_INVAL, "hwloc cannot load %s \"%s\"",
                               cfg->synthetic ? "synthetic topology" : "XML topology",
                               cfg->synthetic ? cfg->synthetic : cfg->xml);
    }
    *out = t;
    return DISCO_OK;
}

/* ---- building the plan ---- */

static void note(disco_plan_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(disco_plan_t *p, const char *fmt, ...)
{
    size_t used = strlen(p->notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->notes + used, sizeof p->notes - used, fmt, ap);
    va_end(ap);
}

/* Fills entry e from a cpuset: the set itself, its NUMA nodes (only where
 * there is more than one node), its first PU's core and package. */
static void fill(hwloc_topology_t t, const disco_plan_t *p, disco_place_entry_t *e,
                 hwloc_const_cpuset_t set)
{
    hwloc_bitmap_list_snprintf(e->cpus, sizeof e->cpus, set);
    if (p->num_numa > 1) {
        hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
        if (nodes != NULL) {
            hwloc_cpuset_to_nodeset(t, set, nodes);
            hwloc_bitmap_list_snprintf(e->nodes, sizeof e->nodes, nodes);
            hwloc_bitmap_free(nodes);
        }
    }
    hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(t, (unsigned)hwloc_bitmap_first(set));
    hwloc_obj_t core = pu ? hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu) : NULL;
    hwloc_obj_t pkg = pu ? hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu) : NULL;
    e->core = core ? (int)core->logical_index : -1;
    e->package = pkg ? (int)pkg->os_index : -1;
}

/* Spreads n workers over root's CPUs (hwloc_distrib), one PU each; sets[i]
 * get the singlified shares. hwloc_distrib allocates the sets itself (with
 * hwloc_bitmap_dup): handing it allocated ones leaked them (ASan found it). */
static disco_status_t distrib(hwloc_topology_t t, hwloc_obj_t root, int n, hwloc_bitmap_t *sets)
{
    if (hwloc_distrib(t, &root, 1, sets, (unsigned)n, INT_MAX, 0) != 0)
        return disco_set_error(DISCO_E_SYS, "hwloc_distrib: %s", strerror(errno));
    for (int i = 0; i < n; i++)
        if (sets[i] == NULL)
            return disco_set_error(DISCO_E_NOMEM, "cpusets");
    for (int i = 0; i < n; i++)
        hwloc_bitmap_singlify(sets[i]);
    return DISCO_OK;
}

static disco_status_t plan_spread(hwloc_topology_t t, const disco_plan_t *p, hwloc_obj_t root,
                                  disco_place_entry_t *entries, int n, int gpu)
{
    hwloc_bitmap_t *sets = calloc((size_t)n, sizeof *sets);
    if (sets == NULL)
        return disco_set_error(DISCO_E_NOMEM, "cpusets");
    disco_status_t st = distrib(t, root, n, sets);
    for (int i = 0; i < n && st == DISCO_OK; i++) {
        fill(t, p, &entries[i], sets[i]);
        entries[i].gpu = gpu;
    }
    for (int i = 0; i < n; i++)
        hwloc_bitmap_free(sets[i]);
    free(sets);
    return st;
}

static disco_status_t plan_compact(hwloc_topology_t t, disco_plan_t *p)
{
    for (int i = 0; i < p->num_workers; i++) {
        hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, (unsigned)(i % p->num_pus));
        fill(t, p, &p->worker[i], pu->cpuset);
    }
    return DISCO_OK;
}

/* One entry of an explicit list: "N" or "A-B", every CPU present here. */
static disco_status_t list_entry(hwloc_topology_t t, const char *list, int idx, const char *tok,
                                 hwloc_bitmap_t set)
{
    char *end;
    errno = 0;
    long a = strtol(tok, &end, 10), b = a;
    if (end != tok && *end == '-') {
        const char *s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s)
            end = (char *)s - 1; /* "3-": not a range */
    }
    if (end == tok || *end != '\0' || errno != 0 || !isdigit((unsigned char)tok[0]) || a < 0 ||
        b < a || b > 1 << 20)
        return disco_set_error(DISCO_E_INVAL,
                               "cpu list \"%s\": entry %d (\"%s\") is not a CPU "
                               "number or range",
                               list, idx, tok);
    hwloc_bitmap_zero(set);
    for (long c = a; c <= b; c++) {
        if (hwloc_get_pu_obj_by_os_index(t, (unsigned)c) == NULL) {
            char have[128];
            hwloc_bitmap_list_snprintf(have, sizeof have, hwloc_topology_get_topology_cpuset(t));
            return disco_set_error(DISCO_E_INVAL,
                                   "cpu list \"%s\": entry %d (\"%s\"): there is no CPU %ld here "
                                   "(CPUs %s)",
                                   list, idx, tok, c, have);
        }
        hwloc_bitmap_set(set, (unsigned)c);
    }
    return DISCO_OK;
}

static disco_status_t plan_list(hwloc_topology_t t, disco_plan_t *p, const char *list)
{
    if (list == NULL || list[0] == '\0')
        return disco_set_error(DISCO_E_INVAL, "list placement needs a cpu list (config or "
                                              "$DISCO_CPUS)");
    char *copy = strdup(list);
    hwloc_bitmap_t *sets = calloc((size_t)p->num_workers, sizeof *sets);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    disco_status_t st = copy && sets && set ? DISCO_OK : disco_set_error(DISCO_E_NOMEM, "cpu list");
    int n = 0;
    char *save = NULL;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok != NULL && st == DISCO_OK;
         tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        if ((st = list_entry(t, list, n + 1, tok, set)) != DISCO_OK)
            break;
        if (n < p->num_workers)
            sets[n] = hwloc_bitmap_dup(set);
        n++;
    }
    if (st == DISCO_OK && n == 0)
        st = disco_set_error(DISCO_E_INVAL, "cpu list \"%s\" has no entry", list);
    for (int i = 0; i < p->num_workers && st == DISCO_OK; i++)
        fill(t, p, &p->worker[i], sets[i % (n < p->num_workers ? n : p->num_workers)]);
    for (int i = 0; sets != NULL && i < p->num_workers; i++)
        hwloc_bitmap_free(sets[i]);
    hwloc_bitmap_free(set);
    free(sets);
    free(copy);
    return st;
}

/* The CUDA GPUs of the topology, in CUDA order: hwloc's "cudaN" OS devices
 * where its CUDA plugin ran, else NVIDIA display/3D PCI devices in bus order
 * (CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID). */
static int find_gpus(hwloc_topology_t t, hwloc_obj_t *out, int cap)
{
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(t, o)) != NULL;) {
        int k;
        if (o->name != NULL && sscanf(o->name, "cuda%d", &k) == 1 && k >= 0 && k < cap) {
            out[k] = o;
            n = k + 1 > n ? k + 1 : n;
        }
    }
    if (n > 0)
        return n;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t, o)) != NULL && n < cap;)
        if (o->attr->pcidev.vendor_id == 0x10de && (o->attr->pcidev.class_id >> 8) == 0x03)
            out[n++] = o;
    return n;
}

static disco_status_t plan_gpu(hwloc_topology_t t, disco_plan_t *p)
{
    hwloc_obj_t gpus[64] = {0};
    int n = find_gpus(t, gpus, 64);
    p->num_gpus = n;
    if (n == 0) {
        note(p, "No GPU in the topology: spread instead. ");
        return plan_spread(t, p, hwloc_get_root_obj(t), p->worker, p->num_workers, -1);
    }
    /* Workers sharing a GPU are spread over its local CPUs: place them as a
     * group, then scatter the group into worker order (i = g + k * n). */
    disco_place_entry_t *tmp = calloc((size_t)p->num_workers, sizeof *tmp);
    if (tmp == NULL)
        return disco_set_error(DISCO_E_NOMEM, "plan");
    disco_status_t st = DISCO_OK;
    for (int g = 0; g < n && g < p->num_workers && st == DISCO_OK; g++) {
        int m = (p->num_workers - g + n - 1) / n; /* workers on GPU g */
        hwloc_obj_t local = gpus[g] ? hwloc_get_non_io_ancestor_obj(t, gpus[g]) : NULL;
        if (local == NULL || hwloc_bitmap_iszero(local->cpuset) ||
            (local->type == HWLOC_OBJ_MACHINE && p->num_packages > 1)) {
            /* hwloc reports no locality (an empty local_cpus reads as the
             * whole machine): say so rather than pretend. */
            note(p, "GPU %d has no local CPUs reported: all CPUs. ", g);
            local = hwloc_get_root_obj(t);
        }
        st = plan_spread(t, p, local, tmp, m, g);
        for (int k = 0; k < m && st == DISCO_OK; k++)
            p->worker[g + k * n] = tmp[k];
    }
    free(tmp);
    return st;
}

static disco_status_t build(hwloc_topology_t t, const disco_place_config_t *cfg, disco_plan_t *p)
{
    p->num_pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    p->num_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    p->num_numa = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    p->num_packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    p->oversubscribed = p->num_workers > p->num_pus;
    if (p->policy == DISCO_PLACE_DEFAULT) {
        /* Spread even when workers outnumber PUs: with the crowded waits
         * (a 200 ns pause, then yields; scheduler/session/open.c) a no-op
         * call + sync_all on 2 PUs took 4.5-4.8 us at N = 4 and 9.6-9.9 us
         * at N = 8 spread, against 4.6-7.0 and 9.4-14.9 us unbound, where
         * the kernel's choice of who shares a PU changes from one session
         * to the next (issue 21). With waits that spun long before
         * yielding, pinned was 5-10x slower: ask for none with them. */
        p->policy = DISCO_PLACE_SPREAD;
        if (p->oversubscribed)
            note(p, "Workers outnumber PUs: spread over them, several a PU (the default); ask "
                    "for none to leave them unbound. ");
    }
    for (int i = 0; i < p->num_workers; i++)
        p->worker[i] = (disco_place_entry_t){.core = -1, .package = -1, .gpu = -1};
    if (p->num_pus < 1)
        return disco_set_error(DISCO_E_SYS, "hwloc: the topology has no PU");
    switch (p->policy) {
    case DISCO_PLACE_NONE:
        return DISCO_OK;
    case DISCO_PLACE_SPREAD:
        return plan_spread(t, p, hwloc_get_root_obj(t), p->worker, p->num_workers, -1);
    case DISCO_PLACE_COMPACT:
        return plan_compact(t, p);
    case DISCO_PLACE_GPU:
        return plan_gpu(t, p);
    case DISCO_PLACE_LIST:
        return plan_list(t, p, cfg->cpus ? cfg->cpus : getenv("DISCO_CPUS"));
    default:
        return disco_set_error(DISCO_E_INVAL, "placement policy %d is unknown", (int)p->policy);
    }
}

disco_status_t disco_plan_make(const disco_place_config_t *cfg, int num_workers, disco_plan_t **out)
{
    static const disco_place_config_t none = {0};
    if (cfg == NULL)
        cfg = &none;
    if (num_workers < 1 || num_workers > 4096)
        return disco_set_error(DISCO_E_INVAL, "%d workers: must be 1..4096", num_workers);
    disco_place_policy_t policy = cfg->policy;
    disco_status_t st = DISCO_OK;
    if (policy == DISCO_PLACE_DEFAULT) {
        const char *env = getenv("DISCO_PLACE");
        if (env != NULL && env[0] != '\0' &&
            (st = disco_place_policy_parse(env, &policy)) != DISCO_OK)
            return disco_set_error(st, "$DISCO_PLACE: %s", disco_last_error());
    }
    hwloc_topology_t t = NULL;
    bool owned = false;
    if ((st = get_topology(cfg, policy == DISCO_PLACE_GPU, &t, &owned)) != DISCO_OK)
        return st;
    disco_plan_t *p = calloc(1, sizeof *p);
    if (p != NULL)
        p->worker = calloc((size_t)num_workers, sizeof *p->worker);
    if (p == NULL || p->worker == NULL) {
        st = disco_set_error(DISCO_E_NOMEM, "plan of %d workers", num_workers);
    } else {
        p->policy = policy;
        p->num_workers = num_workers;
        st = build(t, cfg, p);
    }
    if (owned)
        hwloc_topology_destroy(t);
    if (st != DISCO_OK) {
        disco_plan_free(p);
        return st;
    }
    *out = p;
    return DISCO_OK;
}

void disco_plan_free(disco_plan_t *p)
{
    if (p == NULL)
        return;
    free(p->worker);
    free(p);
}

/* ---- printing ---- */

static disco_status_t print_json(const disco_plan_t *p, FILE *out)
{
    json_t *workers = json_array();
    for (int i = 0; i < p->num_workers; i++) {
        const disco_place_entry_t *e = &p->worker[i];
        json_array_append_new(workers, json_pack("{s:i, s:s, s:s, s:i, s:i, s:i}", "worker", i,
                                                 "cpus", e->cpus, "nodes", e->nodes, "core",
                                                 e->core, "package", e->package, "gpu", e->gpu));
    }
    json_t *doc = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:o}", "policy",
                            disco_place_policy_name(p->policy), "workers", p->num_workers, "pus",
                            p->num_pus, "cores", p->num_cores, "numa_nodes", p->num_numa,
                            "packages", p->num_packages, "gpus", p->num_gpus, "oversubscribed",
                            p->oversubscribed, "notes", p->notes, "plan", workers);
    int rc = doc ? json_dumpf(doc, out, JSON_INDENT(2)) : -1;
    json_decref(doc);
    if (rc != 0 || fputc('\n', out) == EOF)
        return disco_set_error(DISCO_E_SYS, "writing the plan as JSON failed");
    return DISCO_OK;
}

disco_status_t disco_plan_print(const disco_plan_t *p, FILE *out, bool json)
{
    if (json)
        return print_json(p, out);
    fprintf(out, "placement: %s, %d workers on %d packages, %d NUMA nodes, %d cores, %d PUs",
            disco_place_policy_name(p->policy), p->num_workers, p->num_packages, p->num_numa,
            p->num_cores, p->num_pus);
    if (p->num_gpus > 0)
        fprintf(out, ", %d GPUs", p->num_gpus);
    fprintf(out, "%s\n", p->oversubscribed ? " (workers outnumber PUs)" : "");
    fprintf(out, "  %-7s %-16s %-10s %-5s %-8s %s\n", "worker", "cpus", "nodes", "core", "package",
            "gpu");
    for (int i = 0; i < p->num_workers; i++) {
        const disco_place_entry_t *e = &p->worker[i];
        char core[16] = "-", pkg[16] = "-", gpu[16] = "-";
        if (e->core >= 0)
            snprintf(core, sizeof core, "%d", e->core);
        if (e->package >= 0)
            snprintf(pkg, sizeof pkg, "%d", e->package);
        if (e->gpu >= 0)
            snprintf(gpu, sizeof gpu, "%d", e->gpu);
        fprintf(out, "  %-7d %-16s %-10s %-5s %-8s %s\n", i, e->cpus[0] ? e->cpus : "(any)",
                e->nodes[0] ? e->nodes : "-", core, pkg, gpu);
    }
    if (p->notes[0] != '\0')
        fprintf(out, "  note: %s\n", p->notes);
    return ferror(out) ? disco_set_error(DISCO_E_SYS, "writing the plan failed") : DISCO_OK;
}
