/* _module.c - the disco._core module: its globals, its functions (status
 * table, dtype names, the C call loop the bench compares against, ...) and
 * PyInit__core, which makes the types of _core.c, _dref.c, _tensor.c and
 * _rpc.c. */
#include "_core.h"

#include "disco/device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

PyObject *dp_DataType, *dp_Device, *dp_error_classes, *dp_DiscoError;
pid_t dp_pid;
int dp_call_nogil = 1;

static void note_fork(void)
{
    dp_pid = getpid();
}

/* ---- module functions ---- */

/* _set_types(DataType, Device, error_classes, DiscoError) */
static PyObject *mod_set_types(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *dt, *dev, *errs, *base;
    if (!PyArg_ParseTuple(args, "OOO!O", &dt, &dev, &PyDict_Type, &errs, &base))
        return NULL;
    PyObject *old[4] = {dp_DataType, dp_Device, dp_error_classes, dp_DiscoError};
    dp_DataType = Py_NewRef(dt);
    dp_Device = Py_NewRef(dev);
    dp_error_classes = Py_NewRef(errs);
    dp_DiscoError = Py_NewRef(base);
    for (int i = 0; i < 4; i++)
        Py_XDECREF(old[i]);
    Py_RETURN_NONE;
}

/* status_table(): [(code, "DISCO_E_...", message), ...], from the one table */
static PyObject *mod_status_table(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    PyObject *l = PyList_New(0);
    if (l == NULL)
        return NULL;
#define DP_ROW(name, value, msg)                                                                   \
    do {                                                                                           \
        PyObject *row = Py_BuildValue("(iss)", value, "DISCO_" #name, msg);                        \
        if (row == NULL || PyList_Append(l, row) < 0) {                                            \
            Py_XDECREF(row);                                                                       \
            Py_DECREF(l);                                                                          \
            return NULL;                                                                           \
        }                                                                                          \
        Py_DECREF(row);                                                                            \
    } while (0);
    DISCO_STATUS_TABLE(DP_ROW)
#undef DP_ROW
    return l;
}

/* dtype_parse(name) -> (code, bits, lanes); dtype_str(code, bits, lanes) -> name */
static PyObject *mod_dtype_parse(PyObject *m, PyObject *arg)
{
    (void)m;
    DLDataType t;
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (s == NULL || !disco_dtype_parse(s, &t)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "not a dtype: %R", arg);
        return NULL;
    }
    return Py_BuildValue("(iii)", t.code, t.bits, t.lanes);
}

