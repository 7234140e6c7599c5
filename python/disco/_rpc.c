/* _rpc.c - RPCSession: a disco_rpc_t (disco/rpc.h) for disco.rpc. Every
 * operation runs with the GIL released under the object's own lock (an
 * RPC session is used by one thread at a time). */
#include "_core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD disco_rpc_t *r;
    pid_t pid;
    PyThread_type_lock lock;
    PyObject *session; /* rpc_from_worker: the Disco session it views */
} RPCObject;

/* Takes o's lock (and a worker view's session lock). Returns 0; 1 when
 * the session is closed and quiet is set (no error, no lock held); -1 with
 * an error. The state is checked again once the lock is held: a close()
 * that held it may have run while this thread waited (test_safety.py's
 * test_rpc_close_races). */
static int rpc_enter_q(RPCObject *o, bool quiet)
{
    if (o->pid != dp_pid) {
        dp_raise_msg(DISCO_E_CLOSED, "RPC session of another process");
        return -1;
    }
    if (o->r != NULL && !PyThread_acquire_lock(o->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(o->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    } else if (o->r == NULL) {
        goto closed;
    }
    if (o->r == NULL) {
        PyThread_release_lock(o->lock);
        goto closed;
    }
    /* A worker's view uses the Disco session: its lock too. */
    if (o->session != NULL && dp_enter((SessionObject *)o->session) < 0) {
        PyThread_release_lock(o->lock);
        return -1;
    }
    return 0;
closed:
    if (quiet)
        return 1;
    dp_raise_msg(DISCO_E_CLOSED, "RPC session is closed");
    return -1;
}

static int rpc_enter(RPCObject *o)
{
    return rpc_enter_q(o, false);
}

static void rpc_leave(RPCObject *o)
{
    if (o->session != NULL)
        dp_leave((SessionObject *)o->session);
    PyThread_release_lock(o->lock);
}

static PyObject *rpc_wrap(disco_rpc_t *r, PyObject *session)
{
    RPCObject *o = PyObject_New(RPCObject, dp_RPC_Type);
    if (o == NULL || (o->lock = PyThread_allocate_lock()) == NULL) {
        if (o != NULL) {
            o->r = NULL;
            o->session = NULL;
            Py_DECREF(o);
        }
        disco_rpc_close(r);
        return o == NULL ? NULL : PyErr_NoMemory();
    }
    o->r = r;
    o->pid = dp_pid;
    o->session = Py_XNewRef(session);
    return (PyObject *)o;
}

static void rpc_dealloc(RPCObject *o)
{
    if (o->r != NULL && o->pid == dp_pid) {
        disco_rpc_t *r = o->r;
        o->r = NULL;
        Py_BEGIN_ALLOW_THREADS disco_rpc_close(r);
        Py_END_ALLOW_THREADS
    }
    if (o->lock != NULL)
        PyThread_free_lock(o->lock);
    Py_CLEAR(o->session);
    dp_free_self((PyObject *)o);
}

/* rpc_connect(address, timeout_ms=0, token=None, token_file=None) */
static PyObject *mod_rpc_connect(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"address", "timeout_ms", "token", "token_file", NULL};
    const char *addr, *token_file = NULL;
    unsigned long long timeout = 0;
    PyObject *timeout_o = NULL;
    Py_buffer token = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Oz*z", kwlist, &addr, &timeout_o, &token,
                                     &token_file))
        return NULL;
    if (timeout_o != NULL && dp_uint_in(timeout_o, UINT32_MAX, "timeout_ms", &timeout) < 0) {
        if (token.buf != NULL)
            PyBuffer_Release(&token);
        return NULL;
    }
    if (token.buf != NULL && token.len != DISCO_RPC_TOKEN_BYTES) {
        PyBuffer_Release(&token);
        PyErr_Format(PyExc_ValueError, "token: %d bytes", DISCO_RPC_TOKEN_BYTES);
        return NULL;
    }
    disco_rpc_client_config_t cfg = {
        .call_timeout_ms = (uint32_t)timeout, .token = token.buf, .token_file = token_file};
    disco_rpc_t *r;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_rpc_connect_with(addr, &cfg, &r);
    Py_END_ALLOW_THREADS if (token.buf != NULL) PyBuffer_Release(&token);
    if (st != DISCO_OK)
        return dp_raise(st);
    return rpc_wrap(r, NULL);
}

