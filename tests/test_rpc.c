/* test_rpc.c - RPC sessions: every operation over every transport, the local
 * session, a two-hop proxy chain, version mismatch, session timeout, a
 * client killed mid-call, malformed packets, handles after the connection
 * closed. Servers are the disco-rpc-server tool. */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workers/rpc/rpc_auth.h"
#include "workers/rpc/rpc_proto.h"
#include "disco/rpc.h"
#include "disco/session.h"
#include "disco/transport.h"
#include "disco/shm/wait.h"
#include "tests/rpc_util.h"
#include "tests/session_util.h"

static disco_rpc_t *connect_to(server_t *sv)
{
    disco_rpc_t *s;
    if (sv->address[0] != '\0') {
        CK_OK(disco_rpc_connect(sv->address, 10000, &s));
    } else {
        disco_transport_t *t;
        CK_OK(disco_transport_from_fds(sv->out, sv->in, &t));
        sv->out = sv->in = -1; /* the transport owns them now */
        CK_OK(disco_rpc_client(t, 10000, &s));
    }
    return s;
}

struct order {
    int next;
    int64_t seen[16];
};

static void on_done(void *p, disco_status_t st, const disco_value_t *ret)
{
    struct order *o = p;
    o->seen[o->next++] = st == DISCO_OK ? ret->v.i : -1;
}

static void count_done(void *p, disco_status_t st, const disco_value_t *ret)
{
    (void)ret;
    if (st == DISCO_OK)
        ++*(int *)p;
}

static void status_done(void *p, disco_status_t st, const disco_value_t *ret)
{
    (void)ret;
    *(disco_status_t *)p = st;
}

/* Tensors on the session's memory: allocated, copied up and back through
 * their devices; mismatches refused. */
static void remote_tensors(disco_rpc_t *s)
{
    int64_t shape[2] = {4, 5}, other[2] = {5, 4};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor r;
    CK_OK(disco_rpc_tensor_alloc(s, (DLDevice){kDLCPU, 0}, shape, 2, f32, &r));
    ck_assert_int_ge(r.device.device_type, DISCO_RPC_SESS_MASK);
    float in[20], out[20] = {0};
    for (int i = 0; i < 20; i++)
        in[i] = (float)i * 1.5f;
    DLTensor h_in = {.data = in, .device = {kDLCPU, 0}, .ndim = 2, .dtype = f32, .shape = shape};
    DLTensor h_out = h_in;
    h_out.data = out;
    CK_OK(disco_rpc_tensor_copy(s, &h_in, &r));
    CK_OK(disco_rpc_tensor_copy(s, &r, &h_out));
    ck_assert(memcmp(in, out, sizeof in) == 0);
    h_out.shape = other;
    CK_STATUS(disco_rpc_tensor_copy(s, &r, &h_out), DISCO_E_MISMATCH);
    CK_STATUS(disco_rpc_tensor_copy(s, &h_in, &h_out), DISCO_E_INVAL); /* host to host */
    CK_OK(disco_rpc_tensor_free(s, &r));
}

