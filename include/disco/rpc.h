/*
 * disco/rpc.h - RPC sessions: one interface for local and remote execution,
 * as TVM's RPCSession, served over local IPC and chainable through proxies.
 *
 * An RPC session is an ops table. Implementations:
 *  - the local session (disco_rpc_local): functions of this process's
 *    registry, memory from this process;
 *  - the client session (disco_rpc_connect): every op travels to an endpoint
 *    over a transport (disco/transport.h: shm ring pair, Unix socket, TCP,
 *    stdio pipes) and back;
 *  - a Disco worker (disco_rpc_from_worker), over its session's rings.
 * A server (disco_rpc_serve, the disco-rpc-server tool) serves a session on a
 * transport; that session may itself be a client session to another server,
 * so sessions chain: client -> server A -> server B -> local.
 *
 * Handles. Functions and remote memory are named by 64-bit handles that only
 * the session that made them understands; free them with
 * disco_rpc_free_handle (a free after the connection closed is harmless).
 * Remote memory appears as its own device: disco_rpc_device() tags a device
 * type with the session, so tensor code can tell remote memory apart.
 *
 * Protocol. Packets are a u64 length and a disco frame (disco/value.h). The
 * first exchange carries a magic and DISCO_RPC_VERSION; a mismatch fails the
 * connect with DISCO_E_VERSION naming both versions.
 *
 * Authentication (numbered steps; workers/rpc/rpc_auth.c holds the crypto):
 *   A1 client -> server  INIT [magic, version, client nonce (32 random bytes)]
 *   A2 server -> client  RETURN [version, server nonce (32 random bytes), mode]
 *                        mode 1: a token is required; mode 0: this server
 *                        does not authenticate (a transport its caller
 *                        trusts, such as pipes to its parent): done.
 *   A3 client -> server  AUTH [HMAC-SHA256(token, "disco-rpc 2 client" ||
 *                        client nonce || server nonce)]
 *   A4 server -> client  RETURN [HMAC-SHA256(token, "disco-rpc 2 server" ||
 *                        client nonce || server nonce)], or EXCEPTION
 *                        DISCO_E_AUTH and the server hangs up.
 * The token (DISCO_RPC_TOKEN_BYTES random bytes, libsodium) never crosses
 * the wire; fresh nonces from both sides make a recorded handshake useless;
 * proofs are compared in constant time. The client checks the server's proof
 * (A4) too, and refuses a server that does not authenticate when it holds a
 * token. Before A4 the server runs no request, reads no packet larger than
 * 4 KiB and waits at most its handshake timeout. A server whose session
 * outlives its timeout sends DISCO_E_SESSION_TIMEOUT to the client before it
 * kills the serving process; the client reports exactly that code. Large
 * copies travel in chunks of DISCO_RPC_CHUNK bytes.
 *
 * Errors: every function returns a disco_status_t; a remote failure comes
 * back with its code and the remote message in disco_last_error(). Values
 * returned own their memory (disco_value_clear). A session is used by one
 * thread at a time.
 */
#ifndef DISCO_RPC_H
#define DISCO_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include "disco/session.h"
#include "disco/status.h"
#include "disco/transport.h"
#include "disco/value.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISCO_RPC_VERSION     2           /* the wire protocol's version (hello) */
#define DISCO_RPC_MAGIC       "disco-rpc" /* first bytes of every hello */
#define DISCO_RPC_CHUNK       (1u << 20)  /* copies travel in chunks of this many bytes */
#define DISCO_RPC_SESS_MASK   128         /* remote device type = local type + mask * (index + 1) */
#define DISCO_RPC_TOKEN_BYTES 32          /* 256-bit shared secret */
#define DISCO_RPC_TOKEN_ENV   "DISCO_TOKEN_FILE" /* names the client's token file */

/* An RPC session: local, a client, or a view of a Disco worker. */
typedef struct disco_rpc disco_rpc_t;
/* A function or memory handle of the session's far side. */
typedef uint64_t disco_rpc_handle_t;

