/* _dref.c - DRef (a register of a session) and DPackedFunc (a DRef holding
 * a function; calling it is the hot path: vectorcall, arguments converted
 * into values on the stack, one disco_session_call). */
#include "_core.h"

#ifndef Py_LIMITED_API
#include <structmember.h>
#endif

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef Py_LIMITED_API
static PyObject *func_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames);
#endif

PyObject *dp_dref_new(PyTypeObject *type, SessionObject *so, uint64_t reg, PyObject *name)
{
    DRefObject *d = PyObject_GC_New(DRefObject, type);
    if (d == NULL) {
        dp_release_reg(so, reg);
        return NULL;
    }
    Py_INCREF((PyObject *)so);
    d->sess = so;
    d->reg = reg;
    d->pid = so->pid;
    d->name = name;
    Py_XINCREF(name);
#ifndef Py_LIMITED_API
    d->vectorcall = type == dp_Func_Type ? func_vectorcall : NULL;
#endif
    PyObject_GC_Track((PyObject *)d);
    return (PyObject *)d;
}

/* DRefs take part in the cycle collector: a session's cached functions
 * (session.py's _get_cached_method) refer back to it, and without this
 * visit the cycle would keep a shut down session, its segment fd and its
 * mapping until process exit (test_refcount.py,
 * test_session_with_collective_collected). There is no tp_clear: a DRef
 * needs its session to free its register when it goes, and every cycle
 * through one passes through an object that has one (the session's or a
 * subclass's __dict__, cleared by Python's subtype_clear). */
static int dref_traverse(DRefObject *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)d));
    Py_VISIT((PyObject *)d->sess);
    Py_VISIT(d->name);
    return 0;
}

static void dref_dealloc(DRefObject *d)
{
    PyObject_GC_UnTrack((PyObject *)d);
    if (d->sess != NULL && d->reg != 0 && d->pid == dp_pid)
        dp_release_reg(d->sess, d->reg);
    Py_CLEAR(d->sess);
    Py_CLEAR(d->name);
    PyTypeObject *t = Py_TYPE((PyObject *)d);
    PyObject_GC_Del(d); /* only this file makes DRefs: always a GC object */
    Py_DECREF(t);
}

PyObject *dp_call(SessionObject *so, uint64_t func, PyObject *const *args, Py_ssize_t n)
{
    return dp_call_as(so, func, args, n, false);
}

PyObject *dp_call_as(SessionObject *so, uint64_t func, PyObject *const *args, Py_ssize_t n,
                     bool sync_all)
{
    if (n > DP_MAX_ARGS - 1) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zd arguments; at most %d", n, DP_MAX_ARGS - 1);
        return dp_raise_msg(DISCO_E_ARG_COUNT, msg);
    }
    disco_value_t v[DP_MAX_ARGS];
    dp_scratch_t sc;
    dp_scratch_init(&sc);
    /* Converted before the lock, which may release the GIL while it waits:
     * what the values point at must not change meanwhile (dp_to_value). */
    for (Py_ssize_t i = 0; i < n; i++)
        if (dp_to_value(so, args[i], &v[i], &sc) < 0) {
            dp_scratch_free(&sc);
            return NULL;
        }
    if (dp_enter(so) < 0) {
        dp_scratch_free(&sc);
        return NULL;
    }
    disco_dref_t r;
    /* Worker 0 runs the function here, before the call returns: a
     * collective waits for the others, a library function may compute for
     * long. Other Python threads run meanwhile (a Python function on
     * worker 0 takes the GIL back, _pyfunc.c). */
    disco_status_t st;
    if (sync_all) { /* waits for every worker: never with the GIL held */
        Py_BEGIN_ALLOW_THREADS st = disco_session_call_sync_all(so->s, func, v, (int)n, &r);
        Py_END_ALLOW_THREADS
    } else if (dp_call_nogil) {
        Py_BEGIN_ALLOW_THREADS st = disco_session_call(so->s, func, v, (int)n, &r);
        Py_END_ALLOW_THREADS
    } else {
        st = disco_session_call(so->s, func, v, (int)n, &r);
    }
    dp_leave(so);
    if (sc.nheap != 0)
        dp_scratch_free(&sc);
    if (st != DISCO_OK)
        return dp_raise(st);
    return dp_dref_new(dp_DRef_Type, so, r, NULL);
}

#ifndef Py_LIMITED_API
/* DPackedFunc.__call__, the fast way: the arguments as the caller holds
 * them. */
