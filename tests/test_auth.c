/* test_auth.c - who may use an RPC server (issue 14, part 1): the token
 * handshake (wrong, missing, replayed, a server without the token), token
 * files, the load_library privilege, loopback binding, peer uids. Servers
 * are the disco-rpc-server tool; test_rpc_server.c covers its connections. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/rpc.h"
#include "disco/shm/segment.h"
#include "disco/transport.h"
#include "tests/rpc_util.h"
#include "tests/testutil.h"

#define DEMO_LIB DISCO_TEST_BIN "/../lib/libdisco_demo.so"

/* A server on tu_kind(k) with extra args (rpc_util.h). */
static void start_on(server_t *sv, int k, const char *tag, const char *const *extra)
{
    start_on_kind(sv, "auth", k, tag, extra);
}

/* A new token file in a fresh private directory; path_out gets its path. */
static void other_token(char *path_out, size_t cap, uint8_t *tok)
{
    char dir[] = "/tmp/disco-test-tok-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/t.token", dir);
    CK_OK(disco_rpc_token_create(p, tok, path_out, cap));
}

/* A client holding another token is refused with DISCO_E_AUTH, on every
 * listener kind; the server lives on and takes the right token. */
START_TEST(test_wrong_token)
{
    server_t sv;
    start_on(&sv, _i, "w", NULL);
    char path[PATH_MAX];
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    other_token(path, sizeof path, tok);
    disco_rpc_client_config_t cfg = {.call_timeout_ms = 10000, .token_file = path};
    disco_rpc_t *s;
    CK_STATUS(disco_rpc_connect_with(sv.address, &cfg, &s), DISCO_E_AUTH);
    CK_HAS("proof does not match");
    CK_OK(disco_rpc_connect(sv.address, 10000, &s)); /* $DISCO_TOKEN_FILE: the right one */
    disco_rpc_close(s);
    stop_server(&sv);
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}
END_TEST

/* Without a token the client refuses to start (DISCO_E_AUTH naming
 * DISCO_TOKEN_FILE); a raw client that skips the proof gets DISCO_E_AUTH
 * from the server and the connection ends; a client over an open transport
 * with no token is told the server requires one. */
START_TEST(test_no_token)
{
    server_t sv;
    start_on(&sv, 0, "n", NULL);
    unsetenv(DISCO_RPC_TOKEN_ENV);
    disco_rpc_t *s;
    CK_STATUS(disco_rpc_connect(sv.address, 10000, &s), DISCO_E_AUTH);
    CK_HAS(DISCO_RPC_TOKEN_ENV);
    int64_t dl = disco_now_ns() + 10000000000LL;
    disco_transport_t *t;
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    disco__rpc_buf_t b;
    CK_OK(disco__rpc_buf_init(&b));
    disco_frame_hdr_t h;
    disco_value_t v[4];
    uint8_t cn[DISCO__RPC_NONCE_BYTES] = {9};
    disco_value_t hello[3] = {disco_value_str(DISCO_RPC_MAGIC), disco_value_int(DISCO_RPC_VERSION),
                              disco_value_bytes(cn, sizeof cn)};
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_INIT, 1, hello, 3, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_RETURN);
    disco_value_t name = disco_value_str("disco.echo");
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_GET_FUNC, 2, &name, 1, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_EXCEPTION);
    ck_assert_int_eq(v[0].v.i, DISCO_E_AUTH);
    CK_STATUS(disco__rpc_recv(t, &b, &h, v, 4, dl), DISCO_E_CLOSED);
    disco_transport_close(t);
    /* an empty proof is no proof either */
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_INIT, 1, hello, 3, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    disco_value_t empty = disco_value_bytes(cn, 0);
    CK_OK(disco__rpc_send(t, &b, DISCO_RPC_AUTH, 2, &empty, 1, dl));
    CK_OK(disco__rpc_recv(t, &b, &h, v, 4, dl));
    ck_assert_int_eq(v[0].v.i, DISCO_E_AUTH);
    disco_transport_close(t);
    CK_OK(disco_transport_connect(sv.address, dl, &t));
    CK_STATUS(disco_rpc_client(t, 10000, &s), DISCO_E_AUTH);
    CK_HAS("requires a token");
    disco__rpc_buf_free(&b);
    stop_server(&sv);
}
END_TEST

