/* test_shm_lies.c - a worker that lies in the shared memory it writes:
 * heap offsets posted in the collective area, the span an RPC view is told,
 * the collective area's header, the heap's own links. Each lie is checked
 * before it is used. White-box: the tests reach into the session to lie on
 * cue. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/session_impl.h"
#include "shm/heap_block.h"
#include "shm/heap_internal.h"
#include "workers/data/collective.h"
#include "workers/data/tensor_impl.h"
#include "disco/func.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/shm/ring.h"
#include "disco/shm/wait.h"
#include "tests/session_util.h"
#include "tests/liveness_util.h"

/* ---- section 6: heap offsets a worker posts in the collective area ---- */

/* A member that posts by hand: its slot, its mark, and its arrivals at the
 * world barrier (the second one, if any, once the first generation ended). */
struct liar {
    struct disco__coll_area *a;
    int arrivals;
};

static void *liar_main(void *p)
{
    struct liar *l = p;
    struct disco__barrier *b = &l->a->world_barrier;
    for (int i = 0; i < l->arrivals; i++) {
        /* As collective.c arrives, in a world of 2 (seq_cst: a test). */
        uint64_t old = atomic_load(&b->state), next;
        do
            next = (uint32_t)old == 1 ? ((old >> 32) + 1) << 32 : old + 1;
        while (!atomic_compare_exchange_weak(&b->state, &old, next));
        if ((uint32_t)old == 1) {
            disco_waitq_wake_all(&b->q);
            continue;
        }
        int64_t end = disco_now_ns() + 20000000000LL;
        while ((atomic_load(&b->state) >> 32) == (old >> 32) && disco_now_ns() < end)
            sched_yield(); /* worker 0 arrives last and starts the next generation */
    }
    return NULL;
}

/* Worker 1 posts lies in the collective area (white-box: its real process
 * hangs in test.hang while the test posts for it): heap offsets far outside
 * the heap, offsets that overflow, an output block that runs past the
 * heap's end, a send_recv from a bogus block, an absurd dimension count, a
 * status that is no status with an unterminated message, inline bytes
 * past the slot's (collective.h, Inline). Worker 0 (the
 * controller) fails the collective with an error naming worker 1 and never
 * reads or writes outside the heap (offsets dereferenced as posted would
 * segfault here, or be an ASan report under make test SANITIZE=address);
 * the session goes on. */
START_TEST(test_posted_offsets_checked)
{
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 10000);
    int64_t n = 1024;
    disco_value_t fa[3] = {disco_value_shape(&n, 1), disco_value_dtype(F32), disco_value_int(1)};
    disco_dref_t x, r, y, f;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    CK_OK(disco_session_sync(s, 1));
    disco_value_t one = disco_value_int(1);
    CK_OK(disco_session_call_by_name(s, "test.hang", &one, 1, &r));
    bool send = _i == 3;
    CK_OK(disco_session_get_func(s, send ? "disco.send_recv" : "disco.allreduce", &f));

    struct disco__coll_area *a =
        (struct disco__coll_area *)((char *)disco_segment_data(&s->seg) + s->ctl->coll_off);
    struct disco__coll_slot *m = disco__coll_slot(a, 2, 1, (uint32_t)(s->w0.ncoll & 1), 1);
    const DLTensor *x0 = disco__worker_get_reg(&s->w0, x)->v.tensor;
    memset(m, 0, sizeof *m);
    m->seq = s->seq + 1;                                      /* the call's command */
    m->kind = send ? DISCO__K_SEND_RECV : DISCO__K_ALLREDUCE; /* its first collective */
    m->index = 0;
    m->ndim = 1;
    m->dtype = F32;
    m->shape[0] = n;
    m->in_block = m->out_block = disco__tensor_block(x0); /* sound, unless changed below */
    const char *want = "outside the shared heap";
    switch (_i) {
    case 0:
        m->in_block = 0x7fffffff0000ULL;
        break;
    case 1:
        m->in_off = UINT64_MAX - 8;
        break;
    case 2:
        m->out_block = s->heap.arena_end - 64;
        break;
    case 3:
        m->in_block = 0x7fffffff0000ULL;
        want = "outside the heap";
        break;
    case 4:
        m->ndim = 1000;
        want = "malformed tensor";
        break;
    case 5:
        m->status = 12345;
        memset(m->msg, 'A', sizeof m->msg);
        want = "AAAA";
        break;
    default: /* inline bytes it cannot have: 1 MiB of float32 */
        m->inl = 1;
        m->inl_bytes = UINT32_MAX;
        m->shape[0] = 1 << 18;
        want = "bytes inline";
    }
    /* Its arrive word, as disco__coll_meet stores it; an inline member
     * (case 6) never arrives at the barrier. */
    atomic_store(&m->arrive, DISCO__COLL_ARRIVE(DISCO__COLL_TAG(m->seq, 0), m->inl));
    struct liar liar = {a, m->inl ? 0 : send ? 2 : 1};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, liar_main, &liar), 0);
    disco_value_t args[3] = {dref(x), send ? disco_value_int(1) : disco_value_str("sum"),
                             disco_value_int(0)};
    CK_OK(disco_session_call(s, f, args, send ? 3 : 2, &y));
    pthread_join(th, NULL);
    CK_STATUS(disco_session_sync(s, 0), send ? DISCO_E_INVAL : DISCO_E_PROTOCOL);
    CK_HAS(want);
    if (!send)
        CK_HAS("worker 1");
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    CK_OK(copy_floats(s, 64, 1, &r));
    kill(disco_session_worker_pid(s, 1), SIGKILL);
    disco_session_close(s);
}
END_TEST

