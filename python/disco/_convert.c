/* _convert.c - Python objects <-> disco values, dtypes and devices, and
 * host arrays (the buffer protocol or __dlpack__) as DLTensors. */
#include "_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- dtypes and devices ---- */

int dp_to_dtype(PyObject *o, DLDataType *out)
{
    PyObject *s = NULL;
    const char *name = NULL;
    const char *tn = Py_TYPE(o)->tp_name;
    if (PyUnicode_Check(o)) { /* "float32", disco.DataType */
        name = PyUnicode_AsUTF8(o);
    } else if (strcmp(tn, "torch.dtype") == 0 || strncmp(tn, "numpy.dtype", 11) == 0 ||
               strncmp(tn, "numpy.", 6) == 0) {
        /* str(torch.float32) is "torch.float32"; str(numpy.dtype) "float32" */
        if ((s = PyObject_Str(o)) != NULL)
            name = PyUnicode_AsUTF8(s);
        if (name != NULL && strncmp(name, "torch.", 6) == 0)
            name += 6;
    } else if (PyType_Check(o)) { /* numpy.float32, the scalar type */
        PyObject *nm = PyUnicode_FromString("numpy");
        PyObject *np = nm != NULL ? PyImport_GetModule(nm) : NULL;
        Py_XDECREF(nm);
        PyObject *d = np != NULL ? PyObject_CallMethod(np, "dtype", "O", o) : NULL;
        Py_XDECREF(np);
        if (d != NULL && (s = PyObject_Str(d)) != NULL)
            name = PyUnicode_AsUTF8(s);
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

static int int_attr(PyObject *o, const char *name, long *out)
{
    PyObject *a = PyObject_GetAttrString(o, name);
    if (a == NULL)
        return -1;
    *out = a == Py_None ? 0 : PyLong_AsLong(a);
    Py_DECREF(a);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
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
            out->device_type = kinds[i].type;
            out->device_id = s[n] == ':' ? atoi(s + n + 1) : 0;
            return 0;
        }
    }
    return -1;
}

int dp_to_device(PyObject *o, DLDevice *out)
{
    long type, id;
    *out = (DLDevice){kDLCPU, 0};
    if (o == NULL || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) { /* "cpu", "cuda:1", "sim:0" */
        const char *s = PyUnicode_AsUTF8(o);
        if (s != NULL && device_named(s, out) == 0)
            return 0;
    } else if (dp_Device != NULL && PyObject_TypeCheck(o, (PyTypeObject *)dp_Device)) {
        if (int_attr(o, "device_type", &type) < 0 || int_attr(o, "device_id", &id) < 0)
            return -1;
        *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
        return 0;
    } else if (strcmp(Py_TYPE(o)->tp_name, "torch.device") == 0) {
        PyObject *t = PyObject_GetAttrString(o, "type");
        const char *s = t != NULL && PyUnicode_Check(t) ? PyUnicode_AsUTF8(t) : NULL;
        int bad = s == NULL || device_named(s, out) != 0;
        Py_XDECREF(t);
        if (!bad && int_attr(o, "index", &id) == 0) {
            out->device_id = (int32_t)id;
            return 0;
        }
    } else if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2) { /* (device_type, device_id) */
        type = PyLong_AsLong(PyTuple_GET_ITEM(o, 0));
        id = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
        if (!PyErr_Occurred()) {
            *out = (DLDevice){(DLDeviceType)type, (int32_t)id};
            return 0;
        }
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
    if (PyObject_TypeCheck(o, &DiscoTensor_Type) || PyObject_CheckBuffer(o))
        return true;
    return PyObject_HasAttrString(o, "__dlpack__");
}

