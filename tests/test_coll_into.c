/* test_coll_into.c - the collectives into the caller's tensor
 * (disco.allreduce_into, allgather_into, broadcast_from_worker0_into,
 * scatter_from_worker0_into, gather_to_worker0_into; suite coll_into):
 * each writes the destination directly, allocates nothing, and names what
 * is wrong with a destination. Heap tensors and sim device tensors. */
#include <math.h>

#include "tests/gpu_session_util.h"
#include "tests/session_util.h"

static const DLDataType I32 = {kDLInt, 32, 1};

enum { W = 3, N = 3072 }; /* workers; elements of x (12 KiB) */

/* x on worker w: element i as tests/testlib.c's test.fill (float32, seed
 * 0) stores it. */
static float xval(int w, int i)
{
    return (float)((i * 7 + w * 13) % 17 - 8) * 0.5f;
}

static disco_session_t *open_on(DLDeviceType type)
{
    disco_session_config_t c = disco_session_config_default(W);
    c.call_timeout_ms = 60000;
    c.device_arena_bytes = 4u << 20;
    /* A small heap: stuff() fills it whole (the default reserves half of
     * the machine's memory, which filling would back). */
    c.heap_bytes = 16u << 20;
    (void)type; /* NEED_DEVICE set DISCO_SIM_GPUS for sim */
    return tu_open_with_testlib(&c);
}

/* A tensor of shape on every worker (worker 0 only with w0), on type. */
static disco_dref_t make(disco_session_t *s, DLDeviceType type, const int64_t *shape, int ndim,
                         DLDataType dt, bool w0)
{
    disco_dref_t r;
    CK_OK(disco_session_empty_device(s, shape, ndim, dt, (DLDevice){type, 0}, w0, &r));
    return r;
}

/* Fills dst (heap or device) with xval on every worker: test.fill makes
 * the pattern in the heap, disco.copy_into copies it in. */
static void set_x(disco_session_t *s, disco_dref_t dst)
{
    int64_t shape[1] = {N};
    disco_value_t fa[3] = {disco_value_shape(shape, 1), disco_value_dtype(F32), disco_value_int(0)};
    disco_dref_t f, r;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &f));
    disco_value_t ca[2] = {tu_dref(dst), tu_dref(f)};
    CK_OK(disco_session_call_by_name(s, "disco.copy_into", ca, 2, &r));
    for (int w = 0; w < W; w++)
        CK_OK(disco_session_sync(s, w));
    CK_OK(disco_session_free_reg(s, r));
    CK_OK(disco_session_free_reg(s, f));
}

/* Worker w's bytes of r, as floats into got (want n of them). */
static void get(disco_session_t *s, disco_dref_t r, int w, float *got, size_t n)
{
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    ck_assert_uint_eq(v.len, n * sizeof *got);
    memcpy(got, v.v.bytes, v.len);
    disco_value_clear(&v);
}

/* What the call may have allocated: the heap's live blocks and bytes, and
 * every worker's arena use (sim). */
struct use {
    size_t blocks, bytes;
    int64_t arena[W][2];
};

static void use_of(disco_session_t *s, DLDeviceType type, struct use *u)
{
    for (int w = 0; w < W; w++)
        CK_OK(disco_session_sync(s, w));
    disco_heap_stats_t hs;
    CK_OK(disco_session_heap_stats(s, &hs));
    u->blocks = hs.live_blocks;
    u->bytes = hs.used_bytes;
    memset(u->arena, 0, sizeof u->arena);
    for (int w = 0; type != kDLCPU && w < W; w++) {
        int64_t st[9];
        arena_stats(s, w, st);
        u->arena[w][0] = st[1], u->arena[w][1] = st[2];
    }
}

/* Calls name(args) on every worker, syncs them all, and checks that the
 * call allocated nothing (heap stats and arena use the same after). */
