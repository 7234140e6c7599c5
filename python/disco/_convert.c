/* _convert.c - Python objects <-> disco values, dtypes and devices, and
 * host arrays (the buffer protocol or __dlpack__) as DLTensors. */
#include "_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes and devices ---- */

const char *dp_type_name(PyObject *o, char *buf, size_t cap)
{
    PyTypeObject *t = Py_TYPE(o);
    PyObject *mod = PyObject_GetAttrString((PyObject *)t, "__module__");
    PyObject *name = PyType_GetName(t);
    const char *m = mod != NULL && PyUnicode_Check(mod) ? PyUnicode_AsUTF8AndSize(mod, NULL) : NULL;
    const char *n = name != NULL ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    if (m != NULL && strcmp(m, "builtins") != 0)
        snprintf(buf, cap, "%s.%s", m, n != NULL ? n : "?");
    else
        snprintf(buf, cap, "%s", n != NULL ? n : "?");
    Py_XDECREF(mod);
    Py_XDECREF(name);
    PyErr_Clear();
    return buf;
}

int dp_to_dtype(PyObject *o, DLDataType *out)
{
    PyObject *s = NULL;
    const char *name = NULL;
    char tn[128];
    dp_type_name(o, tn, sizeof tn);
    if (PyUnicode_Check(o)) { /* "float32", disco.DataType */
        name = PyUnicode_AsUTF8AndSize(o, NULL);
    } else if (strcmp(tn, "torch.dtype") == 0 || strncmp(tn, "numpy.", 6) == 0) {
        /* str(torch.float32) is "torch.float32"; str(numpy.dtype) "float32" */
        if ((s = PyObject_Str(o)) != NULL)
            name = PyUnicode_AsUTF8AndSize(s, NULL);
        if (name != NULL && strncmp(name, "torch.", 6) == 0)
            name += 6;
    } else if (PyType_Check(o)) { /* numpy.float32, the scalar type */
        PyObject *nm = PyUnicode_FromString("numpy");
        PyObject *np = nm != NULL ? PyImport_GetModule(nm) : NULL;
        Py_XDECREF(nm);
        PyObject *d = np != NULL ? PyObject_CallMethod(np, "dtype", "O", o) : NULL;
        Py_XDECREF(np);
        if (d != NULL && (s = PyObject_Str(d)) != NULL)
            name = PyUnicode_AsUTF8AndSize(s, NULL);
        Py_XDECREF(d);
        PyErr_Clear();
    }
    if (name == NULL || !disco_dtype_parse(name, out)) {
        Py_XDECREF(s);
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "not a dtype: %R (a name such as \"float32\", a disco.DataType, or "
                         "a numpy or torch dtype)",
                         o);
        }
        return -1;
    }
    Py_XDECREF(s);
    return 0;
}

/* ---- integers from Python ---- */

