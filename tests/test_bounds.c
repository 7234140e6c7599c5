/* test_bounds.c - sizes that come from callers, configs and the wire are
 * checked before use (issue 14, section 2): shape products that overflow,
 * tensors larger than the heap, config sizes, a debug get of 4 GiB or
 * more, copy ranges past 2^63, session-only builtins called where there is
 * no worker. No test allocates more than a few MiB: the huge sizes are
 * refused before anything is allocated, or claimed by a small tensor's
 * shape (white-box). */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/session/session_impl.h"
#include "shm/text.h"
#include "workers/rpc/rpc_proto.h"
#include "workers/data/tensor_impl.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "disco/transport.h"
#include "tests/heap_util.h"
#include "tests/session_util.h"

extern char **environ;

#define F32 ((DLDataType){kDLFloat, 32, 1})
#define U8  ((DLDataType){kDLUInt, 8, 1})

/* The two shapes of the report: 2^62 + 1 float32 (16 EiB + 4 bytes, which
 * wrapped to 4) and 2^40 x 2^40 (2^80 elements). */
static const int64_t shape_wrap4[1] = {(INT64_C(1) << 62) + 1};
static const int64_t shape_2e80[2] = {INT64_C(1) << 40, INT64_C(1) << 40};

static disco_session_t *open_small(int n, uint64_t heap)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.heap_bytes = heap;
    cfg.call_timeout_ms = 20000;
    return tu_open_with_testlib(&cfg);
}

static disco_value_t dref(disco_dref_t r)
{
    disco_value_t v = {.type = DISCO_T_DREF, .v.reg = r};
    return v;
}

/* A normal allreduce (sum of test.fill's pattern over the workers) gives
 * the right numbers: the session survived what came before. */
static void allreduce_still_works(disco_session_t *s)
{
    int n = disco_session_num_workers(s);
    int64_t shape[1] = {1000};
    disco_value_t fa[3] = {disco_value_shape(shape, 1), disco_value_dtype(F32), disco_value_int(3)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", fa, 3, &x));
    disco_value_t a[3] = {dref(x), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y));
    for (int w = n - 1; w >= 0; w--)
        CK_OK(disco_session_sync(s, w));
    float got[1000] = {0};
    DLTensor h = {.data = got, .device = {kDLCPU, 0}, .ndim = 1, .dtype = F32, .shape = shape};
    CK_OK(disco_session_copy_from_worker0(s, y, &h));
    for (int i = 0; i < 1000; i++) {
        double want = 0; /* test.fill: ((i * 7 + w * 13 + seed) % 17 - 8) * 0.5 */
        for (int w = 0; w < n; w++)
            want += ((i * 7 + w * 13 + 3) % 17 - 8) * 0.5;
        ck_assert_msg(got[i] == (float)want, "element %d: %g, want %g", i, got[i], want);
    }
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, x));
}

/* disco_shape_nbytes checks every product; numel and nbytes saturate
 * instead of wrapping; compactness of an overflowing shape is no UB. */
