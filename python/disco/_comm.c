/* _comm.c - disco.comm's C part: <disco/comm.h> for Python worker
 * functions (see comm.py for the Python face).
 *
 * The trampoline of _pyfunc.c sets dp_comm_ctx to the call's ctx and
 * dp_comm_args to its argument tuple for as long as the Python function
 * runs (this thread's; NULL outside a call), so these functions find the
 * worker they run on. A tensor argument is
 *  - a disco Tensor that is one of the running call's arguments: its
 *    DLTensor is used as it is (in place: the shared heap or the device
 *    arena). A borrowed Tensor of any other call (one that ended, another
 *    worker's in a threaded session, an outer call's) is refused with
 *    BufferError: it is another worker's memory, or none;
 *  - anything else with __dlpack__ or the buffer protocol (NumPy, torch
 *    CPU, torch CUDA, any DLPack producer on a device, a view Tensor):
 *    held as a Py_buffer or DLPack capsule (dp_host_get, without
 *    DP_HOST_CPU_ONLY: a device pointer is passed on, never read here) for
 *    the whole call, and staged by comm.h: host memory through the shared
 *    heap, device memory on the worker's own device through its device
 *    arena (a CUDA producer's work is ordered first: dp_host_get exports it
 *    with our copy stream and syncs that stream). test_device_comm.py runs
 *    it on sim and, with DISCO_TEST_DEVICE=cuda, on torch CUDA tensors.
 * The collective runs with the GIL released: the objects stay referenced
 * by the argument tuple and their exports by the dp_host_t held here, so
 * nothing they borrow goes away meanwhile (STYLE.md 17).
 *
 * Misuse (docs/python-safety.md, "disco.comm"; test_comm_misuse.py):
 *  1. Outside a worker function every call raises InvalidArgumentError
 *     before it looks at its arguments.
 *  2. An argument the call cannot take raises TypeError, ValueError,
 *     BufferError or disco's class, its message starting
 *     "disco.comm.<function>: <argument>", and nothing is written.
 *  3. Such a call still takes its place: once this worker's ctx is known,
 *     a collective whose arguments failed here enters the collective with
 *     no tensors (comm.h fails it on every member, in that collective),
 *     and a send or receive with a valid peer is passed on with no tensor
 *     (it still pairs with its peer's call, waiting for it as a good one
 *     would); the call fails with the Python error's words
 *     (disco__comm_fail_next), which the peers quote; then the argument's
 *     error is raised. So the members' next collectives meet each other,
 *     not this one (test_failed_call_keeps_its_place,
 *     test_comm_peer_words.py).
 *
 * Thread safety: the worker function's own thread (dp_comm_ctx is
 * thread-local). */
#include "_core.h"

#include <limits.h>
#include <string.h>

#include "disco/comm.h"
#include "workers/data/comm_impl.h"

__thread disco_ctx_t *dp_comm_ctx;
__thread PyObject *dp_comm_args;

/* A tensor argument: either a borrowed Tensor's DLTensor or an export
 * (host or device memory). */
typedef struct {
    DLTensor *t;
    dp_host_t h;
    bool held;
} arg_t;

/* The pending exception again, its message now "disco.comm.<fn>: <arg>: "
 * and the old one, which becomes its __cause__: for disco's classes and
 * the plain builtins whose constructor takes a message; anything else is
 * left as it was. */
static void name_error(const char *fn, const char *arg)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v == NULL) {
        PyErr_Restore(t, v, tb);
        return;
    }
    if (tb != NULL)
        PyException_SetTraceback(v, tb);
    PyObject *nv = NULL, *msg = NULL;
    bool ours = dp_DiscoError != NULL && PyObject_IsInstance(v, dp_DiscoError) == 1;
    if (ours) {
        PyObject *detail = PyObject_GetAttrString(v, "detail");
        PyObject *code = PyObject_GetAttrString(v, "code");
        if (detail != NULL && code != NULL &&
            (msg = PyUnicode_FromFormat("disco.comm.%s: %s: %S", fn, arg, detail)) != NULL)
            nv = PyObject_CallFunctionObjArgs(t, msg, code, NULL);
        Py_XDECREF(detail);
        Py_XDECREF(code);
    } else if (t == PyExc_TypeError || t == PyExc_ValueError || t == PyExc_BufferError ||
               t == PyExc_OverflowError || t == PyExc_RuntimeError) {
        if ((msg = PyUnicode_FromFormat("disco.comm.%s: %s: %S", fn, arg, v)) != NULL)
            nv = PyObject_CallFunctionObjArgs(t, msg, NULL);
    }
    Py_XDECREF(msg);
    if (nv == NULL) { /* not renamed: the original, as it was */
        PyErr_Clear();
        PyErr_Restore(t, v, tb);
        return;
    }
    PyException_SetCause(nv, v); /* steals v */
    PyErr_SetObject(t, nv);
    Py_DECREF(nv);
    Py_DECREF(t);
    Py_XDECREF(tb);
}