int dp_int_in(PyObject *o, long long lo, long long hi, const char *what, long long *out)
{
    int over = 0;
    long long x;
    PyObject *i = PyNumber_Index(o); /* int, bool, numpy integers; TypeError else */
    if (i == NULL)
        return -1;
    x = PyLong_AsLongLongAndOverflow(i, &over);
    Py_DECREF(i);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (over != 0 || x < lo || x > hi) {
        PyErr_Format(PyExc_OverflowError, "%s must be in [%lld, %lld]", what, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int dp_uint_in(PyObject *o, unsigned long long hi, const char *what, unsigned long long *out)
{
    PyObject *i = PyNumber_Index(o);
    if (i == NULL)
        return -1;
    int neg = PyObject_RichCompareBool(i, Py_False, Py_LT); /* i < 0 */
    unsigned long long x = neg == 0 ? PyLong_AsUnsignedLongLong(i) : 0;
    Py_DECREF(i);
    if (neg < 0)
        return -1;
    if (neg) {
        PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
        return -1;
    }
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
    } else if (x <= hi) {
        *out = x;
        return 0;
    }
    PyErr_Format(PyExc_OverflowError, "%s must be at most %llu", what, hi);
    return -1;
}

int dp_worker_id(SessionObject *so, PyObject *o, int *out)
{
    int over = 0;
    PyObject *i = PyNumber_Index(o);
    if (i == NULL)
        return -1;
    long long v = PyLong_AsLongLongAndOverflow(i, &over);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred())
        return -1;
    /* Checked whole, before it narrows: 2**32 is no alias of worker 0
     * (test_safety.py's test_worker_id_range). */
    if (over != 0 || v < 0 || v >= so->num_workers) {
        char msg[160];
        PyObject *r = PyObject_Repr(o);
        const char *rs = r != NULL ? PyUnicode_AsUTF8AndSize(r, NULL) : NULL;
        snprintf(msg, sizeof msg, "no worker %.60s in a session of %d", rs != NULL ? rs : "?",
                 so->num_workers);
        Py_XDECREF(r);
        PyErr_Clear();
        dp_raise_msg(DISCO_E_INVAL, msg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* ---- devices ---- */

/* The int attribute name of o in [lo, hi] (None: 0). */
static int int_attr(PyObject *o, const char *name, long long lo, long long hi, long long *out)
{
    PyObject *a = PyObject_GetAttrString(o, name);
    if (a == NULL)
        return -1;
    int r = 0;
    if (a == Py_None)
        *out = 0;
    else
        r = dp_int_in(a, lo, hi, name, out);
    Py_DECREF(a);
    return r;
}

static int device_named(const char *s, DLDevice *out)
{
    static const struct {
        const char *name;
        DLDeviceType type;
    } kinds[] = {{"cpu", kDLCPU}, {"cuda", kDLCUDA}, {"gpu", kDLCUDA}, {"sim", kDLExtDev}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i].name);
        if (strncmp(s, kinds[i].name, n) == 0 && (s[n] == '\0' || s[n] == ':')) {
            long id = 0;
            if (s[n] == ':') { /* a decimal id that fits an int32 (no atoi overflow) */
                char *end;
                errno = 0;
                id = strtol(s + n + 1, &end, 10);
                if (end == s + n + 1 || *end != '\0' || errno != 0 || id < 0 || id > INT32_MAX)
                    return -1;
            }
            out->device_type = kinds[i].type;
            out->device_id = (int32_t)id;
            return 0;
        }
    }
    return -1;
}

/* DLDevice's fields from Python ints, range-checked (a DLDeviceType is an
 * int32 enum; ids are int32). */
static int device_from(PyObject *type_o, PyObject *id_o, DLDevice *out)
{
    long long type, id;
    if (dp_int_in(type_o, 0, INT32_MAX, "device_type", &type) < 0 ||
        dp_int_in(id_o, 0, INT32_MAX, "device_id", &id) < 0)
        return -1;
    *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
    return 0;
}

int dp_to_device(PyObject *o, DLDevice *out)
{
    long long type, id;
    char tn[128];
    *out = (DLDevice){kDLCPU, 0};
    if (o == NULL || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) { /* "cpu", "cuda:1", "sim:0" */
        const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
        if (s != NULL && device_named(s, out) == 0)
            return 0;
    } else if (dp_Device != NULL && PyObject_TypeCheck(o, (PyTypeObject *)dp_Device)) {
        if (int_attr(o, "device_type", 0, INT32_MAX, &type) < 0 ||
            int_attr(o, "device_id", 0, INT32_MAX, &id) < 0)
            return -1;
        *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
        return 0;
    } else if (strcmp(dp_type_name(o, tn, sizeof tn), "torch.device") == 0) {
        PyObject *t = PyObject_GetAttrString(o, "type");
        const char *s = t != NULL && PyUnicode_Check(t) ? PyUnicode_AsUTF8AndSize(t, NULL) : NULL;
        int bad = s == NULL || device_named(s, out) != 0;
        Py_XDECREF(t);
        if (!bad) {
            if (int_attr(o, "index", 0, INT32_MAX, &id) < 0)
                return -1;
            out->device_id = (int32_t)id;
            return 0;
        }
    } else if (PyTuple_Check(o) && PyTuple_Size(o) == 2) { /* (device_type, device_id) */
        if (device_from(PyTuple_GetItem(o, 0), PyTuple_GetItem(o, 1), out) == 0)
            return 0;
    }
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "not a device: %R (disco.cpu(), disco.cuda(i), disco.sim(i), \"cuda:1\")", o);
    }
    return -1;
}

PyObject *dp_dtype_obj(DLDataType t)
{
    char buf[DISCO_DTYPE_STR_MAX];
    disco_dtype_str(t, buf, sizeof buf);
    if (dp_DataType == NULL)
        return PyUnicode_FromString(buf);
    return PyObject_CallFunction(dp_DataType, "s", buf);
}

PyObject *dp_device_obj(DLDevice d)
{
    if (dp_Device == NULL)
        return Py_BuildValue("(ii)", (int)d.device_type, (int)d.device_id);
    return PyObject_CallFunction(dp_Device, "ii", (int)d.device_type, (int)d.device_id);
}