START_TEST(test_shape_nbytes)
{
    size_t nb = 1;
    int64_t ok[2] = {3, 5};
    CK_OK(disco_shape_nbytes(ok, 2, F32, &nb));
    ck_assert_uint_eq(nb, 60);
    CK_OK(disco_shape_nbytes(NULL, 0, F32, &nb));
    ck_assert_uint_eq(nb, 4);
    CK_STATUS(disco_shape_nbytes(shape_wrap4, 1, F32, &nb), DISCO_E_OVERFLOW);
    CK_HAS("4611686018427387905");
    CK_STATUS(disco_shape_nbytes(shape_2e80, 2, F32, &nb), DISCO_E_OVERFLOW);
    CK_HAS("[1099511627776, 1099511627776]");
    int64_t empty[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 0}; /* no elements: 0 bytes */
    CK_OK(disco_shape_nbytes(empty, 3, F32, &nb));
    ck_assert_uint_eq(nb, 0);
    int64_t max[1] = {INT64_C(1) << 62}, over[1] = {(INT64_C(1) << 62) + 1};
    CK_OK(disco_shape_nbytes(max, 1, U8, &nb));
    ck_assert_uint_eq(nb, DISCO_TENSOR_MAX_BYTES);
    CK_STATUS(disco_shape_nbytes(over, 1, U8, &nb), DISCO_E_OVERFLOW);
    int64_t neg[2] = {4, -1};
    nb = 0;
    CK_STATUS(disco_shape_nbytes(neg, 2, F32, &nb), DISCO_E_INVAL);
    CK_HAS("dimension 1 is negative");
    CK_STATUS(disco_shape_nbytes(ok, 9, F32, &nb), DISCO_E_INVAL);
    CK_STATUS(disco_shape_nbytes(ok, 2, (DLDataType){kDLFloat, 32, 4}, &nb), DISCO_E_BAD_TYPE);
    ck_assert_uint_eq(nb, 0); /* untouched by failures */

    DLTensor t = {.ndim = 2, .dtype = F32, .shape = (int64_t *)shape_2e80};
    ck_assert(disco_tensor_numel(&t) == INT64_MAX);
    ck_assert(disco_tensor_nbytes(&t) == SIZE_MAX);
    t = (DLTensor){.ndim = 1, .dtype = F32, .shape = (int64_t *)shape_wrap4};
    ck_assert(disco_tensor_numel(&t) == shape_wrap4[0]);
    ck_assert(disco_tensor_nbytes(&t) == SIZE_MAX); /* not 4 */
    int64_t strides[2] = {1, 1};
    t = (DLTensor){.ndim = 2, .dtype = F32, .shape = (int64_t *)shape_2e80, .strides = strides};
    ck_assert(!disco_tensor_is_compact(&t));
}
END_TEST

/* The report's scenario: shapes whose byte count wraps are refused by
 * disco_session_empty, by disco.empty called directly, and by
 * copy_to_worker0, before anything is allocated; an allreduce on what the
 * direct call left fails cleanly instead of writing past a block in the
 * controller; then a normal allreduce still works. */
START_TEST(test_huge_shapes_refused)
{
    disco_session_t *s = open_small(2, 16u << 20);
    disco_heap_stats_t before, after;
    CK_OK(disco_session_heap_stats(s, &before));
    const int64_t *shapes[2] = {shape_wrap4, shape_2e80};
    const int ndims[2] = {1, 2};
    for (int k = 0; k < 2; k++) {
        disco_dref_t r;
        CK_STATUS(disco_session_empty(s, shapes[k], ndims[k], F32, false, &r), DISCO_E_OVERFLOW);
        CK_HAS("overflows");
        CK_STATUS(disco_session_empty(s, shapes[k], ndims[k], F32, true, &r), DISCO_E_OVERFLOW);
        CK_OK(disco_session_sync(s, 1)); /* nothing was sent */

        disco_value_t ea[4] = {disco_value_shape(shapes[k], (uint32_t)ndims[k]),
                               disco_value_dtype(F32), disco_value_device((DLDevice){kDLCPU, 0}),
                               disco_value_bool(false)};
        disco_dref_t x, y;
        CK_OK(disco_session_call_by_name(s, "disco.empty", ea, 4, &x));
        disco_value_t aa[3] = {dref(x), disco_value_str("sum"), disco_value_bool(false)};
        CK_OK(disco_session_call_by_name(s, "disco.allreduce", aa, 3, &y));
        CK_STATUS(disco_session_sync(s, 1), DISCO_E_OVERFLOW);
        CK_HAS("worker 0: disco.empty");
        CK_HAS("worker 1: disco.empty");
        CK_OK(disco_session_free_reg(s, y));
        CK_OK(disco_session_free_reg(s, x));

        float small[4] = {0};
        DLTensor h = {.data = small,
                      .device = {kDLCPU, 0},
                      .ndim = ndims[k],
                      .dtype = F32,
                      .shape = (int64_t *)shapes[k]};
        CK_STATUS(disco_session_copy_to_worker0(s, &h, &r), DISCO_E_OVERFLOW);
        CK_HAS("copy to worker 0");
    }
    int64_t neg[1] = {-5};
    disco_dref_t r;
    CK_STATUS(disco_session_empty(s, neg, 1, F32, false, &r), DISCO_E_INVAL);
    CK_HAS("negative");
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_heap_stats(s, &after));
    ck_assert_uint_eq(after.live_blocks, before.live_blocks);
    allreduce_still_works(s);
    ck_assert_int_eq(disco_session_health(s), DISCO_OK);
    disco_session_close(s);
}
END_TEST

