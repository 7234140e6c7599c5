/* test_value.c - packed values and the frame codec: exact round trips and
 * clear errors for every kind of malformed frame. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "disco/device.h"
#include "disco/tensor.h"
#include "disco/value.h"
#include "tests/testutil.h"

static const int64_t dims[3] = {1, -2, INT64_MIN};
static const unsigned char raw[3] = {0, 255, 0};

static void sample(disco_value_t *v, size_t *n)
{
    size_t k = 0;
    v[k++] = disco_value_null();
    v[k++] = disco_value_bool(false);
    v[k++] = disco_value_bool(true);
    v[k++] = disco_value_int(-1);
    v[k++] = disco_value_float(NAN);
    v[k++] = disco_value_float(-0.0);
    v[k++] = disco_value_str("");
    v[k++] = disco_value_str("seven77");
    v[k++] = disco_value_str("eight888");
    v[k++] = disco_value_bytes(raw, 3);
    v[k++] = disco_value_bytes(NULL, 0);
    v[k++] = disco_value_shape(dims, 3);
    v[k++] = disco_value_shape(NULL, 0);
    v[k++] = disco_value_dtype((DLDataType){kDLFloat, 16, 4});
    v[k++] = disco_value_device((DLDevice){kDLCUDAHost, -7});
    v[k++] = (disco_value_t){.type = DISCO_T_DREF, .v.reg = UINT64_MAX};
    v[k++] = (disco_value_t){.type = DISCO_T_FUNC, .v.handle = 12};
    v[k++] = disco_value_opaque(0x0123456789abcdefULL);
    *n = k;
}

/* Every type, including empty strings/bytes/shapes at the very end of a
 * frame, decodes to the same type and bytes. */
START_TEST(test_round_trip)
{
    disco_value_t v[32], out[32];
    size_t n, len;
    sample(v, &n);
    static uint64_t buf[512];
    for (size_t cut = 1; cut <= n; cut++) { /* every prefix: each type is last once */
        CK_OK(disco_frame_encode(7, 99, v, (uint32_t)cut, buf, sizeof buf, &len));
        ck_assert_uint_eq(len % 8, 0);
        disco_frame_hdr_t h;
        CK_OK(disco_frame_decode(buf, len, &h, out, 32));
        ck_assert_uint_eq(h.code, 7);
        ck_assert_uint_eq(h.seq, 99);
        ck_assert_uint_eq(h.nargs, cut);
        for (size_t i = 0; i < cut; i++)
            ck_assert_msg(disco_value_equal(&v[i], &out[i]), "value %zu (%s)", i,
                          disco_type_name(v[i].type));
    }
    size_t total = DISCO_FRAME_HDR;
    for (size_t i = 0; i < n; i++)
        total += disco_value_encoded_size(&v[i]);
    ck_assert_uint_eq(total, len);
}
END_TEST

/* Deep copies are equal and independent; clear frees and resets. */
START_TEST(test_copy_clear)
{
    disco_value_t v[32];
    size_t n;
    sample(v, &n);
    for (size_t i = 0; i < n; i++) {
        disco_value_t c;
        CK_OK(disco_value_copy(&v[i], &c));
        ck_assert(disco_value_equal(&v[i], &c));
        if (v[i].type == DISCO_T_STR && v[i].len > 0)
            ck_assert_ptr_ne(c.v.str, v[i].v.str);
        disco_value_clear(&c);
        ck_assert_uint_eq(c.type, DISCO_T_NULL);
    }
    disco_value_t bad = {.type = 99}, out;
    CK_STATUS(disco_value_copy(&bad, &out), DISCO_E_BAD_TYPE);
}
END_TEST

/* Every truncation of a valid frame is refused as truncated (or as a
 * header-only frame with too few arguments), never read past its end. */
START_TEST(test_truncated)
{
    disco_value_t v[32], out[32];
    size_t n, len;
    sample(v, &n);
    static uint64_t buf[512];
    CK_OK(disco_frame_encode(3, 1, v, (uint32_t)n, buf, sizeof buf, &len));
    for (size_t cut = 0; cut < len; cut++) {
        /* A fresh heap copy of exactly cut bytes, so ASan sees any overread. */
        void *p = malloc(cut ? cut : 1);
        memcpy(p, buf, cut);
        disco_frame_hdr_t h;
        disco_status_t st = disco_frame_decode(p, cut, &h, out, 32);
        ck_assert_msg(st == DISCO_E_TRUNCATED, "cut at %zu: %s", cut, disco_err_name(st));
        free(p);
    }
}
END_TEST

