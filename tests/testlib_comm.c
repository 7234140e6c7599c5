/* testlib_comm.c - worker functions that call <disco/comm.h> (the comm
 * suite, tests/test_comm.c, and the bench's ctx rows), linked into
 * build/lib/libdisco_testlib.so beside testlib.c. Each checks its own
 * results on its worker and fails with a message naming what differed. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disco/clock.h"
#include "disco/comm.h"
#include "disco/device.h"
#include "disco/dtype.h"
#include "disco/func.h"
#include "disco/tensor.h"

/* Element i of worker w's pattern: small integers, exact in float32. */
static double val(int w, int64_t i)
{
    return (double)(w * 10 + (int)(i % 7) + 1);
}

struct env {
    disco_ctx_t *ctx;
    DLDeviceType dev; /* kDLCPU: heap (or, with foreign, malloc'd) tensors */
    DLDataType dt;    /* float32 or int32 */
    bool foreign;     /* tensors of the worker's own (staged): malloc'd, or device memory */
    void *mallocs[16];
    int nm;
    void *devmem[16]; /* foreign device memory (disco_device_alloc), on ddev */
    int nd;
    DLDevice ddev;
};

/* Device memory of the worker's own (not the session's arena): nb bytes on
 * e->ddev, filled from host by a copy left queued on the device's default
 * stream (disco_ctx_* sync that stream before they read: comm.h). */
static disco_status_t foreign_device(struct env *e, const void *host, size_t nb, void **out)
{
    void *p;
    disco_status_t st = disco_device_alloc(e->ddev, nb, &p);
    if (st != DISCO_OK)
        return st;
    e->devmem[e->nd++] = p;
    DLDevice cpu = {kDLCPU, 0};
    st = disco_device_copy(p, e->ddev, host, cpu, nb, NULL);
    if (st == DISCO_OK && e->ddev.device_type == kDLCUDA) /* the host side goes away below */
        st = disco_device_stream_sync(e->ddev, NULL);
    if (st == DISCO_OK)
        *out = p;
    return st;
}

static DLDataType dtype_of(int code)
{
    DLDataType f = {kDLFloat, 32, 1}, i = {kDLInt, 32, 1};
    return code == 0 ? f : i;
}

/* A tensor of n elements (dimension 0: rows of 4) filled with f(i). */
static disco_status_t make(struct env *e, int64_t n, double (*f)(int, int64_t), int w,
                           DLTensor **out)
{
    int64_t shape[2] = {n / 4, 4};
    DLTensor *t;
    size_t nb = (size_t)n * 4;
    void *host = malloc(nb + 1);
    if (host == NULL)
        return disco_ctx_fail(e->ctx, "no memory");
    for (int64_t i = 0; i < n; i++) {
        if (e->dt.code == kDLFloat)
            ((float *)host)[i] = f != NULL ? (float)f(w, i) : -1.0f;
        else
            ((int32_t *)host)[i] = f != NULL ? (int32_t)f(w, i) : -1;
    }
    disco_status_t st;
    if (e->foreign && e->nm < 15 && e->nd < 16) { /* the worker's own memory, not disco's */
        DLDevice where = {kDLCPU, 0};
        void *data = host;
        st = DISCO_OK;
        if (e->dev != kDLCPU) { /* host stays till the end: sim's queued copy reads it late */
            where = e->ddev;
            st = foreign_device(e, host, nb, &data);
        }
        e->mallocs[e->nm++] = host;
        t = calloc(1, sizeof *t + sizeof shape);
        if (st != DISCO_OK || t == NULL) {
            free(t);
            return st != DISCO_OK ? st : disco_ctx_fail(e->ctx, "no memory");
        }
        int64_t *sh = (int64_t *)(t + 1);
        memcpy(sh, shape, sizeof shape);
        *t = (DLTensor){.data = data, .device = where, .ndim = 2, .dtype = e->dt, .shape = sh};
        e->mallocs[e->nm++] = t;
        *out = t;
        return DISCO_OK;
    }
    st = disco_ctx_empty_device(e->ctx, shape, 2, e->dt, e->dev, &t);
    if (st == DISCO_OK) {
        DLDevice cpu = {kDLCPU, 0};
        st = disco_device_copy(t->data, t->device, host, cpu, nb, NULL);
        if (st == DISCO_OK && e->dev != kDLCPU)
            st = disco_device_stream_sync(t->device, NULL);
    }
    free(host);
    if (st == DISCO_OK)
        *out = t;
    return st;
}