/* A tensor larger than the whole heap (or one per worker that cannot all
 * fit) is refused by the call, naming the sizes, before anything is sent. */
START_TEST(test_larger_than_heap)
{
    disco_session_t *s = open_small(2, 1u << 20);
    int64_t big[1] = {2u << 20}, half[1] = {600u << 10};
    disco_dref_t r;
    CK_STATUS(disco_session_empty(s, big, 1, U8, true, &r), DISCO_E_HEAP_EXHAUSTED);
    CK_HAS("2097152 bytes");
    CK_HAS("heap_bytes");
    /* 600 KiB fits once, not once per worker */
    CK_STATUS(disco_session_empty(s, half, 1, U8, false, &r), DISCO_E_HEAP_EXHAUSTED);
    CK_HAS("2 tensors");
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_empty(s, half, 1, U8, true, &r));
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);
}
END_TEST

/* Section 7: when worker 0 (the controller's own thread) finds no room,
 * disco_session_empty returns DISCO_E_HEAP_EXHAUSTED itself, as its header
 * says, leaves no register and no block behind, and the next sync is clean
 * (it used to return DISCO_OK and report the error at the next sync). */
START_TEST(test_empty_w0_error_from_call)
{
    disco_session_t *s = open_small(2, 1u << 20);
    int64_t fill_shape[1] = {600u << 10}, want[1] = {500u << 10};
    unsigned char *host = calloc(600u << 10, 1);
    DLTensor h = {.data = host, .device = {kDLCPU, 0}, .ndim = 1, .dtype = U8, .shape = fill_shape};
    disco_dref_t filler, r = 0;
    CK_OK(disco_session_copy_to_worker0(s, &h, &filler));
    disco_heap_stats_t before, after;
    CK_OK(disco_session_heap_stats(s, &before));
    CK_STATUS(disco_session_empty(s, want, 1, U8, true, &r), DISCO_E_HEAP_EXHAUSTED);
    CK_HAS("worker 0");
    CK_HAS("disco_heap_alloc");
    ck_assert_uint_eq(r, 0);
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_sync(s, 0));
    CK_OK(disco_session_heap_stats(s, &after));
    ck_assert_uint_eq(after.live_blocks, before.live_blocks);
    CK_OK(disco_session_free_reg(s, filler));
    CK_OK(disco_session_empty(s, want, 1, U8, true, &r));
    CK_OK(disco_session_sync(s, 1));
    free(host);
    disco_session_close(s);
}
END_TEST

/* A debug get of a tensor of 4 GiB or more is refused with
 * DISCO_E_OVERFLOW: its byte count does not fit the reply's 32-bit
 * length (cut, 4 GiB + 16 would answer 16 bytes). White-box: a 16-byte tensor's shape claims 4 GiB
 * + 16 on worker 0, so no test needs 4 GiB. */
START_TEST(test_debug_get_4gib)
{
    disco_session_t *s = open_small(2, 1u << 20);
    int64_t shape[1] = {16};
    disco_dref_t r;
    CK_OK(disco_session_empty(s, shape, 1, U8, true, &r));
    const disco_value_t *v = disco__worker_get_reg(&s->w0, r);
    ck_assert(v != NULL && v->type == DISCO_T_TENSOR);
    v->v.tensor->shape[0] = (INT64_C(1) << 32) + 16;
    disco_value_t got;
    CK_STATUS(disco_session_debug_get(s, r, 0, &got), DISCO_E_OVERFLOW);
    CK_HAS("4294967312 bytes");
    v->v.tensor->shape[0] = 16;
    CK_OK(disco_session_debug_get(s, r, 0, &got));
    ck_assert_uint_eq(got.len, 16);
    disco_value_clear(&got);
    CK_OK(disco_session_sync(s, 1));
    CK_OK(disco_session_free_reg(s, r));
    disco_session_close(s);

    /* the check itself, on a tensor whose data is never read */
    char byte = 0;
    int64_t at_limit[1] = {UINT32_MAX}, past[1] = {INT64_C(1) << 32};
    DLTensor t = {.data = &byte, .ndim = 1, .dtype = U8, .shape = at_limit};
    disco_value_t b;
    CK_OK(disco__tensor_bytes_value(&t, &b));
    ck_assert_uint_eq(b.len, UINT32_MAX);
    t.shape = past;
    CK_STATUS(disco__tensor_bytes_value(&t, &b), DISCO_E_OVERFLOW);
    t.shape = (int64_t *)shape_2e80;
    t.ndim = 2;
    CK_STATUS(disco__tensor_bytes_value(&t, &b), DISCO_E_OVERFLOW);
}
END_TEST