/* ---- call arguments ---- */

void dp_scratch_free(dp_scratch_t *sc)
{
    for (int i = 0; i < sc->nheap; i++)
        PyMem_Free(sc->heap[i]);
    sc->nheap = 0;
}

bool dp_is_array(PyObject *o)
{
    if (PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o))
        return false;
    if (PyObject_TypeCheck(o, dp_Tensor_Type) || PyObject_CheckBuffer(o))
        return true;
    return PyObject_HasAttrString(o, "__dlpack__");
}

/* A shape from a tuple or list of ints, copied into sc. A list is read
 * through a tuple of it: an element's __index__ may run Python code that
 * shrinks the list (test_safety.py's test_shape_list_mutated). */
static int to_shape(PyObject *o, disco_value_t *v, dp_scratch_t *sc)
{
    PyObject *t = PyTuple_Check(o) ? Py_NewRef(o) : PySequence_Tuple(o);
    if (t == NULL)
        return -1;
    Py_ssize_t n = PyTuple_Size(t);
    int64_t *dims;
    int r = -1;
    if ((size_t)n <= sizeof sc->dims / sizeof sc->dims[0] - sc->used) {
        dims = sc->dims + sc->used;
        sc->used += (size_t)n;
    } else if (n > UINT32_MAX || sc->nheap == DP_MAX_ARGS ||
               (dims = PyMem_Malloc((size_t)n * sizeof *dims + 1)) == NULL) {
        PyErr_NoMemory();
        goto out;
    } else {
        sc->heap[sc->nheap++] = dims;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(t, i); /* borrowed from t, which we hold */
        if (!PyLong_Check(item) && !PyIndex_Check(item)) {
            char tn[128];
            PyErr_Format(PyExc_TypeError, "a shape holds ints; element %zd is %s", i,
                         dp_type_name(item, tn, sizeof tn));
            goto out;
        }
        dims[i] = PyLong_AsLongLong(item);
        if (dims[i] == -1 && PyErr_Occurred())
            goto out;
    }
    *v = disco_value_shape(dims, (uint32_t)n);
    r = 0;
out:
    Py_DECREF(t);
    return r;
}

/* A copy of a bytearray's n bytes in sc: the call reads them with the GIL
 * released (worker 0 runs on the caller's values), when any thread may
 * resize the bytearray and free its buffer. */
