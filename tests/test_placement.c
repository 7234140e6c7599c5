/* test_placement.c - placement plans on synthetic and XML topologies (exact
 * cpusets), explicit lists and their errors, the JSON form, and on this
 * machine: each worker's real affinity, read from inside it, matches its
 * plan, forked and spawned; heap pages follow a process's node binding. */
#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "workers/data/bind.h"
#include "workers/data/tensor_impl.h"
#include "disco/shm/heap.h"
#include "disco/placement.h"
#include "disco/shm/segment.h"
#include "tests/session_util.h"

#define SYN     "pack:2 numa:2 core:4 pu:2" /* 32 PUs, 4 per... 8 per NUMA node */
#define GPU_XML DISCO_TEST_SRC "/tests/data/gpu3.xml"

static disco_plan_t *plan(disco_place_policy_t policy, const char *syn, const char *xml,
                          const char *cpus, int n)
{
    disco_place_config_t cfg = {.policy = policy, .synthetic = syn, .xml = xml, .cpus = cpus};
    disco_plan_t *p;
    CK_OK(disco_plan_make(&cfg, n, &p));
    ck_assert_int_eq(p->num_workers, n);
    return p;
}

/* Checks worker i's cpus, nodes and package. */
static void expect(const disco_plan_t *p, int i, const char *cpus, const char *nodes, int pkg)
{
    ck_assert_msg(strcmp(p->worker[i].cpus, cpus) == 0, "worker %d cpus \"%s\", want \"%s\"", i,
                  p->worker[i].cpus, cpus);
    ck_assert_msg(strcmp(p->worker[i].nodes, nodes) == 0, "worker %d nodes \"%s\", want \"%s\"", i,
                  p->worker[i].nodes, nodes);
    ck_assert_int_eq(p->worker[i].package, pkg);
}

/* Spread gives 4 workers one NUMA node each (the first PU of each), 2 per
 * package; the topology's counts are reported. */
START_TEST(test_spread)
{
    disco_plan_t *p = plan(DISCO_PLACE_SPREAD, SYN, NULL, NULL, 4);
    ck_assert_int_eq(p->policy, DISCO_PLACE_SPREAD);
    ck_assert_int_eq(p->num_pus, 32);
    ck_assert_int_eq(p->num_cores, 16);
    ck_assert_int_eq(p->num_numa, 4);
    ck_assert_int_eq(p->num_packages, 2);
    ck_assert(!p->oversubscribed);
    expect(p, 0, "0", "0", 0);
    expect(p, 1, "8", "1", 0);
    expect(p, 2, "16", "2", 1);
    expect(p, 3, "24", "3", 1);
    disco_plan_free(p);
    /* 2 workers: one package each */
    p = plan(DISCO_PLACE_SPREAD, SYN, NULL, NULL, 2);
    expect(p, 0, "0", "0", 0);
    expect(p, 1, "16", "2", 1);
    disco_plan_free(p);
}
END_TEST

/* Compact fills a core's PUs (SMT siblings) first, then the next core. */
START_TEST(test_compact)
{
    disco_plan_t *p = plan(DISCO_PLACE_COMPACT, SYN, NULL, NULL, 3);
    expect(p, 0, "0", "0", 0);
    expect(p, 1, "1", "0", 0);
    expect(p, 2, "2", "0", 0);
    ck_assert_int_eq(p->worker[0].core, 0);
    ck_assert_int_eq(p->worker[1].core, 0);
    ck_assert_int_eq(p->worker[2].core, 1);
    disco_plan_free(p);
}
END_TEST

/* GPU-affine: worker i on GPU i mod 3, on CPUs of the GPU's package; GPU 2
 * reports no locality, so its workers spread over the machine and the
 * plan's notes say so. */