/* Every size field of the session config is range-checked, rounding
 * included, and the refusal names the field (a max_msg of 0xFFFFFFFF was
 * accepted; rounded up it wrapped to 0 and the first call overran the
 * controller's frame buffer). */
START_TEST(test_config_sizes)
{
    static const struct {
        uint32_t max_msg;
        uint64_t heap, spin, pause;
        const char *field;
    } bad[] = {
        {0xFFFFFFFFu, 0, 0, 0, "cfg.max_msg"},
        {0xFFFFFFF9u, 0, 0, 0, "cfg.max_msg"}, /* + 7 wraps in 32 bits */
        {(1u << 30) + 1, 0, 0, 0, "cfg.max_msg"},
        {255, 0, 0, 0, "cfg.max_msg"},
        {0, UINT64_MAX, 0, 0, "cfg.heap_bytes"},
        {0, (UINT64_C(1) << 46) + 1, 0, 0, "cfg.heap_bytes"},
        {0, 0, UINT64_MAX, 0, "cfg.spin_ns"},
        {0, 0, 0, UINT64_MAX, "cfg.pause_ns"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        disco_session_config_t cfg = disco_session_config_default(2);
        cfg.max_msg = bad[i].max_msg;
        cfg.heap_bytes = bad[i].heap;
        cfg.spin_ns = bad[i].spin;
        cfg.pause_ns = bad[i].pause;
        disco_session_t *s = NULL;
        CK_STATUS(disco_session_open(&cfg, &s), DISCO_E_INVAL);
        CK_HAS(bad[i].field);
        ck_assert_ptr_null(s);
    }
    /* the smallest max_msg still works end to end */
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.max_msg = 256;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "disco.noop", NULL, 0, &r));
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1, "a worker was left");
}
END_TEST

/* The builtins that need a session worker, with arguments their
 * signatures accept. */
static void call_session_builtins(disco_rpc_t *rs, const char *how)
{
    static const char *const names[] = {
        "disco.allreduce",
        "disco.allgather",
        "disco.broadcast_from_worker0",
        "disco.scatter_from_worker0",
        "disco.gather_to_worker0",
        "disco.send_recv",
        "disco.empty",
        "disco.tensor_span",
    };
    int64_t shape[1] = {4};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        disco_rpc_handle_t f;
        CK_OK(disco_rpc_get_func(rs, names[i], &f));
        disco_value_t a[4];
        int n;
        if (strcmp(names[i], "disco.empty") == 0) {
            a[0] = disco_value_shape(shape, 1), a[1] = disco_value_dtype(F32);
            a[2] = disco_value_device((DLDevice){kDLCPU, 0}), a[3] = disco_value_bool(false);
            n = 4;
        } else if (strcmp(names[i], "disco.tensor_span") == 0 && disco_rpc_is_local(rs)) {
            static float data[4];
            static DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = 1};
            t.dtype = F32, t.shape = shape;
            a[0] = (disco_value_t){.type = DISCO_T_TENSOR, .v.tensor = &t};
            n = 1;
        } else if (strcmp(names[i], "disco.tensor_span") == 0) {
            continue; /* a tensor cannot travel in a frame */
        } else {
            a[0] = disco_value_int(0), a[1] = disco_value_str("sum"), a[2] = disco_value_int(0);
            n = 3;
        }
        disco_value_t ret = disco_value_null();
        disco_status_t st = disco_rpc_call(rs, f, a, n, &ret);
        ck_assert_msg(st == DISCO_E_INVAL, "%s %s: %s (%s)", how, names[i], disco_err_name(st),
                      disco_last_error());
        CK_HAS("needs a session worker");
        CK_HAS(names[i]);
        disco_rpc_free_handle(rs, f);
    }
    /* still serving */
    disco_rpc_handle_t ws;
    CK_OK(disco_rpc_get_func(rs, "disco.world_size", &ws));
    disco_value_t ret;
    CK_OK(disco_rpc_call(rs, ws, NULL, 0, &ret));
    ck_assert_int_eq(ret.v.i, 1);
}