static void call_no_alloc(disco_session_t *s, DLDeviceType type, const char *name,
                          const disco_value_t *a, int n)
{
    struct use before, after;
    use_of(s, type, &before);
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, name, a, n, &r));
    for (int w = 0; w < W; w++)
        ck_assert_msg(disco_session_sync(s, w) == DISCO_OK, "%s on worker %d: %s", name, w,
                      disco_last_error());
    CK_OK(disco_session_free_reg(s, r));
    use_of(s, type, &after);
    ck_assert_msg(before.blocks == after.blocks && before.bytes == after.bytes,
                  "%s allocated: heap blocks %zu -> %zu, bytes %zu -> %zu", name, before.blocks,
                  after.blocks, before.bytes, after.bytes);
    ck_assert_msg(memcmp(before.arena, after.arena, sizeof before.arena) == 0,
                  "%s allocated in a device arena", name);
}

/* Fills the heap with tensors until no block of 8 KiB is left: less than
 * any temporary of the collectives below (12 KiB and up). */
static void stuff(disco_session_t *s)
{
    for (int round = 0; round < 200; round++) {
        disco_heap_stats_t hs;
        CK_OK(disco_session_heap_stats(s, &hs));
        if (hs.largest_free < 8192)
            return;
        int64_t len[1] = {(int64_t)(hs.largest_free / (W + 1))};
        disco_dref_t r;
        CK_OK(disco_session_empty(s, len, 1, (DLDataType){kDLUInt, 8, 1}, false, &r));
        for (int w = 0; w < W; w++)
            CK_OK(disco_session_sync(s, w));
    }
    ck_abort_msg("the heap could not be stuffed");
}

/* Every into form writes its destination on every member with the right
 * bytes and allocates nothing (heap stats, arena use unchanged): allreduce
 * into another tensor and in place, allgather, broadcast (and worker 0's
 * into x itself), scatter by element count into a (32, 32) from a
 * (3072), gather into worker 0's out only (null elsewhere); on sim, a
 * heap x broadcast and scattered into device outs too. _i: heap, sim.
 * The heap variant runs with the heap stuffed (stuff): a collective that
 * made a temporary of its size would fail, not only one that leaked it. */