/* Whether o is one of the running call's arguments (by identity). */
static bool is_call_arg(PyObject *o)
{
    if (dp_comm_args == NULL || !PyTuple_Check(dp_comm_args))
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_Size(dp_comm_args); i++)
        if (PyTuple_GetItem(dp_comm_args, i) == o)
            return true;
    return false;
}

static int arg_get(PyObject *o, bool writable, const char *fn, const char *name, arg_t *a)
{
    a->held = false;
    a->t = NULL;
    if (PyObject_TypeCheck(o, dp_Tensor_Type) && ((TensorObject *)o)->orig != NULL) {
        TensorObject *to = (TensorObject *)o;
        /* An argument of this call is live until the trampoline, which
         * this thread is inside of, returns. */
        if (is_call_arg(o) && to->live && to->pid == dp_pid) {
            a->t = to->orig;
            return 0;
        }
        PyErr_Format(PyExc_BufferError,
                     "disco.comm.%s: %s is a worker function's Tensor argument but not an "
                     "argument of this call (its call ended, or it is another worker's or an "
                     "outer call's): disco.comm uses only the running call's own Tensors",
                     fn, name);
        return -1;
    }
    if (dp_host_get(o, writable ? DP_HOST_WRITABLE : 0, &a->h) < 0) {
        name_error(fn, name);
        return -1;
    }
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
                                    "runs it, in the thread that runs it)");
    return dp_comm_ctx;
}

/* o as a C long long: an int or anything with __index__, not a bool (a
 * rank is not a truth value) and not a float (never truncated). Values
 * beyond long long saturate (the callers' range checks refuse them).
 * Returns 0, or -1 with TypeError set, naming the argument. */
static int int_arg(PyObject *o, const char *fn, const char *name, long long *out)
{
    char tn[128];
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "disco.comm.%s: %s must be an int, not %s", fn, name,
                     dp_type_name(o, tn, sizeof tn));
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        name_error(fn, name);
        return -1;
    }
    int over = 0;
    long long x = PyLong_AsLongLongAndOverflow(i, &over);
    Py_DECREF(i);
    if (x == -1 && PyErr_Occurred()) {
        name_error(fn, name);
        return -1;
    }
    *out = over > 0 ? LLONG_MAX : over < 0 ? LLONG_MIN : x;
    return 0;
}

/* InvalidArgumentError: "disco.comm.<fn>: <name> <o> is not <what> (0 ..
 * n - 1)". Returns -1. */
static int raise_range(const char *fn, const char *name, PyObject *o, const char *what, int n)
{
    PyObject *m =
        PyUnicode_FromFormat("disco.comm.%s: %s %R is not %s (0 .. %d)", fn, name, o, what, n - 1);
    const char *s = m != NULL ? PyUnicode_AsUTF8AndSize(m, NULL) : NULL;
    if (s != NULL)
        dp_raise_msg(DISCO_E_INVAL, s);
    Py_XDECREF(m);
    return -1;
}

/* A worker id for send/recv: 0 <= id < the world (this worker itself is
 * comm.h's to refuse, with its words). Returns 0, or -1 with TypeError or
 * InvalidArgumentError set. */
static int peer_arg(disco_ctx_t *ctx, PyObject *o, const char *fn, const char *name, int *out)
{
    long long x;
    if (int_arg(o, fn, name, &x) < 0)
        return -1;
    int world = disco_ctx_world_size(ctx);
    if (x < 0 || x >= world)
        return raise_range(fn, name, o, "a worker id", world);
    *out = (int)x;
    return 0;
}

/* The collective a call whose arguments failed here still takes part in
 * (rule 3 above). */
enum kind { K_ALLREDUCE, K_ALLGATHER, K_BROADCAST };

/* Has comm.h fail this worker's next call with exception v's words
 * ("<class>: <message>"; a disco error's status, else DISCO_E_INVAL), so
 * that its peers quote the Python reason (comm_impl.h,
 * disco__comm_fail_next). v: normalized, or NULL. GIL held. */
