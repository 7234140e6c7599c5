/* rpc_auth.c - tokens, token files and handshake proofs (see rpc_auth.h and
 * the authentication steps in disco/rpc.h). */
#include "workers/rpc/rpc_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

static int sodium_state = -1;

static void start_sodium(void)
{
    sodium_state = sodium_init() < 0 ? -1 : 0;
}

disco_status_t disco__rpc_random(void *buf, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start_sodium);
    if (sodium_state != 0)
        return disco_set_error(DISCO_E_SYS, "libsodium failed to initialize");
    randombytes_buf(buf, n);
    return DISCO_OK;
}

static const char *const labels[] = {
    [DISCO__RPC_CLIENT] = "disco-rpc 2 client", [DISCO__RPC_SERVER] = "disco-rpc 2 server"};

void disco__rpc_proof(const uint8_t token[DISCO_RPC_TOKEN_BYTES], enum disco__rpc_role role,
                      const uint8_t cn[DISCO__RPC_NONCE_BYTES],
                      const uint8_t sn[DISCO__RPC_NONCE_BYTES], uint8_t out[DISCO__RPC_PROOF_BYTES])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, token, DISCO_RPC_TOKEN_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)labels[role], strlen(labels[role]));
    crypto_auth_hmacsha256_update(&st, cn, DISCO__RPC_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, sn, DISCO__RPC_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

bool disco__rpc_proof_ok(const uint8_t token[DISCO_RPC_TOKEN_BYTES], enum disco__rpc_role role,
                         const uint8_t cn[DISCO__RPC_NONCE_BYTES],
                         const uint8_t sn[DISCO__RPC_NONCE_BYTES], const void *proof, size_t len)
{
    uint8_t want[DISCO__RPC_PROOF_BYTES];
    disco__rpc_proof(token, role, cn, sn, want);
    bool ok = len == sizeof want && sodium_memcmp(want, proof, sizeof want) == 0;
    sodium_memzero(want, sizeof want);
    return ok;
}

/* ---- token files ---- */

/* Makes (0700) or checks dir: a real directory (not a link), ours, private. */
static disco_status_t private_dir(const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return disco_set_error(DISCO_E_SYS, "token directory %s: mkdir: %s", dir, strerror(errno));
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return disco_set_error(DISCO_E_SYS, "token directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 077) != 0)
        return disco_set_error(DISCO_E_AUTH,
                               "token directory %s is not a private directory of uid %u (owner "
                               "%u, mode %o): remove it or set XDG_RUNTIME_DIR",
                               dir, (unsigned)geteuid(), (unsigned)sb.st_uid,
                               (unsigned)(sb.st_mode & 07777));
    return DISCO_OK;
}

/* This user's runtime directory for token files, made if need be. */
static disco_status_t runtime_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat sb;
    int n;
    if (xdg != NULL && xdg[0] == '/' && stat(xdg, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        sb.st_uid == geteuid() && (sb.st_mode & 077) == 0)
        n = snprintf(buf, cap, "%s/disco", xdg);
    else
        n = snprintf(buf, cap, "/tmp/disco-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= cap)
        return disco_set_error(DISCO_E_INVAL, "token directory name too long");
    return private_dir(buf);
}

disco_status_t disco_rpc_token_create(const char *path, uint8_t token_out[DISCO_RPC_TOKEN_BYTES],
                                      char *path_out, size_t cap)
{
    char name[PATH_MAX];
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    uint32_t tag;
    disco_status_t st = disco__rpc_random(tok, sizeof tok);
    if (st == DISCO_OK)
        st = disco__rpc_random(&tag, sizeof tag);
    if (st == DISCO_OK && path == NULL && (st = runtime_dir(name, sizeof name)) == DISCO_OK) {
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, "/rpc-%d-%08x.token", (int)getpid(), tag);
    } else if (st == DISCO_OK && snprintf(name, sizeof name, "%s", path) >= (int)sizeof name) {
        st = disco_set_error(DISCO_E_INVAL, "token file name too long");
    }
    if (st != DISCO_OK)
        return st;
    if (strlen(name) >= cap)
        return disco_set_error(DISCO_E_INVAL, "token file %s: name longer than %zu bytes", name,
                               cap);
    char hex[2 * DISCO_RPC_TOKEN_BYTES + 2];
    sodium_bin2hex(hex, sizeof hex, tok, sizeof tok);
    hex[2 * DISCO_RPC_TOKEN_BYTES] = '\n';
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return disco_set_error(DISCO_E_SYS, "token file %s: create: %s", name, strerror(errno));
    bool ok = fchmod(fd, 0600) == 0 &&
              write(fd, hex, 2 * DISCO_RPC_TOKEN_BYTES + 1) == 2 * DISCO_RPC_TOKEN_BYTES + 1;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    sodium_memzero(hex, sizeof hex);
    if (!ok) {
        unlink(name);
        sodium_memzero(tok, sizeof tok);
        return disco_set_error(DISCO_E_SYS, "token file %s: write: %s", name, strerror(err));
    }
    memcpy(token_out, tok, sizeof tok);
    sodium_memzero(tok, sizeof tok);
    memcpy(path_out, name, strlen(name) + 1);
    return DISCO_OK;
}

disco_status_t disco_rpc_token_read(const char *path, uint8_t token_out[DISCO_RPC_TOKEN_BYTES])
{
    if (path == NULL || path[0] == '\0')
        return disco_set_error(DISCO_E_AUTH, "no token file named");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return disco_set_error(DISCO_E_AUTH, "token file %s: %s", path, strerror(errno));
    struct stat sb;
    char buf[2 * DISCO_RPC_TOKEN_BYTES + 8];
    ssize_t n = -1;
    disco_status_t st = DISCO_OK;
    if (fstat(fd, &sb) != 0)
        st = disco_set_error(DISCO_E_SYS, "token file %s: fstat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = disco_set_error(DISCO_E_AUTH, "token file %s is not a regular file", path);
    else if ((sb.st_uid != geteuid() && sb.st_uid != 0) || (sb.st_mode & 077) != 0)
        st = disco_set_error(DISCO_E_AUTH,
                             "token file %s is not private (owner %u, mode %o): it must belong "
                             "to uid %u and have mode 0600",
                             path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777),
                             (unsigned)geteuid());
    else if ((n = read(fd, buf, sizeof buf - 1)) < 0)
        st = disco_set_error(DISCO_E_SYS, "token file %s: read: %s", path, strerror(errno));
    close(fd);
    if (st != DISCO_OK)
        return st;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    uint8_t tok[DISCO_RPC_TOKEN_BYTES];
    size_t bin_len = 0;
    const char *end = NULL;
    if (n != 2 * DISCO_RPC_TOKEN_BYTES ||
        sodium_hex2bin(tok, sizeof tok, buf, (size_t)n, NULL, &bin_len, &end) != 0 ||
        bin_len != sizeof tok) {
        sodium_memzero(buf, sizeof buf);
        return disco_set_error(DISCO_E_AUTH, "token file %s does not hold %d hex digits", path,
                               2 * DISCO_RPC_TOKEN_BYTES);
    }
    sodium_memzero(buf, sizeof buf);
    memcpy(token_out, tok, sizeof tok);
    sodium_memzero(tok, sizeof tok);
    return DISCO_OK;
}

/* ---- the load policy ---- */

disco_status_t disco_rpc_load_allowed(const char *allow_dir, const char *path, char *real_out,
                                      size_t cap)
{
    if (path == NULL)
        return disco_set_error(DISCO_E_LIBRARY, "disco.load_library: no path");
    if (allow_dir == NULL)
        return disco_set_error(DISCO_E_LIBRARY,
                               "disco.load_library(%s) refused: loading libraries over RPC is "
                               "off (start the server with --load LIBRARY, or allow a directory "
                               "with --allow-load DIR)",
                               path);
    char dir[PATH_MAX], lib[PATH_MAX];
    if (realpath(allow_dir, dir) == NULL)
        return disco_set_error(DISCO_E_LIBRARY, "allowed library directory %s: %s", allow_dir,
                               strerror(errno));
    if (realpath(path, lib) == NULL)
        return disco_set_error(DISCO_E_LIBRARY, "disco.load_library(%s): %s", path,
                               strerror(errno));
    size_t dl = strlen(dir);
    /* Inside means below dir followed by a separator: /a/lib2/x is not in
     * /a/lib. The root directory ends in '/' already. */
    bool inside = strncmp(lib, dir, dl) == 0 &&
                  (dl == 1 ? lib[1] != '\0' : lib[dl] == '/' && lib[dl + 1] != '\0');
    if (!inside)
        return disco_set_error(DISCO_E_LIBRARY,
                               "disco.load_library(%s) refused: it resolves to %s, outside the "
                               "allowed directory %s",
                               path, lib, dir);
    if (strlen(lib) >= cap)
        return disco_set_error(DISCO_E_LIBRARY, "disco.load_library(%s): path too long", path);
    memcpy(real_out, lib, strlen(lib) + 1);
    return DISCO_OK;
}