/* Collectives and the other session-only builtins called through the
 * local RPC session (no worker: they used to dereference NULL and kill the
 * process) answer DISCO_E_INVAL "... needs a session worker". */
START_TEST(test_collectives_outside_session_local)
{
    disco_rpc_t *rs;
    CK_OK(disco_rpc_local(&rs));
    call_session_builtins(rs, "local");
    /* a tensor view of a shape that wraps is refused, not allocated small */
    DLTensor t;
    CK_STATUS(disco_rpc_tensor_alloc(rs, (DLDevice){kDLCPU, 0}, (int64_t *)shape_wrap4, 1, F32, &t),
              DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_tensor_alloc(rs, (DLDevice){kDLCPU, 0}, (int64_t *)shape_2e80, 2, F32, &t),
              DISCO_E_OVERFLOW);
    disco_rpc_close(rs);
}
END_TEST

/* disco-rpc-server --stdio (serving its local session, with the test
 * library) as a client session; *pid_out is the server's pid. */
static disco_rpc_t *stdio_server(pid_t *pid_out)
{
    int out[2], in[2];
    ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    const char *argv[] = {DISCO_TEST_BIN "/disco-rpc-server", "--load", DISCO_TEST_LIB, "--stdio",
                          NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    ck_assert_int_eq(posix_spawn(pid_out, argv[0], &fa, NULL, (char **)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(in[0]);
    disco_transport_t *t;
    CK_OK(disco_transport_from_fds(out[0], in[1], &t));
    disco_rpc_t *rs;
    CK_OK(disco_rpc_client(t, 10000, &rs));
    return rs;
}

static void stdio_server_end(disco_rpc_t *rs, pid_t pid)
{
    disco_rpc_close(rs);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "server ended with status %#x", ws);
}

/* The same through an RPC server (disco-rpc-server --stdio serving its
 * local session): the serving process answers the error and goes on. */
START_TEST(test_collectives_outside_session_server)
{
    pid_t pid;
    disco_rpc_t *rs = stdio_server(&pid);
    call_session_builtins(rs, "server");
    stdio_server_end(rs, pid);
}
END_TEST

static void no_done(void *ctx, disco_status_t st, const disco_value_t *ret)
{
    (void)st, (void)ret;
    ++*(int *)ctx;
}

/* A copy whose offset plus size passes 2^63 is refused before anything is
 * sent (a client sends chunk k's offset as offset + done, which wrapped to
 * the start of the allocation: the second chunk of a copy at 2^64 - 1 MiB
 * landed at offset 0). */
START_TEST(test_copy_range_overflow)
{
    pid_t pid;
    disco_rpc_t *rs = stdio_server(&pid);
    static unsigned char buf[2u << 20];
    disco_rpc_handle_t h;
    CK_OK(disco_rpc_dev_alloc(rs, (DLDevice){kDLCPU, 0}, sizeof buf, 64, &h));
    memset(buf, 0x5a, sizeof buf);
    CK_OK(disco_rpc_copy_to_remote(rs, buf, h, 0, sizeof buf));
    memset(buf, 0xa5, sizeof buf);               /* what a wrapped copy would write */
    uint64_t wrap = UINT64_MAX - (1u << 20) + 1; /* + 1 MiB == 0 */
    int dones = 0;
    CK_STATUS(disco_rpc_copy_to_remote_async(rs, buf, h, wrap, sizeof buf, no_done, &dones),
              DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_copy_to_remote(rs, buf, h, wrap, sizeof buf), DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_copy_from_remote(rs, h, wrap, buf, sizeof buf), DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_copy_from_remote_async(rs, h, wrap, buf, sizeof buf, no_done, &dones),
              DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_copy_to_remote(rs, buf, h, INT64_MAX, 1), DISCO_E_OVERFLOW);
    disco_rpc_wait(rs);
    ck_assert_int_eq(dones, 0);
    /* nothing landed at the start of the allocation */
    memset(buf, 0, sizeof buf);
    CK_OK(disco_rpc_copy_from_remote(rs, h, 0, buf, 1u << 20));
    for (size_t i = 0; i < (1u << 20); i++)
        ck_assert_msg(buf[i] == 0x5a, "byte %zu is %#x", i, buf[i]);
    CK_OK(disco_rpc_free_handle(rs, h));
    stdio_server_end(rs, pid);
}
END_TEST

/* A worker view's device alloc of more than 2^62 bytes is an overflow, not
 * a negative dimension. */
START_TEST(test_worker_view_alloc_overflow)
{
    disco_session_t *s = open_small(2, 1u << 20);
    disco_rpc_t *rs;
    CK_OK(disco_rpc_from_worker(s, 1, &rs));
    disco_rpc_handle_t h;
    CK_STATUS(disco_rpc_dev_alloc(rs, (DLDevice){kDLCPU, 0}, UINT64_MAX - 7, 64, &h),
              DISCO_E_OVERFLOW);
    CK_STATUS(disco_rpc_dev_alloc(rs, (DLDevice){kDLCPU, 0}, UINT64_C(1) << 40, 64, &h),
              DISCO_E_HEAP_EXHAUSTED);
    CK_OK(disco_rpc_dev_alloc(rs, (DLDevice){kDLCPU, 0}, 100, 64, &h));
    CK_OK(disco_rpc_free_handle(rs, h));
    disco_rpc_close(rs);
    disco_session_close(s);
}
END_TEST

/* Gathering a tensor with a zero dimension multiplies dimension 0 by the
 * group size: past int64 that is refused as an overflow (it was signed
 * overflow, and came out as a "negative dimension" at best). */
START_TEST(test_gather_dim0_overflow)
{
    disco_session_t *s = open_small(2, 1u << 20);
    int64_t shape[2] = {INT64_C(1) << 62, 0}; /* no elements, 0 bytes */
    disco_dref_t x, y;
    CK_OK(disco_session_empty(s, shape, 2, F32, false, &x));
    disco_value_t a[2] = {dref(x), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allgather", a, 2, &y));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_OVERFLOW);
    CK_HAS("times 2 overflows");
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_call_by_name(s, "disco.gather_to_worker0", a, 2, &y));
    CK_STATUS(disco_session_sync(s, 1), DISCO_E_OVERFLOW);
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, x));
    allreduce_still_works(s);
    disco_session_close(s);
}
END_TEST

