/* test_worker.c - a worker's execution of command frames
 * (workers/core/worker.h), frames encoded and decoded as on the wire: the
 * call head (workers/core/protocol.h) and what a worker does with a head
 * that is wrong. */
#include <check.h>
#include <string.h>

#include "workers/core/protocol.h"
#include "workers/core/worker.h"
#include "tests/session_util.h"

struct bench {
    disco_worker_t w;
    struct disco__errbox box;
    disco_wait_t wait;
    _Alignas(8) unsigned char frame[4096];
    _Alignas(8) unsigned char reply[4096];
    size_t reply_len;
};

/* Encodes code + args, decodes it as a worker's loop does and runs it on
 * b's worker. */
static void run(struct bench *b, uint32_t code, const disco_value_t *args, uint32_t nargs)
{
    static uint64_t seq;
    size_t len;
    CK_OK(disco_frame_encode(code, ++seq, args, nargs, b->frame, sizeof b->frame, &len));
    disco_frame_hdr_t h;
    disco_value_t got[DISCO_MAX_ARGS];
    CK_OK(disco_frame_decode(b->frame, len, &h, got, DISCO_MAX_ARGS));
    CK_OK(disco__worker_exec(&b->w, &h, got, b->reply, sizeof b->reply, &b->reply_len));
}

static void bench_init(struct bench *b)
{
    memset(b, 0, sizeof *b);
    CK_OK(disco__worker_init(&b->w, 1, 2, &b->box, NULL, NULL, &b->wait));
    disco_value_t get[2] = {tu_dref(1), disco_value_str("disco.echo")};
    run(b, DISCO_CMD_GET_FUNC, get, 2);
    ck_assert_int_eq(atomic_load(&b->box.full), 0);
}

/* Register r on b's worker holds the int want. */
static void assert_reg_int(const struct bench *b, uint64_t r, int64_t want)
{
    const disco_value_t *v = disco__worker_get_reg(&b->w, r);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->type, DISCO_T_INT);
    ck_assert_int_eq(v->v.i, want);
}

/* A call without arguments is one cache line in a ring slot: a 48-byte
 * frame, whatever its head carries (issue 21). */
START_TEST(test_call_head_fits_a_line)
{
    struct disco__call_head hd = {.kill = DISCO_REG_LIMIT - 1,
                                  .result = DISCO_REG_LIMIT - 2,
                                  .func = DISCO_REG_LIMIT - 3,
                                  .token = INT64_MAX};
    disco_value_t v = disco__call_head_value(&hd);
    unsigned char buf[256];
    size_t len;
    CK_OK(disco_frame_encode(DISCO_CMD_CALL_SYNC, UINT64_MAX, &v, 1, buf, sizeof buf, &len));
    ck_assert_uint_eq(len + DISCO_RING_SLOT_HDR, DISCO_CACHE_LINE);
}
END_TEST

/* A call runs the function in the head's func register into its result
 * register with the arguments after the head, freeing the head's kill
 * register first; a CALL_SYNC answers with the head's token, a CALL not at
 * all. */
START_TEST(test_call_head_runs)
{
    struct bench b;
    bench_init(&b);
    struct disco__call_head hd = {.result = 2, .func = 1};
    disco_value_t args[2] = {disco__call_head_value(&hd), disco_value_int(7)};
    run(&b, DISCO_CMD_CALL, args, 2);
    ck_assert_uint_eq(b.reply_len, 0);
    assert_reg_int(&b, 2, 7);

    hd = (struct disco__call_head){.kill = 2, .result = 3, .func = 1, .token = 99};
    args[1] = disco_value_int(8);
    run(&b, DISCO_CMD_CALL_SYNC, args, 2);
    ck_assert_int_eq(disco__worker_get_reg(&b.w, 2)->type, DISCO_T_NULL); /* killed */
    assert_reg_int(&b, 3, 8);
    disco_frame_hdr_t h;
    disco_value_t r[2];
    CK_OK(disco_frame_decode(b.reply, b.reply_len, &h, r, 2));
    ck_assert_uint_eq(h.code, DISCO_REPLY_OK);
    ck_assert_uint_eq(h.nargs, 1);
    ck_assert_int_eq(r[0].v.i, 99);
    ck_assert_int_eq(atomic_load(&b.box.full), 0);
    disco__worker_fini(&b.w);
}
END_TEST

/* What a worker refuses, each posted to its error box with the reason and
 * nothing run (the result register untouched, no answer): a head of the
 * wrong size, or with its zero word set, or not bytes; a result register
 * past DISCO_REG_LIMIT; code 9, a call carrying a free before layout 13. */
START_TEST(test_call_head_refused)
{
    static const struct {
        int kind;
        disco_status_t code;
        const char *msg;
    } cases[] = {
        {0, DISCO_E_BAD_TYPE, "its head is 23 bytes, expected 24"},
        {1, DISCO_E_BAD_TYPE, "its head is 24 bytes with its zero word set"},
        {2, DISCO_E_BAD_TYPE, "argument 0: dref, expected bytes"},
        {3, DISCO_E_BAD_REG, "register 16777216 is out of range"},
        {4, DISCO_E_PROTOCOL, "unknown command code 9"},
        {5, DISCO_E_ARG_COUNT, "call packed and sync with 0 arguments"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bench b;
        bench_init(&b);
        struct disco__call_head hd = {.result = 2, .func = 1, .token = 5};
        disco_value_t args[2] = {disco__call_head_value(&hd), disco_value_int(7)};
        uint32_t code = DISCO_CMD_CALL_SYNC, nargs = 2;
        switch (cases[i].kind) {
        case 0:
            args[0].len--;
            break;
        case 1:
            hd.zero = 1;
            break;
        case 2:
            args[0] = tu_dref(2);
            break;
        case 3:
            hd.result = DISCO_REG_LIMIT;
            break;
        case 4:
            code = 9;
            break;
        default:
            nargs = 0;
            break;
        }
        run(&b, code, args, nargs);
        ck_assert_msg(atomic_load(&b.box.full) == 1, "case %zu: nothing posted", i);
        ck_assert_int_eq(b.box.code, cases[i].code);
        ck_assert_msg(strstr(b.box.msg, cases[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i,
                      b.box.msg, cases[i].msg);
        const disco_value_t *v = disco__worker_get_reg(&b.w, 2);
        ck_assert_msg(v == NULL || v->type == DISCO_T_NULL, "case %zu: the call ran", i);
        /* A call that fails is answered as any CALL_SYNC is (its failure
         * is in the error box); a refused command is not. */
        if (cases[i].kind == 3)
            ck_assert_uint_gt(b.reply_len, 0);
        else
            ck_assert_uint_eq(b.reply_len, 0);
        disco__worker_fini(&b.w);
    }
}
END_TEST

Suite *suite_worker(void)
{
    Suite *s = suite_create("worker");
    TCase *tc = tcase_create("worker");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_call_head_fits_a_line);
    tcase_add_test(tc, test_call_head_runs);
    tcase_add_test(tc, test_call_head_refused);
    suite_add_tcase(s, tc);
    return s;
}