/* Completion of an asynchronous op: status, and the result (owned by the
 * callback for the call's duration only; copy what you keep). */
typedef void (*disco_rpc_done_fn)(void *ctx, disco_status_t status, const disco_value_t *ret);

/* What a kind of RPC session implements; each entry behaves as the
 * disco_rpc_* function of the same name documents. */
typedef struct disco_rpc_ops {
    const char *kind; /* "local", "client" */
    /* disco_rpc_get_func */
    disco_status_t (*get_func)(disco_rpc_t *s, const char *name, disco_rpc_handle_t *func_out);
    /* disco_rpc_call */
    disco_status_t (*call)(disco_rpc_t *s, disco_rpc_handle_t func, const disco_value_t *args,
                           int nargs, disco_value_t *ret_out);
    /* disco_rpc_copy_to_remote */
    disco_status_t (*copy_to_remote)(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                     uint64_t offset, uint64_t nbytes);
    /* disco_rpc_copy_from_remote */
    disco_status_t (*copy_from_remote)(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t offset,
                                       void *dst, uint64_t nbytes);
    /* disco_rpc_free_handle */
    disco_status_t (*free_handle)(disco_rpc_t *s, disco_rpc_handle_t h);
    /* disco_rpc_dev_alloc */
    disco_status_t (*dev_alloc)(disco_rpc_t *s, DLDevice dev, uint64_t nbytes, uint64_t align,
                                disco_rpc_handle_t *mem_out);
    /* disco_rpc_dev_free */
    disco_status_t (*dev_free)(disco_rpc_t *s, DLDevice dev, disco_rpc_handle_t mem);
    /* disco_rpc_stream_sync */
    disco_status_t (*stream_sync)(disco_rpc_t *s, DLDevice dev);
    /* disco_rpc_call_async */
    disco_status_t (*call_async)(disco_rpc_t *s, disco_rpc_handle_t func, const disco_value_t *args,
                                 int nargs, disco_rpc_done_fn done, void *ctx);
    /* Optional (NULL: the copy runs inside the call, then done runs). */
    disco_status_t (*copy_to_remote_async)(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                           uint64_t offset, uint64_t nbytes, disco_rpc_done_fn done,
                                           void *ctx);
    /* Optional, as copy_to_remote_async. */
    disco_status_t (*copy_from_remote_async)(disco_rpc_t *s, disco_rpc_handle_t src,
                                             uint64_t offset, void *dst, uint64_t nbytes,
                                             disco_rpc_done_fn done, void *ctx);
    /* disco_rpc_wait */
    disco_status_t (*wait)(disco_rpc_t *s);
    /* disco_rpc_close */
    void (*close)(disco_rpc_t *s);
    /* Optional (NULL: none): where bytes [off, off + n) of memory handle h
     * are in this process, or NULL if they are not reachable; lets a server
     * receive a copy straight into the destination. */
    void *(*direct)(disco_rpc_t *s, disco_rpc_handle_t h, uint64_t off, uint64_t n);
} disco_rpc_ops_t;

/* The head of every kind of RPC session. */
struct disco_rpc {
    /* its kind's operations */
    const disco_rpc_ops_t *ops;
    int index; /* for device tagging: unique per process */
};

/* ---- making sessions ---- */

/* Options of the local session. */
typedef struct disco_rpc_local_config {
    /* "disco.load_library" called through this session loads only a library
     * whose real path (symlinks resolved) lies inside the real path of this
     * directory; NULL (the default) refuses every such call. Loading code is
     * a privilege: libraries named at start (--load) are the normal way. */
    const char *allow_load_dir;
} disco_rpc_local_config_t;

/** The in-process session, refusing "disco.load_library" (as
 *  disco_rpc_local_with with no allowed directory). Returns DISCO_OK,
 *  DISCO_E_NOMEM. Thread-safe. */