/* Every operation on a session: calls, values, errors, memory, async. */
static void exercise(disco_rpc_t *s)
{
    disco_rpc_handle_t add, echo, fail;
    CK_OK(disco_rpc_get_func(s, "test.add", &add));
    disco_value_t a[2] = {disco_value_int(40), disco_value_int(2)}, r;
    CK_OK(disco_rpc_call(s, add, a, 2, &r));
    ck_assert_int_eq(r.v.i, 42);
    /* values round-trip */
    CK_OK(disco_rpc_get_func(s, "test.echo", &echo));
    const int64_t dims[2] = {3, -1};
    const char bin[4] = {0, 1, 0, 2};
    disco_value_t vals[] = {disco_value_null(),
                            disco_value_bool(true),
                            disco_value_int(INT64_MIN),
                            disco_value_float(-0.0),
                            disco_value_str("héllo"),
                            disco_value_bytes(bin, 4),
                            disco_value_shape(dims, 2),
                            disco_value_dtype((DLDataType){kDLBfloat, 16, 1}),
                            disco_value_device((DLDevice){kDLCUDA, 1}),
                            disco_value_opaque(77)};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        CK_OK(disco_rpc_call(s, echo, &vals[i], 1, &r));
        ck_assert_msg(disco_value_equal(&r, &vals[i]), "echo of %s", disco_type_name(vals[i].type));
        disco_value_clear(&r);
    }
    /* errors travel with their code and message; the session goes on */
    disco_rpc_handle_t none;
    CK_STATUS(disco_rpc_get_func(s, "test.nope", &none), DISCO_E_NO_FUNC);
    CK_HAS("test.nope");
    CK_OK(disco_rpc_get_func(s, "test.fail_on", &fail));
    disco_value_t f[2] = {disco_value_int(-1), disco_value_str("broken input")};
    CK_STATUS(disco_rpc_call(s, fail, f, 2, &r), DISCO_E_REMOTE);
    CK_HAS("broken input");
    CK_STATUS(disco_rpc_call(s, add, a, 1, &r), DISCO_E_ARG_COUNT);
    /* memory: alloc, copy in chunks both ways, bounds, free */
    size_t n = 3 * DISCO_RPC_CHUNK + 5;
    unsigned char *src = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    disco_rpc_handle_t mem;
    DLDevice cpu = {kDLCPU, 0};
    CK_OK(disco_rpc_dev_alloc(s, cpu, n, 64, &mem));
    CK_OK(disco_rpc_copy_to_remote(s, src, mem, 0, n));
    CK_OK(disco_rpc_copy_from_remote(s, mem, 0, back, n));
    ck_assert_msg(memcmp(src, back, n) == 0, "copied bytes differ");
    CK_OK(disco_rpc_copy_from_remote(s, mem, 7, back, 10));
    ck_assert(memcmp(src + 7, back, 10) == 0);
    CK_STATUS(disco_rpc_copy_to_remote(s, src, mem, n - 2, 3), DISCO_E_INVAL);
    CK_OK(disco_rpc_stream_sync(s, cpu));
    CK_STATUS(disco_rpc_dev_alloc(s, (DLDevice){kDLCUDA, 0}, 16, 64, &none), DISCO_E_NO_DEVICE);
    /* a size beyond the machine is refused cleanly (fuzzing found the
     * local session handing it to the allocator) */
    disco_status_t big = disco_rpc_dev_alloc(s, cpu, 1ULL << 62, 64, &none);
    ck_assert_msg(big == DISCO_E_NOMEM || big == DISCO_E_HEAP_EXHAUSTED, "alloc of 2^62: %s",
                  disco_err_name(big));
    CK_OK(disco_rpc_free_handle(s, mem));
    CK_STATUS(disco_rpc_copy_to_remote(s, src, mem, 0, 1), DISCO_E_BAD_REG);
    CK_STATUS(disco_rpc_free_handle(s, mem), DISCO_E_BAD_REG);
    free(src);
    free(back);
    /* asynchronous calls complete in order, with their values */
    struct order o = {0};
    for (int i = 0; i < 10; i++) {
        disco_value_t b[2] = {disco_value_int(i), disco_value_int(100)};
        CK_OK(disco_rpc_call_async(s, add, b, 2, on_done, &o));
    }
    CK_OK(disco_rpc_wait(s));
    ck_assert_int_eq(o.next, 10);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(o.seen[i], 100 + i);
    /* asynchronous copies report their completion */
    int done = 0;
    unsigned char out[64] = {1, 2, 3}, in[64] = {0};
    CK_OK(disco_rpc_dev_alloc(s, cpu, sizeof out, 64, &mem));
    CK_OK(disco_rpc_copy_to_remote_async(s, out, mem, 0, sizeof out, count_done, &done));
    CK_OK(disco_rpc_copy_from_remote_async(s, mem, 0, in, sizeof in, count_done, &done));
    CK_OK(disco_rpc_wait(s));
    ck_assert_int_eq(done, 2);
    ck_assert(memcmp(in, out, sizeof in) == 0);
    disco_status_t bad = DISCO_OK; /* a bad range is the copy's error, given to done */
    CK_OK(disco_rpc_copy_to_remote_async(s, out, mem, 60, 8, status_done, &bad));
    CK_OK(disco_rpc_wait(s));
    ck_assert_int_eq(bad, DISCO_E_INVAL);
    CK_OK(disco_rpc_free_handle(s, mem));
    CK_OK(disco_rpc_free_handle(s, add));
    if (!disco_rpc_is_local(s))
        remote_tensors(s);
}

