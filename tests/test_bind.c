/* test_bind.c - what a binding from another language needs: a user pointer
 * bound to each registered name, and the value constructors as exported
 * out-of-line functions. */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "disco/func.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/tensor.h"
#include "disco/value.h"
#include "tests/testutil.h"

/* ---- the user pointer ---- */

/* The state two registrations of one function carry: an offset and a name. */
struct tag {
    int64_t base;
    const char *name;
};

static const struct tag tag_a = {100, "a"};
static const struct tag tag_b = {200, "b"};

/* One C function for every name: base + worker id from its user pointer
 * (-1 with none), and the state's name as a second result through a
 * separate call argument. */
static disco_status_t tagged(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                             disco_value_t *ret)
{
    const struct tag *t = disco_ctx_user(ctx);
    if (nargs == 1 && args[0].type == DISCO_T_STR) { /* "name": the tag's name */
        *ret = disco_value_str(t != NULL ? t->name : "none");
        return DISCO_OK;
    }
    *ret = disco_value_int(t != NULL ? t->base + disco_ctx_worker_id(ctx) : -1);
    return DISCO_OK;
}

static void register_tags(void)
{
    CK_OK(disco_register_func_ex("bind.a", NULL, tagged, (void *)&tag_a));
    CK_OK(disco_register_func_ex("bind.b", NULL, tagged, (void *)&tag_b));
    CK_OK(disco_register_func("bind.plain", NULL, tagged));
    /* Registered first with tag_b, then again with tag_a: the second
     * registration's pointer wins, with its function. */
    CK_OK(disco_register_func_ex("bind.again", NULL, tagged, (void *)&tag_b));
    CK_OK(disco_register_func_ex("bind.again", NULL, tagged, (void *)&tag_a));
}

static int64_t session_int(disco_session_t *s, const char *name, int w)
{
    disco_dref_t r;
    CK_OK(disco_session_call_by_name(s, name, NULL, 0, &r));
    disco_value_t v;
    CK_OK(disco_session_debug_get(s, r, w, &v));
    CK_OK(disco_session_free_reg(s, r));
    ck_assert_int_eq(v.type, DISCO_T_INT);
    return v.v.i;
}

/* In a session: one C function registered under two names with two user
 * pointers answers differently through each name, on every worker (the
 * forked workers see the registrations made before the fork); plain
 * registration gives NULL; registering a name again replaces the pointer. */
START_TEST(test_user_pointer_session)
{
    register_tags();
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.launch = DISCO_LAUNCH_FORK;
    disco_session_t *s;
    CK_OK(disco_session_open(&cfg, &s));
    for (int w = 0; w < 3; w++) {
        ck_assert_int_eq(session_int(s, "bind.a", w), 100 + w);
        ck_assert_int_eq(session_int(s, "bind.b", w), 200 + w);
        ck_assert_int_eq(session_int(s, "bind.plain", w), -1);
        ck_assert_int_eq(session_int(s, "bind.again", w), 100 + w);
    }
    disco_session_close(s);
}
END_TEST

static disco_value_t rpc_call(disco_rpc_t *s, const char *name, const disco_value_t *args,
                              int nargs)
{
    disco_rpc_handle_t f;
    CK_OK(disco_rpc_get_func(s, name, &f));
    disco_value_t v;
    CK_OK(disco_rpc_call(s, f, args, nargs, &v));
    CK_OK(disco_rpc_free_handle(s, f));
    return v;
}

/* Through the local RPC session: the same function under two names gets
 * each name's user pointer (ints and the tag's own string). */
START_TEST(test_user_pointer_local_rpc)
{
    register_tags();
    disco_rpc_t *s;
    CK_OK(disco_rpc_local(&s));
    disco_value_t v = rpc_call(s, "bind.a", NULL, 0);
    ck_assert_int_eq(v.v.i, 100);
    v = rpc_call(s, "bind.b", NULL, 0);
    ck_assert_int_eq(v.v.i, 200);
    v = rpc_call(s, "bind.plain", NULL, 0);
    ck_assert_int_eq(v.v.i, -1);
    disco_value_t q = disco_value_str("name");
    v = rpc_call(s, "bind.a", &q, 1);
    ck_assert_int_eq(v.type, DISCO_T_STR);
    ck_assert_str_eq(v.v.str, "a");
    disco_value_clear(&v);
    v = rpc_call(s, "bind.b", &q, 1);
    ck_assert_str_eq(v.v.str, "b");
    disco_value_clear(&v);
    disco_rpc_close(s);
}
END_TEST

/* disco_register_func_ex refuses what disco_register_func refuses. */
START_TEST(test_register_ex_errors)
{
    CK_STATUS(disco_register_func_ex("", NULL, tagged, NULL), DISCO_E_INVAL);
    CK_STATUS(disco_register_func_ex("bind.x", NULL, NULL, (void *)&tag_a), DISCO_E_INVAL);
    CK_STATUS(disco_register_func_ex("bind.x", "iQ", tagged, (void *)&tag_a), DISCO_E_INVAL);
}
END_TEST

/* ---- the out-of-line constructors ---- */

static const int64_t dims[2] = {3, -4};
static const unsigned char raw[3] = {1, 2, 3};
static DLTensor tensor;

/* The out-of-line constructors, as a binding sees them: addresses. */
struct ctors {
    disco_value_t (*null_)(void);
    disco_value_t (*bool_)(bool);
    disco_value_t (*int_)(int64_t);
    disco_value_t (*float_)(double);
    disco_value_t (*str_)(const char *);
    disco_value_t (*bytes_)(const void *, uint32_t);
    disco_value_t (*shape_)(const int64_t *, uint32_t);
    disco_value_t (*dtype_)(DLDataType);
    disco_value_t (*device_)(DLDevice);
    disco_value_t (*opaque_)(uint64_t);
    disco_value_t (*tensor_)(DLTensor *);
};