static int bytearray_copy(PyObject *o, disco_value_t *v, dp_scratch_t *sc)
{
    Py_ssize_t n = PyByteArray_Size(o);
    if ((size_t)n > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a bytes argument of 4 GiB or more");
        return -1;
    }
    char *c;
    if (sc->nheap == DP_MAX_ARGS || (c = PyMem_Malloc((size_t)n + 1)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    sc->heap[sc->nheap++] = c;
    memcpy(c, PyByteArray_AsString(o), (size_t)n); /* GIL held: no one resizes it now */
    *v = disco_value_bytes(c, (uint32_t)n);
    return 0;
}

int dp_to_value(SessionObject *so, PyObject *o, disco_value_t *v, dp_scratch_t *sc)
{
    PyTypeObject *t = Py_TYPE(o);
    /* The common kinds first, by exact type. */
    if (t == &PyLong_Type) {
        long long x = PyLong_AsLongLong(o);
        if (x == -1 && PyErr_Occurred())
            return -1;
        *v = disco_value_int(x);
        return 0;
    }
    if (t == dp_DRef_Type || PyObject_TypeCheck(o, dp_DRef_Type)) {
        DRefObject *d = (DRefObject *)o;
        if (d->sess != so) {
            PyErr_SetString(PyExc_ValueError, "a DRef of another session");
            return -1;
        }
        *v = (disco_value_t){.type = DISCO_T_DREF, .v.reg = d->reg};
        return 0;
    }
    if (t == &PyFloat_Type) {
        *v = disco_value_float(PyFloat_AsDouble(o));
        return 0;
    }
    if (o == Py_None) {
        *v = disco_value_null();
        return 0;
    }
    if (PyBool_Check(o)) {
        *v = disco_value_bool(o == Py_True);
        return 0;
    }
    if (dp_DataType != NULL && PyObject_TypeCheck(o, (PyTypeObject *)dp_DataType)) {
        DLDataType d;
        if (dp_to_dtype(o, &d) < 0)
            return -1;
        *v = disco_value_dtype(d);
        return 0;
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL)
            return -1;
        if ((size_t)n > UINT32_MAX - 1) {
            PyErr_SetString(PyExc_OverflowError, "a str argument of 4 GiB or more");
            return -1;
        }
        *v = disco_value_str(s);
        v->len = (uint32_t)n;
        return 0;
    }
    if (PyBytes_Check(o)) { /* immutable: borrowed */
        Py_ssize_t n = PyBytes_Size(o);
        if ((size_t)n > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a bytes argument of 4 GiB or more");
            return -1;
        }
        *v = disco_value_bytes(PyBytes_AsString(o), (uint32_t)n);
        return 0;
    }
    if (PyByteArray_Check(o))
        return bytearray_copy(o, v, sc);
    if (PyTuple_Check(o) || PyList_Check(o)) /* a shape: the sequence stays alive with o */
        return to_shape(o, v, sc);
    if (PyLong_Check(o)) { /* int subclasses: IntEnum, ... */
        long long x = PyLong_AsLongLong(o);
        if (x == -1 && PyErr_Occurred())
            return -1;
        *v = disco_value_int(x);
        return 0;
    }
    if (PyFloat_Check(o)) {
        *v = disco_value_float(PyFloat_AsDouble(o));
        return 0;
    }
    char tn[128];
    dp_type_name(o, tn, sizeof tn);
    if ((dp_Device != NULL && PyObject_TypeCheck(o, (PyTypeObject *)dp_Device)) ||
        strcmp(tn, "torch.device") == 0) {
        DLDevice d;
        if (dp_to_device(o, &d) < 0)
            return -1;
        *v = disco_value_device(d);
        return 0;
    }
    if (dp_is_array(o)) {
        PyErr_Format(PyExc_TypeError,
                     "a %s cannot travel inside a call: tensors move by register (copy it "
                     "with sess.copy_to_worker_0 or sess.broadcast and pass the DRef)",
                     tn);
        return -1;
    }
    if (PyIndex_Check(o)) { /* numpy integers */
        PyObject *i = PyNumber_Index(o);
        long long x = i != NULL ? PyLong_AsLongLong(i) : -1;
        Py_XDECREF(i);
        if (x == -1 && PyErr_Occurred())
            return -1;
        *v = disco_value_int(x);
        return 0;
    }
    DLDataType d;
    if (dp_to_dtype(o, &d) == 0) { /* numpy and torch dtypes */
        *v = disco_value_dtype(d);
        return 0;
    }
    PyErr_Clear();
    if (PyType_GetSlot(t, Py_nb_float) != NULL) { /* numpy floats */
        double x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
        *v = disco_value_float(x);
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "cannot pass a %s to a disco function (int, float, bool, str, bytes, None, "
                 "a shape, a dtype, a device or a DRef)",
                 tn);
    return -1;
}

PyObject *dp_from_value(const disco_value_t *v)
{
    switch (v->type) {
    case DISCO_T_NULL:
        Py_RETURN_NONE;
    case DISCO_T_BOOL:
        return PyBool_FromLong(v->v.b);
    case DISCO_T_INT:
        return PyLong_FromLongLong(v->v.i);
    case DISCO_T_FLOAT:
        return PyFloat_FromDouble(v->v.f);
    case DISCO_T_STR:
        return PyUnicode_DecodeUTF8(v->v.str, v->len, "surrogateescape");
    case DISCO_T_BYTES:
        return PyBytes_FromStringAndSize(v->v.bytes, v->len);
    case DISCO_T_SHAPE: {
        PyObject *t = PyTuple_New(v->len);
        for (uint32_t i = 0; t != NULL && i < v->len; i++) {
            PyObject *x = PyLong_FromLongLong(v->v.shape[i]);
            if (x == NULL) {
                Py_CLEAR(t);
                break;
            }
            PyTuple_SetItem(t, i, x);
        }
        return t;
    }
    case DISCO_T_DTYPE:
        return dp_dtype_obj(v->v.dtype);
    case DISCO_T_DEVICE:
        return dp_device_obj(v->v.device);
    case DISCO_T_DREF:
    case DISCO_T_FUNC:
    case DISCO_T_OPAQUE:
        return PyLong_FromUnsignedLongLong(v->v.handle);
    case DISCO_T_TENSOR:
        return dp_tensor_borrow(v->v.tensor);
    default:
        PyErr_Format(PyExc_TypeError, "a disco value of unknown type %u", v->type);
        return NULL;
    }
}