/* Relays one packet (u64 length + frame) from a to b, appending it to rec
 * when rec is not NULL. */
static void relay(disco_transport_t *a, disco_transport_t *b, unsigned char *rec, size_t *rec_len,
                  int64_t dl)
{
    uint64_t len;
    unsigned char buf[4096];
    CK_OK(disco_transport_recv(a, &len, 8, dl));
    ck_assert_uint_le(len, sizeof buf);
    CK_OK(disco_transport_recv(a, buf, len, dl));
    CK_OK(disco_transport_send(b, &len, 8, dl));
    CK_OK(disco_transport_send(b, buf, len, dl));
    if (rec != NULL) {
        memcpy(rec + *rec_len, &len, 8);
        memcpy(rec + *rec_len + 8, buf, len);
        *rec_len += 8 + len;
    }
}

struct client_run {
    disco_transport_t *t;
    const char *token_file;
    disco_status_t st;
};

static void *client_thread(void *p)
{
    struct client_run *r = p;
    disco_rpc_client_config_t cfg = {.call_timeout_ms = 10000, .token_file = r->token_file};
    disco_rpc_t *s;
    r->st = disco_rpc_client_with(r->t, &cfg, &s);
    if (r->st == DISCO_OK)
        disco_rpc_close(s);
    return NULL;
}

/* A recorded handshake replayed on a new connection fails: the bytes a real
 * client sent (hello and proof, relayed through this test) are sent again
 * verbatim; the server's fresh nonce makes the old proof wrong. */
START_TEST(test_replayed_handshake)
{
    server_t sv;
    start_on(&sv, 1, "r", NULL);
    int64_t dl = disco_now_ns() + 20000000000LL;
    int sp[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    struct client_run r = {.token_file = sv.token};
    disco_transport_t *mine, *up;
    CK_OK(disco_transport_from_fds(sp[0], sp[0], &r.t));
    CK_OK(disco_transport_from_fds(sp[1], sp[1], &mine));
    CK_OK(disco_transport_connect(sv.address, dl, &up));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, client_thread, &r), 0);
    static unsigned char rec[8192];
    size_t rec_len = 0;
    for (int i = 0; i < 2; i++) { /* hello, proof: recorded; the answers relayed back */
        relay(mine, up, rec, &rec_len, dl);
        relay(up, mine, NULL, NULL, dl);
    }
    relay(mine, up, NULL, NULL, dl); /* the client's shutdown */
    relay(up, mine, NULL, NULL, dl);
    pthread_join(th, NULL);
    CK_OK(r.st); /* the recorded handshake was a good one */
    disco_transport_close(up);
    disco_transport_close(mine);
    /* the replay */
    CK_OK(disco_transport_connect(sv.address, dl, &up));
    CK_OK(disco_transport_send(up, rec, rec_len, dl));
    disco__rpc_buf_t b;
    CK_OK(disco__rpc_buf_init(&b));
    disco_frame_hdr_t h;
    disco_value_t v[4];
    CK_OK(disco__rpc_recv(up, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_RETURN); /* a hello is answered, with a new nonce */
    CK_OK(disco__rpc_recv(up, &b, &h, v, 4, dl));
    ck_assert_int_eq(h.code, DISCO_RPC_EXCEPTION);
    ck_assert_int_eq(v[0].v.i, DISCO_E_AUTH);
    CK_STATUS(disco__rpc_recv(up, &b, &h, v, 4, dl), DISCO_E_CLOSED);
    disco_transport_close(up);
    disco__rpc_buf_free(&b);
    stop_server(&sv);
}
END_TEST

struct fake_server {
    disco_transport_t *t;
    int mode; /* 0: say "no authentication"; 1: ask for a proof, answer a bogus one */
};