static int to_shape(PyObject *o, disco_value_t *v, dp_scratch_t *sc)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject **items = PySequence_Fast_ITEMS(o);
    int64_t *dims;
    if ((size_t)n <= sizeof sc->dims / sizeof sc->dims[0] - sc->used) {
        dims = sc->dims + sc->used;
        sc->used += (size_t)n;
    } else if (n > UINT32_MAX || sc->nheap == DP_MAX_ARGS ||
               (dims = PyMem_Malloc((size_t)n * sizeof *dims + 1)) == NULL) {
        PyErr_NoMemory();
        return -1;
    } else {
        sc->heap[sc->nheap++] = dims;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_Check(items[i]) && !PyIndex_Check(items[i])) {
            PyErr_Format(PyExc_TypeError, "a shape holds ints; element %zd is %.80s", i,
                         Py_TYPE(items[i])->tp_name);
            return -1;
        }
        dims[i] = PyLong_AsLongLong(items[i]);
        if (dims[i] == -1 && PyErr_Occurred())
            return -1;
    }
    *v = disco_value_shape(dims, (uint32_t)n);
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
    if (t == &DiscoDRef_Type || PyObject_TypeCheck(o, &DiscoDRef_Type)) {
        DRefObject *d = (DRefObject *)o;
        if (d->sess != so) {
            PyErr_SetString(PyExc_ValueError, "a DRef of another session");
            return -1;
        }
        *v = (disco_value_t){.type = DISCO_T_DREF, .v.reg = d->reg};
        return 0;
    }
    if (t == &PyFloat_Type) {
        *v = disco_value_float(PyFloat_AS_DOUBLE(o));
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
    if (PyBytes_Check(o) || PyByteArray_Check(o)) {
        Py_ssize_t n = PyBytes_Check(o) ? PyBytes_GET_SIZE(o) : PyByteArray_GET_SIZE(o);
        if ((size_t)n > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a bytes argument of 4 GiB or more");
            return -1;
        }
        *v = disco_value_bytes(PyBytes_Check(o) ? PyBytes_AS_STRING(o) : PyByteArray_AS_STRING(o),
                               (uint32_t)n);
        return 0;
    }
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
    if ((dp_Device != NULL && PyObject_TypeCheck(o, (PyTypeObject *)dp_Device)) ||
        strcmp(t->tp_name, "torch.device") == 0) {
        DLDevice d;
        if (dp_to_device(o, &d) < 0)
            return -1;
        *v = disco_value_device(d);
        return 0;
    }
    if (dp_is_array(o)) {
        PyErr_Format(PyExc_TypeError,
                     "a %.80s cannot travel inside a call: tensors move by register (copy it "
                     "with sess.copy_to_worker_0 or sess.broadcast and pass the DRef)",
                     t->tp_name);
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
    if (t->tp_as_number != NULL && t->tp_as_number->nb_float != NULL) { /* numpy floats */
        double x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
        *v = disco_value_float(x);
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "cannot pass a %.80s to a disco function (int, float, bool, str, bytes, None, "
                 "a shape, a dtype, a device or a DRef)",
                 t->tp_name);
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
            PyTuple_SET_ITEM(t, i, x);
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

/* ---- host arrays ---- */

/* The DLPack dtype of a buffer's struct format ("f", "<i4"-less forms). */
static int format_dtype(const char *f, Py_ssize_t itemsize, DLDataType *out)
{
    if (f == NULL)
        f = "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return -1;
    uint8_t code;
    switch (f[0]) {
    case 'e':
    case 'f':
    case 'd':
        code = kDLFloat;
        break;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
        code = kDLInt;
        break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
    case 'c':
        code = kDLUInt;
        break;
    case '?':
        code = DISCO_DL_BOOL;
        break;
    default:
        return -1;
    }
    *out = (DLDataType){code, (uint8_t)(itemsize * 8), 1};
    return 0;
}

static int from_buffer(PyObject *o, bool writable, dp_host_t *h)
{
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &h->view, flags) < 0)
        return -1;
    h->has_view = true;
    Py_buffer *b = &h->view;
    if (b->ndim > DISCO_MAX_NDIM || !PyBuffer_IsContiguous(b, 'C') ||
        format_dtype(b->format, b->itemsize, &h->t.dtype) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "a host array must be C-contiguous, of at most %d dimensions and of a "
                     "numeric format (this one: format %s, %d dims)",
                     DISCO_MAX_NDIM, b->format ? b->format : "B", b->ndim);
        return -1;
    }
    for (int i = 0; i < b->ndim; i++)
        h->shape[i] = b->shape != NULL ? b->shape[i] : b->len / b->itemsize;
    h->t.data = b->buf;
    h->t.device = (DLDevice){kDLCPU, 0};
    h->t.ndim = b->ndim;
    h->t.shape = h->shape;
    h->t.strides = NULL;
    return 0;
}

static int from_dlpack(PyObject *o, dp_host_t *h)
{
    PyObject *cap = PyObject_CallMethod(o, "__dlpack__", NULL);
    if (cap == NULL)
        return -1;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m == NULL) {
        Py_DECREF(cap);
        return -1;
    }
    /* Not consumed: the capsule's destructor calls the deleter. */
    h->capsule = cap;
    h->t = m->dl_tensor;
    if (h->t.ndim > DISCO_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "a host array of at most %d dimensions", DISCO_MAX_NDIM);
        return -1;
    }
    return 0;
}

int dp_host_get(PyObject *o, bool writable, dp_host_t *h)
{
    memset(h, 0, sizeof *h);
    if (PyObject_TypeCheck(o, &DiscoTensor_Type)) { /* ours: its DLTensor */
        h->t = ((TensorObject *)o)->dl;
        h->capsule = Py_NewRef(o);
        return 0;
    }
    /* The buffer protocol first (NumPy's bool and read-only arrays export
     * no DLPack), then __dlpack__ (PyTorch, device arrays). */
    if (PyObject_CheckBuffer(o)) {
        if (from_buffer(o, writable, h) == 0)
            return 0;
        if (!PyObject_HasAttrString(o, "__dlpack__")) {
            dp_host_release(h);
            return -1;
        }
        PyErr_Clear();
        dp_host_release(h);
        memset(h, 0, sizeof *h);
    }
    if (PyObject_HasAttrString(o, "__dlpack__")) {
        if (from_dlpack(o, h) == 0)
            return 0;
        dp_host_release(h);
        return -1;
    }
    PyErr_Format(PyExc_TypeError,
                 "a host array is anything with __dlpack__ or the buffer protocol (numpy, torch); "
                 "got %.80s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

void dp_host_release(dp_host_t *h)
{
    if (h->has_view)
        PyBuffer_Release(&h->view);
    h->has_view = false;
    Py_CLEAR(h->capsule);
}