/* Starts a server on transport kind k (0 unix, 1 tcp, 2 shm, 3 stdio
 * pipes); tag keeps socket paths of different tests apart. */
static void start_server_on(server_t *sv, int k, const char *tag)
{
    static const char *const kinds[] = {"unix", "tcp", "shm", "pipe"};
    char addr[128];
    if (k == 1)
        snprintf(addr, sizeof addr, "tcp:127.0.0.1:0");
    else
        snprintf(addr, sizeof addr, "%s:/tmp/disco-test-rpc-%s-%d.sock", kinds[k], tag,
                 (int)getpid());
    start_server(sv, k == 3 ? NULL : addr, NULL, NULL, NULL);
}

/* Every operation over unix, tcp, shm and stdio pipes. */
START_TEST(test_ops_every_transport)
{
    server_t sv;
    start_server_on(&sv, _i, "o");
    disco_rpc_t *s = connect_to(&sv);
    ck_assert(!disco_rpc_is_local(s));
    DLDevice d = disco_rpc_device(s, (DLDevice){kDLCPU, 0});
    ck_assert_int_ge(d.device_type, DISCO_RPC_SESS_MASK);
    exercise(s);
    disco_rpc_close(s);
    stop_server(&sv);
}
END_TEST

struct echo_check {
    int next;
    int bad;
};

/* Checks that echo answer i carries bytes all equal to (i & 0xff). */
static void echo_done(void *p, disco_status_t st, const disco_value_t *ret)
{
    struct echo_check *e = p;
    int i = e->next++;
    if (st != DISCO_OK || ret->type != DISCO_T_BYTES || ret->len != 2048 ||
        ((const unsigned char *)ret->v.bytes)[2047] != (unsigned char)i)
        e->bad++;
}

/* Client sessions pipeline: thousands of asynchronous calls whose answers
 * outgrow every transport's buffer neither deadlock nor time out; a copy
 * of several chunks is still in flight after it returns and completes at
 * the wait; an error the server finds reaches the callback. */