static void *fake_server_thread(void *p)
{
    struct fake_server *f = p;
    disco__rpc_buf_t b;
    disco_frame_hdr_t h;
    disco_value_t v[4];
    uint8_t sn[DISCO__RPC_NONCE_BYTES] = {7}, bogus[DISCO__RPC_PROOF_BYTES] = {1};
    if (disco__rpc_buf_init(&b) != DISCO_OK ||
        disco__rpc_recv(f->t, &b, &h, v, 4, disco_now_ns() + 10000000000LL) != DISCO_OK)
        return NULL;
    disco_value_t r[3] = {disco_value_int(DISCO_RPC_VERSION), disco_value_bytes(sn, sizeof sn),
                          disco_value_int(f->mode)};
    disco__rpc_send(f->t, &b, DISCO_RPC_RETURN, h.seq, r, 3, 0);
    if (f->mode == 1 &&
        disco__rpc_recv(f->t, &b, &h, v, 4, disco_now_ns() + 10000000000LL) == DISCO_OK) {
        disco_value_t pr = disco_value_bytes(bogus, sizeof bogus);
        disco__rpc_send(f->t, &b, DISCO_RPC_RETURN, h.seq, &pr, 1, 0);
    }
    disco__rpc_buf_free(&b);
    return NULL;
}

/* --stdio serves its parent without a token, or with one when given
 * --token-file: then a client without it is refused and one with it is
 * served. */
START_TEST(test_stdio_token)
{
    char path[PATH_MAX];
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    other_token(path, sizeof path, tok);
    for (int with = 0; with < 2; with++) {
        const char *extra[] = {"--token-file", path, NULL};
        server_t sv;
        start_server_args(&sv, NULL, extra, NULL);
        disco_transport_t *t;
        CK_OK(disco_transport_from_fds(sv.out, sv.in, &t));
        disco_rpc_client_config_t cfg = {.call_timeout_ms = 10000, .token = with ? tok : NULL};
        disco_rpc_t *s;
        if (with) {
            CK_OK(disco_rpc_client_with(t, &cfg, &s));
            disco_rpc_handle_t f;
            CK_OK(disco_rpc_get_func(s, "test.add", &f));
            disco_rpc_close(s);
        } else {
            CK_STATUS(disco_rpc_client_with(t, &cfg, &s), DISCO_E_AUTH);
            CK_HAS("requires a token");
        }
        int ws;
        ck_assert_int_eq(waitpid(sv.pid, &ws, 0), sv.pid);
    }
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}
END_TEST

/* The client checks the server too: a server that cannot prove it holds
 * the token, or that claims to need none, is refused by a client holding
 * one. */
START_TEST(test_client_checks_server)
{
    char path[PATH_MAX];
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    other_token(path, sizeof path, tok);
    for (int mode = 0; mode < 2; mode++) {
        int sp[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        struct fake_server f = {.mode = mode};
        disco_transport_t *t;
        CK_OK(disco_transport_from_fds(sp[0], sp[0], &t));
        CK_OK(disco_transport_from_fds(sp[1], sp[1], &f.t));
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, fake_server_thread, &f), 0);
        disco_rpc_client_config_t cfg = {.call_timeout_ms = 10000, .token = tok};
        disco_rpc_t *s;
        CK_STATUS(disco_rpc_client_with(t, &cfg, &s), DISCO_E_AUTH);
        CK_HAS(mode == 0 ? "does not authenticate" : "server's proof does not match");
        pthread_join(th, NULL);
        disco_transport_close(f.t);
    }
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}
END_TEST

/* Token files: made 0600 and exclusively (never over an existing file or
 * through a symlink); read only when private and well formed. */