/* A string value whose len is short of its strlen (what disco_value_str makes of
 * a string of 4 GiB or more) is copied and encoded as ending at len: the
 * copy keeps a terminator, the frame decodes (it used to lose its NUL). */
START_TEST(test_str_len_rules)
{
    disco_value_t v = {.type = DISCO_T_STR, .len = 3, .v.str = "abcdef"}, c;
    CK_OK(disco_value_copy(&v, &c));
    ck_assert_str_eq(c.v.str, "abc");
    disco_value_clear(&c);
    _Alignas(8) unsigned char buf[64];
    size_t len;
    CK_OK(disco_frame_encode(1, 2, &v, 1, buf, sizeof buf, &len));
    disco_frame_hdr_t h;
    disco_value_t d;
    CK_OK(disco_frame_decode(buf, len, &h, &d, 1));
    ck_assert_str_eq(d.v.str, "abc");
}
END_TEST

/* A device allocation too large to name on the wire is DISCO_E_OVERFLOW
 * with its size said, the same through a client as in a local session (they
 * answered DISCO_E_INVAL "negative size" and DISCO_E_NOMEM with no detail). */
START_TEST(test_dev_alloc_sizes_agree)
{
    pid_t pid;
    disco_rpc_t *rc = stdio_server(&pid), *rl;
    CK_OK(disco_rpc_local(&rl));
    disco_rpc_handle_t h;
    const uint64_t sizes[] = {UINT64_MAX, (uint64_t)INT64_MAX + 1, DISCO_TENSOR_MAX_BYTES + 1};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            CK_STATUS(disco_rpc_dev_alloc(k ? rc : rl, (DLDevice){kDLCPU, 0}, sizes[i], 64, &h),
                      DISCO_E_OVERFLOW);
            CK_HAS("bytes: over the 2^62-byte limit");
        }
    /* within the limit but beyond the machine: refused, and said why */
    disco_status_t st =
        disco_rpc_dev_alloc(rl, (DLDevice){kDLCPU, 0}, DISCO_TENSOR_MAX_BYTES, 64, &h);
    ck_assert_int_ne(st, DISCO_OK);
    ck_assert_msg(strstr(disco_last_error(), "allocation of") != NULL, "detail: %s",
                  disco_last_error());
    disco_rpc_close(rl);
    stdio_server_end(rc, pid);
}
END_TEST