/* rpc_local(allow_load_dir=None) */
static PyObject *mod_rpc_local(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"allow_load_dir", NULL};
    const char *dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z", kwlist, &dir))
        return NULL;
    disco_rpc_local_config_t cfg = {.allow_load_dir = dir};
    disco_rpc_t *r;
    disco_status_t st = disco_rpc_local_with(&cfg, &r);
    if (st != DISCO_OK)
        return dp_raise(st);
    return rpc_wrap(r, NULL);
}

/* rpc_from_worker(session, worker) */
static PyObject *mod_rpc_from_worker(PyObject *m, PyObject *args)
{
    (void)m;
    SessionObject *so;
    int w;
    if (!PyArg_ParseTuple(args, "O!i", dp_Session_Type, &so, &w))
        return NULL;
    if (dp_enter(so) < 0)
        return NULL;
    disco_rpc_t *r;
    disco_status_t st = disco_rpc_from_worker(so->s, w, &r);
    dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return rpc_wrap(r, (PyObject *)so);
}

#define RPC_RUN(o, st, expr)                                                                       \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS(st) = (expr);                                                       \
        Py_END_ALLOW_THREADS rpc_leave(o);                                                         \
    } while (0)

static PyObject *rpc_get_func(RPCObject *o, PyObject *name)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    if (n == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "get_func(name): name must be a str");
        return NULL;
    }
    if (rpc_enter(o) < 0)
        return NULL;
    disco_rpc_handle_t h;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_get_func(o->r, n, &h));
    if (st != DISCO_OK)
        return dp_raise(st);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *rpc_call(RPCObject *o, PyObject *const *args, Py_ssize_t n)
{
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "call(func_handle, *args)");
        return NULL;
    }
    if (n - 1 > DP_MAX_ARGS)
        return dp_raise_msg(DISCO_E_ARG_COUNT, "too many arguments");
    unsigned long long f;
    if (dp_uint_in(args[0], UINT64_MAX, "func_handle", &f) < 0)
        return NULL;
    disco_value_t v[DP_MAX_ARGS], ret = disco_value_null();
    dp_scratch_t sc;
    dp_scratch_init(&sc);
    for (Py_ssize_t i = 1; i < n; i++)
        if (dp_to_value(NULL, args[i], &v[i - 1], &sc) < 0) {
            dp_scratch_free(&sc);
            return NULL;
        }
    if (rpc_enter(o) < 0) {
        dp_scratch_free(&sc);
        return NULL;
    }
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_call(o->r, f, v, (int)(n - 1), &ret));
    dp_scratch_free(&sc);
    if (st != DISCO_OK)
        return dp_raise(st);
    PyObject *r = ret.type == DISCO_T_TENSOR ? Py_NewRef(Py_None) : dp_from_value(&ret);
    disco_value_clear(&ret);
    return r;
}

static PyObject *rpc_free_handle(RPCObject *o, PyObject *arg)
{
    unsigned long long h;
    if (dp_uint_in(arg, UINT64_MAX, "handle", &h) < 0)
        return NULL;
    int e = rpc_enter_q(o, true); /* after close: harmless */
    if (e != 0)
        return e > 0 ? Py_NewRef(Py_None) : NULL;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_free_handle(o->r, h));
    if (st != DISCO_OK && st != DISCO_E_CLOSED)
        return dp_raise(st);
    Py_RETURN_NONE;
}