/* disco.tensor_span as a lying worker answers it: a heap offset far outside
 * the heap. */
static disco_status_t lying_span(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                 disco_value_t *ret)
{
    (void)a, (void)n;
    int64_t *span = disco_ctx_alloc(ctx, 2 * sizeof *span);
    if (span == NULL)
        return disco_ctx_fail(ctx, "out of memory");
    span[0] = 0x7fffffff0000LL;
    span[1] = 100;
    *ret = disco_value_shape(span, 2);
    return DISCO_OK;
}

/* A worker's RPC view asks the worker where an allocation's bytes are and
 * copies there directly: an answer outside the shared heap fails the copy
 * with DISCO_E_PROTOCOL instead of sending the controller's memcpy to that
 * address (a segfault). The lie is registered in this test's
 * process before the workers fork (Check runs each test in its own). */
START_TEST(test_rpc_span_checked)
{
    disco__builtins_init(); /* the builtins first, so that the lie replaces theirs */
    CK_OK(disco_register_func("disco.tensor_span", "T", lying_span));
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 10000);
    disco_rpc_t *r;
    CK_OK(disco_rpc_from_worker(s, 1, &r));
    disco_rpc_handle_t mem;
    unsigned char bytes[100] = {1};
    CK_OK(disco_rpc_dev_alloc(r, (DLDevice){kDLCPU, 0}, 100, 64, &mem));
    CK_STATUS(disco_rpc_copy_to_remote(r, bytes, mem, 0, 100), DISCO_E_PROTOCOL);
    CK_HAS("outside the shared heap");
    CK_STATUS(disco_rpc_copy_from_remote(r, mem, 0, bytes, 100), DISCO_E_PROTOCOL);
    CK_OK(disco_rpc_free_handle(r, mem));
    disco_rpc_close(r);
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* The collective area's header (world size, group count) is shared memory
 * any process can overwrite: worker 0 uses its own copy of the geometry, so
 * a header set to 0 groups and a million workers changes nothing (neither
 * a division by the group count nor slots indexed with the world size). */