static PyObject *mod_dtype_str(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *code_o, *bits_o, *lanes_o = NULL;
    long long code, bits, lanes = 1;
    if (!PyArg_ParseTuple(args, "OO|O", &code_o, &bits_o, &lanes_o))
        return NULL;
    /* DLDataType's fields are 8, 8 and 16 bits: checked before they narrow. */
    if (dp_int_in(code_o, 0, UINT8_MAX, "code", &code) < 0 ||
        dp_int_in(bits_o, 0, UINT8_MAX, "bits", &bits) < 0 ||
        (lanes_o != NULL && dp_int_in(lanes_o, 0, UINT16_MAX, "lanes", &lanes) < 0))
        return NULL;
    char buf[DISCO_DTYPE_STR_MAX];
    DLDataType t = {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
    return PyUnicode_FromString(disco_dtype_str(t, buf, sizeof buf));
}

/* library_path(): where libdisco.so is (the C disco-worker is beside it:
 * ../bin when it is installed in a lib folder, bin/ in the build tree). */
static PyObject *mod_library_path(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    Dl_info info;
    if (dladdr((void *)disco_session_open, &info) == 0 || info.dli_fname == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(info.dli_fname);
}

/* _c_call_sync(session, func, iters) -> ns: disco-bench's call_sync round
 * (tools/bench/bench_session.c) in C on this session, for py_bench.py to
 * set beside the same rounds through Python: iters calls of func (no
 * arguments) each followed by a sync of worker 1, results freed between
 * timed batches of 256. */
static PyObject *mod_c_call_sync(PyObject *m, PyObject *args)
{
    (void)m;
    SessionObject *so;
    DRefObject *f;
    PyObject *iters_o;
    unsigned long long iters;
    if (!PyArg_ParseTuple(args, "O!O!O", dp_Session_Type, &so, dp_DRef_Type, &f, &iters_o) ||
        dp_uint_in(iters_o, UINT64_MAX, "iters", &iters) < 0)
        return NULL;
    if (f->sess != so) {
        PyErr_SetString(PyExc_ValueError, "_c_call_sync: the function is another session's");
        return NULL;
    }
    if (dp_enter(so) < 0)
        return NULL;
    disco_dref_t res[256];
    int64_t total = 0;
    disco_status_t st = DISCO_OK;
    Py_BEGIN_ALLOW_THREADS while (iters > 0 && st == DISCO_OK)
    {
        unsigned long long n = iters < 256 ? iters : 256, done = 0;
        int64_t t0 = disco_now_ns();
        for (; done < n && st == DISCO_OK; done++)
            if ((st = disco_session_call(so->s, f->reg, NULL, 0, &res[done])) == DISCO_OK)
                st = disco_session_sync(so->s, 1);
        total += disco_now_ns() - t0;
        for (unsigned long long i = 0; i < done; i++)
            (void)disco_session_free_reg(so->s, res[i]);
        iters -= n;
    }
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return PyLong_FromLongLong(total);
}

/* _c_coll_rounds(session, func, args, rounds) -> [ns, ...]: single rounds
 * of bench_tensor.c's coll_rounds in C on this session, for py_bench.py to
 * alternate with the same rounds through Python: a call of func with args
 * (a tuple of at most 8, converted once) + a sync of worker 1, timed; the
 * result freed and worker 1 synced again, untimed. The tuple (and so every
 * value converted from it) lives as long as this call. */
static PyObject *mod_c_coll_rounds(PyObject *m, PyObject *args)
{
    (void)m;
    SessionObject *so;
    DRefObject *f;
    PyObject *tup, *rounds_o;
    unsigned long long rounds;
    if (!PyArg_ParseTuple(args, "O!O!O!O", dp_Session_Type, &so, dp_DRef_Type, &f, &PyTuple_Type,
                          &tup, &rounds_o) ||
        dp_uint_in(rounds_o, 1u << 20, "rounds", &rounds) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_Size(tup); /* the limited API's (PY_ABI3=1) */
    if (f->sess != so || n > 8) {
        PyErr_SetString(PyExc_ValueError,
                        "_c_coll_rounds: the function is another session's, or over 8 arguments");
        return NULL;
    }
    disco_value_t v[8];
    dp_scratch_t sc;
    dp_scratch_init(&sc);
    for (Py_ssize_t i = 0; i < n; i++)
        if (dp_to_value(so, PyTuple_GetItem(tup, i), &v[i], &sc) < 0) {
            dp_scratch_free(&sc);
            return NULL;
        }
    int64_t *ns = PyMem_Malloc((rounds ? rounds : 1) * sizeof *ns);
    if (ns == NULL || dp_enter(so) < 0) {
        PyMem_Free(ns);
        dp_scratch_free(&sc);
        return ns == NULL ? PyErr_NoMemory() : NULL;
    }
    disco_status_t st = DISCO_OK;
    unsigned long long done = 0;
    Py_BEGIN_ALLOW_THREADS for (; done < rounds && st == DISCO_OK; done++)
    {
        disco_dref_t r;
        int64_t t0 = disco_now_ns();
        if ((st = disco_session_call(so->s, f->reg, v, (int)n, &r)) != DISCO_OK)
            break;
        st = disco_session_sync(so->s, 1);
        ns[done] = disco_now_ns() - t0;
        (void)disco_session_free_reg(so->s, r);
        if (st == DISCO_OK)
            st = disco_session_sync(so->s, 1);
    }
    Py_END_ALLOW_THREADS dp_leave(so);
    dp_scratch_free(&sc);
    PyObject *list = st == DISCO_OK ? PyList_New((Py_ssize_t)rounds) : NULL;
    for (unsigned long long i = 0; list != NULL && i < rounds; i++) {
        PyObject *x = PyLong_FromLongLong(ns[i]);
        if (x == NULL || PyList_SetItem(list, (Py_ssize_t)i, x) < 0) /* steals x */
            Py_CLEAR(list);
    }
    PyMem_Free(ns);
    return st != DISCO_OK ? dp_raise(st) : list;
}

/* _set_call_nogil(flag): whether calls release the GIL (for measuring). */
static PyObject *mod_set_call_nogil(PyObject *m, PyObject *arg)
{
    (void)m;
    int v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    dp_call_nogil = v;
    Py_RETURN_NONE;
}

static PyObject *mod_last_error(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return PyUnicode_FromString(disco_last_error());
}

/* _device_count(device_type): disco_device_probe (asked in a forked child,
 * so that this process does not initialize CUDA before it forks workers). */
static PyObject *mod_device_count(PyObject *m, PyObject *arg)
{
    (void)m;
    long type = PyLong_AsLong(arg);
    if (type == -1 && PyErr_Occurred())
        return NULL;
    if (type < 0 || type > 0xFFFF)
        return dp_raise_msg(DISCO_E_INVAL, "device type out of range");
    int count = 0;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_device_probe((DLDeviceType)type, &count);
    Py_END_ALLOW_THREADS if (st != DISCO_OK) return dp_raise(st);
    return PyLong_FromLong(count);
}

static PyMethodDef module_methods[] = {
    {"_device_count", mod_device_count, METH_O, NULL},
    {"_set_types", mod_set_types, METH_VARARGS, NULL},
    {"_set_call_nogil", mod_set_call_nogil, METH_O, NULL},
    {"_c_call_sync", mod_c_call_sync, METH_VARARGS, NULL},
    {"_c_coll_rounds", mod_c_coll_rounds, METH_VARARGS, NULL},
    {"status_table", mod_status_table, METH_NOARGS,
     "status_table()\n--\n\nEvery disco status: [(code, 'DISCO_E_...', message)]."},
    {"dtype_parse", mod_dtype_parse, METH_O,
     "dtype_parse(name)\n--\n\n'float32' -> (code, bits, lanes)."},
    {"dtype_str", mod_dtype_str, METH_VARARGS,
     "dtype_str(code, bits, lanes=1)\n--\n\n(2, 32, 1) -> 'float32'."},
    {"library_path", mod_library_path, METH_NOARGS,
     "library_path()\n--\n\nThe path of the libdisco.so this module uses."},
    {"last_error", mod_last_error, METH_NOARGS,
     "last_error()\n--\n\ndisco_last_error() of this thread."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "disco._core",
    .m_doc = "The C part of the disco package (see disco/__init__.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyTypeObject *dp_Session_Type, *dp_DRef_Type, *dp_Func_Type, *dp_Tensor_Type, *dp_RPC_Type;

/* Makes a type from its spec (with base, or none) and adds it to m. */
static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject *base, const char *name,
                    PyTypeObject **out)
{
    PyObject *t =
        base != NULL ? PyType_FromSpecWithBases(spec, (PyObject *)base) : PyType_FromSpec(spec);
    if (t == NULL)
        return -1;
    *out = (PyTypeObject *)t; /* kept for the life of the process */
    return PyModule_AddObjectRef(m, name, t);
}

PyMODINIT_FUNC PyInit__core(void)
{
    /* Libraries loaded with disco.load_library are not linked against
     * libdisco: they find disco_register_func & co. in the global scope,
     * where this extension's dependency is not (Python loads extensions
     * RTLD_LOCAL). Promote it. */
    Dl_info info;
    if (dladdr((void *)disco_session_open, &info) != 0 && info.dli_fname != NULL)
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    dp_pid = getpid();
    dp_python_pid = dp_pid;
    if (pthread_atfork(NULL, NULL, note_fork) != 0)
        return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddFunctions(m, dp_pyfunc_methods) < 0 ||
        PyModule_AddFunctions(m, dp_rpc_methods) < 0 ||
        PyModule_AddFunctions(m, dp_comm_methods) < 0 ||
        add_type(m, &dp_session_spec, NULL, "Session", &dp_Session_Type) < 0 ||
        add_type(m, &dp_dref_spec, NULL, "DRef", &dp_DRef_Type) < 0 ||
        add_type(m, &dp_func_spec, dp_DRef_Type, "DPackedFunc", &dp_Func_Type) < 0 ||
        add_type(m, &dp_tensor_spec, NULL, "Tensor", &dp_Tensor_Type) < 0 ||
        add_type(m, &dp_rpc_spec, NULL, "RPCSession", &dp_RPC_Type) < 0 ||
        PyModule_AddIntConstant(m, "DLPACK_VERSION", DLPACK_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MAX_NDIM", DISCO_MAX_NDIM) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