disco_status_t disco_rpc_local(disco_rpc_t **sess_out);

/** The in-process session with options (cfg NULL: the defaults). A
 *  "disco.load_library" call it refuses fails with DISCO_E_LIBRARY, naming
 *  the path and the allowed directory. Thread-safe. Returns DISCO_OK,
 *  DISCO_E_NOMEM, DISCO_E_INVAL (allow_load_dir does not resolve to a
 *  directory). */
disco_status_t disco_rpc_local_with(const disco_rpc_local_config_t *cfg, disco_rpc_t **sess_out);

/** Whether path may be loaded under allow_dir: DISCO_OK with the library's
 *  real path in real_out (cap bytes) when realpath(path) lies strictly
 *  inside realpath(allow_dir) (no prefix tricks: /a/lib2 is not inside
 *  /a/lib; no symlink escapes: the resolved path is what is checked and what
 *  should be loaded). DISCO_E_LIBRARY otherwise (allow_dir NULL included),
 *  with the reason. The same rule serves disco-rpc-server and disco-jsonrpc.
 *  Thread-safe. */
disco_status_t disco_rpc_load_allowed(const char *allow_dir, const char *path, char *real_out,
                                      size_t cap);

/* Options of a client session. */
typedef struct disco_rpc_client_config {
    uint32_t call_timeout_ms; /* per-call deadline, 0 = none */
    /* The token: token (DISCO_RPC_TOKEN_BYTES bytes) if not NULL, else the
     * file token_file, else (disco_rpc_connect_with only) the file named by
     * $DISCO_TOKEN_FILE. */
    const uint8_t *token;
    /* a 0600 file holding the token in hex */
    const char *token_file;
} disco_rpc_client_config_t;

/** A client session to the endpoint at address (see disco_transport_connect), with a
 *  per-call deadline (0 = none) and the token from $DISCO_TOKEN_FILE: as
 *  disco_rpc_connect_with. */
disco_status_t disco_rpc_connect(const char *address, uint32_t call_timeout_ms,
                                 disco_rpc_t **sess_out);

/** A client session to the endpoint at address. Performs the version
 *  handshake and the mutual authentication (steps A1-A4 at the top); a
 *  listener always authenticates, so a token is required. Thread-safe.
 *  Returns DISCO_OK, DISCO_E_AUTH (no token; an unreadable or unsafe token
 *  file; the server refused the token or this user; the server's proof is
 *  wrong), DISCO_E_BUSY (every connection slot of the server is taken),
 *  DISCO_E_VERSION (both versions named), DISCO_E_CLOSED, DISCO_E_TIMEOUT,
 *  DISCO_E_INVAL (bad address), DISCO_E_NOMEM. */
disco_status_t disco_rpc_connect_with(const char *address, const disco_rpc_client_config_t *cfg,
                                      disco_rpc_t **sess_out);

/** A client session over a transport already open (e.g. stdio pipes); takes
 *  it. No token: the server must not ask for one (it serves without
 *  authentication). Returns as disco_rpc_client_with. */
disco_status_t disco_rpc_client(disco_transport_t *t, uint32_t call_timeout_ms,
                                disco_rpc_t **sess_out);

/** The same with options (cfg NULL: no token, no timeout); takes t. With a
 *  token the server must prove it holds it too. Returns as
 *  disco_rpc_connect_with, less DISCO_E_INVAL. */
disco_status_t disco_rpc_client_with(disco_transport_t *t, const disco_rpc_client_config_t *cfg,
                                     disco_rpc_t **sess_out);

/** Disco worker `worker` of a session as an RPC session, over the session's
 *  shared-memory rings. A call runs on every worker (Disco is SPMD) and
 *  answers with this worker's result; memory is a byte tensor register in
 *  the shared heap, copied to and from with one memcpy (after a sync of the
 *  worker). Completes asynchronous calls at once. Closing the view leaves
 *  the Disco session open. Returns DISCO_OK, DISCO_E_INVAL, DISCO_E_NOMEM. */