struct release_arg {
    DLTensor *t;
};

static void *release_there(void *p)
{
    disco__tensor_release(((struct release_arg *)p)->t);
    return NULL;
}

/* A tensor disco freed is no longer ours, though this thread asked about
 * it (and cached the answer: tensor.c, L1-L2) before the free, whether
 * the free was this thread's or another's: a caller's own DLTensor at the
 * freed struct's address is foreign. A caller's stack DLTensor never is
 * ours; a tensor still held stays ours across the others' frees. */
START_TEST(test_is_ours_after_free)
{
    disco_segment_t seg;
    disco_heap_t h;
    make_heap(64 * KiB, &seg, &h);
    int64_t n = 4;
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor *t, *u, *v;
    CK_OK(disco__tensor_new(&h, 0, &n, 1, f32, &t));
    CK_OK(disco__tensor_new(&h, 0, &n, 1, f32, &u));
    CK_OK(disco__tensor_new(&h, 0, &n, 1, f32, &v));
    for (int i = 0; i < 2; i++) /* the second answer from the cache */
        ck_assert_msg(disco__tensor_is_ours(t) && disco__tensor_is_ours(u) &&
                          disco__tensor_is_ours(v),
                      "disco__tensor_is_ours: a tensor just made is not ours");
    DLTensor mine = *u;
    ck_assert_msg(!disco__tensor_is_ours(&mine), "a caller's DLTensor taken for ours");
    uintptr_t at = (uintptr_t)t; /* compared, never read, after the free */
    disco__tensor_release(t);
    ck_assert_msg(!disco__tensor_is_ours((const DLTensor *)at),
                  "disco__tensor_is_ours: a tensor freed by this thread is still ours");
    ck_assert_msg(disco__tensor_is_ours(u), "a held tensor is no longer ours");
    at = (uintptr_t)u;
    pthread_t th;
    struct release_arg ra = {u};
    ck_assert_int_eq(pthread_create(&th, NULL, release_there, &ra), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(!disco__tensor_is_ours((const DLTensor *)at),
                  "disco__tensor_is_ours: a tensor freed by another thread is still ours");
    ck_assert_msg(disco__tensor_is_ours(v), "a held tensor is no longer ours");
    disco__tensor_release(v);
    disco_segment_close(&seg);
}
END_TEST

Suite *suite_bounds(void)
{
    Suite *s = suite_create("bounds");
    TCase *tc = tcase_create("bounds");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_shape_nbytes);
    tcase_add_test(tc, test_huge_shapes_refused);
    tcase_add_test(tc, test_larger_than_heap);
    tcase_add_test(tc, test_empty_w0_error_from_call);
    tcase_add_test(tc, test_debug_get_4gib);
    tcase_add_test(tc, test_config_sizes);
    tcase_add_test(tc, test_collectives_outside_session_local);
    tcase_add_test(tc, test_collectives_outside_session_server);
    tcase_add_test(tc, test_copy_range_overflow);
    tcase_add_test(tc, test_dev_alloc_sizes_agree);
    tcase_add_test(tc, test_worker_view_alloc_overflow);
    tcase_add_test(tc, test_gather_dim0_overflow);
    tcase_add_test(tc, test_str_len_rules);
    tcase_add_test(tc, test_is_ours_after_free);
    suite_add_tcase(s, tc);
    return s;
}
