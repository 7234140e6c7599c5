/*
 * disco/status.h - the one status type of disco.
 *
 * Error rule for the whole library: every function that can fail returns a
 * disco_status_t. DISCO_OK (0) is success; every error is negative. Output
 * arguments are written only on success. The function that first detects an
 * error records a human-readable context string (worker id, function name,
 * path, ...) in a thread-local buffer read with disco_last_error(); callers
 * that only pass a status up leave it alone.
 */
#ifndef DISCO_STATUS_H
#define DISCO_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, message): the single table behind the enum, disco_strerror
 * and disco_err_name. A code cannot exist without a message. */
#define DISCO_STATUS_TABLE(X)                                                                      \
    X(OK, 0, "success")                                                                            \
    X(E_INVAL, -1, "invalid argument")                                                             \
    X(E_NOMEM, -2, "out of memory")                                                                \
    X(E_SYS, -3, "system call failed")                                                             \
    X(E_NOSPACE, -4, "shared memory cannot be backed")                                             \
    X(E_BAD_MAGIC, -5, "bad magic or layout version")                                              \
    X(E_TIMEOUT, -6, "deadline passed")                                                            \
    X(E_PEER_DEAD, -7, "peer process died")                                                        \
    X(E_MSG_TOO_BIG, -8, "message larger than the configured maximum")                             \
    X(E_AGAIN, -9, "would block")                                                                  \
    X(E_BUF_TOO_SMALL, -10, "buffer too small for message")                                        \
    X(E_TRUNCATED, -11, "truncated frame")                                                         \
    X(E_BAD_TYPE, -12, "wrong or unknown type code")                                               \
    X(E_ARG_COUNT, -13, "wrong argument count")                                                    \
    X(E_NO_FUNC, -14, "unknown function")                                                          \
    X(E_BAD_REG, -15, "bad or freed register id")                                                  \
    X(E_REMOTE, -16, "function failed on a worker")                                                \
    X(E_WORKER_DIED, -17, "worker died")                                                           \
    X(E_BROKEN, -18, "session is broken")                                                          \
    X(E_SHUTDOWN, -19, "session is shut down")                                                     \
    X(E_LIBRARY, -20, "cannot load library")                                                       \
    X(E_VERSION, -21, "protocol version mismatch")                                                 \
    X(E_SESSION_TIMEOUT, -22, "session expired on the server")                                     \
    X(E_HEAP_EXHAUSTED, -23, "shared heap exhausted")                                              \
    X(E_NO_DEVICE, -24, "no such device")                                                          \
    X(E_MISMATCH, -25, "shape, dtype, device or size mismatch")                                    \
    X(E_CLOSED, -26, "connection closed")                                                          \
    X(E_PROTOCOL, -27, "malformed message")                                                        \
    X(E_AUTH, -28, "authentication failed")                                                        \
    X(E_BUSY, -29, "server busy: every connection slot is taken")                                  \
    X(E_OVERFLOW, -30, "size overflows or exceeds its limit")                                      \
    X(E_UNSUPPORTED, -31, "not supported in this configuration")

/* The status of every call: DISCO_OK or a negative DISCO_E_* of the table
 * above (DISCO_E_NAME = value). */
typedef enum {
#define DISCO_STATUS_ENUM(name, value, msg) DISCO_##name = value,
    DISCO_STATUS_TABLE(DISCO_STATUS_ENUM)
#undef DISCO_STATUS_ENUM
} disco_status_t;

/* Smallest (most negative) code in the table; handy for exhaustive tests.
 * Derived from the table at compile time, in C and C++ alike: the union holds
 * one char array per code, sized 1 - value (codes are 0 or negative), so its
 * size is 1 - (the smallest code). Only its size is used. */
union disco__status_span {
#define DISCO_STATUS_SPAN(name, value, msg) char disco__##name[1 - (value)];
    DISCO_STATUS_TABLE(DISCO_STATUS_SPAN)
#undef DISCO_STATUS_SPAN
};
/* The smallest code (see the union above). */
#define DISCO_STATUS_MIN (1 - (int)sizeof(union disco__status_span))

/** Message for a status code. Thread-safe. Never NULL: an unknown code gives
 *  "unknown status". */
const char *disco_strerror(int status);

/** Symbolic name of a status code ("DISCO_E_TIMEOUT"). Thread-safe. Never NULL:
 *  an unknown code gives "DISCO_E_UNKNOWN". */
const char *disco_err_name(int status);

/** Context of the most recent error recorded on this thread ("" if none).
 *  Thread-safe (thread-local); valid until the next error on this thread. */
const char *disco_last_error(void);

/** Records context for an error on this thread (printf format) and returns
 *  status unchanged, so a caller can write
 *  `return disco_set_error(DISCO_E_..., ...)`. Thread-safe (thread-local).
 *  Returns status (any code; it is not checked). */
disco_status_t disco_set_error(disco_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Clears this thread's error context. Thread-safe. */
void disco_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
