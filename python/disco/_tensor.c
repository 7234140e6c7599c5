/* _tensor.c - disco.Tensor: a tensor seen from this process, exported
 * with DLPack (__dlpack__, __dlpack_device__) and the buffer protocol.
 *
 * Two kinds. A view of a session's register (debug_get_from_remote): the
 * session's DLManagedTensor, which holds a reference to the heap block, so
 * the bytes stay allocated while the Tensor lives; the Tensor holds the
 * session object, so the heap stays mapped (disco_session_close runs only
 * when the session object goes). A worker function's argument: the
 * worker's own DLTensor, valid during the call only; afterwards the Tensor
 * refuses new exports and every copy that would take its DLTensor
 * (dp_host_get), and a copy that took it during the call holds the call
 * open until it is done (pins). Arrays already made from it must not be
 * used after the call: nothing can revoke them.
 *
 * Each export (a capsule) holds the Tensor until the consumer's array goes:
 * numpy.from_dlpack(t) and torch.from_dlpack(t) share the bytes, no copy. */
#include "_core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fill_py_layout(TensorObject *t)
{
    Py_ssize_t item = (Py_ssize_t)((t->dl.dtype.bits * t->dl.dtype.lanes + 7) / 8);
    for (int i = t->dl.ndim - 1; i >= 0; i--) {
        t->pyshape[i] = (Py_ssize_t)t->shape[i];
        t->pystrides[i] = item;
        item *= t->pyshape[i];
    }
}

static TensorObject *tensor_alloc(const DLTensor *src)
{
    TensorObject *t = PyObject_GC_New(TensorObject, dp_Tensor_Type);
    if (t == NULL)
        return NULL;
    t->dl = *src;
    t->dl.data = (char *)src->data + src->byte_offset;
    t->dl.byte_offset = 0;
    t->dl.strides = NULL;
    int nd = src->ndim < DISCO_MAX_NDIM ? src->ndim : DISCO_MAX_NDIM;
    t->dl.ndim = nd;
    memcpy(t->shape, src->shape, (size_t)nd * sizeof *t->shape);
    t->dl.shape = t->shape;
    fill_py_layout(t);
    t->view = NULL;
    t->orig = NULL;
    t->sess = NULL;
    t->pid = dp_pid;
    t->live = true;
    t->pins = 0;
    PyObject_GC_Track((PyObject *)t);
    return t;
}

PyObject *dp_tensor_from_view(SessionObject *so, DLManagedTensor *view)
{
    TensorObject *t = tensor_alloc(&view->dl_tensor);
    if (t == NULL) {
        dp_release_view(so, view);
        return NULL;
    }
    t->view = view;
    t->sess = (SessionObject *)Py_NewRef((PyObject *)so);
    return (PyObject *)t;
}

PyObject *dp_tensor_borrow(DLTensor *src)
{
    TensorObject *t = tensor_alloc(src);
    if (t != NULL)
        t->orig = src;
    return (PyObject *)t;
}

void dp_tensor_expire(PyObject *o)
{
    if (o != NULL && PyObject_TypeCheck(o, dp_Tensor_Type))
        ((TensorObject *)o)->live = false;
}

/* Tensors take part in the cycle collector as DRefs do (_dref.c says why
 * there is no tp_clear: a view needs its session to be released). */
static int tensor_traverse(TensorObject *t, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)t));
    Py_VISIT((PyObject *)t->sess);
    return 0;
}

static void tensor_dealloc(TensorObject *t)
{
    PyObject_GC_UnTrack((PyObject *)t);
    if (t->view != NULL && t->sess != NULL && t->pid == dp_pid)
        dp_release_view(t->sess, t->view);
    Py_CLEAR(t->sess);
    PyTypeObject *tp = Py_TYPE((PyObject *)t);
    PyObject_GC_Del(t); /* only this file makes Tensors: always a GC object */
    Py_DECREF(tp);
}

static int check_live(TensorObject *t)
{
    if (t->live && t->pid == dp_pid)
        return 0;
    PyErr_SetString(PyExc_BufferError,
                    t->live ? "this disco.Tensor belongs to another process (a fork's copy)"
                            : "this disco.Tensor was a worker function's argument: its bytes "
                              "belong to the call, which has returned");
    return -1;
}

int dp_tensor_check_live(PyObject *o)
{
    return check_live((TensorObject *)o);
}

/* ---- DLPack ---- */

typedef struct {
    DLManagedTensor m;
    int64_t shape[DISCO_MAX_NDIM];
} export_t;

static void export_delete(DLManagedTensor *m)
{
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF((PyObject *)m->manager_ctx);
        PyGILState_Release(g);
    }
    free(m);
}

static void capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "used_dltensor"))
        return; /* consumed: the consumer calls the deleter */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m != NULL)
        m->deleter(m);
    else
        PyErr_WriteUnraisable(cap);
    PyErr_Restore(type, value, tb);
}

#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
typedef struct {
    DLManagedTensorVersioned m;
    int64_t shape[DISCO_MAX_NDIM];
} export_v1_t;

