/* test_tensor_view.c - what the Python front needs from the session:
 * zero-copy views of a worker's tensor (disco_session_tensor_view), a
 * string where a signature wants a dtype, disco.copy_into (TVM's
 * collectives write into a destination) and disco.empty's in_group. */
#include <check.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "disco/device.h"
#include "disco/dtype.h"
#include "disco/observe.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "tests/session_util.h"

static disco_session_t *open_view_session(int n, int groups)
{
    disco_session_config_t cfg = disco_session_config_default(n);
    cfg.num_groups = groups;
    cfg.call_timeout_ms = 20000;
    return tu_open_with_testlib(&cfg);
}

/* test.fill(shape {count}, float32, seed) on every worker. */
static disco_dref_t fill(disco_session_t *s, int64_t count, int64_t seed)
{
    int64_t shape[1] = {count};
    disco_value_t a[3] = {disco_value_shape(shape, 1), disco_value_dtype(DISCO_DTYPE_FLOAT32),
                          disco_value_int(seed)};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fill", a, 3, &r));
    return r;
}

/* A view of worker 0's and worker 2's tensor shows the heap bytes with no
 * copy: what debug get returns, and a write through the view is what the
 * worker's function then reads (its checksum changes to match). The view
 * keeps the bytes after the register is freed. */
START_TEST(test_view_zero_copy)
{
    disco_session_t *s = open_view_session(3, 1);
    disco_dref_t x = fill(s, 64, 5);
    for (int w = 0; w < 3; w += 2) {
        DLManagedTensor *m;
        CK_OK(disco_session_tensor_view(s, x, w, &m));
        DLTensor *t = &m->dl_tensor;
        ck_assert_int_eq(t->ndim, 1);
        ck_assert_int_eq(t->shape[0], 64);
        ck_assert_int_eq(t->dtype.code, kDLFloat);
        ck_assert_int_eq(t->device.device_type, kDLCPU);
        ck_assert(!disco_tensor_view_is_copy(m));
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, x, w, &v));
        ck_assert_uint_eq(v.len, 64 * 4);
        ck_assert(memcmp(v.v.bytes, (char *)t->data + t->byte_offset, v.len) == 0);
        disco_value_clear(&v);
        int64_t before = tu_checksum_on(s, x, w);
        ((float *)t->data)[3] = 1234.5f; /* seen by the worker: the same bytes */
        ck_assert(tu_checksum_on(s, x, w) != before);
        CK_OK(disco_session_debug_get(s, x, w, &v));
        ck_assert(((const float *)v.v.bytes)[3] == 1234.5f);
        disco_value_clear(&v);
        if (w == 2) { /* the view outlives the register */
            CK_OK(disco_session_free_reg(s, x));
            disco_dref_t y = fill(s, 64, 6); /* the heap may reuse freed blocks */
            ck_assert(((float *)t->data)[3] == 1234.5f);
            x = y;
        }
        m->deleter(m);
    }
    CK_OK(disco_session_sync(s, 2));
    disco_session_close(s);
}
END_TEST

/* A register without a tensor gives DISCO_E_BAD_TYPE naming what it holds,
 * on worker 0 and elsewhere (worker0_only tensors are null there); the
 * session goes on. */