START_TEST(test_token_files)
{
    char path[PATH_MAX], again[PATH_MAX], dflt[PATH_MAX];
    uint8_t tok[DISCO_RPC_TOKEN_BYTES], back[DISCO_RPC_TOKEN_BYTES];
    other_token(path, sizeof path, tok);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0600);
    CK_OK(disco_rpc_token_read(path, back));
    ck_assert(memcmp(tok, back, sizeof tok) == 0);
    CK_STATUS(disco_rpc_token_create(path, tok, again, sizeof again), DISCO_E_SYS);
    char link[PATH_MAX + 8];
    snprintf(link, sizeof link, "%s.lnk", path);
    ck_assert_int_eq(symlink("/tmp/disco-test-nowhere", link), 0);
    CK_STATUS(disco_rpc_token_create(link, tok, again, sizeof again), DISCO_E_SYS);
    ck_assert_int_ne(access("/tmp/disco-test-nowhere", F_OK), 0);
    ck_assert_int_eq(chmod(path, 0644), 0);
    CK_STATUS(disco_rpc_token_read(path, back), DISCO_E_AUTH);
    CK_HAS("not private");
    FILE *f = fopen(path, "w");
    fputs("not hex\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0600), 0);
    CK_STATUS(disco_rpc_token_read(path, back), DISCO_E_AUTH);
    CK_STATUS(disco_rpc_token_read("/tmp/disco-test-no-such-token", back), DISCO_E_AUTH);
    /* the default place: this user's private runtime directory */
    CK_OK(disco_rpc_token_create(NULL, tok, dflt, sizeof dflt));
    ck_assert_int_eq(stat(dflt, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0600);
    char *slash = strrchr(dflt, '/');
    *slash = '\0';
    ck_assert_int_eq(stat(dflt, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 077, 0);
    *slash = '/';
    unlink(dflt);
    unlink(link);
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}
END_TEST

/* Copies file src to dst. */
static void copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    ck_assert(in != NULL && out != NULL);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

struct load_dirs {
    char root[64], ok[96], ok2[96], lib[160], lib2[160], escape[160];
};

/* root/lib (allowed) holds a.so and esc.so -> root/lib2/a.so; root/lib2 is
 * a prefix neighbour. */
static void make_load_dirs(struct load_dirs *d)
{
    snprintf(d->root, sizeof d->root, "/tmp/disco-test-load-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->root));
    snprintf(d->ok, sizeof d->ok, "%s/lib", d->root);
    snprintf(d->ok2, sizeof d->ok2, "%s/lib2", d->root);
    ck_assert_int_eq(mkdir(d->ok, 0700), 0);
    ck_assert_int_eq(mkdir(d->ok2, 0700), 0);
    snprintf(d->lib, sizeof d->lib, "%s/a.so", d->ok);
    snprintf(d->lib2, sizeof d->lib2, "%s/a.so", d->ok2);
    snprintf(d->escape, sizeof d->escape, "%s/esc.so", d->ok);
    copy_file(DEMO_LIB, d->lib);
    copy_file(DEMO_LIB, d->lib2);
    ck_assert_int_eq(symlink(d->lib2, d->escape), 0);
}

static void remove_load_dirs(const struct load_dirs *d)
{
    unlink(d->escape);
    unlink(d->lib);
    unlink(d->lib2);
    rmdir(d->ok);
    rmdir(d->ok2);
    rmdir(d->root);
}

/* Calls disco.load_library(path) on s; returns the status. */
static disco_status_t load_via(disco_rpc_t *s, const char *path)
{
    disco_rpc_handle_t f;
    disco_status_t st = disco_rpc_get_func(s, "disco.load_library", &f);
    if (st != DISCO_OK)
        return st;
    disco_value_t a = disco_value_str(path), r;
    st = disco_rpc_call(s, f, &a, 1, &r);
    if (st == DISCO_OK)
        disco_value_clear(&r);
    return st;
}

/* disco.load_library through a local session: refused without an allowed
 * directory; with one, refused outside it (another directory, a prefix
 * neighbour such as lib2 for lib, a "..", a symlink inside that leads out)
 * and allowed inside. */
START_TEST(test_load_policy_local)
{
    struct load_dirs d;
    memset(&d, 0, sizeof d);
    make_load_dirs(&d);
    disco_rpc_t *s;
    CK_OK(disco_rpc_local(&s));
    CK_STATUS(load_via(s, d.lib), DISCO_E_LIBRARY);
    CK_HAS("--allow-load");
    disco_rpc_close(s);
    disco_rpc_local_config_t cfg = {.allow_load_dir = d.ok};
    CK_OK(disco_rpc_local_with(&cfg, &s));
    CK_STATUS(load_via(s, DISCO_TEST_LIB), DISCO_E_LIBRARY);
    CK_STATUS(load_via(s, d.lib2), DISCO_E_LIBRARY); /* prefix trick */
    CK_HAS("outside");
    char dots[256];
    snprintf(dots, sizeof dots, "%s/../lib2/a.so", d.ok);
    CK_STATUS(load_via(s, dots), DISCO_E_LIBRARY);
    CK_STATUS(load_via(s, d.escape), DISCO_E_LIBRARY); /* symlink escape */
    CK_STATUS(load_via(s, d.ok), DISCO_E_LIBRARY);     /* the directory itself */
    CK_OK(load_via(s, d.lib));
    disco_rpc_close(s);
    cfg.allow_load_dir = "/tmp/disco-test-no-such-dir";
    CK_STATUS(disco_rpc_local_with(&cfg, &s), DISCO_E_INVAL);
    remove_load_dirs(&d);
}
END_TEST

/* The same rule over the server: without --allow-load a client cannot load
 * its own library into the server; with --allow-load DIR only inside DIR. */
START_TEST(test_load_policy_server)
{
    struct load_dirs d;
    memset(&d, 0, sizeof d);
    make_load_dirs(&d);
    server_t sv;
    start_on(&sv, 1, "l", NULL);
    disco_rpc_t *s;
    CK_OK(disco_rpc_connect(sv.address, 10000, &s));
    CK_STATUS(load_via(s, d.lib), DISCO_E_LIBRARY);
    CK_HAS("refused");
    disco_rpc_close(s);
    stop_server(&sv);
    const char *extra[] = {"--allow-load", d.ok, NULL};
    start_on(&sv, 0, "l", extra);
    CK_OK(disco_rpc_connect(sv.address, 10000, &s));
    CK_STATUS(load_via(s, d.escape), DISCO_E_LIBRARY);
    CK_STATUS(load_via(s, d.lib2), DISCO_E_LIBRARY);
    CK_OK(load_via(s, d.lib));
    disco_rpc_close(s);
    stop_server(&sv);
    remove_load_dirs(&d);
}
END_TEST

/* Binding: loopback by default; a non-loopback address needs allow_remote
 * (the tool's --allow-remote). */
START_TEST(test_remote_bind)
{
    disco_listener_t *l;
    CK_STATUS(disco_listener_open("tcp:0.0.0.0:0", &l), DISCO_E_INVAL);
    CK_HAS("--allow-remote");
    CK_STATUS(disco_listener_open("tcp:[::]:0", &l), DISCO_E_INVAL);
    CK_OK(disco_listener_open("tcp:127.0.0.1:0", &l));
    disco_listener_close(l);
    CK_OK(disco_listener_open("tcp:localhost:0", &l));
    disco_listener_close(l);
    disco_listener_config_t cfg = {.allow_remote = 1};
    CK_OK(disco_listener_open_with("tcp:0.0.0.0:0", &cfg, &l));
    disco_listener_close(l);
    /* the tool refuses too, and says why */
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(SERVER, SERVER, "--listen", "tcp:0.0.0.0:0", (char *)NULL);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 1);
    /* with --allow-remote it listens, and warns */
    int err[2];
    ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
    pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(err[1], 2);
        execl(SERVER, SERVER, "--listen", "tcp:0.0.0.0:0", "--allow-remote", (char *)NULL);
        _exit(127);
    }
    close(err[1]);
    char text[1024] = {0};
    size_t got = 0;
    while (got < sizeof text - 1 && strstr(text, "warning") == NULL) {
        struct pollfd pf = {.fd = err[0], .events = POLLIN};
        ck_assert_msg(poll(&pf, 1, 10000) == 1, "no warning within 10 s");
        ssize_t k = read(err[0], text + got, sizeof text - 1 - got);
        ck_assert_msg(k > 0, "the server exited without a warning");
        got += (size_t)k;
    }
    ck_assert_ptr_nonnull(strstr(text, "--allow-remote"));
    kill(pid, SIGTERM);
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    close(err[0]);
}
END_TEST

/* In a child as uid 65534: connects to address (with the token) and exits
 * with the status's negation. */
static int connect_as_nobody(const char *address, const uint8_t *tok)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(100);
        disco_rpc_client_config_t cfg = {.call_timeout_ms = 10000, .token = tok};
        disco_rpc_t *s;
        disco_status_t st = disco_rpc_connect_with(address, &cfg, &s);
        if (st == DISCO_OK) {
            disco_rpc_handle_t f;
            st = disco_rpc_get_func(s, "disco.echo", &f);
            disco_rpc_close(s);
        }
        _exit(-st);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) != 100);
    return -WEXITSTATUS(ws);
}