static void fail_next(disco_ctx_t *ctx, PyObject *v)
{
    disco_status_t st = DISCO_E_INVAL;
    PyObject *name = v != NULL ? PyObject_GetAttrString((PyObject *)Py_TYPE(v), "__name__") : NULL;
    PyObject *str = v != NULL ? PyObject_Str(v) : NULL;
    PyObject *code = NULL;
    if (v != NULL && dp_DiscoError != NULL && PyObject_IsInstance(v, dp_DiscoError) == 1)
        code = PyObject_GetAttrString(v, "code");
    if (code != NULL && PyLong_Check(code))
        st = (disco_status_t)PyLong_AsLong(code);
    const char *n =
        name != NULL && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    const char *m = str != NULL ? PyUnicode_AsUTF8AndSize(str, NULL) : NULL;
    PyErr_Clear(); /* a failure here loses words, never the caller's error */
    char words[512];
    snprintf(words, sizeof words, "%s: %s", n != NULL ? n : "error", m != NULL ? m : "?");
    disco__comm_fail_next(ctx, st, words);
    Py_XDECREF(code);
    Py_XDECREF(str);
    Py_XDECREF(name);
}

/* Enters kind's collective with no tensors, so that it fails on every
 * member (the words fail_next left, else comm.h's, naming this worker);
 * its status is dropped: the caller has an error of its own. GIL held
 * (released while it waits). */
static void enter_failed(disco_ctx_t *ctx, enum kind k, bool in_group)
{
    Py_BEGIN_ALLOW_THREADS switch (k)
    {
    case K_ALLREDUCE:
        (void)disco_ctx_allreduce(ctx, NULL, NULL, DISCO_REDUCE_SUM, in_group);
        break;
    case K_ALLGATHER:
        (void)disco_ctx_allgather(ctx, NULL, NULL, in_group);
        break;
    case K_BROADCAST:
        (void)disco_ctx_broadcast(ctx, NULL, 0, in_group);
        break;
    }
    Py_END_ALLOW_THREADS
}

/* enter_failed, then returns NULL with the argument's error, which was
 * pending, raised again. */
static PyObject *forfeit(disco_ctx_t *ctx, enum kind k, bool in_group)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    fail_next(ctx, v);
    enter_failed(ctx, k, in_group);
    PyErr_Restore(t, v, tb);
    return NULL;
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

/* op: "sum", "prod", "min", "max" or "avg". Returns 0, or -1 with TypeError
 * or InvalidArgumentError set. */
static int op_arg(PyObject *o, disco_reduce_op_t *op)
{
    char tn[128];
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "disco.comm.allreduce: op must be a str (sum, prod, min, max or avg), not %s",
                     dp_type_name(o, tn, sizeof tn));
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == NULL) {
        name_error("allreduce", "op");
        return -1;
    }
    if ((size_t)n != strlen(s) || !disco_reduce_parse(s, op)) {
        PyObject *m = PyUnicode_FromFormat(
            "disco.comm.allreduce: op %.100R is none of sum, prod, min, max, avg", o);
        const char *ms = m != NULL ? PyUnicode_AsUTF8AndSize(m, NULL) : NULL;
        if (ms != NULL)
            dp_raise_msg(DISCO_E_INVAL, ms);
        Py_XDECREF(m);
        return -1;
    }
    return 0;
}

/* _comm_allreduce(src, dst, op, in_group) */
static PyObject *c_allreduce(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *src, *dst, *op_o;
    int in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOOp", &src, &dst, &op_o, &in_group))
        return NULL;
    disco_reduce_op_t op;
    arg_t a, b = {0};
    if (op_arg(op_o, &op) < 0)
        return forfeit(ctx, K_ALLREDUCE, in_group != 0);
    if (arg_get(src, src == dst, "allreduce", "src", &a) < 0)
        return forfeit(ctx, K_ALLREDUCE, in_group != 0);
    if (src != dst && arg_get(dst, true, "allreduce", "dst", &b) < 0) {
        arg_release(&a);
        return forfeit(ctx, K_ALLREDUCE, in_group != 0);
    }
    DLTensor *out = src == dst ? a.t : b.t;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_allreduce(ctx, a.t, out, op, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, &a, &b);
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
    if (arg_get(src, false, "allgather", "src", &a) < 0)
        return forfeit(ctx, K_ALLGATHER, in_group != 0);
    if (arg_get(dst, true, "allgather", "dst", &b) < 0) {
        arg_release(&a);
        return forfeit(ctx, K_ALLGATHER, in_group != 0);
    }
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_allgather(ctx, a.t, b.t, in_group != 0);
    Py_END_ALLOW_THREADS return done(st, &a, &b);
}