START_TEST(test_into_written)
{
    DLDeviceType type = _i == 0 ? kDLCPU : kDLExtDev;
    if (type != kDLCPU)
        NEED_DEVICE(type);
    disco_session_t *s = open_on(type);
    int64_t n1[1] = {N}, nall[1] = {W * N}, part[2] = {32, 32};
    disco_dref_t x = make(s, type, n1, 1, F32, false), y = make(s, type, n1, 1, F32, false);
    disco_dref_t g = make(s, type, nall, 1, F32, false), sc = make(s, type, part, 2, F32, false);
    disco_dref_t g0 = make(s, type, nall, 1, F32, true), y2 = make(s, type, n1, 1, F32, false);
    set_x(s, x);
    set_x(s, y2);
    if (type == kDLCPU)
        stuff(s);
    disco_value_t no = disco_value_bool(false);
    static float got[W * N];

    disco_value_t ar[4] = {tu_dref(x), tu_dref(y), disco_value_str("sum"), no};
    call_no_alloc(s, type, "disco.allreduce_into", ar, 4);
    for (int w = 0; w < W; w++) {
        get(s, y, w, got, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(got[i] == xval(0, i) + xval(1, i) + xval(2, i), "allreduce %d[%d]: %g", w,
                          i, (double)got[i]);
    }

    disco_value_t ag[3] = {tu_dref(x), tu_dref(g), no};
    call_no_alloc(s, type, "disco.allgather_into", ag, 3);
    for (int w = 0; w < W; w++) {
        get(s, g, w, got, W * N);
        for (int i = 0; i < W * N; i++)
            ck_assert_msg(got[i] == xval(i / N, i % N), "allgather %d[%d]", w, i);
    }

    disco_value_t ga[3] = {tu_dref(x), tu_dref(g0), no};
    call_no_alloc(s, type, "disco.gather_to_worker0_into", ga, 3);
    get(s, g0, 0, got, W * N);
    for (int i = 0; i < W * N; i++)
        ck_assert_msg(got[i] == xval(i / N, i % N), "gather [%d]", i);

    disco_value_t bc[3] = {tu_dref(x), tu_dref(y), no};
    call_no_alloc(s, type, "disco.broadcast_from_worker0_into", bc, 3);
    for (int w = 0; w < W; w++) {
        get(s, y, w, got, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(got[i] == xval(0, i), "broadcast %d[%d]", w, i);
    }

    disco_value_t sa[3] = {tu_dref(x), tu_dref(sc), no};
    call_no_alloc(s, type, "disco.scatter_from_worker0_into", sa, 3);
    for (int w = 0; w < W; w++) {
        get(s, sc, w, got, N / W);
        for (int i = 0; i < N / W; i++)
            ck_assert_msg(got[i] == xval(0, N / W * w + i), "scatter %d[%d]", w, i);
    }

    /* worker 0's x is its out: the others get it, worker 0's is unchanged */
    disco_value_t self[3] = {tu_dref(y2), tu_dref(y2), no};
    call_no_alloc(s, type, "disco.broadcast_from_worker0_into", self, 3);
    for (int w = 0; w < W; w++) {
        get(s, y2, w, got, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(got[i] == xval(0, i), "broadcast in place %d[%d]", w, i);
    }

    /* a heap x into device outs (broadcast, scatter: each member copies its
     * part onto its own device) */
    if (type != kDLCPU) {
        disco_dref_t hx = make(s, kDLCPU, n1, 1, F32, false);
        set_x(s, hx);
        disco_value_t hb[3] = {tu_dref(hx), tu_dref(y), no};
        call_no_alloc(s, type, "disco.broadcast_from_worker0_into", hb, 3);
        disco_value_t hs[3] = {tu_dref(hx), tu_dref(sc), no};
        call_no_alloc(s, type, "disco.scatter_from_worker0_into", hs, 3);
        for (int w = 0; w < W; w++) {
            get(s, y, w, got, N);
            for (int i = 0; i < N; i++)
                ck_assert_msg(got[i] == xval(0, i), "heap to device broadcast %d[%d]", w, i);
            get(s, sc, w, got, N / W);
            for (int i = 0; i < N / W; i++)
                ck_assert_msg(got[i] == xval(0, N / W * w + i), "heap to device scatter %d", w);
        }
    }

    /* in place: out is x (through a temporary on a device, freed after) */
    disco_value_t ip[4] = {tu_dref(x), tu_dref(x), disco_value_str("max"), no};
    call_no_alloc(s, type, "disco.allreduce_into", ip, 4);
    for (int w = 0; w < W; w++) {
        get(s, x, w, got, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(got[i] == fmaxf(fmaxf(xval(0, i), xval(1, i)), xval(2, i)),
                          "allreduce in place %d[%d]", w, i);
    }
    disco_session_close(s);
}
END_TEST

/* Runs name(a), syncs every worker, and checks that the first failure
 * reported is want with says in its message; with who >= 0, that only
 * worker who failed (a verdict only worker 0's posted x made: broadcast,
 * scatter), else that worker 0 did (checks worker 0 makes before the
 * meeting: every member fails alike with them). */
static void fails(disco_session_t *s, const char *name, const disco_value_t *a, int n,
                  disco_status_t want, const char *says, int who)
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, name, a, n, &r));
    disco_status_t first = DISCO_OK;
    char msg[2048] = "";
    for (int w = 0; w < W; w++) {
        disco_status_t st = disco_session_sync(s, w);
        if (st != DISCO_OK && first == DISCO_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", disco_last_error());
        }
    }
    ck_assert_msg(first == want, "%s: %s, want %s (%s)", name, disco_err_name(first),
                  disco_err_name(want), msg);
    ck_assert_msg(strstr(msg, says) != NULL, "%s: '%s' lacks '%s'", name, msg, says);
    for (int w = 0; w < W; w++) {
        char tag[64];
        snprintf(tag, sizeof tag, "worker %d: disco.", w);
        bool named = strstr(msg, tag) != NULL;
        ck_assert_msg(who < 0 ? w != 0 || named : named == (w == who),
                      "%s: worker %d %s named in '%s'", name, w, named ? "is" : "is not", msg);
    }
    CK_OK(disco_session_free_reg(s, r));
}

/* A destination of the wrong dtype, element count or shape, a destination
 * that overlaps the source, a missing one, and worker 0's x not splitting
 * evenly: each a named error (the builtin, "out", the sizes), on every
 * member when worker 0's checks find it, on the one member whose out is
 * wrong when only worker 0's posted x shows it; the session goes on. */
START_TEST(test_into_mismatches)
{
    disco_session_t *s = open_on(kDLCPU);
    int64_t n1[1] = {12}, n10[1] = {10}, n3[1] = {3}, n5[1] = {5};
    disco_dref_t x = make(s, kDLCPU, n1, 1, F32, false), i = make(s, kDLCPU, n1, 1, I32, false);
    disco_dref_t ten = make(s, kDLCPU, n10, 1, F32, false),
                 three = make(s, kDLCPU, n3, 1, F32, false);
    disco_dref_t five = make(s, kDLCPU, n5, 1, F32, false);
    disco_value_t no = disco_value_bool(false);

    disco_value_t a1[4] = {tu_dref(x), tu_dref(ten), disco_value_str("sum"), no};
    fails(s, "disco.allreduce_into", a1, 4, DISCO_E_MISMATCH,
          "allreduce_into: out is float32 of "
          "shape [10]",
          -1);
    disco_value_t a2[4] = {tu_dref(x), tu_dref(i), disco_value_str("sum"), no};
    fails(s, "disco.allreduce_into", a2, 4, DISCO_E_MISMATCH, "int32", -1);
    disco_value_t a3[4] = {tu_dref(x), disco_value_int(3), disco_value_str("sum"), no};
    fails(s, "disco.allreduce_into", a3, 4, DISCO_E_BAD_TYPE, "out: expected a tensor", -1);
    disco_value_t g2[3] = {tu_dref(x), tu_dref(ten), no};
    fails(s, "disco.allgather_into", g2, 3, DISCO_E_MISMATCH,
          "allgather_into: out is float32 with 10 elements on device type 0; it must be float32 "
          "with 36",
          -1);
    disco_value_t b1[3] = {tu_dref(x), tu_dref(i), no};
    fails(s, "disco.broadcast_from_worker0_into", b1, 3, DISCO_E_MISMATCH,
          "out is int32 with 12 elements on device type 0; it must be float32 with 12", -1);
    disco_value_t s1[3] = {tu_dref(ten), tu_dref(three), no};
    fails(s, "disco.scatter_from_worker0_into", s1, 3, DISCO_E_MISMATCH,
          "x has 10 elements, not a multiple of 3 members", -1);
    disco_value_t s2[3] = {tu_dref(x), tu_dref(five), no};
    fails(s, "disco.scatter_from_worker0_into", s2, 3, DISCO_E_MISMATCH,
          "out is float32 with 5 elements on device type 0; it must be float32 with 4", -1);
    disco_value_t s3[3] = {tu_dref(x), tu_dref(x), no};
    fails(s, "disco.scatter_from_worker0_into", s3, 3, DISCO_E_INVAL, "out overlaps x", -1);
    disco_value_t q1[3] = {tu_dref(x), tu_dref(ten), no};
    fails(s, "disco.gather_to_worker0_into", q1, 3, DISCO_E_MISMATCH, "it must be float32 with 36",
          -1);

    /* out wrong on worker 2 only, which only worker 0's posted x shows:
     * worker 2 fails, the others are written */
    int64_t shape[1] = {12};
    disco_value_t fa[5] = {disco_value_shape(shape, 1), disco_value_dtype(F32), disco_value_int(2),
                           disco_value_dtype(I32), disco_value_int(0)};
    disco_dref_t odd;
    CK_OK(disco_session_call_by_name(s, "test.fill_odd", fa, 5, &odd));
    disco_value_t b2[3] = {tu_dref(x), tu_dref(odd), no};
    fails(s, "disco.broadcast_from_worker0_into", b2, 3, DISCO_E_MISMATCH, "out is int32", 2);

    /* still usable */
    disco_dref_t y = make(s, kDLCPU, n1, 1, F32, false);
    disco_value_t ok[4] = {tu_dref(x), tu_dref(y), disco_value_str("sum"), no};
    call_no_alloc(s, kDLCPU, "disco.allreduce_into", ok, 4);
    disco_session_close(s);
}
END_TEST

Suite *suite_coll_into(void)
{
    Suite *s = suite_create("coll_into");
    TCase *tc = tcase_create("into");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_into_written, 0, 2);
    tcase_add_test(tc, test_into_mismatches);
    suite_add_tcase(s, tc);
    return s;
}
