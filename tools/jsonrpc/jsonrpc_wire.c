/* jsonrpc_wire.c - framing and loading for disco-jsonrpc (jsonrpc_wire.h). */
#include "tools/jsonrpc/jsonrpc_wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADER_LINE 4096

void jw_init(jw_stream_t *s, FILE *in, FILE *out)
{
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    *s = (jw_stream_t){.in = in, .out = out, .framing = JW_UNKNOWN};
    /* decoded form: a NUL byte, then text; sent as "\u0000..." */
    int n = snprintf(s->marker + 1, sizeof s->marker - 1, "out-of-range-%016llx",
                     (unsigned long long)nonce);
    s->marker_len = 1 + (size_t)n;
}

void jw_free(jw_stream_t *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

__attribute__((format(printf, 3, 4))) static int wire_fail(char *err, size_t cap, const char *fmt,
                                                           ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* A header line is a name, a colon and a value; the two LSP headers start a
 * header-framed stream. */
static int is_lsp_header(const char *line)
{
    return strncasecmp(line, "Content-Length:", 15) == 0 ||
           strncasecmp(line, "Content-Type:", 13) == 0;
}

/* Reads one line into s->buf without its "\n" or "\r\n". -1 at the end. */
static ssize_t read_line(jw_stream_t *s)
{
    ssize_t n = getline(&s->buf, &s->cap, s->in);
    if (n < 0)
        return -1;
    if (n > 0 && s->buf[n - 1] == '\n')
        n--;
    if (n > 0 && s->buf[n - 1] == '\r')
        n--;
    s->buf[n] = '\0';
    return n;
}

static int blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t')
            return 0;
    return 1;
}

/* Parses the Content-Length value ("  123 "). */
static int content_length(const char *v, size_t *out)
{
    char *end;
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    if (errno != 0 || *end != '\0')
        return -1;
    *out = n > JW_MAX_BODY ? JW_MAX_BODY + 1 : (size_t)n;
    return 0;
}

/* Reads a header block (its first line may already be in s->buf, have
 * says its length) and the body after it. */
static int read_framed(jw_stream_t *s, ssize_t have, const char **msg_out, size_t *len_out,
                       char *err, size_t cap)
{
    size_t len = 0;
    int got_len = 0;
    ssize_t n = have;
    if (n < 0) { /* blank lines between messages are skipped */
        while ((n = read_line(s)) >= 0 && blank(s->buf, (size_t)n))
            ;
        if (n < 0)
            return 0; /* the end, between messages */
    }
    for (; n > 0; n = read_line(s)) {
        if ((size_t)n > MAX_HEADER_LINE)
            return wire_fail(err, cap, "a header line of %zd bytes (at most %d)", n,
                             MAX_HEADER_LINE);
        const char *colon = memchr(s->buf, ':', (size_t)n);
        if (colon == NULL || colon == s->buf)
            return wire_fail(err, cap, "\"%.64s\" is not a header line (\"Name: value\")", s->buf);
        if (strncasecmp(s->buf, "Content-Length:", 15) == 0) {
            if (content_length(s->buf + 15, &len) != 0)
                return wire_fail(err, cap, "bad Content-Length \"%.40s\"", s->buf + 15);
            got_len = 1;
        } /* other headers (Content-Type) are ignored */
    }
    if (n < 0)
        return wire_fail(err, cap, "the input ended inside a header block");
    if (!got_len)
        return wire_fail(err, cap, "a header block without Content-Length");
    if (len > JW_MAX_BODY)
        return wire_fail(err, cap, "Content-Length above %zu bytes", JW_MAX_BODY);
    if (len + 1 > s->cap) {
        char *b = realloc(s->buf, len + 1);
        if (b == NULL)
            return wire_fail(err, cap, "no memory for a %zu-byte message", len);
        s->buf = b;
        s->cap = len + 1;
    }
    size_t got = fread(s->buf, 1, len, s->in);
    if (got != len)
        return wire_fail(err, cap, "the input ended %zu bytes into a %zu-byte body", got, len);
    s->buf[len] = '\0';
    *msg_out = s->buf;
    *len_out = len;
    return 1;
}

int jw_read(jw_stream_t *s, const char **msg_out, size_t *len_out, char *err, size_t errcap)
{
    if (s->framing == JW_HEADERS)
        return read_framed(s, -1, msg_out, len_out, err, errcap);
    ssize_t n;
    while ((n = read_line(s)) >= 0) {
        if (blank(s->buf, (size_t)n)) /* blank lines are skipped */
            continue;
        if (s->framing == JW_UNKNOWN) {
            s->framing = is_lsp_header(s->buf) ? JW_HEADERS : JW_LINES;
            if (s->framing == JW_HEADERS)
                return read_framed(s, n, msg_out, len_out, err, errcap);
        }
        *msg_out = s->buf;
        *len_out = (size_t)n;
        return 1;
    }
    return 0;
}

int jw_write(jw_stream_t *s, const char *body, size_t len)
{
    if (s->framing == JW_HEADERS && fprintf(s->out, "Content-Length: %zu\r\n\r\n", len) < 0)
        return -1;
    if (fwrite(body, 1, len, s->out) != len)
        return -1;
    if (s->framing != JW_HEADERS && fputc('\n', s->out) == EOF)
        return -1;
    return fflush(s->out) == 0 ? 0 : -1;
}

/* ---- numbers out of range ---- */

static int number_char(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

json_t *jw_load(const jw_stream_t *s, const char *buf, size_t len, json_error_t *je)
{
    const size_t flags = JSON_DECODE_ANY | JSON_ALLOW_NUL;
    json_t *j = json_loadb(buf, len, flags, je);
    if (j != NULL || json_error_code(je) != json_error_numeric_overflow)
        return j;
    /* The marker as JSON text: "\u0000" and the rest. */
    char text[sizeof s->marker + 8];
    int tn = snprintf(text, sizeof text, "\"\\u0000%s\"", s->marker + 1);
    char *copy = NULL;
    size_t n = len;
    for (int round = 0; round < JW_MAX_OVERFLOW; round++) {
        /* jansson stops right after the number it refuses (position, in
         * bytes); the number's text runs back from there. */
        const char *cur = copy != NULL ? copy : buf;
        size_t end = (size_t)je->position, start = end;
        if (end > n)
            break;
        while (start > 0 && number_char(cur[start - 1]))
            start--;
        if (start == end)
            break;
        char *next = malloc(n - (end - start) + (size_t)tn + 1);
        if (next == NULL)
            break;
        memcpy(next, cur, start);
        memcpy(next + start, text, (size_t)tn);
        memcpy(next + start + tn, cur + end, n - end);
        n = n - (end - start) + (size_t)tn;
        free(copy);
        copy = next;
        j = json_loadb(copy, n, flags, je);
        if (j != NULL || json_error_code(je) != json_error_numeric_overflow)
            break;
    }
    free(copy);
    return j;
}

int jw_has_overflow(const jw_stream_t *s, const json_t *j)
{
    size_t i;
    const char *key;
    json_t *v;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return json_string_length(j) == s->marker_len &&
               memcmp(json_string_value(j), s->marker, s->marker_len) == 0;
    case JSON_ARRAY:
        json_array_foreach(j, i, v)
        {
            if (jw_has_overflow(s, v))
                return 1;
        }
        return 0;
    case JSON_OBJECT:
        json_object_foreach((json_t *)j, key, v)
        {
            if (jw_has_overflow(s, v))
                return 1;
        }
        return 0;
    default:
        return 0;
    }
}
