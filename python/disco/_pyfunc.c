/* _pyfunc.c - Python functions that workers run (disco.register_func), and
 * the spawned Python worker's loop (disco.worker).
 *
 * One C trampoline serves every registered name: disco_register_func_ex
 * binds the name to a struct pyfunc (the name and the callable, kept for
 * the life of the process, as the registry keeps its bindings), which the
 * call reads back with disco_ctx_user.
 *
 * Where it runs:
 *  - worker 0, in the controller's thread, inside disco_session_call (which
 *    the session runs with the GIL released): it takes the GIL;
 *  - a forked worker: the process was forked by disco_session_open while
 *    the opening thread held the GIL, so that thread's state is current
 *    there and the GIL is held; the first call runs PyOS_AfterFork_Child
 *    (what os.fork does for a child: the GIL and the thread states of the
 *    threads that did not survive are reset, at-fork hooks run). The
 *    worker loop then keeps the GIL; every call after it is a plain call;
 *  - a spawned Python worker (disco.worker): the loop runs with the GIL
 *    released, each call takes it.
 * A function registered after a session forked its workers does not exist
 * in them (as in TVM); spawned workers have what the modules they import
 * register. */
#include "_core.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pid_t dp_python_pid;

struct pyfunc {
    PyObject *name; /* str */
    PyObject *fn;
};

/* The Python runtime of this process, set up for use by this thread: in a
 * worker forked by disco_session_open, once (see the top). */
static void ensure_python(void)
{
    if (dp_pid != dp_python_pid) {
        PyOS_AfterFork_Child();
        dp_python_pid = dp_pid;
    }
}

/* "ValueError: message (file.py:12 in fn)" of the pending exception, which
 * is cleared. */
static void describe_exception(char *out, size_t cap)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *tn = type != NULL ? PyType_GetName((PyTypeObject *)type) : NULL;
    const char *tname = tn != NULL ? PyUnicode_AsUTF8AndSize(tn, NULL) : NULL;
    if (tname == NULL)
        tname = "exception";
    const char *dot = strrchr(tname, '.');
    PyObject *s = value != NULL ? PyObject_Str(value) : NULL;
    const char *msg = s != NULL ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    PyErr_Clear();
    int n = snprintf(out, cap, "%s: %s", dot != NULL ? dot + 1 : tname, msg != NULL ? msg : "?");
    /* Where it was raised: the innermost frame. */
    PyObject *last = tb != NULL ? Py_NewRef(tb) : NULL;
    while (last != NULL) {
        PyObject *next = PyObject_GetAttrString(last, "tb_next");
        if (next == NULL || next == Py_None) {
            Py_XDECREF(next);
            break;
        }
        Py_DECREF(last);
        last = next;
    }
    if (last != NULL && n > 0 && (size_t)n < cap) {
        PyObject *line = PyObject_GetAttrString(last, "tb_lineno");
        PyObject *frame = PyObject_GetAttrString(last, "tb_frame");
        PyObject *code = frame != NULL ? PyObject_GetAttrString(frame, "f_code") : NULL;
        PyObject *file = code != NULL ? PyObject_GetAttrString(code, "co_filename") : NULL;
        PyObject *fname = code != NULL ? PyObject_GetAttrString(code, "co_name") : NULL;
        const char *f =
            file != NULL && PyUnicode_Check(file) ? PyUnicode_AsUTF8AndSize(file, NULL) : NULL;
        const char *fn =
            fname != NULL && PyUnicode_Check(fname) ? PyUnicode_AsUTF8AndSize(fname, NULL) : NULL;
        long ln = line != NULL ? PyLong_AsLong(line) : -1;
        if (f != NULL && fn != NULL) {
            const char *base = strrchr(f, '/');
            snprintf(out + n, cap - (size_t)n, " (%s:%ld in %s)", base ? base + 1 : f, ln, fn);
        }
        Py_XDECREF(line), Py_XDECREF(frame), Py_XDECREF(code), Py_XDECREF(file);
        Py_XDECREF(fname);
        PyErr_Clear();
    }
    Py_XDECREF(last);
    Py_XDECREF(s);
    Py_XDECREF(tn);
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
}

