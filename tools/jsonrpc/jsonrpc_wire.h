/* jsonrpc_wire.h - disco-jsonrpc's wire: message framing on a byte stream
 * and a JSON loader that tells numbers out of range from malformed JSON.
 *
 * Framing (detected once, from the first non-blank line of the input):
 *  1. Lines: one JSON text per line; blank lines are skipped. Each response
 *     is one line.
 *  2. Headers (LSP style): when the first line is a "Content-Length:" or
 *     "Content-Type:" header, every message is header lines ending in an
 *     empty line ("\r\n" or "\n"), then exactly Content-Length bytes of
 *     JSON. Each response is "Content-Length: N\r\n\r\n" and N bytes.
 *     A header block without a valid Content-Length, a body above
 *     JW_MAX_BODY or an input that ends inside a message cannot be read
 *     past: the stream is done (jw_read returns -1).
 *
 * Numbers out of range: jansson refuses an integer outside int64 or a real
 * that overflows a double with json_error_numeric_overflow. jw_load then
 * replaces that number's text with a marker string (random per stream, so
 * a client cannot guess it) and parses again, so the caller gets the tree
 * and can answer "invalid request" or "invalid params" depending on where
 * the number was (jw_has_overflow), where the JSON is otherwise valid.
 *
 * Not thread safe: one stream, one thread. */
#ifndef DISCO_TOOLS_JSONRPC_WIRE_H
#define DISCO_TOOLS_JSONRPC_WIRE_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#define JW_MAX_BODY     ((size_t)1 << 30) /* a Content-Length above this is refused */
#define JW_MAX_OVERFLOW 64                /* numbers out of range jw_load replaces */

typedef enum { JW_UNKNOWN, JW_LINES, JW_HEADERS } jw_framing_t;

typedef struct jw_stream {
    FILE *in, *out;
    jw_framing_t framing; /* JW_UNKNOWN until the first message */
    char *buf;            /* the last message read (owned) */
    size_t cap;
    char marker[32]; /* the decoded marker string (starts with a NUL byte) */
    size_t marker_len;
} jw_stream_t;

/** Sets up s on in and out (not owned) and draws its marker. */
void jw_init(jw_stream_t *s, FILE *in, FILE *out);

/** Frees s's buffer (not its files). */
void jw_free(jw_stream_t *s);

/** Reads the next message: 1 with *msg_out and *len_out set (valid until
 *  the next call), 0 at the end of the input, -1 when the stream cannot be
 *  read on (why, NUL-terminated, in err). */
int jw_read(jw_stream_t *s, const char **msg_out, size_t *len_out, char *err, size_t errcap);

/** Writes one message of len bytes framed as the input is (lines until the
 *  input showed headers) and flushes. 0, or -1 with errno set. */
int jw_write(jw_stream_t *s, const char *body, size_t len);

/** Parses len bytes at buf (any JSON value; NUL bytes allowed in strings).
 *  Numbers out of range become s's marker string (up to JW_MAX_OVERFLOW of
 *  them). NULL if the text is not JSON (or has more such numbers), with je
 *  set; the caller owns the result. */
json_t *jw_load(const jw_stream_t *s, const char *buf, size_t len, json_error_t *je);

/** Whether j, or any value inside it, is s's marker. */
int jw_has_overflow(const jw_stream_t *s, const json_t *j);

#endif