START_TEST(test_async_pipelining)
{
    server_t sv;
    start_server_on(&sv, _i, "p");
    disco_rpc_t *s = connect_to(&sv);
    disco_rpc_handle_t echo;
    CK_OK(disco_rpc_get_func(s, "test.echo", &echo));
    static unsigned char blob[2048];
    struct echo_check e = {0};
    for (int i = 0; i < 4000; i++) { /* 8 MiB of answers */
        memset(blob, i & 0xff, sizeof blob);
        disco_value_t b = disco_value_bytes(blob, sizeof blob);
        CK_OK(disco_rpc_call_async(s, echo, &b, 1, echo_done, &e));
    }
    CK_OK(disco_rpc_wait(s));
    ck_assert_int_eq(e.next, 4000);
    ck_assert_int_eq(e.bad, 0);

    size_t n = 3 * DISCO_RPC_CHUNK + 11;
    unsigned char *src = malloc(n), *back = calloc(1, n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    disco_rpc_handle_t mem;
    CK_OK(disco_rpc_dev_alloc(s, (DLDevice){kDLCPU, 0}, n, 64, &mem));
    disco_status_t to = 1, from = 1, bad = 1;
    CK_OK(disco_rpc_copy_to_remote_async(s, src, mem, 0, n, status_done, &to));
    CK_OK(disco_rpc_copy_from_remote_async(s, mem, 0, back, n, status_done, &from));
    ck_assert_msg(to == 1 && from == 1, "copies completed before the wait");
    CK_OK(disco_rpc_copy_to_remote_async(s, src, mem, n - 2, 3, status_done, &bad));
    CK_OK(disco_rpc_wait(s));
    ck_assert_int_eq(to, DISCO_OK);
    ck_assert_int_eq(from, DISCO_OK);
    ck_assert_int_eq(bad, DISCO_E_INVAL);
    ck_assert_msg(memcmp(src, back, n) == 0, "bytes differ after asynchronous copies");
    CK_OK(disco_rpc_free_handle(s, mem));
    free(src);
    free(back);
    disco_rpc_close(s);
    stop_server(&sv);
}
END_TEST

/* The local session does the same in process, and is local. */
START_TEST(test_local_session)
{
    void *lib = dlopen(DISCO_TEST_LIB, RTLD_NOW | RTLD_GLOBAL);
    ck_assert_ptr_nonnull(lib);
    disco_rpc_t *s;
    CK_OK(disco_rpc_local(&s));
    ck_assert(disco_rpc_is_local(s));
    DLDevice d = disco_rpc_device(s, (DLDevice){kDLCPU, 0});
    ck_assert_int_eq(d.device_type, kDLCPU);
    exercise(s);
    disco_rpc_close(s);
}
END_TEST

/* Each Disco worker as an RPC session over the session's rings: the same
 * operations, and bytes copied into a worker's memory are what the worker
 * sees. */
START_TEST(test_disco_worker_views)
{
    disco_session_config_t cfg = disco_session_config_default(3);
    cfg.heap_bytes = 64u << 20;
    disco_session_t *ds = tu_open_with_testlib(&cfg);
    for (int w = 0; w < 3; w++) {
        disco_rpc_t *s;
        CK_OK(disco_rpc_from_worker(ds, w, &s));
        ck_assert(!disco_rpc_is_local(s));
        exercise(s);
        /* the worker reads what the copy wrote */
        disco_rpc_handle_t mem;
        unsigned char bytes[100];
        for (int i = 0; i < 100; i++)
            bytes[i] = (unsigned char)(i + w);
        CK_OK(disco_rpc_dev_alloc(s, (DLDevice){kDLCPU, 0}, 100, 64, &mem));
        CK_OK(disco_rpc_copy_to_remote(s, bytes, mem, 0, 100));
        disco_value_t got;
        CK_OK(disco_session_debug_get(ds, mem, w, &got));
        ck_assert_uint_eq(got.len, 100);
        ck_assert(memcmp(got.v.bytes, bytes, 100) == 0);
        disco_value_clear(&got);
        CK_OK(disco_rpc_free_handle(s, mem));
        disco_rpc_close(s);
    }
    disco_rpc_t *bad;
    CK_STATUS(disco_rpc_from_worker(ds, 3, &bad), DISCO_E_INVAL);
    disco_session_close(ds);
}
END_TEST

/* client -> server A (proxy) -> server B (local): everything still works. */
START_TEST(test_proxy_chain)
{
    char b_addr[128];
    snprintf(b_addr, sizeof b_addr, "unix:/tmp/disco-test-rpc-b-%d.sock", (int)getpid());
    server_t b, a;
    start_server(&b, b_addr, NULL, NULL, NULL);
    const char *extra[] = {"--proxy", b.address, "--proxy-token-file", b.token, NULL};
    start_server_args(&a, "tcp:127.0.0.1:0", extra, NULL);
    disco_rpc_t *s = connect_to(&a);
    exercise(s);
    disco_rpc_close(s);
    stop_server(&a);
    stop_server(&b);
}
END_TEST

/* A server of another protocol version is refused at connect, with both
 * versions named. */
START_TEST(test_version_mismatch)
{
    char addr[128], *env[] = {"DISCO_RPC_TEST_VERSION=99", NULL};
    snprintf(addr, sizeof addr, "unix:/tmp/disco-test-rpc-v-%d.sock", (int)getpid());
    server_t sv;
    start_server(&sv, addr, NULL, NULL, env);
    disco_rpc_t *s;
    CK_STATUS(disco_rpc_connect(sv.address, 10000, &s), DISCO_E_VERSION);
    CK_HAS("client speaks disco-rpc 2");
    CK_HAS("server speaks disco-rpc 99");
    stop_server(&sv);
}
END_TEST

/* A hung call past the session timeout: the client gets the distinct
 * session-timeout error, and the server serves the next client. */
START_TEST(test_session_timeout)
{
    char addr[128];
    snprintf(addr, sizeof addr, "shm:/tmp/disco-test-rpc-t-%d.sock", (int)getpid());
    server_t sv;
    start_server(&sv, addr, NULL, "300", NULL);
    disco_rpc_t *s = connect_to(&sv);
    disco_rpc_handle_t hang;
    CK_OK(disco_rpc_get_func(s, "test.hang", &hang));
    disco_value_t w = disco_value_int(0), r;
    int64_t t0 = disco_now_ns();
    CK_STATUS(disco_rpc_call(s, hang, &w, 1, &r), DISCO_E_SESSION_TIMEOUT);
    CK_HAS("session has expired");
    int64_t took = disco_now_ns() - t0;
    ck_assert_msg(took >= 250000000 && took < 5000000000LL, "timeout after %lld ns",
                  (long long)took);
    CK_STATUS(disco_rpc_call(s, hang, &w, 1, &r), DISCO_E_SESSION_TIMEOUT); /* stays told */
    CK_OK(disco_rpc_free_handle(s, hang)); /* harmless after the end */
    disco_rpc_close(s);
    s = connect_to(&sv);
    disco_rpc_handle_t add;
    CK_OK(disco_rpc_get_func(s, "test.add", &add));
    disco_value_t a[2] = {disco_value_int(1), disco_value_int(2)};
    CK_OK(disco_rpc_call(s, add, a, 2, &r));
    ck_assert_int_eq(r.v.i, 3);
    disco_rpc_close(s);
    stop_server(&sv);
}
END_TEST

/* A client killed in the middle of a call leaves the server serving. */
START_TEST(test_client_killed_mid_call)
{
    char addr[128];
    snprintf(addr, sizeof addr, "unix:/tmp/disco-test-rpc-k-%d.sock", (int)getpid());
    server_t sv;
    start_server(&sv, addr, NULL, "10000", NULL);
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t c = fork();
    if (c == 0) {
        disco_rpc_t *s;
        disco_rpc_handle_t spin;
        if (disco_rpc_connect(sv.address, 10000, &s) != DISCO_OK ||
            disco_rpc_get_func(s, "test.spin_ms", &spin) != DISCO_OK)
            _exit(1);
        disco_value_t ms = disco_value_int(300);
        disco_rpc_call_async(s, spin, &ms, 1, on_done, NULL); /* sent; never waited for */
        (void)!write(ready[1], "x", 1);
        for (;;)
            pause();
    }
    char x;
    ck_assert_int_eq(read(ready[0], &x, 1), 1);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    disco_rpc_t *s = connect_to(&sv);
    disco_rpc_handle_t add;
    CK_OK(disco_rpc_get_func(s, "test.add", &add));
    disco_value_t a[2] = {disco_value_int(5), disco_value_int(6)}, r;
    CK_OK(disco_rpc_call(s, add, a, 2, &r));
    ck_assert_int_eq(r.v.i, 11);
    disco_rpc_close(s);
    stop_server(&sv);
    close(ready[0]);
    close(ready[1]);
}
END_TEST

/* Speaks raw packets to a server: a request before authentication ends the
 * connection; after it, malformed packets get errors, the server survives
 * and serves the next client. */
START_TEST(test_malformed_packets)
{
    char addr[128];
    snprintf(addr, sizeof addr, "unix:/tmp/disco-test-rpc-m-%d.sock", (int)getpid());
    server_t sv;
    start_server(&sv, addr, NULL, NULL, NULL);
    disco_transport_t *t;
    int64_t dl = disco_now_ns() + 10000000000LL;
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    disco__rpc_buf_t b;
    CK_OK(disco__rpc_buf_init(&b));
    disco_frame_hdr_t h;
    disco_value_t v[4];
    /* a request before the handshake: refused, and the connection ends */
    disco_value_t name = disco_value_str("disco.noop");
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_GET_FUNC, 1, &name, 1, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_EXCEPTION);
    ck_assert_int_eq(v[0].v.i, DISCO_E_AUTH);
    CK_STATUS(disco__rpc_recv(t, &b, &h, v, 4, dl), DISCO_E_CLOSED);
    disco_transport_close(t);
    /* the handshake, then an unknown code, then wrong argument types */
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    CK_OK(disco_rpc_token_read(sv.token, tok));
    raw_handshake(t, &b, tok, dl);
    CK_OK(disco__rpc_send(t, &b, 999, 3, NULL, 0, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(v[0].v.i, DISCO_E_PROTOCOL);
    disco_value_t wrong = disco_value_int(5);
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_GET_FUNC, 4, &wrong, 1, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(v[0].v.i, DISCO_E_BAD_TYPE);
    /* a whole packet whose frame is garbage: an error, and the stream goes on */
    uint64_t junk[4] = {24, 0x0000000100000003ULL, 5, 0xffffffff000000ffULL};
    CK_OK(disco_transport_send(t, junk, sizeof junk, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_EXCEPTION);
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_GET_FUNC, 6, &name, 1, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_RETURN);
    /* an oversized length: the server says so and hangs up */
    uint64_t huge = 1ULL << 40;
    CK_OK(disco_transport_send(t, &huge, 8, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(v[0].v.i, DISCO_E_MSG_TOO_BIG);
    CK_STATUS(disco__rpc_recv(t, &b, &h, v, 4, dl), DISCO_E_CLOSED);
    disco_transport_close(t);
    /* a truncated packet, then gone */
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    uint64_t half[2] = {64, 0};
    CK_OK(disco_transport_send(t, half, sizeof half, dl));
    disco_transport_close(t);
    disco__rpc_buf_free(&b);
    /* still serving */
    disco_rpc_t *s = connect_to(&sv);
    disco_rpc_handle_t f;
    CK_OK(disco_rpc_get_func(s, "disco.noop", &f));
    disco_rpc_close(s);
    stop_server(&sv);
}
END_TEST

/* When the server is gone, calls fail with a closed connection and frees
 * are harmless. */
START_TEST(test_handles_after_close)
{
    char addr[128];
    snprintf(addr, sizeof addr, "tcp:127.0.0.1:0");
    server_t sv;
    start_server(&sv, addr, NULL, NULL, NULL);
    disco_rpc_t *s = connect_to(&sv);
    disco_rpc_handle_t mem, f;
    CK_OK(disco_rpc_dev_alloc(s, (DLDevice){kDLCPU, 0}, 100, 64, &mem));
    CK_OK(disco_rpc_get_func(s, "test.add", &f));
    kill(sv.pid, SIGKILL); /* the server and, with it, the connection */
    waitpid(sv.pid, NULL, 0);
    unlink(sv.token); /* it could not */
    disco_value_t a[2] = {disco_value_int(1), disco_value_int(2)}, r;
    disco_status_t st = disco_rpc_call(s, f, a, 2, &r);
    ck_assert_msg(st == DISCO_E_CLOSED, "call after the server died: %s", disco_err_name(st));
    CK_OK(disco_rpc_free_handle(s, mem));
    CK_OK(disco_rpc_dev_free(s, (DLDevice){kDLCPU, 0}, mem));
    disco_rpc_close(s);
    close(sv.out);
    close(sv.in);
}
END_TEST

Suite *suite_rpc(void)
{
    Suite *s = suite_create("rpc");
    TCase *tc = tcase_create("rpc");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_ops_every_transport, 0, 4);
    tcase_add_loop_test(tc, test_async_pipelining, 0, 4);
    tcase_add_test(tc, test_local_session);
    tcase_add_test(tc, test_disco_worker_views);
    tcase_add_test(tc, test_proxy_chain);
    tcase_add_test(tc, test_version_mismatch);
    tcase_add_test(tc, test_session_timeout);
    tcase_add_test(tc, test_client_killed_mid_call);
    tcase_add_test(tc, test_malformed_packets);
    tcase_add_test(tc, test_handles_after_close);
    suite_add_tcase(s, tc);
    return s;
}