/* Unix and shm listeners take only this user (SO_PEERCRED) unless told
 * otherwise: another uid holding the right token is refused when the
 * socket is open to it (--allow-uid of someone else) and when it is not;
 * with --allow-uid of its uid it is served. */
START_TEST(test_peer_uid)
{
    if (geteuid() != 0)
        return; /* needs root to act as another user */
    int k = _i == 0 ? 0 : 2;
    for (int round = 0; round < 3; round++) {
        const char *extra[] = {"--allow-uid", round == 1 ? "12345" : "65534", NULL};
        server_t sv;
        char tag[16];
        snprintf(tag, sizeof tag, "u%d", round);
        start_on(&sv, k, tag, round == 0 ? NULL : extra);
        uint8_t tok[DISCO_RPC_TOKEN_BYTES];
        CK_OK(disco_rpc_token_read(sv.token, tok));
        disco_status_t st = connect_as_nobody(sv.address, tok);
        if (round == 2)
            ck_assert_msg(st == DISCO_OK, "allowed uid: %s", disco_err_name(st));
        else if (round == 1) /* unix too: the server tells the peer why (was DISCO_E_CLOSED) */
            ck_assert_msg(st == DISCO_E_AUTH, "uid refused (%s): %s", k == 2 ? "shm" : "unix",
                          disco_err_name(st));
        else
            ck_assert_msg(st != DISCO_OK, "uid refused: got through");
        stop_server(&sv);
    }
    /* the library's listener says why */
    char addr[128];
    snprintf(addr, sizeof addr, "unix:/tmp/disco-test-auth-lu-%d.sock", (int)getpid());
    uint32_t other = 12345;
    disco_listener_config_t cfg = {.allow_uids = &other, .n_allow_uids = 1};
    disco_listener_t *l;
    CK_OK(disco_listener_open_with(addr, &cfg, &l));
    pid_t pid = fork();
    if (pid == 0) {
        disco_transport_t *t;
        if (setuid(65534) != 0 ||
            disco_transport_connect(addr, disco_now_ns() + 10000000000LL, &t) != 0)
            _exit(1);
        char c;
        disco_transport_recv(t, &c, 1, disco_now_ns() + 10000000000LL);
        _exit(0);
    }
    disco_transport_t *t;
    CK_STATUS(disco_listener_accept(l, disco_now_ns() + 10000000000LL, &t), DISCO_E_AUTH);
    CK_HAS("uid 65534");
    waitpid(pid, NULL, 0);
    disco_listener_close(l);
}
END_TEST

Suite *suite_auth(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("auth");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_wrong_token, 0, 3);
    tcase_add_test(tc, test_no_token);
    tcase_add_test(tc, test_replayed_handshake);
    tcase_add_test(tc, test_client_checks_server);
    tcase_add_test(tc, test_stdio_token);
    tcase_add_test(tc, test_token_files);
    tcase_add_test(tc, test_load_policy_local);
    tcase_add_test(tc, test_load_policy_server);
    tcase_add_test(tc, test_remote_bind);
    tcase_add_loop_test(tc, test_peer_uid, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
