/* trace_util.h - what the trace suites share (tests/test_trace*.c): a
 * trace written as Perfetto JSON to a temporary file and parsed back. */
#ifndef DISCO_TESTS_TRACE_UTIL_H
#define DISCO_TESTS_TRACE_UTIL_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "disco/trace.h"
#include "tests/session_util.h"

/* Writes t as JSON into a new temporary file (its name into path, a
 * "/tmp/...-XXXXXX" template the caller owns and unlinks) and returns the
 * parsed document (json_decref it); fails the test if either step fails. */
static inline json_t *tu_trace_json(const disco_trace_t *t, char *path)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *fp = fdopen(fd, "w");
    ck_assert_ptr_nonnull(fp);
    CK_OK(disco_trace_write_json(t, fp));
    fclose(fp);
    json_error_t err;
    json_t *doc = json_load_file(path, 0, &err);
    ck_assert_msg(doc != NULL, "%s", err.text);
    return doc;
}

#endif