/* Same bytes, all 16 of them (the inline forms zero the unused payload). */
static void same(disco_value_t got, disco_value_t want, const char *what)
{
    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0 && disco_value_equal(&got, &want),
                  "%s: out-of-line type %u len %u differs from the inline form", what, got.type,
                  want.len);
}

static void compare_all(const struct ctors *c)
{
    same(c->null_(), disco_value_null(), "null");
    same(c->bool_(true), disco_value_bool(true), "bool true");
    same(c->bool_(false), disco_value_bool(false), "bool false");
    same(c->int_(INT64_MIN), disco_value_int(INT64_MIN), "int");
    same(c->float_(-0.0), disco_value_float(-0.0), "float -0");
    same(c->float_(1.5), disco_value_float(1.5), "float");
    same(c->str_("seven77"), disco_value_str("seven77"), "str");
    same(c->bytes_(raw, 3), disco_value_bytes(raw, 3), "bytes");
    same(c->shape_(dims, 2), disco_value_shape(dims, 2), "shape");
    same(c->dtype_((DLDataType){kDLBfloat, 16, 2}),
         disco_value_dtype((DLDataType){kDLBfloat, 16, 2}), "dtype");
    same(c->device_((DLDevice){kDLCUDA, 7}), disco_value_device((DLDevice){kDLCUDA, 7}), "device");
    same(c->opaque_(0x0123456789abcdefULL), disco_value_opaque(0x0123456789abcdefULL), "opaque");
    same(c->tensor_(&tensor), disco_value_tensor(&tensor), "tensor");
}

/* Called through pointers (volatile: the compiler cannot see which function
 * it calls, so no inline body stands in), each out-of-line constructor
 * builds exactly the value its inline twin builds. */
START_TEST(test_ctors_by_pointer)
{
    struct ctors c = {disco_value_null,   disco_value_bool,   disco_value_int,   disco_value_float,
                      disco_value_str,    disco_value_bytes,  disco_value_shape, disco_value_dtype,
                      disco_value_device, disco_value_opaque, disco_value_tensor};
    struct ctors volatile cv = c;
    struct ctors copy;
    memcpy(&copy, (const void *)&cv, sizeof copy);
    compare_all(&copy);
}
END_TEST

/* Under ASan a second copy of the library in this process (the runner links
 * libdisco.a) is an ODR violation by ASan's rules, and under TSan its
 * report ends the test (exit 66), so there the symbols are
 * looked up in the runner's own dynamic table (it links with -rdynamic):
 * still exported names found by dlsym, from the same code as libdisco.so. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DLSYM_FROM_SO 0
#else
#define DLSYM_FROM_SO 1
#endif

/* Looks name up in lib, checks that the symbol is libdisco.so's own. */
static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    ck_assert_msg(p != NULL, "dlsym(libdisco.so, %s): %s", name, dlerror());
    Dl_info info;
    ck_assert_msg(dladdr(p, &info) != 0, "dladdr(%s) failed", name);
    ck_assert_msg(!DLSYM_FROM_SO || strstr(info.dli_fname, "libdisco.so") != NULL,
                  "%s resolved outside libdisco.so", name);
    return p;
}

/* As ctypes and cffi find them: every constructor is exported by
 * build/libdisco.so under its disco_value_<kind> name (dlsym), and builds
 * what the inline form builds. */
START_TEST(test_ctors_by_dlsym)
{
    void *lib =
        DLSYM_FROM_SO ? dlopen(DISCO_TEST_LIBDISCO, RTLD_NOW | RTLD_LOCAL) : dlopen(NULL, RTLD_NOW);
    ck_assert_msg(lib != NULL, "dlopen(%s): %s", DISCO_TEST_LIBDISCO, dlerror());
    struct ctors c = {0}; /* every member is set below (POSIX's dlsym cast) */
    *(void **)&c.null_ = sym(lib, "disco_value_null");
    *(void **)&c.bool_ = sym(lib, "disco_value_bool");
    *(void **)&c.int_ = sym(lib, "disco_value_int");
    *(void **)&c.float_ = sym(lib, "disco_value_float");
    *(void **)&c.str_ = sym(lib, "disco_value_str");
    *(void **)&c.bytes_ = sym(lib, "disco_value_bytes");
    *(void **)&c.shape_ = sym(lib, "disco_value_shape");
    *(void **)&c.dtype_ = sym(lib, "disco_value_dtype");
    *(void **)&c.device_ = sym(lib, "disco_value_device");
    *(void **)&c.opaque_ = sym(lib, "disco_value_opaque");
    *(void **)&c.tensor_ = sym(lib, "disco_value_tensor");
    compare_all(&c);
    /* The registration and context calls a binding needs are exported too. */
    sym(lib, "disco_register_func_ex");
    sym(lib, "disco_ctx_user");
    dlclose(lib);
}
END_TEST

Suite *suite_bind(void)
{
    Suite *s = suite_create("bind");
    TCase *tc = tcase_create("user");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_user_pointer_session);
    tcase_add_test(tc, test_user_pointer_local_rpc);
    tcase_add_test(tc, test_register_ex_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("ctors");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ctors_by_pointer);
    tcase_add_test(tc, test_ctors_by_dlsym);
    suite_add_tcase(s, tc);
    return s;
}
