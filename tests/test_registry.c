/* test_registry.c - the function table (workers/core/registry.h) and the
 * lookup that puts the built-in libraries into it (workers/core/lookup.h). */
#include <check.h>
#include <string.h>

#include "disco/session.h"
#include "disco/tensor.h"

#include "workers/core/ctx.h"
#include "workers/core/lookup.h"
#include "workers/core/registry.h"
#include "tests/session_util.h"
#include "tests/testutil.h"

static disco_status_t answer(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                             disco_value_t *ret)
{
    (void)ctx, (void)args, (void)nargs;
    *ret = disco_value_int(42);
    return DISCO_OK;
}

/* Runs the function registered as name with no worker and one argument. */
static disco_status_t run_named(const char *name, disco_value_t *ret_out)
{
    uint64_t h;
    disco_status_t st = disco__func_find(name, &h);
    if (st != DISCO_OK)
        return st;
    const struct disco__func *f = disco__func_at(h);
    ck_assert_msg(f != NULL && strcmp(f->name, name) == 0, "disco__func_at(%s)", name);
    disco_value_t arg = disco_value_int(7);
    return disco__func_run(f, NULL, &arg, 1, ret_out);
}

/* A lookup finds the functions of both built-in libraries (builtins.c and
 * the collectives) and refuses a name nobody registered. */
START_TEST(test_builtin_libs_found)
{
    uint64_t h;
    CK_OK(disco__func_find("disco.echo", &h));
    CK_OK(disco__func_find("disco.allreduce", &h));
    CK_OK(disco__func_find("disco.cpu_affinity", &h));
    CK_STATUS(disco__func_find("no.such.function", &h), DISCO_E_NO_FUNC);
    disco_value_t v = disco_value_null();
    CK_OK(run_named("disco.echo", &v));
    ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 7, "disco.echo(7) gave type %u", v.type);
    /* A collective registers as needing a session worker: refused here. */
    CK_STATUS(run_named("disco.allreduce", &v), DISCO_E_INVAL);
}
END_TEST

/* The built-in libraries register once: a function registered afterwards
 * under a builtin's name replaces it, and later lookups (which make sure
 * the libraries are in) do not put the builtin back. */
START_TEST(test_libs_register_once)
{
    disco__builtins_init();
    CK_OK(disco_register_func("disco.echo", NULL, answer));
    for (int i = 0; i < 2; i++) {
        disco__builtins_init();
        disco_value_t v = disco_value_null();
        CK_OK(run_named("disco.echo", &v));
        ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 42, "lookup %d: the builtin came back", i);
    }
}
END_TEST

/* Issue 35 part 1: TVM's builtin names are registered, and those that need
 * no worker answer in TVM's forms outside a session (worker_id a shape of
 * one, worker_rank an int, device cpu(0)); the collectives need a worker. */
START_TEST(test_tvm_names_found)
{
    static const char *const names[] = {"runtime.disco.worker_id",
                                        "runtime.disco.worker_rank",
                                        "runtime.disco.device",
                                        "runtime.disco.empty",
                                        "runtime.disco.allreduce",
                                        "runtime.disco.allgather",
                                        "runtime.disco.broadcast_from_worker0",
                                        "runtime.disco.scatter_from_worker0",
                                        "runtime.disco.gather_to_worker0"};
    uint64_t h;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(disco__func_find(names[i], &h) == DISCO_OK, "%s: %s", names[i],
                      disco_last_error());
    disco_value_t v = disco_value_null();
    CK_OK(run_named("runtime.disco.worker_id", &v));
    ck_assert_msg(v.type == DISCO_T_SHAPE && v.len == 1 && v.v.shape[0] == 0,
                  "worker_id gave type %u", v.type);
    disco_value_clear(&v);
    CK_OK(run_named("runtime.disco.worker_rank", &v));
    ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 0, "worker_rank gave type %u", v.type);
    CK_OK(run_named("runtime.disco.device", &v));
    ck_assert_msg(v.type == DISCO_T_DEVICE && v.v.device.device_type == kDLCPU,
                  "device gave type %u", v.type);
    CK_STATUS(run_named("runtime.disco.allreduce", &v), DISCO_E_INVAL);
}
END_TEST

/* Calls name with n arguments in s; returns the result's register. */
static disco_dref_t tvm_call(disco_session_t *s, const char *name, const disco_value_t *a, int n)
{
    disco_dref_t r;
    ck_assert_msg(disco_session_call_by_name(s, name, a, n, &r) == DISCO_OK, "%s: %s", name,
                  disco_last_error());
    return r;
}