START_TEST(test_gpu_affine)
{
    disco_plan_t *p = plan(DISCO_PLACE_GPU, NULL, GPU_XML, NULL, 6);
    ck_assert_int_eq(p->num_gpus, 3);
    static const char *const cpus[6] = {"0", "4", "0", "2", "6", "4"};
    static const int pkg[6] = {0, 1, 0, 0, 1, 1};
    for (int i = 0; i < 6; i++) {
        expect(p, i, cpus[i], pkg[i] == 0 ? "0" : "1", pkg[i]);
        ck_assert_int_eq(p->worker[i].gpu, i % 3);
    }
    ck_assert_msg(strstr(p->notes, "GPU 2 has no local CPUs") != NULL, "notes: %s", p->notes);
    disco_plan_free(p);
    /* no GPU at all: spread, and said */
    p = plan(DISCO_PLACE_GPU, SYN, NULL, NULL, 2);
    ck_assert_int_eq(p->num_gpus, 0);
    expect(p, 1, "16", "2", 1);
    ck_assert(strstr(p->notes, "No GPU") != NULL);
    disco_plan_free(p);
}
END_TEST

/* Every XML topology in tests/data loads with hwloc's built-in minimal XML
 * parser (forced by HWLOC_LIBXML=0, as on a bare machine without
 * libhwloc-plugins), which rejects comments and anything else it does not
 * know. hwloc reads that variable once per process, so each file is loaded
 * in a fresh child. */
START_TEST(test_data_xml_minimal_parser)
{
    glob_t g;
    ck_assert_int_eq(glob(DISCO_TEST_SRC "/tests/data/*.xml", 0, NULL, &g), 0);
    ck_assert_uint_ge(g.gl_pathc, 1);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        pid_t pid = tu_fork();
        if (pid == 0) {
            setenv("HWLOC_LIBXML", "0", 1);
            disco_place_config_t cfg = {.policy = DISCO_PLACE_SPREAD, .xml = g.gl_pathv[i]};
            disco_plan_t *p;
            if (disco_plan_make(&cfg, 1, &p) != DISCO_OK)
                tu_child_fail("%s: %s", g.gl_pathv[i], disco_last_error());
            disco_plan_free(p);
            _exit(0);
        }
        tu_wait_ok(pid, g.gl_pathv[i]);
    }
    globfree(&g);
}
END_TEST

/* An explicit list: worker i gets entry i mod count; ranges stay sets. */
START_TEST(test_list)
{
    disco_plan_t *p = plan(DISCO_PLACE_LIST, SYN, NULL, "5, 3-4", 3);
    expect(p, 0, "5", "0", 0);
    expect(p, 1, "3-4", "0", 0);
    expect(p, 2, "5", "0", 0);
    disco_plan_free(p);
}
END_TEST

/* A bad list entry is an error naming the entry: not a number, a CPU the
 * topology lacks, an empty list. */
START_TEST(test_list_errors)
{
    disco_place_config_t cfg = {.policy = DISCO_PLACE_LIST, .synthetic = SYN, .cpus = "0,x"};
    disco_plan_t *p = NULL;
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
    CK_HAS("entry 2 (\"x\")");
    cfg.cpus = "1,40";
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
    CK_HAS("no CPU 40");
    cfg.cpus = "3-";
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
    CK_HAS("\"3-\"");
    cfg.cpus = "";
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
    ck_assert_ptr_null(p);
    disco_place_policy_t pol;
    CK_STATUS(disco_place_policy_parse("scatter", &pol), DISCO_E_INVAL);
    CK_HAS("scatter");
    CK_OK(disco_place_policy_parse("compact", &pol));
    ck_assert_int_eq(pol, DISCO_PLACE_COMPACT);
    /* and a session refuses to open with it */
    disco_session_config_t sc = disco_session_config_default(2);
    sc.place = (disco_place_config_t){.policy = DISCO_PLACE_LIST, .cpus = "0,zero"};
    disco_session_t *s;
    CK_STATUS(disco_session_open(&sc, &s), DISCO_E_INVAL);
    CK_HAS("zero");
    cfg = (disco_place_config_t){.synthetic = "pack:nonsense"};
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
}
END_TEST