static PyObject *func_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    DRefObject *f = (DRefObject *)self;
    if (kwnames != NULL && PyTuple_Size(kwnames) != 0) {
        PyErr_SetString(PyExc_TypeError, "a DPackedFunc takes no keyword arguments");
        return NULL;
    }
    return dp_call(f->sess, f->reg, args, PyVectorcall_NARGS(nargsf));
}
#endif

/* DPackedFunc.__call__ with an argument tuple (the only way in 3.11's
 * stable ABI), borrowed into an array for dp_call. */
static PyObject *func_call(PyObject *self, PyObject *args, PyObject *kw)
{
    DRefObject *f = (DRefObject *)self;
    if (kw != NULL && PyDict_Size(kw) != 0) {
        PyErr_SetString(PyExc_TypeError, "a DPackedFunc takes no keyword arguments");
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(args);
    if (n > DP_MAX_ARGS - 1) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zd arguments; at most %d", n, DP_MAX_ARGS - 1);
        return dp_raise_msg(DISCO_E_ARG_COUNT, msg);
    }
    PyObject *a[DP_MAX_ARGS];
    for (Py_ssize_t i = 0; i < n; i++)
        a[i] = PyTuple_GetItem(args, i);
    return dp_call(f->sess, f->reg, a, n);
}

/* debug_get_from_remote(worker_id): a tensor as a Tensor view of the
 * worker's bytes (no copy; a host copy for a device tensor), anything else
 * as its Python value. */
static PyObject *dref_debug_get(DRefObject *d, PyObject *arg)
{
    SessionObject *so = d->sess;
    int w;
    if (dp_worker_id(so, arg, &w) < 0)
        return NULL;
    if (dp_enter(so) < 0)
        return NULL;
    DLManagedTensor *view = NULL;
    disco_value_t v = disco_value_null();
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_session_tensor_view(so->s, d->reg, w, &view);
    if (st == DISCO_E_BAD_TYPE)
        st = disco_session_debug_get(so->s, d->reg, w, &v);
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    if (view != NULL)
        return dp_tensor_from_view(so, view);
    PyObject *r = dp_from_value(&v);
    disco_value_clear(&v);
    return r;
}

/* A copy of host into worker w's tensor register: straight into the
 * heap bytes through a view, or, for a device tensor, as bytes that fill it.
 * The host reads host's bytes: dp_host_get made sure they are CPU memory,
 * compact, of a size that does not overflow (test_safety.py's
 * test_debug_copy_from_device_array_refused). */
static disco_status_t copy_to_remote(SessionObject *so, uint64_t reg, int w, const DLTensor *host)
{
    DLManagedTensor *view;
    disco_status_t st = disco_session_tensor_view(so->s, reg, w, &view);
    if (st != DISCO_OK)
        return st;
    DLTensor *t = &view->dl_tensor;
    size_t n = disco_tensor_nbytes(t), hn = disco_tensor_nbytes(host);
    if (t->dtype.code != host->dtype.code || t->dtype.bits != host->dtype.bits ||
        t->dtype.lanes != host->dtype.lanes || n != hn) {
        char a[32], b[32];
        st = disco_set_error(DISCO_E_MISMATCH,
                             "debug_copy_from: worker %d holds %s of %zu bytes, the value is %s of "
                             "%zu bytes",
                             w, disco_dtype_str(t->dtype, a, sizeof a), n,
                             disco_dtype_str(host->dtype, b, sizeof b), hn);
    } else if (!disco_tensor_view_is_copy(view)) {
        memcpy((char *)t->data + t->byte_offset, (const char *)host->data + host->byte_offset, n);
    } else if (n > UINT32_MAX) {
        st = disco_set_error(DISCO_E_OVERFLOW, "debug_copy_from: %zu bytes", n);
    } else {
        disco_value_t b =
            disco_value_bytes((const char *)host->data + host->byte_offset, (uint32_t)n);
        st = disco_session_debug_set(so->s, reg, w, &b);
    }
    view->deleter(view);
    return st;
}

/* debug_copy_from(worker_id, value): an array into the register's tensor
 * on that worker (same dtype and byte size, any shape); any other value replaces the
 * register's value there. */
