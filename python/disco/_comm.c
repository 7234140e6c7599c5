/* _comm.c - disco.comm's C part: <disco/comm.h> for Python worker
 * functions (see comm.py for the Python face).
 *
 * The trampoline of _pyfunc.c sets dp_comm_ctx to the call's ctx for as
 * long as the Python function runs (this thread's; NULL outside a call),
 * so these functions find the worker they run on. A tensor argument is
 *  - a disco Tensor that is one of the call's arguments: its DLTensor is
 *    used as it is (in place: the shared heap or the device arena);
 *  - anything else with __dlpack__ or the buffer protocol (NumPy, torch
 *    CPU, torch CUDA, any DLPack producer on a device): held as a
 *    Py_buffer or DLPack capsule (dp_host_get, without DP_HOST_CPU_ONLY:
 *    a device pointer is passed on, never read here) for the whole call,
 *    and staged by comm.h: host memory through the shared heap, device
 *    memory on the worker's own device through its device arena (a CUDA
 *    producer's work is ordered first: dp_host_get exports it with our
 *    copy stream and syncs that stream). test_device_comm.py runs it on
 *    sim and, with DISCO_TEST_DEVICE=cuda, on torch CUDA tensors.
 * The collective runs with the GIL released: the objects stay referenced
 * by the argument tuple and their exports by the dp_host_t held here, so
 * nothing they borrow goes away meanwhile (STYLE.md 17).
 *
 * Thread safety: the worker function's own thread (dp_comm_ctx is
 * thread-local). */
#include "_core.h"

#include <string.h>

#include "disco/comm.h"

__thread disco_ctx_t *dp_comm_ctx;

/* A tensor argument: either a borrowed Tensor's DLTensor or an export
 * (host or device memory). */
typedef struct {
    DLTensor *t;
    dp_host_t h;
    bool held;
} arg_t;

static int arg_get(PyObject *o, bool writable, arg_t *a)
{
    a->held = false;
    if (PyObject_TypeCheck(o, dp_Tensor_Type)) {
        TensorObject *to = (TensorObject *)o;
        if (to->orig != NULL && to->live) {
            a->t = to->orig;
            return 0;
        }
        if (to->orig != NULL) {
            PyErr_SetString(PyExc_ValueError,
                            "disco.comm: a worker function's Tensor argument after its call");
            return -1;
        }
    }
    if (dp_host_get(o, writable, &a->h) < 0)
        return -1;
    a->held = true;
    a->t = &a->h.t;
    return 0;
}

static void arg_release(arg_t *a)
{
    if (a->held)
        dp_host_release(&a->h);
    a->held = false;
}

static disco_ctx_t *ctx_or_raise(void)
{
    if (dp_comm_ctx == NULL)
        dp_raise_msg(DISCO_E_INVAL, "disco.comm: callable only inside a worker function (a "
                                    "function registered with disco.register_func, as a worker "
                                    "runs it)");
    return dp_comm_ctx;
}

static PyObject *done(disco_status_t st, arg_t *a, arg_t *b)
{
    if (a != NULL)
        arg_release(a);
    if (b != NULL)
        arg_release(b);
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

/* _comm_allreduce(src, dst, op, in_group) */
static PyObject *c_allreduce(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *src, *dst;
    const char *opname;
    int in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOsp", &src, &dst, &opname, &in_group))
        return NULL;
    disco_reduce_op_t op;
    if (!disco_reduce_parse(opname, &op))
        return dp_raise_msg(DISCO_E_INVAL,
                            "disco.comm.allreduce: op must be sum, prod, min, max or avg");
    arg_t a, b;
    if (arg_get(src, src == dst, &a) < 0)
        return NULL;
    if (src != dst && arg_get(dst, true, &b) < 0) {
        arg_release(&a);
        return NULL;
    }
    DLTensor *out = src == dst ? a.t : b.t;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_allreduce(ctx, a.t, out, op, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, &a, src == dst ? NULL : &b);
}

/* _comm_allgather(src, dst, in_group) */
static PyObject *c_allgather(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *src, *dst;
    int in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOp", &src, &dst, &in_group))
        return NULL;
    arg_t a, b;
    if (arg_get(src, false, &a) < 0)
        return NULL;
    if (arg_get(dst, true, &b) < 0) {
        arg_release(&a);
        return NULL;
    }
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_allgather(ctx, a.t, b.t, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, &a, &b);
}

/* _comm_broadcast(buf, root, in_group) */
static PyObject *c_broadcast(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *buf;
    int root, in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "Oip", &buf, &root, &in_group))
        return NULL;
    arg_t a;
    if (arg_get(buf, true, &a) < 0)
        return NULL;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_broadcast(ctx, a.t, root, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, &a, NULL);
}

/* _comm_barrier(in_group) */
static PyObject *c_barrier(PyObject *m, PyObject *args)
{
    (void)m;
    int in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "p", &in_group))
        return NULL;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_barrier(ctx, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, NULL, NULL);
}

/* _comm_send(t, to) with to >= 0; to == -1: to the next group. */
static PyObject *c_send(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *t;
    int to;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "Oi", &t, &to))
        return NULL;
    arg_t a;
    if (arg_get(t, false, &a) < 0)
        return NULL;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st =
        to == -1 ? disco_ctx_send_to_next_group(ctx, a.t) : disco_ctx_send(ctx, a.t, to);
    Py_END_ALLOW_THREADS return done(st, &a, NULL);
}

/* _comm_recv(t, frm) with frm >= 0; frm == -1: from the previous group. */
static PyObject *c_recv(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *t;
    int frm;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "Oi", &t, &frm))
        return NULL;
    arg_t a;
    if (arg_get(t, true, &a) < 0)
        return NULL;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st =
        frm == -1 ? disco_ctx_recv_from_prev_group(ctx, a.t) : disco_ctx_recv(ctx, a.t, frm);
    Py_END_ALLOW_THREADS return done(st, &a, NULL);
}

static PyObject *c_rank(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    disco_ctx_t *ctx = ctx_or_raise();
    return ctx == NULL ? NULL : PyLong_FromLong(disco_ctx_worker_id(ctx));
}

static PyObject *c_world_size(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    disco_ctx_t *ctx = ctx_or_raise();
    return ctx == NULL ? NULL : PyLong_FromLong(disco_ctx_world_size(ctx));
}

static PyObject *c_in_worker(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return PyBool_FromLong(dp_comm_ctx != NULL);
}

PyMethodDef dp_comm_methods[] = {
    {"_comm_allreduce", c_allreduce, METH_VARARGS, NULL},
    {"_comm_allgather", c_allgather, METH_VARARGS, NULL},
    {"_comm_broadcast", c_broadcast, METH_VARARGS, NULL},
    {"_comm_barrier", c_barrier, METH_VARARGS, NULL},
    {"_comm_send", c_send, METH_VARARGS, NULL},
    {"_comm_recv", c_recv, METH_VARARGS, NULL},
    {"_comm_rank", c_rank, METH_NOARGS, NULL},
    {"_comm_world_size", c_world_size, METH_NOARGS, NULL},
    {"_comm_in_worker", c_in_worker, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