/* The default: spread, also when workers outnumber PUs (several a PU,
 * noted, as evenly as they go); none binds nothing. */
START_TEST(test_default_and_none)
{
    unsetenv("DISCO_PLACE");
    disco_plan_t *p = plan(DISCO_PLACE_DEFAULT, "core:2 pu:1", NULL, NULL, 2);
    ck_assert_int_eq(p->policy, DISCO_PLACE_SPREAD);
    expect(p, 1, "1", "", -1); /* no package level in this topology */
    disco_plan_free(p);
    p = plan(DISCO_PLACE_DEFAULT, "core:2 pu:1", NULL, NULL, 4);
    ck_assert(p->oversubscribed);
    ck_assert_int_eq(p->policy, DISCO_PLACE_SPREAD);
    ck_assert(strstr(p->notes, "outnumber") != NULL);
    int on0 = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(strcmp(p->worker[i].cpus, "0") == 0 || strcmp(p->worker[i].cpus, "1") == 0,
                      "worker %d cpus \"%s\"", i, p->worker[i].cpus);
        on0 += strcmp(p->worker[i].cpus, "0") == 0;
    }
    ck_assert_int_eq(on0, 2); /* two a PU */
    disco_plan_free(p);
    p = plan(DISCO_PLACE_NONE, "core:2 pu:1", NULL, NULL, 3);
    ck_assert_int_eq(p->policy, DISCO_PLACE_NONE);
    expect(p, 2, "", "", -1);
    disco_plan_free(p);
    setenv("DISCO_PLACE", "compact", 1);
    p = plan(DISCO_PLACE_DEFAULT, SYN, NULL, NULL, 2);
    ck_assert_int_eq(p->policy, DISCO_PLACE_COMPACT);
    disco_plan_free(p);
    setenv("DISCO_PLACE", "sideways", 1);
    disco_place_config_t cfg = {.synthetic = SYN};
    CK_STATUS(disco_plan_make(&cfg, 2, &p), DISCO_E_INVAL);
    CK_HAS("$DISCO_PLACE");
    unsetenv("DISCO_PLACE");
}
END_TEST

/* The JSON form parses and carries every worker's entry. */
START_TEST(test_json)
{
    disco_plan_t *p = plan(DISCO_PLACE_SPREAD, SYN, NULL, NULL, 4);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CK_OK(disco_plan_print(p, f, true));
    fclose(f);
    json_error_t err;
    json_t *doc = json_loadb(buf, len, 0, &err);
    ck_assert_msg(doc != NULL, "plan JSON does not parse: %s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "policy")), "spread");
    json_t *arr = json_object_get(doc, "plan");
    ck_assert_int_eq(json_array_size(arr), 4);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(arr, 3), "cpus")), "24");
    json_decref(doc);
    free(buf);
    disco_plan_free(p);
}
END_TEST

/* On this machine, each worker's affinity read with sched_getaffinity from
 * inside the worker equals its plan entry (forked and spawned workers). */
START_TEST(test_real_affinity)
{
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.launch = _i == 0 ? DISCO_LAUNCH_FORK : DISCO_LAUNCH_SPAWN;
    cfg.worker_path = DISCO_TEST_WORKER;
    cfg.place = (disco_place_config_t){.policy = DISCO_PLACE_COMPACT};
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    const disco_plan_t *p = disco_session_plan(s);
    ck_assert_int_eq(p->num_workers, 3);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.cpu_affinity", NULL, 0, &r));
    for (int w = 1; w < 3; w++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, r, w, &v));
        ck_assert_int_eq(v.type, DISCO_T_STR);
        ck_assert_msg(strcmp(v.v.str, p->worker[w].cpus) == 0, "worker %d runs on %s, plan %s", w,
                      v.v.str, p->worker[w].cpus);
        disco_value_clear(&v);
    }
    disco_session_close(s);
    /* worker 0, the caller's thread, is bound while the session is open
     * (by default), and given back its CPUs at close */
    char before[256], after[256];
    CK_OK(disco_place_current_cpus(before, sizeof before));
    CK_OK(disco_session_open(&cfg, &s));
    CK_OK(disco_place_current_cpus(after, sizeof after));
    ck_assert_str_eq(after, disco_session_plan(s)->worker[0].cpus);
    disco_session_close(s);
    CK_OK(disco_place_current_cpus(after, sizeof after));
    ck_assert_str_eq(after, before);
}
END_TEST