/* Bad type codes, wrong fixed lengths, missing NULs, trailing bytes, too
 * many arguments and small buffers each get their own code. */
START_TEST(test_malformed)
{
    static uint64_t buf[64];
    size_t len;
    disco_value_t out[4], one = disco_value_str("abc");
    disco_frame_hdr_t h;
    CK_OK(disco_frame_encode(1, 0, &one, 1, buf, sizeof buf, &len));
    unsigned char *b = (unsigned char *)buf;
    b[DISCO_FRAME_HDR] = 200; /* type code */
    CK_STATUS(disco_frame_decode(buf, len, &h, out, 4), DISCO_E_BAD_TYPE);
    b[DISCO_FRAME_HDR] = DISCO_T_STR;
    b[DISCO_FRAME_HDR + 8 + 3] = 'x'; /* the NUL */
    CK_STATUS(disco_frame_decode(buf, len, &h, out, 4), DISCO_E_BAD_TYPE);
    ck_assert_ptr_nonnull(strstr(disco_last_error(), "NUL"));
    b[DISCO_FRAME_HDR + 8 + 3] = 0;
    CK_OK(disco_frame_decode(buf, len, &h, out, 4));
    CK_STATUS(disco_frame_decode(buf, len + 8, &h, out, 4), DISCO_E_PROTOCOL); /* trailing */
    CK_STATUS(disco_frame_decode(buf, len, &h, out, 0), DISCO_E_ARG_COUNT);
    disco_value_t i = disco_value_int(5);
    CK_OK(disco_frame_encode(1, 0, &i, 1, buf, sizeof buf, &len));
    b[DISCO_FRAME_HDR + 4] = 4; /* an int claiming 4 payload bytes */
    CK_STATUS(disco_frame_decode(buf, len, &h, out, 4), DISCO_E_BAD_TYPE);
    /* A huge declared length is truncation, not an overread. */
    CK_OK(disco_frame_encode(1, 0, &one, 1, buf, sizeof buf, &len));
    uint32_t huge = UINT32_MAX;
    memcpy(b + DISCO_FRAME_HDR + 4, &huge, 4);
    CK_STATUS(disco_frame_decode(buf, len, &h, out, 4), DISCO_E_TRUNCATED);
    /* Encoding refuses unknown types and buffers that are too small. */
    disco_value_t bad = {.type = 42};
    CK_STATUS(disco_frame_encode(1, 0, &bad, 1, buf, sizeof buf, &len), DISCO_E_BAD_TYPE);
    CK_STATUS(disco_frame_encode(1, 0, &one, 1, buf, 16, &len), DISCO_E_MSG_TOO_BIG);
    ck_assert_uint_eq(disco_value_encoded_size(&bad), 0);
}
END_TEST

/* Type names exist for every type; unknown codes say so. */
START_TEST(test_type_names)
{
    for (uint32_t t = 0; t < DISCO_T_COUNT; t++)
        ck_assert_str_ne(disco_type_name(t), "unknown");
    ck_assert_str_eq(disco_type_name(DISCO_T_COUNT), "unknown");
}
END_TEST

/* Tensor values compare their device too, and device tensors (not
 * host-readable: a sim pointer faults on a host read) by identity, never by
 * reading their bytes on the host. */
START_TEST(test_equal_device_tensors)
{
    CK_OK(disco_device_sim_set_count(1));
    DLDevice sim = {kDLExtDev, 0}, cpu = {kDLCPU, 0};
    void *d = NULL;
    CK_OK(disco_device_alloc(sim, 64, &d));
    float host[16] = {0};
    int64_t shape[1] = {16};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor x = {.data = d, .device = sim, .ndim = 1, .dtype = f32, .shape = shape};
    DLTensor y = x;
    DLTensor z = {.data = host, .device = cpu, .ndim = 1, .dtype = f32, .shape = shape};
    disco_value_t vx = disco_value_tensor(&x), vy = disco_value_tensor(&y),
                  vz = disco_value_tensor(&z);
    ck_assert(disco_value_equal(&vx, &vy)); /* the same device memory */
    ck_assert(!disco_value_equal(&vx, &vz) && !disco_value_equal(&vz, &vx)); /* other device */
    y.byte_offset = 4;
    ck_assert(!disco_value_equal(&vx, &vy)); /* other memory on the same device */
    CK_OK(disco_device_free(sim, d));
}
END_TEST

Suite *suite_value(void)
{
    Suite *s = suite_create("value");
    TCase *tc = tcase_create("codec");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_copy_clear);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_type_names);
    tcase_add_test(tc, test_equal_device_tensors);
    suite_add_tcase(s, tc);
    return s;
}