static PyObject *dref_debug_copy_from(DRefObject *d, PyObject *const *args, Py_ssize_t n)
{
    SessionObject *so = d->sess;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "debug_copy_from(worker_id, value)");
        return NULL;
    }
    int w;
    if (dp_worker_id(so, args[0], &w) < 0)
        return NULL;
    disco_status_t st;
    if (dp_is_array(args[1])) {
        dp_host_t h;
        if (dp_host_get(args[1], DP_HOST_CPU_ONLY, &h) < 0)
            return NULL;
        if (dp_enter_host(so, &h) < 0) {
            dp_host_release(&h);
            return NULL;
        }
        /* Same dtype and size, any shape, as TVM's debug_copy_from (its
         * test_ccl copies a flat array into a (3, 3, 2) tensor); worker 0
         * too, where copy_into_worker0 would insist on the shape. */
        Py_BEGIN_ALLOW_THREADS st = copy_to_remote(so, d->reg, w, &h.t);
        Py_END_ALLOW_THREADS dp_leave(so);
        dp_host_release(&h);
    } else {
        disco_value_t v;
        dp_scratch_t sc;
        dp_scratch_init(&sc);
        if (dp_to_value(so, args[1], &v, &sc) < 0)
            return NULL;
        if (dp_enter(so) < 0) {
            dp_scratch_free(&sc);
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS st = disco_session_debug_set(so->s, d->reg, w, &v);
        Py_END_ALLOW_THREADS dp_leave(so);
        dp_scratch_free(&sc);
    }
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *dref_repr(DRefObject *d)
{
    if (d->name != NULL)
        return PyUnicode_FromFormat("<disco.DPackedFunc %U (register %llu)>", d->name,
                                    (unsigned long long)d->reg);
    return PyUnicode_FromFormat("<disco.DRef register %llu>", (unsigned long long)d->reg);
}

static PyObject *get_reg(DRefObject *d, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(d->reg);
}

static PyObject *get_session(DRefObject *d, void *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)d->sess);
}

static PyObject *get_name(DRefObject *d, void *unused)
{
    (void)unused;
    return Py_NewRef(d->name != NULL ? d->name : Py_None);
}

static PyMethodDef dref_methods[] = {
    {"debug_get_from_remote", (PyCFunction)dref_debug_get, METH_O,
     "debug_get_from_remote(worker_id)\n--\n\nThe register's value on a worker (for debugging). "
     "A tensor comes back as a\ndisco.Tensor viewing the worker's bytes in the shared heap, with "
     "no copy:\nnumpy.from_dlpack(t) and torch.from_dlpack(t) see what the worker sees, and\n"
     "writes through them reach it. The view keeps the bytes alive after the\nregister is freed, "
     "as long as the session object lives (a device tensor\ncomes back as a host copy). Other "
     "values come back as Python values."},
    {"debug_copy_from", (PyCFunction)(void (*)(void))dref_debug_copy_from, METH_FASTCALL,
     "debug_copy_from(worker_id, value)\n--\n\nCopies value into the register on a worker (for "
     "debugging): an array\n(numpy, torch, anything with __dlpack__ or the buffer protocol) into "
     "the\ntensor it holds (same dtype and size); any other value (int, str, ...)\nreplaces the "
     "register's value there."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dref_getset[] = {
    {"reg", (getter)get_reg, NULL, "The register id (the same on every worker).", NULL},
    {"session", (getter)get_session, NULL, "The session the register belongs to.", NULL},
    {"name", (getter)get_name, NULL, "A DPackedFunc's function name (None for a DRef).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot dref_slots[] = {
    {Py_tp_dealloc, dref_dealloc},
    {Py_tp_traverse, dref_traverse},
    {Py_tp_repr, dref_repr},
    {Py_tp_doc, "DRef: a register that exists on every worker of a session (TVM Disco's DRef).\n\n"
                "Calls return DRefs at once; the value is computed on each worker in\n"
                "order. The register is freed on every worker when the DRef is collected."},
    {Py_tp_methods, dref_methods},
    {Py_tp_getset, dref_getset},
    {0, NULL},
};

PyType_Spec dp_dref_spec = {
    .name = "disco.DRef",
    .basicsize = sizeof(DRefObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_HAVE_GC,
    .slots = dref_slots,
};

#ifndef Py_LIMITED_API
static PyMemberDef func_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(DRefObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};
#endif

static PyType_Slot func_slots[] = {
    {Py_tp_call, func_call},
    {Py_tp_traverse, dref_traverse},
#ifndef Py_LIMITED_API
    {Py_tp_members, func_members},
#endif
    {Py_tp_doc, "DPackedFunc: a DRef holding a function of every worker.\n\n"
                "f(*args) calls it on every worker (session.call_packed(f, *args)) and\n"
                "returns the result's DRef at once; sync to wait and to see errors."},
    {0, NULL},
};

PyType_Spec dp_func_spec = {
    .name = "disco.DPackedFunc",
    .basicsize = sizeof(DRefObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC
#ifndef Py_LIMITED_API
             | Py_TPFLAGS_HAVE_VECTORCALL
#endif
    ,
    .slots = func_slots,
};