disco_status_t disco_rpc_from_worker(disco_session_t *sess, int worker, disco_rpc_t **sess_out);

/** Closes a session (a client: tells the server, closes the transport).
 *  NULL is harmless. */
void disco_rpc_close(disco_rpc_t *sess);

/* ---- the ops (thin wrappers over the table) ---- */

/* Every op below is used by one thread at a time per session. A client's
 * op that outlives the server's session timeout returns
 * DISCO_E_SESSION_TIMEOUT; one that outlives the per-call deadline
 * DISCO_E_TIMEOUT; a lost connection DISCO_E_CLOSED. Copies refuse a range
 * whose end passes 2^63 (offsets travel as int64) with DISCO_E_OVERFLOW
 * before anything is sent. */

/** The handle of the far side's function name in *func_out. Returns
 *  DISCO_OK, DISCO_E_NO_FUNC (no such function), or as above. */
disco_status_t disco_rpc_get_func(disco_rpc_t *s, const char *name, disco_rpc_handle_t *func_out);
/** Calls func with nargs args and waits; *ret_out owns its memory
 *  (disco_value_clear). Returns DISCO_OK, the function's own error (e.g.
 *  DISCO_E_REMOTE, the far side's message in disco_last_error()),
 *  DISCO_E_BAD_REG (not a function of this session), DISCO_E_MSG_TOO_BIG,
 *  or as above. */
disco_status_t disco_rpc_call(disco_rpc_t *s, disco_rpc_handle_t func, const disco_value_t *args,
                              int nargs, disco_value_t *ret_out);
/** Copies nbytes from src into memory handle dst at offset (in
 *  DISCO_RPC_CHUNK pieces). Returns DISCO_OK, DISCO_E_BAD_REG (not memory of
 *  this session), DISCO_E_INVAL (past the end of dst), DISCO_E_OVERFLOW, or
 *  as above. */
disco_status_t disco_rpc_copy_to_remote(disco_rpc_t *s, const void *src, disco_rpc_handle_t dst,
                                        uint64_t offset, uint64_t nbytes);
/** Copies nbytes of memory handle src from offset into dst. Returns as
 *  disco_rpc_copy_to_remote. */
disco_status_t disco_rpc_copy_from_remote(disco_rpc_t *s, disco_rpc_handle_t src, uint64_t offset,
                                          void *dst, uint64_t nbytes);
/** Frees a function or memory handle of the far side. Returns DISCO_OK,
 *  DISCO_E_BAD_REG (unknown handle), or as above. */
disco_status_t disco_rpc_free_handle(disco_rpc_t *s, disco_rpc_handle_t h);
/** Allocates nbytes (aligned to align) on the far side's device dev; the
 *  handle in *mem_out. Returns DISCO_OK, DISCO_E_INVAL (bad alignment),
 *  DISCO_E_NOMEM, DISCO_E_NO_DEVICE, or as above. */
disco_status_t disco_rpc_dev_alloc(disco_rpc_t *s, DLDevice dev, uint64_t nbytes, uint64_t align,
                                   disco_rpc_handle_t *mem_out);
/** Frees memory from disco_rpc_dev_alloc. Returns DISCO_OK,
 *  DISCO_E_BAD_REG (unknown handle), or as above. */
disco_status_t disco_rpc_dev_free(disco_rpc_t *s, DLDevice dev, disco_rpc_handle_t mem);
/** Waits for the far side's device dev to finish its queued work. Returns
 *  DISCO_OK, DISCO_E_NO_DEVICE, or as above. */
disco_status_t disco_rpc_stream_sync(disco_rpc_t *s, DLDevice dev);

/** Whether the session runs in this process. */
bool disco_rpc_is_local(const disco_rpc_t *s);