START_TEST(test_coll_header_ignored)
{
    disco_session_t *s = open_cfg(2, DISCO_TRANSPORT_RING, 20000);
    struct disco__coll_area *a =
        (struct disco__coll_area *)((char *)disco_segment_data(&s->seg) + s->ctl->coll_off);
    a->num_groups = 0;
    a->world = 1000000;
    int64_t n = 1000;
    disco_value_t fa[3] = {disco_value_shape(&n, 1), disco_value_dtype(F32), disco_value_int(3)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    disco_value_t ar[3] = {dref(x), disco_value_str("sum"), disco_value_bool(true)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", ar, 3, &y));
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_sync(s, 0));
    float got[1000];
    DLTensor host = {.data = got, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = &n};
    CK_OK(disco_session_copy_from_worker0(s, y, &host));
    for (int64_t i = 0; i < n; i++) {
        float want = 0; /* tests/testlib.c's pattern, seed 3, workers 0 and 1 */
        for (int w = 0; w < 2; w++)
            want += (float)((i * 7 + w * 13 + 3) % 17 - 8) * 0.5f;
        ck_assert_msg(got[i] == want, "element %lld: %g, want %g", (long long)i, got[i], want);
    }
    disco_session_close(s);
}
END_TEST

/* ---- siblings: a ring's geometry, read once at attach ---- */

struct flipper {
    _Atomic uint32_t *word;
    uint32_t a, b;
    _Atomic int stop;
};

__attribute__((unused)) static void *flip_main(void *p)
{
    struct flipper *f = p;
    while (!atomic_load(&f->stop)) {
        atomic_store(f->word, f->b);
        atomic_store(f->word, f->a);
    }
    return NULL;
}

/* Another process rewrites a ring's slot count while this one attaches
 * (every mapper may write the header): the handle is made of the geometry
 * attach checked against the memory, never of a second read. Before, the
 * check read the count once and the handle again, so a count raised in
 * between gave a handle whose slots ran far past the memory. A race by
 * nature: many attaches against a thread that flips the count between 8
 * and 2^20 (a valid geometry, needing 128 MiB); not under TSan, where the
 * race itself is the report. */
START_TEST(test_ring_attach_reads_once)
{
#if defined(__SANITIZE_THREAD__)
    printf("test_ring_attach_reads_once: skipped under TSan (the race is the point)\n");
#else
    disco_ring_config_t cfg = {.nslots = 8, .slot_size = 128, .nreaders = 1, .max_msg = 64};
    size_t need = disco_ring_footprint(&cfg);
    void *mem = aligned_alloc(64, (need + 63) / 64 * 64);
    ck_assert_ptr_nonnull(mem);
    disco_ring_t r;
    CK_OK(disco_ring_init(mem, need, &cfg, &r));
    struct flipper f = {.word = (_Atomic uint32_t *)((char *)mem + 12), .a = 8, .b = 1u << 20};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, flip_main, &f), 0);
    int ok = 0;
    int64_t end = disco_now_ns() + 3000000000LL;
    for (int i = 0; i < 2000000 && disco_now_ns() < end; i++) {
        disco_ring_t h;
        if (disco_ring_attach(mem, need, &h) != DISCO_OK)
            continue;
        ok++;
        if (h.mask + 1 != 8) {
            atomic_store(&f.stop, 1);
            pthread_join(th, NULL);
            ck_abort_msg("attach %d: a handle of %llu slots over memory for 8", i,
                         (unsigned long long)h.mask + 1);
        }
    }
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_gt(ok, 0);
    free(mem);
#endif
}
END_TEST

struct flipper64 {
    _Atomic uint64_t *word;
    uint64_t a, b;
    _Atomic int stop;
};

__attribute__((unused)) static void *flip64_main(void *p)
{
    struct flipper64 *f = p;
    while (!atomic_load(&f->stop)) {
        atomic_store(f->word, f->b);
        atomic_store(f->word, f->a);
    }
    return NULL;
}

/* The heap's sibling: another process rewrites the arena's end in the
 * heap's header while this one attaches; the handle holds the end attach
 * checked against the memory, never a second read (before, a 1 TiB end
 * read after the check made a handle whose arena ran past the mapping).
 * A race, as above; not under TSan. */