static void export_v1_delete(DLManagedTensorVersioned *m)
{
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF((PyObject *)m->manager_ctx);
        PyGILState_Release(g);
    }
    free(m);
}

static void capsule_v1_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "used_dltensor_versioned"))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m != NULL)
        m->deleter(m);
    else
        PyErr_WriteUnraisable(cap);
    PyErr_Restore(type, value, tb);
}
#endif

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) */
static PyObject *tensor_dlpack(TensorObject *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    (void)stream; /* host memory: nothing to order */
    if (check_live(t) < 0)
        return NULL;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "disco.Tensor exports its bytes; copy=True is not "
                                           "supported (copy the consumer's array instead)");
        return NULL;
    }
    if (dl_device != Py_None) {
        DLDevice d;
        if (dp_to_device(dl_device, &d) < 0)
            return NULL;
        if (d.device_type != t->dl.device.device_type || d.device_id != t->dl.device.device_id) {
            PyErr_SetString(PyExc_BufferError, "disco.Tensor: no copy to another device");
            return NULL;
        }
    }
    long major = 0;
    if (max_version != Py_None) {
        if (!PyTuple_Check(max_version) || PyTuple_Size(max_version) < 1) {
            PyErr_SetString(PyExc_TypeError, "max_version must be a (major, minor) tuple");
            return NULL;
        }
        major = PyLong_AsLong(PyTuple_GetItem(max_version, 0));
        if (major == -1 && PyErr_Occurred())
            return NULL;
    }
#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
    if (major >= 1) { /* the consumer speaks DLPack 1.x: a versioned capsule */
        export_v1_t *e = calloc(1, sizeof *e);
        if (e == NULL)
            return PyErr_NoMemory();
        e->m.version.major = DLPACK_MAJOR_VERSION;
        e->m.version.minor = DLPACK_MINOR_VERSION;
        e->m.dl_tensor = t->dl;
        memcpy(e->shape, t->shape, sizeof e->shape);
        e->m.dl_tensor.shape = e->shape;
        e->m.manager_ctx = Py_NewRef((PyObject *)t);
        e->m.deleter = export_v1_delete;
        PyObject *cap = PyCapsule_New(&e->m, "dltensor_versioned", capsule_v1_destructor);
        if (cap == NULL)
            export_v1_delete(&e->m);
        return cap;
    }
#else
    (void)major; /* this dlpack.h has no versioned struct: the legacy capsule */
#endif
    export_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return PyErr_NoMemory();
    e->m.dl_tensor = t->dl;
    memcpy(e->shape, t->shape, sizeof e->shape);
    e->m.dl_tensor.shape = e->shape;
    e->m.manager_ctx = Py_NewRef((PyObject *)t);
    e->m.deleter = export_delete;
    PyObject *cap = PyCapsule_New(&e->m, "dltensor", capsule_destructor);
    if (cap == NULL)
        export_delete(&e->m);
    return cap;
}

static PyObject *tensor_dlpack_device(TensorObject *t, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(ii)", (int)t->dl.device.device_type, (int)t->dl.device.device_id);
}

/* ---- the buffer protocol (memoryview, numpy.asarray, bytes) ---- */

static const char *buffer_format(DLDataType d)
{
    if (d.lanes != 1)
        return NULL;
    switch (d.code) {
    case kDLFloat:
        return d.bits == 16 ? "e" : d.bits == 32 ? "f" : d.bits == 64 ? "d" : NULL;
    case kDLInt:
        return d.bits == 8    ? "b"
               : d.bits == 16 ? "h"
               : d.bits == 32 ? "i"
               : d.bits == 64 ? "q"
                              : NULL;
    case kDLUInt:
        return d.bits == 8    ? "B"
               : d.bits == 16 ? "H"
               : d.bits == 32 ? "I"
               : d.bits == 64 ? "Q"
               : d.bits == 1  ? "?"
                              : NULL;
    case DISCO_DL_BOOL:
        return d.bits == 8 ? "?" : NULL;
    default:
        return NULL;
    }
}

static int tensor_getbuffer(TensorObject *t, Py_buffer *b, int flags)
{
    if (check_live(t) < 0)
        return -1;
    const char *fmt = buffer_format(t->dl.dtype);
    if (t->dl.device.device_type != kDLCPU || fmt == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "disco.Tensor: no buffer for this dtype or device (use __dlpack__)");
        return -1;
    }
    Py_ssize_t item = (Py_ssize_t)((t->dl.dtype.bits + 7) / 8), len = item;
    for (int i = 0; i < t->dl.ndim; i++)
        len *= t->pyshape[i];
    b->buf = t->dl.data;
    b->obj = Py_NewRef((PyObject *)t);
    b->len = len;
    b->readonly = 0;
    b->itemsize = item;
    b->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    b->ndim = t->dl.ndim;
    b->shape = (flags & PyBUF_ND) == PyBUF_ND ? t->pyshape : NULL;
    b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? t->pystrides : NULL;
    b->suboffsets = NULL;
    b->internal = NULL;
    return 0;
}

/* ---- attributes ---- */