/* The TVM forms in a 2-worker session, as a TVM script calls them: empty
 * with device None; broadcast_from_worker0, allreduce (kind as a shape
 * [0]: sum) and allgather into the destination given; scatter_from_worker0
 * by element count ((3,4,3) into two (3,3,2), which disco's dimension-0
 * scatter refuses) and gather_to_worker0 back into a (36,) on worker 0;
 * worker_id and worker_rank on worker 1. */
START_TEST(test_tvm_names_in_session)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    cfg.heap_bytes = 16u << 20;
    disco_session_t *s = NULL;
    CK_OK(disco_session_open(&cfg, &s));
    DLDataType f32 = {kDLFloat, 32, 1};
    float a[36], got[72] = {0};
    for (int i = 0; i < 36; i++)
        a[i] = (float)i;
    int64_t sh[3] = {3, 4, 3}, piece[3] = {3, 3, 2}, flat[1] = {36}, two[1] = {72};
    DLTensor host = {.data = a, .device = {kDLCPU, 0}, .ndim = 3, .dtype = f32, .shape = sh};
    disco_dref_t x;
    CK_OK(disco_session_copy_to_worker0(s, &host, &x)); /* on worker 0 */
    disco_value_t e[5] = {disco_value_shape(sh, 3), disco_value_dtype(f32), disco_value_null(),
                          disco_value_bool(false), disco_value_bool(false)};
    disco_dref_t b = tvm_call(s, "runtime.disco.empty", e, 5);
    e[0] = disco_value_shape(sh, 3);
    disco_dref_t c = tvm_call(s, "runtime.disco.empty", e, 5);
    e[0] = disco_value_shape(piece, 3);
    disco_dref_t y = tvm_call(s, "runtime.disco.empty", e, 5);
    e[0] = disco_value_shape(two, 1);
    disco_dref_t g = tvm_call(s, "runtime.disco.empty", e, 5);
    e[0] = disco_value_shape(flat, 1);
    e[3] = disco_value_bool(true); /* worker0_only */
    disco_dref_t z = tvm_call(s, "runtime.disco.empty", e, 5);

    disco_value_t bc[3] = {tu_dref(x), disco_value_bool(false), tu_dref(b)};
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.broadcast_from_worker0", bc, 3));
    int64_t sum[1] = {0};
    disco_value_t ar[4] = {tu_dref(b), disco_value_shape(sum, 1), disco_value_bool(false),
                           tu_dref(c)};
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.allreduce", ar, 4));
    disco_value_t ag[3] = {tu_dref(c), disco_value_bool(false), tu_dref(g)};
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.allgather", ag, 3));
    disco_value_t sc[3] = {tu_dref(x), disco_value_bool(false), tu_dref(y)};
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.scatter_from_worker0", sc, 3));
    disco_value_t ga[3] = {tu_dref(y), disco_value_bool(false), tu_dref(z)};
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.gather_to_worker0", ga, 3));
    CK_OK(disco_session_sync_all(s));

    DLTensor out = {.data = got, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32, .shape = two};
    CK_OK(disco_session_copy_from_worker0(s, g, &out)); /* worker 0 and worker 1's c */
    for (int i = 0; i < 72; i++)
        ck_assert_msg(got[i] == 2 * a[i % 36], "allgather of the allreduce: [%d] = %g", i, got[i]);
    out.shape = flat;
    CK_OK(disco_session_copy_from_worker0(s, z, &out));
    for (int i = 0; i < 36; i++)
        ck_assert_msg(got[i] == a[i], "scatter then gather: [%d] = %g", i, got[i]);

    disco_dref_t id = tvm_call(s, "runtime.disco.worker_id", NULL, 0);
    disco_dref_t rank = tvm_call(s, "runtime.disco.worker_rank", NULL, 0);
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, id, 1, &v));
    ck_assert_msg(v.type == DISCO_T_SHAPE && v.len == 1 && v.v.shape[0] == 1, "worker_id on 1");
    disco_value_clear(&v);
    CK_OK(disco_session_debug_get(s, rank, 1, &v));
    ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 1, "worker_rank on 1");

    /* A kind that is no ReduceKind fails on every worker, and the session goes on. */
    sum[0] = 9;
    disco_session_free_reg(s, tvm_call(s, "runtime.disco.allreduce", ar, 4));
    ck_assert_int_ne(disco_session_sync_all(s), DISCO_OK);
    CK_OK(disco_session_sync_all(s));
    disco_session_close(s);
}
END_TEST

Suite *suite_registry(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_builtin_libs_found);
    tcase_add_test(tc, test_libs_register_once);
    tcase_add_test(tc, test_tvm_names_found);
    tcase_add_test(tc, test_tvm_names_in_session);
    suite_add_tcase(s, tc);
    return s;
}