/* Element i of t (read back to the host). */
static disco_status_t get_all(struct env *e, const DLTensor *t, double *out)
{
    int64_t n = disco_tensor_numel(t);
    void *host = malloc((size_t)n * 4 + 1);
    DLDevice cpu = {kDLCPU, 0};
    disco_status_t st = disco_device_copy(host, cpu, (char *)t->data + t->byte_offset, t->device,
                                          (size_t)n * 4, NULL);
    if (st == DISCO_OK && t->device.device_type != kDLCPU)
        st = disco_device_stream_sync(t->device, NULL);
    for (int64_t i = 0; st == DISCO_OK && i < n; i++)
        out[i] = e->dt.code == kDLFloat ? ((float *)host)[i] : ((int32_t *)host)[i];
    free(host);
    return st;
}

#define N 1000 /* elements a tensor: several slices, not a multiple of the members */

/* comm.check(op, device_type, dtype (0 float32, 1 int32), in_group,
 * group_size, foreign): runs one operation (or, op 7, several in one
 * command) with comm.h and checks every result element on this worker.
 * op: 0 allreduce sum, 1 allreduce max in place, 2 allgather, 3 broadcast
 * from the last member, 4 barrier, 5 send/recv between pairs, 6 send to the
 * next group / receive from the previous, 7 allreduce, allgather,
 * broadcast, barrier, allreduce in one command. foreign: the tensors are
 * the worker's own memory (malloc'd, or with a device type memory from
 * disco_device_alloc on its device), staged by comm.h. Returns 0. */
static disco_status_t check(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    struct env e = {
        ctx,        (DLDeviceType)a[1].v.i, dtype_of((int)a[2].v.i), a[5].v.b, {0}, 0, {0}, 0,
        {kDLCPU, 0}};
    if (e.dev != kDLCPU &&
        disco_device_of_worker(e.dev, disco_ctx_worker_id(ctx), &e.ddev) != DISCO_OK)
        return disco_ctx_fail(ctx, "no device of type %d", (int)e.dev);
    int op = (int)a[0].v.i, me = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx);
    bool in_group = a[3].v.b;
    if (disco_ctx_group_size(ctx) != (int)a[4].v.i)
        return disco_ctx_fail(ctx, "worker %d: disco_ctx_group_size %d, not %d", me,
                              disco_ctx_group_size(ctx), (int)a[4].v.i);
    int gsize = in_group ? (int)a[4].v.i : world, base = me / gsize * gsize;
    static double got[16 * N];
    disco_status_t st = DISCO_OK;
    DLTensor *x = NULL, *y = NULL;
    int ops[5] = {op}, nops = 1;
    if (op == 7) {
        int seq[5] = {0, 2, 3, 4, 1};
        memcpy(ops, seq, sizeof seq);
        nops = 5;
    }
    for (int k = 0; k < nops && st == DISCO_OK; k++) {
        int o = ops[k];
        if ((st = make(&e, N, val, me, &x)) != DISCO_OK)
            break;
        if (o == 0) {
            if ((st = make(&e, N, NULL, me, &y)) == DISCO_OK &&
                (st = disco_ctx_allreduce(ctx, x, y, DISCO_REDUCE_SUM, in_group)) == DISCO_OK &&
                (st = get_all(&e, y, got)) == DISCO_OK)
                for (int64_t i = 0; i < N; i++) {
                    double want = 0;
                    for (int r = 0; r < gsize; r++)
                        want += val(base + r, i);
                    if (got[i] != want)
                        return disco_ctx_fail(ctx, "allreduce: [%lld] %g, want %g", (long long)i,
                                              got[i], want);
                }
        } else if (o == 1) {
            if ((st = disco_ctx_allreduce(ctx, x, x, DISCO_REDUCE_MAX, in_group)) == DISCO_OK &&
                (st = get_all(&e, x, got)) == DISCO_OK)
                for (int64_t i = 0; i < N; i++)
                    if (got[i] != val(base + gsize - 1, i))
                        return disco_ctx_fail(ctx, "allreduce max in place: [%lld] %g",
                                              (long long)i, got[i]);
        } else if (o == 2) {
            if ((st = make(&e, (int64_t)N * gsize, NULL, me, &y)) == DISCO_OK &&
                (st = disco_ctx_allgather(ctx, x, y, in_group)) == DISCO_OK &&
                (st = get_all(&e, y, got)) == DISCO_OK)
                for (int r = 0; r < gsize; r++)
                    for (int64_t i = 0; i < N; i++)
                        if (got[r * N + i] != val(base + r, i))
                            return disco_ctx_fail(ctx, "allgather: member %d [%lld] %g", r,
                                                  (long long)i, got[r * N + i]);
        } else if (o == 3) {
            if ((st = disco_ctx_broadcast(ctx, x, gsize - 1, in_group)) == DISCO_OK &&
                (st = get_all(&e, x, got)) == DISCO_OK)
                for (int64_t i = 0; i < N; i++)
                    if (got[i] != val(base + gsize - 1, i))
                        return disco_ctx_fail(ctx, "broadcast: [%lld] %g", (long long)i, got[i]);
        } else if (o == 4) {
            st = disco_ctx_barrier(ctx, in_group);
        } else if (o == 5 || o == 6) {
            int peer =
                o == 5 ? (me % 2 == 0 ? me + 1 : me - 1) : (me < gsize ? me + gsize : me - gsize);
            bool sender = o == 5 ? me % 2 == 0 : me < gsize;
            if (peer >= world)
                continue; /* an odd world: the last one sits out */
            if ((st = make(&e, N, NULL, me, &y)) != DISCO_OK)
                break;
            if (sender)
                st = o == 5 ? disco_ctx_send(ctx, x, peer) : disco_ctx_send_to_next_group(ctx, x);
            else
                st = o == 5 ? disco_ctx_recv(ctx, y, peer) : disco_ctx_recv_from_prev_group(ctx, y);
            if (st == DISCO_OK && !sender && (st = get_all(&e, y, got)) == DISCO_OK)
                for (int64_t i = 0; i < N; i++)
                    if (got[i] != val(peer, i))
                        return disco_ctx_fail(ctx, "recv from %d: [%lld] %g", peer, (long long)i,
                                              got[i]);
        }
    }
    for (int i = 0; i < e.nd; i++) /* runs the device's queued work first (device.h) */
        (void)disco_device_free(e.ddev, e.devmem[i]);
    for (int i = 0; i < e.nm; i++)
        free(e.mallocs[i]);
    if (st == DISCO_OK)
        *ret = disco_value_int(0);
    return st;
}
DISCO_FUNC("comm.check", "iiibib", check)