/* alloc(nbytes, device=None, align=64) -> memory handle */
static PyObject *rpc_alloc(RPCObject *o, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"nbytes", "device", "align", NULL};
    unsigned long long nbytes, align = 64;
    PyObject *dev_o = Py_None, *nbytes_o, *align_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwlist, &nbytes_o, &dev_o, &align_o) ||
        dp_uint_in(nbytes_o, UINT64_MAX, "nbytes", &nbytes) < 0 ||
        (align_o != NULL && dp_uint_in(align_o, UINT64_MAX, "align", &align) < 0))
        return NULL;
    DLDevice dev;
    if (dp_to_device(dev_o, &dev) < 0 || rpc_enter(o) < 0)
        return NULL;
    disco_rpc_handle_t h;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_dev_alloc(o->r, dev, nbytes, align, &h));
    if (st != DISCO_OK)
        return dp_raise(st);
    return PyLong_FromUnsignedLongLong(h);
}

/* free(handle, device=None) */
static PyObject *rpc_free(RPCObject *o, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"handle", "device", NULL};
    unsigned long long h;
    PyObject *dev_o = Py_None, *h_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &h_o, &dev_o) ||
        dp_uint_in(h_o, UINT64_MAX, "handle", &h) < 0)
        return NULL;
    DLDevice dev;
    if (dp_to_device(dev_o, &dev) < 0 || rpc_enter(o) < 0)
        return NULL;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_dev_free(o->r, dev, h));
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

/* copy_to_remote(data, handle, offset=0): data is any buffer. */
static PyObject *rpc_copy_to(RPCObject *o, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "handle", "offset", NULL};
    Py_buffer b;
    unsigned long long h, off = 0;
    PyObject *h_o, *off_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*O|O", kwlist, &b, &h_o, &off_o))
        return NULL;
    if (dp_uint_in(h_o, UINT64_MAX, "handle", &h) < 0 ||
        (off_o != NULL && dp_uint_in(off_o, UINT64_MAX, "offset", &off) < 0)) {
        PyBuffer_Release(&b);
        return NULL;
    }
    if (rpc_enter(o) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_copy_to_remote(o->r, b.buf, h, off, (uint64_t)b.len));
    PyBuffer_Release(&b);
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

/* copy_from_remote(handle, nbytes_or_buffer, offset=0): bytes, or into a
 * writable buffer (returning None). */
static PyObject *rpc_copy_from(RPCObject *o, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"handle", "out", "offset", NULL};
    unsigned long long h, off = 0;
    PyObject *out, *h_o, *off_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", kwlist, &h_o, &out, &off_o) ||
        dp_uint_in(h_o, UINT64_MAX, "handle", &h) < 0 ||
        (off_o != NULL && dp_uint_in(off_o, UINT64_MAX, "offset", &off) < 0))
        return NULL;
    PyObject *bytes = NULL;
    Py_buffer b = {0};
    if (PyLong_Check(out)) {
        Py_ssize_t n = PyLong_AsSsize_t(out);
        if (n < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "nbytes must be >= 0");
            return NULL;
        }
        if ((bytes = PyBytes_FromStringAndSize(NULL, n)) == NULL)
            return NULL;
        b.buf = PyBytes_AsString(bytes);
        b.len = n;
    } else if (PyObject_GetBuffer(out, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (rpc_enter(o) < 0) {
        if (bytes == NULL)
            PyBuffer_Release(&b);
        Py_XDECREF(bytes);
        return NULL;
    }
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_copy_from_remote(o->r, h, off, b.buf, (uint64_t)b.len));
    if (bytes == NULL)
        PyBuffer_Release(&b);
    if (st != DISCO_OK) {
        Py_XDECREF(bytes);
        return dp_raise(st);
    }
    if (bytes != NULL)
        return bytes;
    Py_RETURN_NONE;
}