/* A copy of p (n bytes, plus a NUL) in the call's scratch memory. */
static void *scratch_copy(disco_ctx_t *ctx, const void *p, size_t n)
{
    char *c = disco_ctx_alloc(ctx, n + 1);
    if (c != NULL) {
        memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

/* A host array returned by the function: copied into a new heap tensor. */
static disco_status_t array_result(disco_ctx_t *ctx, PyObject *r, disco_value_t *ret, char *why,
                                   size_t cap)
{
    dp_host_t h;
    /* CPU memory only, refused before a producer exports a device pointer
     * (test_safety.py's test_device_array_result_refused). */
    if (dp_host_get(r, DP_HOST_CPU_ONLY, &h) < 0) {
        describe_exception(why, cap);
        return DISCO_E_REMOTE;
    }
    disco_status_t st = DISCO_E_REMOTE;
    DLTensor *t;
    if (h.t.device.device_type != kDLCPU || !disco_tensor_is_compact(&h.t)) {
        snprintf(why, cap, "returned an array that is not compact host memory (device type %d)",
                 (int)h.t.device.device_type);
    } else if ((st = disco_ctx_empty(ctx, h.t.shape, h.t.ndim, h.t.dtype, &t)) != DISCO_OK) {
        snprintf(why, cap, "cannot hold the returned array: %s", disco_last_error());
    } else {
        memcpy(t->data, (const char *)h.t.data + h.t.byte_offset, disco_tensor_nbytes(t));
        *ret = disco_value_tensor(t);
    }
    dp_host_release(&h);
    return st;
}

/* The function's result as the call's value. */
static disco_status_t to_result(disco_ctx_t *ctx, PyObject *r, disco_value_t *ret, char *why,
                                size_t cap)
{
    if (r == Py_None)
        return DISCO_OK;
    if (PyObject_TypeCheck(r, dp_Tensor_Type) && ((TensorObject *)r)->orig != NULL &&
        ((TensorObject *)r)->live && ((TensorObject *)r)->pid == dp_pid) {
        /* one of this call's own arguments (every argument of an earlier
         * call is expired): the register's tensor */
        *ret = disco_value_tensor(((TensorObject *)r)->orig);
        return DISCO_OK;
    }
    if (dp_is_array(r))
        return array_result(ctx, r, ret, why, cap);
    dp_scratch_t sc;
    dp_scratch_init(&sc);
    if (PyObject_TypeCheck(r, dp_DRef_Type) || dp_to_value(NULL, r, ret, &sc) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a DRef cannot be a worker's result");
        describe_exception(why, cap);
        dp_scratch_free(&sc);
        return DISCO_E_REMOTE;
    }
    /* str, bytes and shape payloads must outlive the call: copies. */
    disco_status_t st = DISCO_OK;
    if (ret->type == DISCO_T_STR || ret->type == DISCO_T_BYTES) {
        void *c = scratch_copy(ctx, ret->v.bytes, ret->len);
        if (c == NULL)
            st = DISCO_E_NOMEM;
        ret->v.bytes = c;
    } else if (ret->type == DISCO_T_SHAPE) {
        void *c = scratch_copy(ctx, ret->v.shape, (size_t)ret->len * sizeof(int64_t));
        if (c == NULL)
            st = DISCO_E_NOMEM;
        ret->v.shape = c;
    }
    dp_scratch_free(&sc);
    if (st != DISCO_OK) {
        *ret = disco_value_null();
        snprintf(why, cap, "out of memory for the result");
        return DISCO_E_REMOTE;
    }
    return DISCO_OK;
}

/* Waits until no copy of another thread uses an argument's bytes (a
 * Tensor the function handed to a thread, which copies it through another
 * session with the GIL released): the call must not end, and its arguments
 * be freed, under that copy. No new copy can start: the arguments are
 * expired (dp_host_use re-checks). GIL held; released while it waits. */
static void wait_unpinned(PyObject *tuple, int nargs)
{
    for (int i = 0; tuple != NULL && i < nargs; i++) {
        PyObject *a = PyTuple_GetItem(tuple, i);
        if (!PyObject_TypeCheck(a, dp_Tensor_Type))
            continue;
        /* pins changes under the GIL only (dp_host_use, dp_host_release). */
        for (int spins = 0; ((TensorObject *)a)->pins > 0; spins++) {
            Py_BEGIN_ALLOW_THREADS if (spins < 100) sched_yield();
            else usleep(50);
            Py_END_ALLOW_THREADS
        }
    }
}

static disco_status_t trampoline(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                 disco_value_t *ret)
{
    const struct pyfunc *pf = disco_ctx_user(ctx);
    if (pf == NULL || !Py_IsInitialized())
        return disco_ctx_fail(ctx, "Python is not running in this process");
    ensure_python();
    /* A worker thread of a threaded session is never cancelled inside
     * Python (it would leave the GIL held): cancellation is off here. */
    int cancel_was = 0;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_was);
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *et, *ev, *etb; /* the caller's pending exception, if any, is kept */
    PyErr_Fetch(&et, &ev, &etb);
    char why[DP_MSG_MAX] = "";
    disco_status_t st = DISCO_OK;
    PyObject *tuple = PyTuple_New(nargs), *r = NULL;
    for (int i = 0; tuple != NULL && i < nargs; i++) {
        PyObject *a = dp_from_value(&args[i]);
        if (a == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SetItem(tuple, i, a);
    }
    /* disco.comm finds the call's worker and its Tensor arguments (_comm.c) */
    disco_ctx_t *outer = dp_comm_ctx;
    PyObject *outer_args = dp_comm_args;
    dp_comm_ctx = ctx;
    dp_comm_args = tuple;
    if (tuple != NULL)
        r = PyObject_Call(pf->fn, tuple, NULL);
    dp_comm_ctx = outer;
    dp_comm_args = outer_args;
    if (r == NULL) {
        describe_exception(why, sizeof why);
        st = DISCO_E_REMOTE;
    } else {
        st = to_result(ctx, r, ret, why, sizeof why);
    }
    Py_XDECREF(r);
    for (int i = 0; tuple != NULL && i < nargs; i++)
        dp_tensor_expire(PyTuple_GetItem(tuple, i));
    wait_unpinned(tuple, nargs);
    Py_XDECREF(tuple);
    PyErr_Clear();
    PyErr_Restore(et, ev, etb);
    PyGILState_Release(g);
    pthread_setcancelstate(cancel_was, NULL);
    if (st != DISCO_OK)
        return disco_ctx_fail(ctx, "%s", why);
    return DISCO_OK;
}

/* register_func(name, fn, sig=None): binds name to fn in this process. */
static PyObject *mod_register_func(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwlist[] = {"name", "fn", "sig", NULL};
    PyObject *name, *fn;
    const char *sig = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UO|z", kwlist, &name, &fn, &sig))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "register_func: fn must be callable");
        return NULL;
    }
    struct pyfunc *pf = malloc(sizeof *pf); /* kept: the registry keeps bindings */
    if (pf == NULL)
        return PyErr_NoMemory();
    pf->name = Py_NewRef(name);
    pf->fn = Py_NewRef(fn);
    disco_status_t st =
        disco_register_func_ex(PyUnicode_AsUTF8AndSize(name, NULL), sig, trampoline, pf);
    if (st != DISCO_OK) {
        Py_DECREF(pf->name);
        Py_DECREF(pf->fn);
        free(pf);
        return dp_raise(st);
    }
    Py_RETURN_NONE;
}

/* worker_main(argv): a spawned Python worker's loop (disco.worker). */
static PyObject *mod_worker_main(PyObject *m, PyObject *arg)
{
    (void)m;
    PyObject *seq = PySequence_List(arg);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    char **argv = PyMem_Calloc((size_t)n + 1, sizeof *argv);
    PyObject **keep = PyMem_Calloc((size_t)n + 1, sizeof *keep);
    int rc = 2;
    bool ok = argv != NULL && keep != NULL;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        ok = PyUnicode_FSConverter(PyList_GetItem(seq, i), &keep[i]) != 0;
        if (ok)
            argv[i] = PyBytes_AsString(keep[i]);
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS rc = disco_worker_main((int)n, argv);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; keep != NULL && i < n; i++)
        Py_XDECREF(keep[i]);
    PyMem_Free(argv);
    PyMem_Free(keep);
    Py_DECREF(seq);
    if (!ok)
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    return PyLong_FromLong(rc);
}

/* _forked(): os.register_at_fork's child hook (os.fork set Python up). */
static PyObject *mod_forked(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    dp_python_pid = dp_pid;
    Py_RETURN_NONE;
}

PyMethodDef dp_pyfunc_methods[] = {
    {"register_func", (PyCFunction)(void (*)(void))mod_register_func, METH_VARARGS | METH_KEYWORDS,
     "register_func(name, fn, sig=None)\n--\n\nBinds name to the Python callable fn in this "
     "process's function table\n(use disco.register_func, the decorator)."},
    {"worker_main", mod_worker_main, METH_O,
     "worker_main(argv)\n--\n\nServes a session as a spawned worker (disco.worker); returns the "
     "exit code."},
    {"_forked", mod_forked, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