/** The device that names dev's memory behind session s (device type tagged
 *  with the session; a local session returns dev unchanged). */
DLDevice disco_rpc_device(const disco_rpc_t *s, DLDevice dev);

/* ---- tensors on remote memory ----
 * A remote tensor is a plain DLTensor whose device is disco_rpc_device(s,
 * dev), whose data holds the memory handle and whose byte_offset is the
 * offset into it; tensor code tells it from host memory by its device. */

/** Allocates remote memory for a compact tensor and fills *t_out as a view
 *  of it. shape (ndim entries) is the caller's and must outlive the view.
 *  Returns as disco_rpc_dev_alloc, plus DISCO_E_BAD_TYPE (dtype) and
 *  DISCO_E_INVAL (ndim, negative dimension). */
disco_status_t disco_rpc_tensor_alloc(disco_rpc_t *s, DLDevice dev, int64_t *shape, int ndim,
                                      DLDataType dtype, DLTensor *t_out);

/** Frees a view made by disco_rpc_tensor_alloc (its memory handle). */
disco_status_t disco_rpc_tensor_free(disco_rpc_t *s, DLTensor *t);

/** Copies between a host tensor (CPU memory) and a remote tensor of this
 *  session, in either direction, as their devices say. Both compact, same
 *  dtype and shape. Returns DISCO_OK, DISCO_E_MISMATCH (dtype or shape,
 *  naming both), DISCO_E_INVAL (not one host and one remote tensor of this
 *  session, or not compact), or the copy's error. */
disco_status_t disco_rpc_tensor_copy(disco_rpc_t *s, const DLTensor *from, DLTensor *to);

/** Asynchronous call: done(ctx, status, ret) runs before this returns for a
 *  local session, and from disco_rpc_wait (or the next synchronous op, or
 *  a later asynchronous one that must read answers to keep sending without
 *  deadlock) for a client, in the order the calls were made. If the call cannot be sent, it
 *  returns the error and done is never called. */
disco_status_t disco_rpc_call_async(disco_rpc_t *s, disco_rpc_handle_t func,
                                    const disco_value_t *args, int nargs, disco_rpc_done_fn done,
                                    void *ctx);

/** Asynchronous copies: done(ctx, status, NULL) runs once the copy has
 *  completed, with its status (an error the remote found, such as a bad
 *  handle or range, arrives here). A client queues the copy's chunks and
 *  returns: src must stay unchanged, and dst unread, until done has run,
 *  which happens in disco_rpc_wait or the next synchronous op (or earlier,
 *  when the client must read answers to keep sending). Local sessions and
 *  worker views copy inside the call and run done before it returns.
 *  Returns DISCO_OK (done will run), or DISCO_E_CLOSED / DISCO_E_TIMEOUT /
 *  DISCO_E_NOMEM when the copy could not be sent, DISCO_E_OVERFLOW when
 *  offset + nbytes passes 2^63 (done never runs). */
disco_status_t disco_rpc_copy_to_remote_async(disco_rpc_t *s, const void *src,
                                              disco_rpc_handle_t dst, uint64_t offset,
                                              uint64_t nbytes, disco_rpc_done_fn done, void *ctx);
/** The asynchronous disco_rpc_copy_from_remote: dst must stay valid until
 *  done runs. Returns as disco_rpc_copy_to_remote_async. */
disco_status_t disco_rpc_copy_from_remote_async(disco_rpc_t *s, disco_rpc_handle_t src,
                                                uint64_t offset, void *dst, uint64_t nbytes,
                                                disco_rpc_done_fn done, void *ctx);

/** Waits for every outstanding asynchronous op to complete (their callbacks
 *  have run, with their own errors). Returns DISCO_OK, or the error that
 *  ended the connection (DISCO_E_CLOSED, DISCO_E_TIMEOUT,
 *  DISCO_E_SESSION_TIMEOUT). */
disco_status_t disco_rpc_wait(disco_rpc_t *s);