START_TEST(test_heap_attach_reads_once)
{
#if defined(__SANITIZE_THREAD__)
    printf("test_heap_attach_reads_once: skipped under TSan (the race is the point)\n");
#else
    size_t size = disco_heap_footprint(1 << 20);
    void *mem = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    ck_assert_ptr_nonnull(mem);
    disco_heap_t h;
    CK_OK(disco_heap_init(mem, size, &h));
    struct flipper64 f = {
        .word = (_Atomic uint64_t *)&h.sh->arena_end, .a = h.arena_end, .b = (uint64_t)1 << 40};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, flip64_main, &f), 0);
    int ok = 0;
    int64_t end = disco_now_ns() + 3000000000LL;
    for (int i = 0; i < 2000000 && disco_now_ns() < end; i++) {
        disco_heap_t a;
        if (disco_heap_attach(mem, size, &a) != DISCO_OK)
            continue;
        ok++;
        if (a.arena_end != h.arena_end) {
            atomic_store(&f.stop, 1);
            pthread_join(th, NULL);
            ck_abort_msg("attach %d: an arena ending at %llu in %zu bytes", i,
                         (unsigned long long)a.arena_end, size);
        }
    }
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_gt(ok, 0);
    pthread_mutex_destroy(&h.sh->lock);
    free(mem);
#endif
}
END_TEST

/* ---- siblings: the heap's own links ---- */

/* Every process of a session writes the heap's metadata, so its links are
 * checked before they are followed: a free block whose next (0) or previous
 * (1) free-list link points far outside the heap, or a used block whose size
 * is 0 (2, which would make reclaim walk in place forever). The call fails with
 * DISCO_E_BROKEN (the heap is marked broken, so every later call too) and
 * nothing outside the heap is read or written (an allocation that
 * wrote through the bad link would segfault). */
START_TEST(test_heap_links_checked)
{
    size_t size = 1u << 20;
    unsigned char *mem = aligned_alloc(4096, size);
    disco_heap_t h;
    CK_OK(disco_heap_init(mem, size, &h));
    uint64_t a, b, c;
    CK_OK(disco_heap_alloc(&h, 1000, 0, 1, &a));
    CK_OK(disco_heap_alloc(&h, 1000, 0, 2, &b));
    CK_OK(disco_heap_alloc(&h, 1000, 0, 3, &c));
    CK_OK(disco_heap_free(&h, a)); /* a free block between the heap's start and b */
    /* White-box: a block header is tag, owner (4 bytes each), self, size,
     * prev_size, next_free, prev_free (8 each), 64 bytes before the data. */
    uint64_t *hdr_a = (uint64_t *)(mem + a - DISCO_HEAP_BLOCK_HDR);
    uint64_t *hdr_b = (uint64_t *)(mem + b - DISCO_HEAP_BLOCK_HDR);
    if (_i == 0)
        hdr_a[4] = 0x7fffffff0000ULL;
    else if (_i == 1)
        hdr_a[5] = 0x7fffffff0000ULL;
    else
        hdr_b[2] = 0;
    uint64_t d;
    if (_i < 2)
        CK_STATUS(disco_heap_alloc(&h, 1000, 0, 4, &d), DISCO_E_BROKEN);
    else
        CK_STATUS(disco_heap_reclaim_owner(&h, 3, NULL), DISCO_E_BROKEN); /* not a silent 0 */
    CK_STATUS(disco_heap_free(&h, c), DISCO_E_BROKEN);
    CK_STATUS(disco_heap_alloc(&h, 64, 0, 4, &d), DISCO_E_BROKEN);
    free(mem);
}
END_TEST

Suite *suite_shm_lies(void)
{
    Suite *s = suite_create("shm_lies");
    TCase *tc = tcase_create("shm_lies");
    tcase_set_timeout(tc, 150);
    tcase_add_loop_test(tc, test_posted_offsets_checked, 0, 7);
    tcase_add_test(tc, test_rpc_span_checked);
    tcase_add_test(tc, test_coll_header_ignored);
    tcase_add_test(tc, test_ring_attach_reads_once);
    tcase_add_test(tc, test_heap_attach_reads_once);
    tcase_add_loop_test(tc, test_heap_links_checked, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