/* comm.stage_error(kind, device_type): every worker allreduces in place a
 * device tensor of its own that comm.h must refuse: (kind 0) memory from
 * disco_device_alloc on another device than the worker's (device id + 1),
 * (1) on its own device but not compact (strides of a transposed view),
 * (2) of another device type (kDLCUDA, never read) once the worker's arena
 * is on device_type; (3) worker 0 sends kind 0's tensor to worker 1, which
 * receives into a heap tensor. Returns the allreduce's (the send's)
 * status, with its message. */
static disco_status_t stage_error(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                  disco_value_t *ret)
{
    (void)n;
    int kind = (int)a[0].v.i, me = disco_ctx_worker_id(ctx), count;
    DLDeviceType type = (DLDeviceType)a[1].v.i;
    DLDevice own;
    disco_status_t st = disco_device_count(type, &count);
    if (st == DISCO_OK)
        st = disco_device_of_worker(type, me, &own);
    if (st != DISCO_OK)
        return st;
    DLDevice other = {type, (own.device_id + 1) % count};
    int64_t shape[2] = {4, 4}, strides[2] = {1, 4};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor *arena;
    if ((st = disco_ctx_empty_device(ctx, shape, 2, f32, type, &arena)) != DISCO_OK)
        return st;
    void *p = NULL;
    DLTensor t = {.data = NULL, .device = own, .ndim = 2, .dtype = f32, .shape = shape};
    if (kind == 0 || kind == 3) {
        t.device = other;
        st = disco_device_alloc(other, 64, &p);
    } else if (kind == 1) {
        t.strides = strides;
        st = disco_device_alloc(own, 64, &p);
    } else {
        t.device = (DLDevice){kDLCUDA, 0};
        p = (void *)(uintptr_t)0x1000; /* never read: refused first */
    }
    if (st != DISCO_OK)
        return st;
    t.data = p;
    if (kind == 3) {
        DLTensor *h;
        if ((st = disco_ctx_empty(ctx, shape, 2, f32, &h)) == DISCO_OK && me == 0)
            st = disco_ctx_send(ctx, &t, 1);
        else if (st == DISCO_OK && me == 1)
            st = disco_ctx_recv(ctx, h, 0);
    } else {
        st = disco_ctx_allreduce(ctx, &t, &t, DISCO_REDUCE_SUM, false);
    }
    if (kind != 2)
        (void)disco_device_free(t.device, p);
    if (st == DISCO_OK)
        *ret = disco_value_int(0);
    return st;
}
DISCO_FUNC("comm.stage_error", "ii", stage_error)