/* With the defaults (2 workers), whenever the plan binds workers it binds
 * worker 0, and open binds the controller's thread to that entry: floating,
 * the kernel put it on worker 1's CPU (p99 of call + sync 10x worse). The
 * thread runs where the plan says while the session is open, and close
 * gives it back exactly the CPUs it had. Loop 1: place.leave_controller
 * leaves the thread alone throughout. */
START_TEST(test_controller_bound_by_default)
{
    unsetenv("DISCO_PLACE");
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.place.leave_controller = _i == 1;
    char before[256], during[256], after[256];
    CK_OK(disco_place_current_cpus(before, sizeof before));
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    const disco_plan_t *p = disco_session_plan(s);
    CK_OK(disco_place_current_cpus(during, sizeof during));
    if (p->worker[1].cpus[0] != '\0')
        ck_assert_msg(p->worker[0].cpus[0] != '\0',
                      "plan %s binds worker 1 (%s) but leaves worker 0 floating",
                      disco_place_policy_name(p->policy), p->worker[1].cpus);
    if (_i == 0 && p->worker[0].cpus[0] != '\0')
        ck_assert_msg(strcmp(during, p->worker[0].cpus) == 0,
                      "controller runs on %s while open; the plan says %s", during,
                      p->worker[0].cpus);
    else
        ck_assert_msg(strcmp(during, before) == 0, "controller moved from %s to %s", before,
                      during);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r));
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
    CK_OK(disco_place_current_cpus(after, sizeof after));
    ck_assert_msg(strcmp(after, before) == 0, "controller left on %s after close (had %s)", after,
                  before);
}
END_TEST

/* A controller confined by its user (taskset) to a CPU other than the one
 * the default plan gives worker 0 stays inside that set while the session
 * is open, and keeps it after close (it was moved out of it). */
START_TEST(test_controller_confined_stays)
{
    unsetenv("DISCO_PLACE");
    disco_session_config_t cfg = disco_session_config_default(2);
    disco_plan_t *p;
    CK_OK(disco_plan_make(&cfg.place, 2, &p));
    const char *w0 = p->worker[0].cpus;
    int other = strcmp(w0, "0") == 0 ? 1 : 0;
    bool can =
        w0[0] != '\0' && p->num_pus >= 2 && strchr(w0, ',') == NULL && strchr(w0, '-') == NULL;
    disco_plan_free(p);
    if (!can)
        return; /* needs a plan that pins worker 0 to one CPU of two or more */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(other, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    char want[16], during[256], after[256];
    snprintf(want, sizeof want, "%d", other);
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    CK_OK(disco_place_current_cpus(during, sizeof during));
    ck_assert_msg(strcmp(during, want) == 0, "confined to %s, moved to %s while open", want,
                  during);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r));
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
    CK_OK(disco_place_current_cpus(after, sizeof after));
    ck_assert_msg(strcmp(after, want) == 0, "confined to %s, left on %s after close", want, after);
}
END_TEST

/* The page at addr (rounded up to a page): its memory policy's mode, its
 * node mask's first word, and the node the page is on. */
struct page_policy {
    int mode;
    unsigned long mask0;
    int node;
};

