/* test_status.c - the status table, its messages and the thread-local error detail. */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "disco/status.h"
#include "tests/testutil.h"

/* Every code from DISCO_STATUS_MIN to 0 has a real message and a DISCO_ name. */
START_TEST(test_every_code_named)
{
    for (int c = DISCO_STATUS_MIN; c <= 0; c++) {
        const char *msg = disco_strerror(c);
        const char *name = disco_err_name(c);
        ck_assert_msg(msg != NULL && msg[0] != '\0', "disco_strerror(%d): empty", c);
        ck_assert_msg(strcmp(msg, "unknown status") != 0, "disco_strerror(%d): unknown status", c);
        ck_assert_msg(name != NULL && strncmp(name, "DISCO_", 6) == 0,
                      "disco_err_name(%d): %s lacks the DISCO_ prefix", c, name ? name : "NULL");
        ck_assert_msg(strcmp(name, "DISCO_E_UNKNOWN") != 0, "disco_err_name(%d): unknown", c);
    }
    ck_assert_str_eq(disco_err_name(DISCO_OK), "DISCO_OK");
    ck_assert_str_eq(disco_err_name(DISCO_E_TIMEOUT), "DISCO_E_TIMEOUT");
    ck_assert_str_eq(disco_strerror(DISCO_OK), "success");
}
END_TEST

/* No two codes share a name or a message (a copy-paste slip in the table). */
START_TEST(test_codes_distinct)
{
    for (int a = DISCO_STATUS_MIN; a <= 0; a++)
        for (int b = a + 1; b <= 0; b++) {
            ck_assert_msg(strcmp(disco_err_name(a), disco_err_name(b)) != 0,
                          "disco_err_name: %d and %d are both %s", a, b, disco_err_name(a));
            ck_assert_msg(strcmp(disco_strerror(a), disco_strerror(b)) != 0,
                          "disco_strerror: %d and %d are both \"%s\"", a, b, disco_strerror(a));
        }
}
END_TEST

/* Codes outside the table give "unknown status" and DISCO_E_UNKNOWN, never NULL;
 * DISCO_STATUS_MIN really is the smallest code. */
START_TEST(test_unknown_codes)
{
    const int unknown[] = {1, 2, 100, DISCO_STATUS_MIN - 1, -1000, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ck_assert_msg(strcmp(disco_strerror(unknown[i]), "unknown status") == 0,
                      "disco_strerror(%d): \"%s\"", unknown[i], disco_strerror(unknown[i]));
        ck_assert_msg(strcmp(disco_err_name(unknown[i]), "DISCO_E_UNKNOWN") == 0,
                      "disco_err_name(%d): %s", unknown[i], disco_err_name(unknown[i]));
    }
}
END_TEST

/* DISCO_STATUS_MIN is the smallest value in the status table: no entry lies
 * below it and one entry equals it (walks the table itself, not the range). */
START_TEST(test_min_from_table)
{
    int below = 0, equal = 0;
#define COUNT_MIN(name, value, msg)                                                                \
    below += (value) < DISCO_STATUS_MIN;                                                           \
    equal += (value) == DISCO_STATUS_MIN;
    DISCO_STATUS_TABLE(COUNT_MIN)
#undef COUNT_MIN
    ck_assert_msg(below == 0, "DISCO_STATUS_MIN %d: %d table codes lie below it", DISCO_STATUS_MIN,
                  below);
    ck_assert_msg(equal == 1, "DISCO_STATUS_MIN %d: %d table codes equal it", DISCO_STATUS_MIN,
                  equal);
}
END_TEST

/* disco_set_error returns its status, records the formatted detail, and
 * disco_clear_error empties it. */
START_TEST(test_set_error)
{
    disco_clear_error();
    ck_assert_str_eq(disco_last_error(), "");
    int st = disco_set_error(DISCO_E_TIMEOUT, "worker %d: %s", 3, "fn_name");
    ck_assert_msg(st == DISCO_E_TIMEOUT, "disco_set_error: returned %d, want %d", st,
                  DISCO_E_TIMEOUT);
    ck_assert_str_eq(disco_last_error(), "worker 3: fn_name");
    ck_assert_int_eq(disco_set_error(DISCO_OK, "%s", "second"), DISCO_OK);
    ck_assert_str_eq(disco_last_error(), "second");
    disco_clear_error();
    ck_assert_str_eq(disco_last_error(), "");
}
END_TEST

/* A detail longer than the buffer is truncated and stays NUL-terminated. */
START_TEST(test_set_error_truncates)
{
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(disco_set_error(DISCO_E_INVAL, "%s", big), DISCO_E_INVAL);
    size_t n = strlen(disco_last_error());
    ck_assert_msg(n > 0 && n < sizeof big - 1, "disco_last_error: %zu bytes", n);
    ck_assert_msg(strspn(disco_last_error(), "x") == n, "disco_last_error: corrupted");
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    /* 1: the main thread's detail is not visible here. */
    int ok = strcmp(disco_last_error(), "") == 0;
    /* 2: setting ours does not touch the main thread's. */
    disco_set_error(DISCO_E_SYS, "from the other thread");
    ok = ok && strcmp(disco_last_error(), "from the other thread") == 0;
    return ok ? (void *)1 : NULL;
}

/* The detail is thread-local: another thread neither sees nor overwrites it. */
START_TEST(test_error_thread_local)
{
    disco_set_error(DISCO_E_PEER_DEAD, "main thread detail");
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    void *ok = NULL;
    ck_assert_int_eq(pthread_join(t, &ok), 0);
    ck_assert_msg(ok != NULL, "other thread saw the main thread's detail or lost its own");
    ck_assert_str_eq(disco_last_error(), "main thread detail");
}
END_TEST

/* The detail may be an argument of the next disco_set_error (context
 * added in front of an inner error): the result holds both parts. */
START_TEST(test_set_error_wraps_detail)
{
    disco_set_error(DISCO_E_NOMEM, "inner %d", 7);
    ck_assert_int_eq(disco_set_error(DISCO_E_INVAL, "outer: %s", disco_last_error()),
                     DISCO_E_INVAL);
    ck_assert_str_eq(disco_last_error(), "outer: inner 7");
    disco_set_error(DISCO_E_INVAL, "%s", disco_last_error());
    ck_assert_str_eq(disco_last_error(), "outer: inner 7");
}
END_TEST

Suite *suite_status(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_every_code_named);
    tcase_add_test(tc, test_codes_distinct);
    tcase_add_test(tc, test_unknown_codes);
    tcase_add_test(tc, test_min_from_table);
    suite_add_tcase(s, tc);

    tc = tcase_create("detail");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_set_error);
    tcase_add_test(tc, test_set_error_truncates);
    tcase_add_test(tc, test_error_thread_local);
    tcase_add_test(tc, test_set_error_wraps_detail);
    suite_add_tcase(s, tc);
    return s;
}