static PyObject *get_shape(TensorObject *t, void *unused)
{
    (void)unused;
    PyObject *r = PyTuple_New(t->dl.ndim);
    for (int i = 0; r != NULL && i < t->dl.ndim; i++) {
        PyObject *x = PyLong_FromLongLong(t->shape[i]);
        if (x == NULL) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SetItem(r, i, x);
    }
    return r;
}

static PyObject *get_dtype(TensorObject *t, void *unused)
{
    (void)unused;
    return dp_dtype_obj(t->dl.dtype);
}

static PyObject *get_device(TensorObject *t, void *unused)
{
    (void)unused;
    return dp_device_obj(t->dl.device);
}

static PyObject *get_ndim(TensorObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromLong(t->dl.ndim);
}

static PyObject *get_nbytes(TensorObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(disco_tensor_nbytes(&t->dl));
}

static PyObject *get_is_view(TensorObject *t, void *unused)
{
    (void)unused;
    return PyBool_FromLong(t->view != NULL && !disco_tensor_view_is_copy(t->view));
}

/* numpy(): a NumPy copy (TVM's NDArray.numpy()). */
static PyObject *tensor_numpy(TensorObject *t, PyObject *unused)
{
    (void)unused;
    if (check_live(t) < 0)
        return NULL;
    /* numpy.array(t) of an object without a buffer makes an object array
     * holding t: a silent wrong value (tests/python/test_device.py,
     * test_numpy_of_device_argument). Device bytes are never read here. */
    if (t->dl.device.device_type != kDLCPU) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "disco.Tensor.numpy(): the tensor is on device type %d (id %d), not in CPU "
                 "memory; copy it to a host array first (copy_from_worker_0)",
                 (int)t->dl.device.device_type, (int)t->dl.device.device_id);
        return dp_raise_msg(DISCO_E_INVAL, msg);
    }
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return NULL;
    PyObject *r = NULL;
    if (buffer_format(t->dl.dtype) != NULL) {
        r = PyObject_CallMethod(np, "array", "O", (PyObject *)t);
    } else {
        PyObject *v = PyObject_CallMethod(np, "from_dlpack", "O", (PyObject *)t);
        r = v != NULL ? PyObject_CallMethod(v, "copy", NULL) : NULL;
        Py_XDECREF(v);
    }
    Py_DECREF(np);
    return r;
}

static PyObject *tensor_repr(TensorObject *t)
{
    char dt[DISCO_DTYPE_STR_MAX], shape[160] = "";
    size_t used = 0;
    for (int i = 0; i < t->dl.ndim && used < sizeof shape; i++) {
        int n = snprintf(shape + used, sizeof shape - used, "%s%lld", i ? ", " : "",
                         (long long)t->shape[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    const char *kind = t->orig != NULL                                         ? "a call's argument"
                       : t->view != NULL && disco_tensor_view_is_copy(t->view) ? "a host copy"
                                                                               : "shared heap";
    return PyUnicode_FromFormat("<disco.Tensor %s[%s] (%s)>",
                                disco_dtype_str(t->dl.dtype, dt, sizeof dt), shape, kind);
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule sharing this tensor's bytes (no copy). A versioned\ncapsule when "
     "max_version asks for DLPack 1.x and disco was built with a\ndlpack.h that has it."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(device_type, device_id): (1, 0) for host memory."},
    {"numpy", (PyCFunction)tensor_numpy, METH_NOARGS,
     "numpy()\n--\n\nA NumPy copy of the bytes (numpy.from_dlpack(t) shares them instead)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "The shape, a tuple of ints.", NULL},
    {"dtype", (getter)get_dtype, NULL, "The element type (a disco.DataType).", NULL},
    {"device", (getter)get_device, NULL, "Where the bytes are (a disco.Device).", NULL},
    {"ndim", (getter)get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "Size of the data in bytes.", NULL},
    {"is_view", (getter)get_is_view, NULL,
     "Whether this is the worker's own bytes in the shared heap (False: a host\n"
     "copy of a device tensor, or a function's argument).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_repr, tensor_repr},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_tp_doc,
     (void *)("Tensor: a tensor of a session seen from this process.\n\n"
              "From DRef.debug_get_from_remote(worker): a view of the worker's tensor\n"
              "in the shared heap, no copy. numpy.from_dlpack(t), torch.from_dlpack(t),\n"
              "memoryview(t) and numpy.asarray(t) share the bytes: a worker's later\n"
              "writes show through, and writes through them reach the worker.\n\n"
              "Lifetime: the view holds the heap block, so the bytes stay valid after\n"
              "the register is freed or overwritten, for as long as the Tensor or an\n"
              "array made from it lives; it also keeps the session object alive (the\n"
              "heap stays mapped after shutdown() until the last view goes). Two\n"
              "workers that share bytes (broadcast and scatter results are by\n"
              "reference) show the same bytes.\n\n"
              "Inside a Python worker function, tensor arguments arrive as Tensors\n"
              "valid during the call only.")},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {0, NULL},
};

PyType_Spec dp_tensor_spec = {
    .name = "disco.Tensor",
    .basicsize = sizeof(TensorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
    .slots = tensor_slots,
};