static struct page_policy page_policy(const void *addr)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *at = (void *)(((uintptr_t)addr + page - 1) & ~(page - 1));
    struct page_policy p = {.mode = -1, .node = -1};
    unsigned long mask[16] = {0};
    ck_assert_msg(syscall(SYS_get_mempolicy, &p.mode, mask, sizeof mask * 8, at, MPOL_F_ADDR) == 0,
                  "get_mempolicy(%p): %s", at, strerror(errno));
    ck_assert_msg(syscall(SYS_get_mempolicy, &p.node, NULL, 0UL, at, MPOL_F_NODE | MPOL_F_ADDR) ==
                      0,
                  "get_mempolicy(%p, node): %s", at, strerror(errno));
    p.mask0 = mask[0];
    return p;
}

/* A tensor made by a process bound to node 0 gets that binding as the
 * policy of its pages, and another process mapping the same segment sees
 * it (the policy lives with the shared memory, not the mapping); its pages
 * are on node 0. A tensor made by an unbound process keeps the default
 * policy, and one smaller than a page is made as well. This machine has one
 * node, so a page's move cannot be seen here; its binding can. */
START_TEST(test_heap_pages_follow_binding)
{
    size_t fp = disco_heap_footprint(8u << 20);
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-place", fp, &seg));
    disco_heap_t heap;
    CK_OK(disco_heap_init(disco_segment_data(&seg), fp, &heap));
    char *base = disco_segment_data(&seg);
    const DLDataType f32 = {kDLFloat, 32, 1};
    int64_t shape[1] = {1 << 18}; /* 1 MiB */

    DLTensor *plain;
    CK_OK(disco__tensor_new(&heap, 0, shape, 1, f32, &plain));
    ck_assert_int_eq(page_policy(plain->data).mode, MPOL_DEFAULT);

    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = tu_fork();
    if (pid == 0) {
        if (disco__bind_self("", "0") != DISCO_OK)
            tu_child_fail("bind to node 0: %s", disco_last_error());
        DLTensor *t, *small;
        int64_t one[1] = {4};
        if (disco__tensor_new(&heap, 1, shape, 1, f32, &t) != DISCO_OK ||
            disco__tensor_new(&heap, 1, one, 1, f32, &small) != DISCO_OK)
            tu_child_fail("tensor: %s", disco_last_error());
        memset(t->data, 0x5a, (size_t)shape[0] * 4);
        uint64_t off = (uint64_t)((char *)t->data - base);
        if (write(fds[1], &off, sizeof off) != (ssize_t)sizeof off)
            tu_child_fail("write: %s", strerror(errno));
        _exit(0);
    }
    close(fds[1]);
    uint64_t off;
    ck_assert_int_eq(read(fds[0], &off, sizeof off), (ssize_t)sizeof off);
    close(fds[0]);
    tu_wait_ok(pid, "bound child");

    char *data = base + off;
    struct page_policy p = page_policy(data);
    ck_assert_int_eq(p.mode, MPOL_BIND);
    ck_assert_uint_eq(p.mask0, 1);
    ck_assert_int_eq(p.node, 0);
    ck_assert_int_eq((unsigned char)data[12345], 0x5a); /* the child's bytes */
    /* the unbound process's tensor kept its policy */
    ck_assert_int_eq(page_policy(plain->data).mode, MPOL_DEFAULT);
    disco_segment_close(&seg);
}
END_TEST

Suite *suite_placement(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("plans");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_spread);
    tcase_add_test(tc, test_compact);
    tcase_add_test(tc, test_gpu_affine);
    tcase_add_test(tc, test_data_xml_minimal_parser);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_list_errors);
    tcase_add_test(tc, test_default_and_none);
    tcase_add_test(tc, test_json);
    tcase_add_loop_test(tc, test_real_affinity, 0, 2);
    tcase_add_loop_test(tc, test_controller_bound_by_default, 0, 2);
    tcase_add_test(tc, test_controller_confined_stays);
    tcase_add_test(tc, test_heap_pages_follow_binding);
    suite_add_tcase(s, tc);
    return s;
}