/* _comm_broadcast(buf, root, in_group) */
static PyObject *c_broadcast(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *buf, *root_o;
    int in_group;
    long long root;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOp", &buf, &root_o, &in_group))
        return NULL;
    if (int_arg(root_o, "broadcast", "root", &root) < 0)
        return forfeit(ctx, K_BROADCAST, in_group != 0);
    /* Within the members is comm.h's to check, at the meeting, with every
     * member's verdict; beyond an int it cannot be told. */
    if (root < INT_MIN || root > INT_MAX) {
        raise_range("broadcast", "root", root_o, "a member's rank",
                    in_group ? disco_ctx_group_size(ctx) : disco_ctx_world_size(ctx));
        return forfeit(ctx, K_BROADCAST, in_group != 0);
    }
    arg_t a;
    if (arg_get(buf, true, "broadcast", "buf", &a) < 0)
        return forfeit(ctx, K_BROADCAST, in_group != 0);
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_ctx_broadcast(ctx, a.t, (int)root, in_group != 0);
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

/* A send (is_send) or receive of t to or from peer (-1: the next or the
 * previous group), once the peer is known. */
static PyObject *p2p(disco_ctx_t *ctx, bool is_send, PyObject *t, int peer, const char *fn)
{
    arg_t a;
    disco_status_t st;
    int rc = arg_get(t, !is_send, fn, "t", &a);
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    if (rc < 0) { /* passed on failed: its peer's call fails too, quoting it (rule 3) */
        PyErr_Fetch(&et, &ev, &etb);
        PyErr_NormalizeException(&et, &ev, &etb);
        fail_next(ctx, ev);
    }
    DLTensor *x = rc == 0 ? a.t : NULL;
    Py_BEGIN_ALLOW_THREADS if (is_send) st =
        peer < 0 ? disco_ctx_send_to_next_group(ctx, x) : disco_ctx_send(ctx, x, peer);
    else st = peer < 0 ? disco_ctx_recv_from_prev_group(ctx, x) : disco_ctx_recv(ctx, x, peer);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        PyErr_Restore(et, ev, etb);
        return NULL;
    }
    return done(st, &a, NULL);
}

/* _comm_send(t, to, next_group): to worker to, or with next_group to the
 * next group (to unused). */
static PyObject *c_send(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *t, *to_o;
    int to = -1, next;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOp", &t, &to_o, &next))
        return NULL;
    if (!next && peer_arg(ctx, to_o, "send", "to", &to) < 0)
        return NULL; /* no peer: nothing to pair with */
    return p2p(ctx, true, t, to, next ? "send_to_next_group" : "send");
}

/* _comm_recv(t, frm, prev_group): from worker frm, or with prev_group from
 * the previous group (frm unused). */
static PyObject *c_recv(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *t, *frm_o;
    int frm = -1, prev;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "OOp", &t, &frm_o, &prev))
        return NULL;
    if (!prev && peer_arg(ctx, frm_o, "recv", "frm", &frm) < 0)
        return NULL; /* no peer: nothing to pair with */
    return p2p(ctx, false, t, frm, prev ? "recv_from_prev_group" : "recv");
}

/* _comm_forfeit(kind, in_group): kind ("allreduce", "allgather",
 * "broadcast") entered with no tensors, for an argument comm.py refused
 * (rule 3); the collective's error is not raised (the caller raises its
 * own). */
static PyObject *c_forfeit(PyObject *m, PyObject *args)
{
    (void)m;
    const char *kind;
    int in_group;
    disco_ctx_t *ctx = ctx_or_raise();
    if (ctx == NULL || !PyArg_ParseTuple(args, "sp", &kind, &in_group))
        return NULL;
    enum kind k;
    if (strcmp(kind, "allreduce") == 0)
        k = K_ALLREDUCE;
    else if (strcmp(kind, "allgather") == 0)
        k = K_ALLGATHER;
    else if (strcmp(kind, "broadcast") == 0)
        k = K_BROADCAST;
    else
        return PyErr_Format(PyExc_ValueError, "_comm_forfeit: no collective %s", kind);
    PyObject *t, *v, *tb; /* the exception comm.py is handling: its words */
    PyErr_GetExcInfo(&t, &v, &tb);
    fail_next(ctx, v != Py_None ? v : NULL);
    Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(tb);
    enter_failed(ctx, k, in_group != 0);
    Py_RETURN_NONE;
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

static PyObject *c_group_size(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    disco_ctx_t *ctx = ctx_or_raise();
    return ctx == NULL ? NULL : PyLong_FromLong(disco_ctx_group_size(ctx));
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
    {"_comm_forfeit", c_forfeit, METH_VARARGS, NULL},
    {"_comm_rank", c_rank, METH_NOARGS, NULL},
    {"_comm_world_size", c_world_size, METH_NOARGS, NULL},
    {"_comm_group_size", c_group_size, METH_NOARGS, NULL},
    {"_comm_in_worker", c_in_worker, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