/* comm.fault(kind, victim, timeout_probe): every worker calls
 * disco_ctx_allreduce on a heap tensor filled with -1 for its output,
 * except that the victim (kind 0) is killed while it waits inside it,
 * (kind 1) returns without calling it, (kind 2) passes one more element,
 * (kind 3) calls allgather instead, (kind 4: worker 0 sends to the victim,
 * which returns without receiving; the others do nothing), (kind 5) two
 * allreduces where the victim calls one, (kind 6) as 1 in its group's
 * allreduce (in_group), (kind 7) fails before calling it, (kind 8) passes
 * 4096 elements (too many to go inline while the others' 64 do: the
 * meeting is mixed), (kind 9) reduces with max while the others sum,
 * (kind 10) passes op 9, which is none (its call fails before the meeting
 * while the others' inline meeting waits). Returns the number of output
 * elements that are no longer -1 (0: nothing was written). */
/* Fault injection, not synchronization: the victim dies 100 ms into its
 * wait; worker 0 arrives a second later, so the others wait for it inside
 * the collective when the victim dies (either way the result is a named
 * error). */
static void *die_soon(void *arg)
{
    (void)arg;
    usleep(100000);
    kill(getpid(), SIGKILL);
    return NULL;
}

static disco_status_t fault(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int kind = (int)a[0].v.i, victim = (int)a[1].v.i, me = disco_ctx_worker_id(ctx);
    int64_t len = me == victim && kind == 2 ? 65 : me == victim && kind == 8 ? 4096 : 64;
    disco_reduce_op_t op = me == victim && kind == 9    ? DISCO_REDUCE_MAX
                           : me == victim && kind == 10 ? (disco_reduce_op_t)9
                                                        : DISCO_REDUCE_SUM;
    DLTensor *x, *y;
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &x);
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, &len, 1, f32, &y);
    if (st != DISCO_OK)
        return st;
    for (int64_t i = 0; i < len; i++)
        ((float *)x->data)[i] = 1.0f, ((float *)y->data)[i] = -1.0f;
    if (kind == 0 && me == 0 && victim != 0)
        usleep(1000000);
    if (kind == 4) {
        if (me == 0)
            st = disco_ctx_send(ctx, x, victim);
    } else if (me == victim && kind == 0) { /* killed while it waits inside */
        pthread_t th;
        if (pthread_create(&th, NULL, die_soon, NULL) != 0)
            kill(getpid(), SIGKILL);
        st = disco_ctx_allreduce(ctx, x, y, DISCO_REDUCE_SUM, false);
    } else if (me == victim && kind == 7) {
        return disco_ctx_fail(ctx, "worker %d fails on purpose", me);
    } else if (me == victim && (kind == 1 || kind == 6)) {
        st = DISCO_OK;
    } else if (me == victim && kind == 3) {
        int64_t l2 = len * disco_ctx_world_size(ctx);
        DLTensor *z;
        if ((st = disco_ctx_empty(ctx, &l2, 1, f32, &z)) == DISCO_OK)
            st = disco_ctx_allgather(ctx, x, z, false);
    } else {
        st = disco_ctx_allreduce(ctx, x, y, op, kind == 6);
        if (st == DISCO_OK && kind == 5 && me != victim)
            st = disco_ctx_allreduce(ctx, x, y, DISCO_REDUCE_SUM, false);
    }
    int64_t written = 0;
    for (int64_t i = 0; i < len; i++)
        written += ((float *)y->data)[i] != -1.0f;
    if (st != DISCO_OK)
        return st;
    *ret = disco_value_int(written);
    return DISCO_OK;
}
DISCO_FUNC("comm.fault", "ii", fault)

/* comm.inline_stress(iters, in_group, group_size): iters allreduces (sum, float32) on
 * every member, alternating inputs small enough to go inline (collective.h,
 * Inline) with some that are not, some in place; member r's input in
 * iteration i is (i + 1) * (r + 1) + element index, rewritten before each
 * call, and each member spins a different, varying while before each call,
 * so that members run ahead of each other into the slot set the others may
 * still read; some outputs overlap their input. Every element of every result is checked exactly.
 * Returns the number of calls. */
