/* cxx_api.cpp - the public headers compile as C++ and the library works
 * from it: `make test` builds this file with g++ -std=c++17 -Wall -Wextra
 * -Werror against <disco/disco.h> and libdisco.a, and runs it. It checks
 * the parts whose C++ reading differs from C: the value constructors
 * (member assignments, not designated initializers), the wait structs
 * (std::atomic members standing for C's _Atomic ones: the C library reads
 * an abort word a C++ program set, and the inline wake runs in C++), and a
 * session opened from C++ calling a function registered with DISCO_FUNC.
 * Prints "cxx_api: ok" and exits 0, or names the failed check and exits 1. */
#include <disco/disco.h>
/* The low-level shared-memory headers stand outside the umbrella and
 * compile as C++ too. */
#include <disco/shm/heap.h>
#include <disco/shm/ring.h>
#include <disco/shm/segment.h>
#include <disco/shm/wait.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "cxx_api: %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,    \
                         disco_last_error());                                                      \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* One layout for C and C++: the waitq fills its own cache line. */
static_assert(sizeof(disco_waitq_t) == 64 && alignof(disco_waitq_t) == 64, "disco_waitq_t layout");
static_assert(DISCO_STATUS_MIN < 0, "DISCO_STATUS_MIN is a constant expression in C++");

static disco_status_t twice(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                            disco_value_t *ret)
{
    (void)ctx;
    (void)nargs;
    *ret = disco_value_int(args[0].v.i * 2);
    return DISCO_OK;
}
DISCO_FUNC("cxx.twice", "i", twice)

/* args[0] times the int the registration's user pointer points at. */
static disco_status_t times_user(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                 disco_value_t *ret)
{
    (void)nargs;
    *ret = disco_value_int(args[0].v.i * *static_cast<const int64_t *>(disco_ctx_user(ctx)));
    return DISCO_OK;
}
static const int64_t three = 3;

static bool never(void *arg)
{
    (void)arg;
    return false;
}

/* Values built in C++ encode and decode through the C codec unchanged. */
static void values(void)
{
    const int64_t dims[] = {2, 3};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDevice cpu = {kDLCPU, 0};
    disco_value_t in[] = {disco_value_null(),         disco_value_bool(true),
                          disco_value_int(-7),        disco_value_float(2.5),
                          disco_value_str("hello"),   disco_value_bytes("abc", 3),
                          disco_value_shape(dims, 2), disco_value_dtype(f32),
                          disco_value_device(cpu),    disco_value_opaque(42)};
    const uint32_t n = sizeof in / sizeof in[0];
    alignas(8) unsigned char buf[1024];
    size_t len = 0;
    CHECK(disco_frame_encode(7, 99, in, n, buf, sizeof buf, &len) == DISCO_OK);
    disco_frame_hdr_t hdr;
    disco_value_t out[16];
    CHECK(disco_frame_decode(buf, len, &hdr, out, 16) == DISCO_OK);
    CHECK(hdr.code == 7 && hdr.seq == 99 && hdr.nargs == n);
    for (uint32_t i = 0; i < n && i < hdr.nargs; i++)
        CHECK(disco_value_equal(&in[i], &out[i]));
    disco_value_t copy;
    CHECK(disco_value_copy(&in[4], &copy) == DISCO_OK);
    CHECK(copy.type == DISCO_T_STR && std::strcmp(copy.v.str, "hello") == 0);
    disco_value_clear(&copy);
    CHECK(std::strcmp(disco_err_name(DISCO_E_TIMEOUT), "DISCO_E_TIMEOUT") == 0);
}

/* A wait ends with the value of an abort word that C++ set in a
 * std::atomic; the inline wake runs on a waitq no one waits on. */
static void waits(void)
{
    static disco_waitq_t q; /* zero: an empty queue */
    disco_waitq_wake(&q);
    std::atomic<int32_t> broken(DISCO_E_BROKEN);
    disco_wait_t w;
    std::memset(&w, 0, sizeof w);
    w.abort_word = &broken;
    w.timeout_ns = 10LL * 1000000000LL; /* a bound in case the word went unread */
    CHECK(disco_wait_until(&q, never, nullptr, &w) == DISCO_E_BROKEN);
}

/* What bindings use: the exported constructors (found by name, as an FFI
 * finds them) build what the inline ones build, and disco_set_error's
 * status needs no cast in C++. */
static void bindings(void)
{
    using int_ctor = disco_value_t (*)(int64_t);
    using str_ctor = disco_value_t (*)(const char *);
    auto int_sym = reinterpret_cast<int_ctor>(dlsym(RTLD_DEFAULT, "disco_value_int"));
    auto str_sym = reinterpret_cast<str_ctor>(dlsym(RTLD_DEFAULT, "disco_value_str"));
    CHECK(int_sym != nullptr && str_sym != nullptr);
    if (int_sym != nullptr && str_sym != nullptr) {
        disco_value_t a = disco_value_int(-5), b = int_sym(-5);
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
        a = disco_value_str("x");
        b = str_sym("x");
        CHECK(disco_value_equal(&a, &b) && a.len == b.len);
    }
    disco_status_t st = disco_set_error(DISCO_E_INVAL, "from C++");
    CHECK(st == DISCO_E_INVAL);
    CHECK(disco_register_func_ex("cxx.thrice", "i", times_user, const_cast<int64_t *>(&three)) ==
          DISCO_OK);
}

/* A session opened from C++ runs functions registered from C++ (one of them
 * with a user pointer). */
static void session(void)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    disco_session_t *s = nullptr;
    if (disco_session_open(&cfg, &s) != DISCO_OK) {
        CHECK(!"disco_session_open");
        return;
    }
    disco_dref_t f, r;
    CHECK(disco_session_get_func(s, "cxx.twice", &f) == DISCO_OK);
    disco_value_t arg = disco_value_int(21);
    CHECK(disco_session_call(s, f, &arg, 1, &r) == DISCO_OK);
    CHECK(disco_session_sync(s, 1) == DISCO_OK);
    disco_value_t v;
    if (disco_session_debug_get(s, r, 1, &v) == DISCO_OK) {
        CHECK(v.type == DISCO_T_INT && v.v.i == 42);
        disco_value_clear(&v);
    } else {
        CHECK(!"disco_session_debug_get");
    }
    CHECK(disco_session_free_reg(s, r) == DISCO_OK);
    CHECK(disco_session_free_reg(s, f) == DISCO_OK);
    CHECK(disco_session_call_by_name(s, "cxx.thrice", &arg, 1, &r) == DISCO_OK);
    if (disco_session_debug_get(s, r, 1, &v) == DISCO_OK) {
        CHECK(v.type == DISCO_T_INT && v.v.i == 63);
        disco_value_clear(&v);
    } else {
        CHECK(!"disco_session_debug_get (cxx.thrice)");
    }
    CHECK(disco_session_free_reg(s, r) == DISCO_OK);
    disco_session_close(s);
}

int main()
{
    values();
    waits();
    bindings();
    session();
    if (failures != 0)
        return 1;
    std::printf("cxx_api: ok\n");
    return 0;
}