START_TEST(test_view_not_a_tensor)
{
    disco_session_t *s = open_view_session(2, 1);
    disco_value_t a[2] = {disco_value_int(2), disco_value_int(3)};
    disco_dref_t r, e;
    CK_OK(disco_session_call_by_name(s, "test.add", a, 2, &r));
    DLManagedTensor *m;
    CK_STATUS(disco_session_tensor_view(s, r, 0, &m), DISCO_E_BAD_TYPE);
    CK_HAS("holds int");
    CK_STATUS(disco_session_tensor_view(s, r, 1, &m), DISCO_E_BAD_TYPE);
    CK_HAS("worker 1 holds int");
    int64_t shape[1] = {4};
    CK_OK(disco_session_empty(s, shape, 1, DISCO_DTYPE_INT32, true, &e));
    CK_STATUS(disco_session_tensor_view(s, e, 1, &m), DISCO_E_BAD_TYPE);
    CK_HAS("null");
    CK_OK(disco_session_tensor_view(s, e, 0, &m));
    m->deleter(m);
    CK_STATUS(disco_session_tensor_view(s, e, 2, &m), DISCO_E_INVAL);
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* A sim device tensor is not host-readable: the view is a host copy. */
START_TEST(test_view_device_copy)
{
    CK_OK(disco_device_sim_set_count(2));
    disco_session_t *s = open_view_session(2, 1);
    int64_t shape[1] = {8};
    disco_value_t a[2] = {disco_value_shape(shape, 1), disco_value_int(kDLExtDev)};
    disco_dref_t x;
    CK_OK(disco_session_call_by_name(s, "test.fill_device", a, 2, &x));
    for (int w = 0; w < 2; w++) {
        DLManagedTensor *m;
        CK_OK(disco_session_tensor_view(s, x, w, &m));
        ck_assert_int_eq(m->dl_tensor.device.device_type, kDLCPU);
        ck_assert(disco_tensor_view_is_copy(m));
        for (int i = 0; i < 8; i++)
            ck_assert(((float *)m->dl_tensor.data)[i] == (float)(1000 * w + i));
        m->deleter(m);
    }
    disco_session_close(s);
}
END_TEST

/* "float32" where a signature wants a dtype ('t') is parsed into one; a
 * string that names no dtype fails the call itself. */
START_TEST(test_dtype_string)
{
    disco_session_t *s = open_view_session(2, 1);
    int64_t shape[1] = {16};
    disco_value_t a[3] = {disco_value_shape(shape, 1), disco_value_str("float32"),
                          disco_value_int(5)};
    disco_dref_t x, y;
    CK_OK(disco_session_call_by_name(s, "test.fill", a, 3, &x));
    DLManagedTensor *m;
    CK_OK(disco_session_tensor_view(s, x, 1, &m));
    ck_assert_int_eq(m->dl_tensor.dtype.bits, 32);
    m->deleter(m);
    a[1] = disco_value_str("flaot32");
    CK_STATUS(disco_session_call_by_name(s, "test.fill", a, 3, &y), DISCO_E_BAD_TYPE);
    CK_HAS("\"flaot32\" is not a dtype");
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* disco.copy_into: an allreduce's result into an existing tensor on every
 * worker, scatter's rows into a tensor of one dimension fewer; a null src
 * (gather's result off worker 0) leaves dst alone; a size mismatch fails. */
START_TEST(test_copy_into)
{
    disco_session_t *s = open_view_session(2, 1);
    disco_dref_t x = fill(s, 8, 1), d = fill(s, 8, 2), r, c;
    disco_value_t a[3] = {tu_dref(x), disco_value_str("sum"), disco_value_bool(false)};
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &r));
    disco_value_t ci[2] = {tu_dref(d), tu_dref(r)};
    CK_OK(disco_session_call_by_name(s, "disco.copy_into", ci, 2, &c));
    for (int w = 0; w < 2; w++)
        ck_assert(tu_checksum_on(s, d, w) == tu_checksum_on(s, r, w));
    disco_value_t g[2] = {tu_dref(x), disco_value_bool(false)};
    disco_dref_t gr, big = fill(s, 16, 3);
    CK_OK(disco_session_call_by_name(s, "disco.gather_to_worker0", g, 2, &gr));
    int64_t before = tu_checksum_on(s, big, 1);
    ci[0] = tu_dref(big);
    ci[1] = tu_dref(gr);
    CK_OK(disco_session_call_by_name(s, "disco.copy_into", ci, 2, &c));
    ck_assert(tu_checksum_on(s, big, 0) == tu_checksum_on(s, gr, 0));
    ck_assert(tu_checksum_on(s, big, 1) == before);
    ci[0] = tu_dref(x); /* 8 elements from 16 */
    CK_OK(disco_session_call_by_name(s, "disco.copy_into", ci, 2, &c));
    CK_STATUS(disco_session_sync(s, 0), DISCO_E_MISMATCH);
    CK_HAS("dst is float32 with 8 elements, src float32 with 16");
    CK_OK(disco_session_sync(s, 1));
    disco_session_close(s);
}
END_TEST

/* disco.empty(..., worker0_only, in_group) with 2 groups of 2: a tensor on
 * each group's first worker (0 and 2), null on the others. */
START_TEST(test_empty_in_group)
{
    disco_session_t *s = open_view_session(4, 2);
    int64_t shape[1] = {4};
    DLDevice cpu = {kDLCPU, 0};
    disco_value_t a[5] = {disco_value_shape(shape, 1), disco_value_dtype(DISCO_DTYPE_FLOAT32),
                          disco_value_device(cpu), disco_value_bool(true), disco_value_bool(true)};
    disco_dref_t x;
    CK_OK(disco_session_call_by_name(s, "disco.empty", a, 5, &x));
    for (int w = 0; w < 4; w++) {
        disco_value_t v;
        CK_OK(disco_session_debug_get(s, x, w, &v));
        ck_assert_msg(v.type == (w % 2 == 0 ? DISCO_T_BYTES : DISCO_T_NULL), "worker %d", w);
        disco_value_clear(&v);
    }
    disco_session_close(s);
}
END_TEST

/* Fails on every worker (worker 0 inline), as a failed collective does:
 * allreduce with an op that does not exist; then copies its (null) result
 * into x, as the Python front's collectives do, which leaves x's bytes as
 * they were. */
static void failed_collective(disco_session_t *s, disco_dref_t x)
{
    disco_value_t a[3] = {tu_dref(x), disco_value_str("no-such-op"), disco_value_bool(false)};
    disco_dref_t y, z;
    CK_OK(disco_session_call_by_name(s, "disco.allreduce", a, 3, &y));
    disco_value_t b[2] = {tu_dref(x), tu_dref(y)};
    CK_OK(disco_session_call_by_name(s, "disco.copy_into", b, 2, &z));
    CK_OK(disco_session_free_reg(s, y));
    CK_OK(disco_session_free_reg(s, z));
}

/* A failure still pending (not yet returned by a sync) is reported by the
 * next read of a tensor, whichever read: copy_from_worker0 and worker 0's
 * view (which send no command) and another worker's view. Before, those
 * two returned the stale bytes with DISCO_OK and the error waited for the
 * next sync. Once reported, the error is gone and the reads work; the
 * session goes on. A pending failure of another worker (here worker 1,
 * once its box holds it) is reported by worker 0's reads too. */
START_TEST(test_read_reports_pending_errors)
{
    disco_session_t *s = open_view_session(2, 1);
    disco_dref_t x = fill(s, 16, 3);
    float host_data[16];
    int64_t shape[1] = {16};
    DLTensor host = {.data = host_data,
                     .device = {kDLCPU, 0},
                     .ndim = 1,
                     .dtype = DISCO_DTYPE_FLOAT32,
                     .shape = shape};
    failed_collective(s, x);
    CK_STATUS(disco_session_copy_from_worker0(s, x, &host), DISCO_E_INVAL);
    CK_HAS("worker 0: disco.allreduce");
    CK_OK(disco_session_copy_from_worker0(s, x, &host));
    CK_OK(disco_session_sync_all(s)); /* worker 1's failure of the same call */

    failed_collective(s, x);
    DLManagedTensor *m = NULL;
    CK_STATUS(disco_session_tensor_view(s, x, 0, &m), DISCO_E_INVAL);
    CK_HAS("worker 0: disco.allreduce");
    ck_assert_ptr_null(m);
    CK_OK(disco_session_tensor_view(s, x, 0, &m));
    m->deleter(m);
    CK_OK(disco_session_sync_all(s));

    failed_collective(s, x);
    CK_STATUS(disco_session_tensor_view(s, x, 1, &m), DISCO_E_INVAL);
    CK_HAS("worker 1: disco.allreduce");
    CK_OK(disco_session_tensor_view(s, x, 1, &m));
    m->deleter(m);

    /* Worker 1 alone fails; once its box holds the failure (polled,
     * bounded), worker 0's copy reports it. */
    disco_value_t f[2] = {disco_value_int(1), disco_value_str("late")};
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, "test.fail_on", f, 2, &r));
    CK_OK(disco_session_free_reg(s, r));
    disco_session_view_t v;
    int64_t deadline = disco_now_ns() + 10000000000LL;
    for (;;) { /* worker 1 has run the call once its done count passes it */
        CK_OK(disco_session_view(s, &v));
        bool done = v.workers[1].done >= v.issued - 1;
        disco_view_free(&v);
        if (done)
            break;
        ck_assert_msg(disco_now_ns() < deadline, "worker 1 did not run the call in 10 s");
        sched_yield();
    }
    CK_STATUS(disco_session_copy_from_worker0(s, x, &host), DISCO_E_REMOTE);
    CK_HAS("worker 1: test.fail_on: late");
    CK_OK(disco_session_sync_all(s));
    disco_session_close(s);
}
END_TEST

Suite *suite_tensor_view(void)
{
    Suite *s = suite_create("tensor_view");
    TCase *tc = tcase_create("tensor_view");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_view_zero_copy);
    tcase_add_test(tc, test_view_not_a_tensor);
    tcase_add_test(tc, test_view_device_copy);
    tcase_add_test(tc, test_dtype_string);
    tcase_add_test(tc, test_copy_into);
    tcase_add_test(tc, test_empty_in_group);
    tcase_add_test(tc, test_read_reports_pending_errors);
    suite_add_tcase(s, tc);
    return s;
}