static disco_status_t inline_stress(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                    disco_value_t *ret)
{
    (void)n;
    int me = disco_ctx_worker_id(ctx), world = disco_ctx_world_size(ctx);
    bool in_group = a[1].v.b;
    int size = in_group ? (int)a[2].v.i : world;
    int base = in_group ? me / size * size : 0;
    int64_t big = 2048, small[3] = {1, 64, 1024}; /* 8 KiB: not inline; 4 KiB: inline */
    DLDataType f32 = {kDLFloat, 32, 1};
    DLTensor *x, *y;
    disco_status_t st = disco_ctx_empty(ctx, &big, 1, f32, &x);
    if (st == DISCO_OK)
        st = disco_ctx_empty(ctx, &big, 1, f32, &y);
    for (int64_t i = 0; st == DISCO_OK && i < a[0].v.i; i++) {
        int64_t len = i % 7 == 6 ? big : small[i % 3];
        bool in_place = i % 5 == 1;
        /* An output that overlaps the input 16 elements on (inline sizes
         * only: x has room): the fold must not read input bytes it has
         * already overwritten (collective_allreduce.c, own_source). */
        bool overlap = i % 5 == 3 && len < big;
        DLTensor xs = *x, ys = *y;
        xs.shape = ys.shape = &len;
        if (overlap) {
            ys.data = x->data;
            ys.byte_offset = 16 * sizeof(float);
        }
        for (int64_t k = 0; k < len; k++)
            ((float *)x->data)[k] = (float)((i + 1) * (me + 1) + k);
        /* Skew, not synchronization: members arrive in varying orders. */
        for (volatile int64_t spin = (i * 7 + me * 13) % 64 * 50; spin > 0; spin--)
            ;
        st = disco_ctx_allreduce(ctx, &xs, in_place ? &xs : &ys, DISCO_REDUCE_SUM, in_group);
        const float *got = in_place  ? (const float *)x->data
                           : overlap ? (const float *)x->data + 16
                                     : (const float *)y->data;
        int64_t members = 0;
        for (int r = base; r < base + size; r++)
            members += r + 1;
        for (int64_t k = 0; st == DISCO_OK && k < len; k++) {
            float want = (float)((i + 1) * members + (int64_t)size * k);
            if (got[k] != want)
                st = disco_ctx_fail(ctx, "call %lld (%lld elements%s): element %lld is %g, not %g",
                                    (long long)i, (long long)len,
                                    in_place  ? ", in place"
                                    : overlap ? ", overlapping"
                                              : "",
                                    (long long)k, (double)got[k], (double)want);
        }
    }
    if (st == DISCO_OK)
        *ret = disco_value_int(a[0].v.i);
    return st;
}
DISCO_FUNC("comm.inline_stress", "ibi", inline_stress)

/* comm.allreduce_loop(bytes, iters, in_group): iters in-worker allreduces
 * (sum, float32) of a heap tensor of bytes bytes, in place; the bench's
 * ctx_allreduce rows. Returns 0. */
static disco_status_t allreduce_loop(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                     disco_value_t *ret)
{
    (void)n;
    int64_t len = a[0].v.i / 4 > 0 ? a[0].v.i / 4 : 1;
    DLTensor *x;
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &x);
    if (st == DISCO_OK)
        memset(x->data, 0, (size_t)len * 4);
    for (int64_t i = 0; st == DISCO_OK && i < a[1].v.i; i++)
        st = disco_ctx_allreduce(ctx, x, x, DISCO_REDUCE_SUM, a[2].v.b);
    if (st == DISCO_OK)
        *ret = disco_value_int(0);
    return st;
}
DISCO_FUNC("comm.allreduce_loop", "iib", allreduce_loop)

/* comm.sendrecv_loop(bytes, iters): worker 0 sends to worker 1 and back,
 * iters times (the others do nothing). Returns 0. */
static disco_status_t sendrecv_loop(disco_ctx_t *ctx, const disco_value_t *a, int n,
                                    disco_value_t *ret)
{
    (void)n;
    int64_t len = a[0].v.i / 4 > 0 ? a[0].v.i / 4 : 1;
    int me = disco_ctx_worker_id(ctx);
    DLTensor *x;
    DLDataType f32 = {kDLFloat, 32, 1};
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &x);
    for (int64_t i = 0; st == DISCO_OK && me < 2 && i < a[1].v.i; i++) {
        if (me == 0 && (st = disco_ctx_send(ctx, x, 1)) == DISCO_OK)
            st = disco_ctx_recv(ctx, x, 1);
        else if (me == 1 && (st = disco_ctx_recv(ctx, x, 0)) == DISCO_OK)
            st = disco_ctx_send(ctx, x, 0);
    }
    if (st == DISCO_OK)
        *ret = disco_value_int(0);
    return st;
}
DISCO_FUNC("comm.sendrecv_loop", "ii", sendrecv_loop)