/* ---- tokens ---- */

/** Makes a fresh random token and writes it (hex, one line) to a new file
 *  created exclusively (O_EXCL, O_NOFOLLOW) with mode 0600: path, or NULL
 *  for a new name in this user's private runtime directory
 *  ($XDG_RUNTIME_DIR/disco when that is ours and private, else
 *  /tmp/disco-UID, made 0700 and checked to be ours and private). The path
 *  goes to path_out (cap bytes). Thread-safe. Returns DISCO_OK,
 *  DISCO_E_INVAL (path_out too small), DISCO_E_AUTH (the directory is not
 *  private), DISCO_E_SYS (the file exists or cannot be made). */
disco_status_t disco_rpc_token_create(const char *path, uint8_t token_out[DISCO_RPC_TOKEN_BYTES],
                                      char *path_out, size_t cap);

/** Reads a token file. The file must be a regular file owned by this user
 *  (or root) that nobody else may read or write (mode 0600 or stricter), and
 *  hold 64 hex digits. Thread-safe. Returns DISCO_OK, DISCO_E_AUTH (missing,
 *  unsafe or malformed: the reason named), DISCO_E_SYS. */
disco_status_t disco_rpc_token_read(const char *path, uint8_t token_out[DISCO_RPC_TOKEN_BYTES]);

/* ---- serving ---- */

/* Options of a served connection. */
typedef struct disco_rpc_serve_config {
    /* The token clients must prove they hold (DISCO_RPC_TOKEN_BYTES bytes).
     * NULL: no authentication, only for a transport whose peer is already
     * trusted (a pipe to this process's parent); every listener's
     * connection needs a token. */
    const uint8_t *token;
    uint32_t handshake_timeout_ms; /* A1-A4 must end within; 0: 10 s */
    uint32_t idle_timeout_ms;      /* no request for this long ends the connection; 0: never */
    /* When sess is NULL: makes the session once the client is authenticated
     * (so an unauthenticated client costs nothing, e.g. no proxy hop); the
     * session is closed at the end. */
    disco_status_t (*open)(void *ctx, disco_rpc_t **sess_out);
    /* open's ctx */
    void *open_ctx;
} disco_rpc_serve_config_t;

/** Serves sess on transport t until the peer says shutdown or goes away,
 *  without authentication: disco_rpc_serve_with with no token. Only for a
 *  transport whose peer is trusted already (pipes to the parent). */
disco_status_t disco_rpc_serve(disco_rpc_t *sess, disco_transport_t *t);

/** Serves a connection: the handshake (A1-A4 at the top), then requests
 *  until the peer says shutdown or goes away. Malformed, truncated or
 *  oversized packets and unknown codes answer with an error (or end the
 *  connection when the stream cannot be resynced); never crash. Before
 *  authentication any error ends the connection. Not thread-safe per
 *  transport. Returns DISCO_OK (clean end) or the error that ended it:
 *  DISCO_E_AUTH (the client did not authenticate: wrong or no proof, a
 *  request before it, the handshake timeout; the reason in the detail, for
 *  the server's log), DISCO_E_VERSION, DISCO_E_SESSION_TIMEOUT (idle), or a
 *  transport error. */
disco_status_t disco_rpc_serve_with(disco_rpc_t *sess, disco_transport_t *t,
                                    const disco_rpc_serve_config_t *cfg);

/** Tells a client that connected why it is refused (an EXCEPTION packet with
 *  status and msg, sequence 0: the client reports status and the
 *  connection ends), e.g. DISCO_E_BUSY when every slot is taken. Waits at
 *  most 1 s. Not thread-safe per transport. */
void disco_rpc_refuse(disco_transport_t *t, disco_status_t status, const char *msg);

/** Sends the session-timeout notice on t (the server's parent does, after it
 *  stopped the serving process). */
void disco_rpc_send_timeout(disco_transport_t *t, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