static PyObject *rpc_stream_sync(RPCObject *o, PyObject *args)
{
    PyObject *dev_o = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &dev_o))
        return NULL;
    DLDevice dev;
    if (dp_to_device(dev_o, &dev) < 0 || rpc_enter(o) < 0)
        return NULL;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_stream_sync(o->r, dev));
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *rpc_wait(RPCObject *o, PyObject *unused)
{
    (void)unused;
    if (rpc_enter(o) < 0)
        return NULL;
    disco_status_t st;
    RPC_RUN(o, st, disco_rpc_wait(o->r));
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *rpc_close(RPCObject *o, PyObject *unused)
{
    (void)unused;
    if (o->pid != dp_pid)
        Py_RETURN_NONE;
    int e = rpc_enter_q(o, true); /* closed meanwhile by another thread: done */
    if (e != 0)
        return e > 0 ? Py_NewRef(Py_None) : NULL;
    disco_rpc_t *r = o->r;
    o->r = NULL;
    Py_BEGIN_ALLOW_THREADS disco_rpc_close(r);
    Py_END_ALLOW_THREADS rpc_leave(o);
    Py_RETURN_NONE;
}

static PyObject *get_is_local(RPCObject *o, void *unused)
{
    (void)unused;
    return PyBool_FromLong(o->r != NULL && disco_rpc_is_local(o->r));
}

static PyObject *get_closed(RPCObject *o, void *unused)
{
    (void)unused;
    return PyBool_FromLong(o->r == NULL);
}

static PyMethodDef rpc_methods[] = {
    {"get_func", (PyCFunction)rpc_get_func, METH_O,
     "get_func(name)\n--\n\nA function handle (int) of the remote side's registry."},
    {"call", (PyCFunction)(void (*)(void))rpc_call, METH_FASTCALL,
     "call(func_handle, *args)\n--\n\nCalls a function; returns its result as a Python value."},
    {"free_handle", (PyCFunction)rpc_free_handle, METH_O,
     "free_handle(handle)\n--\n\nFrees a function or memory handle (harmless after close)."},
    {"alloc", (PyCFunction)(void (*)(void))rpc_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(nbytes, device=None, align=64)\n--\n\nRemote memory: a handle."},
    {"free", (PyCFunction)(void (*)(void))rpc_free, METH_VARARGS | METH_KEYWORDS,
     "free(handle, device=None)\n--\n\nFrees remote memory from alloc."},
    {"copy_to_remote", (PyCFunction)(void (*)(void))rpc_copy_to, METH_VARARGS | METH_KEYWORDS,
     "copy_to_remote(data, handle, offset=0)\n--\n\nCopies a buffer (bytes, numpy, ...) into "
     "remote memory."},
    {"copy_from_remote", (PyCFunction)(void (*)(void))rpc_copy_from, METH_VARARGS | METH_KEYWORDS,
     "copy_from_remote(handle, out, offset=0)\n--\n\nCopies remote memory out: out is a byte "
     "count (returns bytes) or a\nwritable buffer (filled; returns None)."},
    {"stream_sync", (PyCFunction)rpc_stream_sync, METH_VARARGS,
     "stream_sync(device=None)\n--\n\nWaits for the remote device's stream."},
    {"wait", (PyCFunction)rpc_wait, METH_NOARGS,
     "wait()\n--\n\nWaits for every outstanding asynchronous operation."},
    {"close", (PyCFunction)rpc_close, METH_NOARGS,
     "close()\n--\n\nCloses the session (a client tells its server). Harmless twice."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rpc_getset[] = {
    {"is_local", (getter)get_is_local, NULL, "Whether the session runs in this process.", NULL},
    {"closed", (getter)get_closed, NULL, "Whether close() has run.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot rpc_slots[] = {
    {Py_tp_dealloc, rpc_dealloc},
    {Py_tp_doc, "An RPC session (disco/rpc.h); see disco.rpc."},
    {Py_tp_methods, rpc_methods},
    {Py_tp_getset, rpc_getset},
    {0, NULL},
};

PyType_Spec dp_rpc_spec = {
    .name = "disco._core.RPCSession",
    .basicsize = sizeof(RPCObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = rpc_slots,
};

PyMethodDef dp_rpc_methods[] = {
    {"rpc_connect", (PyCFunction)(void (*)(void))mod_rpc_connect, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"rpc_local", (PyCFunction)(void (*)(void))mod_rpc_local, METH_VARARGS | METH_KEYWORDS, NULL},
    {"rpc_from_worker", mod_rpc_from_worker, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