/* Whether msg holds every one of the words (NULL-ended). */
static bool holds(const char *msg, const char *const *words)
{
    for (; *words != NULL; words++)
        if (strstr(msg, *words) == NULL)
            return false;
    return true;
}

/* comm.bad_p2p(kind, timeout_ms): worker 0 sends worker 1 two tensors
 * in one command and worker 1 receives both (the others do nothing); the
 * first send (kind 0) or the first receive (kind 1) fails on its own
 * argument (a host tensor that is not compact), the second pair is good.
 * Each side checks its own end (collective.h, Failures): the failed call
 * returns its own words; its peer's first call fails within a quarter of
 * timeout_ms (the call's deadline), naming the failed worker and quoting
 * its words; the second pair meets and worker 1 gets the second tensor's
 * bytes. Returns 0, or fails naming what differed. */
static disco_status_t bad_p2p(disco_ctx_t *ctx, const disco_value_t *a, int n, disco_value_t *ret)
{
    (void)n;
    int kind = (int)a[0].v.i, me = disco_ctx_worker_id(ctx);
    int64_t len = 8, bound_ns = a[1].v.i * 1000000 / 4, strides[1] = {2};
    DLDataType f32 = {kDLFloat, 32, 1};
    float spread[16] = {0};
    DLTensor bad = {.data = spread,
                    .device = {kDLCPU, 0},
                    .ndim = 1,
                    .dtype = f32,
                    .shape = &len,
                    .strides = strides};
    DLTensor *x;
    disco_status_t st = disco_ctx_empty(ctx, &len, 1, f32, &x);
    if (st != DISCO_OK || me > 1)
        return st != DISCO_OK ? st : (*ret = disco_value_int(0), DISCO_OK);
    bool fails_here = (kind == 0) == (me == 0); /* this end's first call is the bad one */
    const char *own[] = {"must be compact", NULL};
    const char *peer[] = {me == 0 ? "disco_ctx_send: worker 1 refused the tensor of worker 0"
                                  : "disco_ctx_recv: worker 0 failed its send to worker 1",
                          "must be compact", NULL};
    for (int64_t i = 0; i < len; i++)
        ((float *)x->data)[i] = me == 0 ? -1.0f : 0.0f;
    int64_t t0 = disco_now_ns();
    if (me == 0)
        st = disco_ctx_send(ctx, kind == 0 ? &bad : x, 1);
    else
        st = disco_ctx_recv(ctx, kind == 1 ? &bad : x, 0);
    int64_t took = disco_now_ns() - t0;
    char first[512];
    snprintf(first, sizeof first, "%s", disco_last_error());
    if (st == DISCO_OK)
        return disco_ctx_fail(ctx, "worker %d: the first %s passed", me, me ? "recv" : "send");
    if (!holds(first, fails_here ? own : peer))
        return disco_ctx_fail(ctx, "worker %d: first call's words: %s", me, first);
    if (!fails_here && took >= bound_ns)
        return disco_ctx_fail(ctx, "worker %d: first call failed after %lld ms", me,
                              (long long)(took / 1000000));
    for (int64_t i = 0; me == 1 && i < len; i++) /* a failed receive writes nothing */
        if (((float *)x->data)[i] != 0.0f)
            return disco_ctx_fail(ctx, "worker 1: element %lld written by a failed receive",
                                  (long long)i);
    for (int64_t i = 0; i < len; i++)
        ((float *)x->data)[i] = me == 0 ? (float)(i + 1) : -5.0f;
    st = me == 0 ? disco_ctx_send(ctx, x, 1) : disco_ctx_recv(ctx, x, 0);
    if (st != DISCO_OK)
        return disco_ctx_fail(ctx, "worker %d: second call: %s", me, disco_last_error());
    for (int64_t i = 0; me == 1 && i < len; i++)
        if (((float *)x->data)[i] != (float)(i + 1))
            return disco_ctx_fail(ctx, "worker 1: element %lld is %g, not %lld", (long long)i,
                                  (double)((float *)x->data)[i], (long long)(i + 1));
    *ret = disco_value_int(0);
    return DISCO_OK;
}
DISCO_FUNC("comm.bad_p2p", "ii", bad_p2p)
