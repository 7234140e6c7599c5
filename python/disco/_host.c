/* _host.c - host arrays (the buffer protocol, a DLPack producer, a disco
 * Tensor) as DLTensors for one copy (dp_host_get in _core.h).
 *
 * What C reads stays valid while it reads: a Py_buffer export, the DLPack
 * capsule or the Tensor is held until dp_host_release. A DLPack producer
 * is asked its device before it exports: the host never reads a device
 * pointer, and a CUDA producer orders its work before the copy (the
 * protocol's stream argument; REFERENCE.md, "DLPack"). */
#include "_core.h"

#include <stdint.h>
#include <string.h>

/* The DLPack dtype of a buffer's struct format ("f", "<i4"-less forms). */
static int format_dtype(const char *f, Py_ssize_t itemsize, DLDataType *out)
{
    if (f == NULL)
        f = "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0' || itemsize <= 0 || itemsize > 32)
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

/* ---- DLPack producers ---- */

/* The streams this process hands CUDA producers, one per device, made at
 * first use and kept (a stream is cheap; copies from producers recur). A
 * fork starts over: a parent's streams are not the child's. GIL held. */
#define DP_STREAM_DEVICES 64
static pid_t streams_pid;
static disco_stream_t streams[DP_STREAM_DEVICES];

static int copy_stream(DLDevice dev, disco_stream_t *out)
{
    if (dev.device_id < 0 || dev.device_id >= DP_STREAM_DEVICES) {
        PyErr_Format(PyExc_ValueError,
                     "a CUDA array on device %d: disco copies from devices "
                     "0..%d",
                     (int)dev.device_id, DP_STREAM_DEVICES - 1);
        return -1;
    }
    if (streams_pid != dp_pid) {
        memset(streams, 0, sizeof streams);
        streams_pid = dp_pid;
    }
    if (streams[dev.device_id] == NULL) {
        disco_stream_t s = NULL;
        disco_status_t st = disco_device_stream_create((DLDevice){kDLCUDA, dev.device_id}, &s);
        if (st != DISCO_OK) {
            dp_raise(st);
            return -1;
        }
        streams[dev.device_id] = s;
    }
    *out = streams[dev.device_id];
    return 0;
}

static bool is_cuda(DLDeviceType t)
{
    return t == kDLCUDA || t == kDLCUDAManaged;
}

/* The producer's device, from __dlpack_device__(): *known is false when
 * it has no such method (an old producer). Returns 0, or -1 with an error. */
static int producer_device(PyObject *o, DLDevice *dev, bool *known)
{
    *known = false;
    if (!PyObject_HasAttrString(o, "__dlpack_device__"))
        return 0;
    PyObject *r = PyObject_CallMethod(o, "__dlpack_device__", NULL);
    if (r == NULL)
        return -1;
    long long type, id;
    int rc = -1;
    if (!PyTuple_Check(r) || PyTuple_Size(r) != 2)
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack_device__() must return a (device_type, device_id) tuple");
    else if (dp_int_in(PyTuple_GetItem(r, 0), 0, INT32_MAX, "device_type", &type) == 0 &&
             dp_int_in(PyTuple_GetItem(r, 1), 0, INT32_MAX, "device_id", &id) == 0) {
        *dev = (DLDevice){(DLDeviceType)type, (int32_t)id};
        *known = true;
        rc = 0;
    }
    Py_DECREF(r);
    return rc;
}

static int refuse_device(DLDevice d)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "this copy reads the array on the host, and it is on device type %d (id %d), not in "
             "CPU memory: copy it to the host first (torch: t.cpu()), or use "
             "copy_to_worker_0, which copies from devices",
             (int)d.device_type, (int)d.device_id);
    dp_raise_msg(DISCO_E_INVAL, msg);
    return -1;
}

static int from_dlpack(PyObject *o, int flags, dp_host_t *h)
{
    DLDevice dev = {kDLCPU, 0};
    bool known;
    if (producer_device(o, &dev, &known) < 0)
        return -1;
    /* Refused before it exports: the host never sees a device pointer. */
    if (known && (flags & DP_HOST_CPU_ONLY) && dev.device_type != kDLCPU)
        return refuse_device(dev);
    disco_stream_t stream = NULL;
    PyObject *cap;
    if (known && is_cuda(dev.device_type)) {
        /* The producer makes our stream wait for its work (an event on its
         * current stream); the stream is synced below, so any copy queued
         * afterwards runs after the producer's kernels. */
        if (copy_stream(dev, &stream) < 0)
            return -1;
        PyObject *meth = PyObject_GetAttrString(o, "__dlpack__");
        PyObject *noargs = PyTuple_New(0);
        PyObject *kw = Py_BuildValue("{s:K}", "stream", (unsigned long long)(uintptr_t)stream);
        cap = meth != NULL && noargs != NULL && kw != NULL ? PyObject_Call(meth, noargs, kw) : NULL;
        Py_XDECREF(meth);
        Py_XDECREF(noargs);
        Py_XDECREF(kw);
    } else { /* CPU and the rest: no stream (the protocol's None) */
        cap = PyObject_CallMethod(o, "__dlpack__", NULL);
    }
    if (cap == NULL)
        return -1;
    if (!PyCapsule_IsValid(cap, "dltensor")) { /* before PyCapsule_GetPointer's own words */
        char tn[128];
        const char *name = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : NULL;
        PyErr_Clear();
        if (name != NULL && strcmp(name, "used_dltensor") == 0)
            PyErr_SetString(PyExc_ValueError, "__dlpack__() returned a capsule that was "
                                              "already consumed (named \"used_dltensor\")");
        else
            PyErr_Format(PyExc_TypeError,
                         "__dlpack__() must return a capsule named \"dltensor\"; got %s",
                         dp_type_name(cap, tn, sizeof tn));
        Py_DECREF(cap);
        return -1;
    }
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m == NULL) {
        Py_DECREF(cap);
        return -1;
    }
    /* Not consumed: the capsule's destructor calls the deleter. */
    h->capsule = cap;
    h->t = m->dl_tensor;
    DLDevice got = h->t.device;
    if (known && (got.device_type != dev.device_type || got.device_id != dev.device_id)) {
        PyErr_Format(
            PyExc_ValueError, "__dlpack_device__() said (%d, %d), __dlpack__() exported (%d, %d)",
            (int)dev.device_type, (int)dev.device_id, (int)got.device_type, (int)got.device_id);
        return -1;
    }
    if (!known && is_cuda(got.device_type)) {
        PyErr_SetString(PyExc_ValueError,
                        "a CUDA array without __dlpack_device__(): its producer's work cannot be "
                        "ordered before the copy");
        return -1;
    }
    if ((flags & DP_HOST_CPU_ONLY) && got.device_type != kDLCPU)
        return refuse_device(got);
    if (h->t.ndim < 0 || h->t.ndim > DISCO_MAX_NDIM || (h->t.ndim > 0 && h->t.shape == NULL)) {
        PyErr_Format(PyExc_ValueError, "a host array of 0 to %d dimensions (this one: %d)",
                     DISCO_MAX_NDIM, (int)h->t.ndim);
        return -1;
    }
    /* Our copies of the shape and strides: the checks and the copy read the
     * same numbers. */
    memcpy(h->shape, m->dl_tensor.shape, (size_t)h->t.ndim * sizeof *h->shape);
    h->t.shape = h->shape;
    if (m->dl_tensor.strides != NULL) {
        memcpy(h->strides, m->dl_tensor.strides, (size_t)h->t.ndim * sizeof *h->strides);
        h->t.strides = h->strides;
    }
    if (stream != NULL) {
        disco_status_t st;
        Py_BEGIN_ALLOW_THREADS st =
            disco_device_stream_sync((DLDevice){kDLCUDA, dev.device_id}, stream);
        Py_END_ALLOW_THREADS if (st != DISCO_OK)
        {
            dp_raise(st);
            return -1;
        }
    }
    return 0;
}

/* What every copy needs of h->t: a size that does not overflow, compact
 * bytes, data where there are bytes. */
static int check_layout(dp_host_t *h)
{
    size_t n;
    disco_status_t st = disco_shape_nbytes(h->t.shape, h->t.ndim, h->t.dtype, &n);
    if (st != DISCO_OK) {
        dp_raise(st);
        return -1;
    }
    if (!disco_tensor_is_compact(&h->t)) {
        dp_raise_msg(DISCO_E_INVAL, "a host array must be compact (C-contiguous): copy it "
                                    "first (numpy.ascontiguousarray, torch .contiguous())");
        return -1;
    }
    if (n > 0 && h->t.data == NULL) {
        dp_raise_msg(DISCO_E_INVAL, "a host array with bytes and no data pointer");
        return -1;
    }
    h->t.strides = NULL; /* compact: the copies need no strides */
    return 0;
}

/* Whether o exports a read-only buffer (any layout). The pending error
 * (from_buffer's) is dropped when it does, kept when it does not. */
static bool read_only(PyObject *o)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    Py_buffer b;
    bool ro = false;
    if (PyObject_GetBuffer(o, &b, PyBUF_FULL_RO) == 0) {
        ro = b.readonly != 0;
        PyBuffer_Release(&b);
    } else {
        PyErr_Clear();
    }
    if (ro) {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(t, v, tb);
    }
    return ro;
}

int dp_host_get(PyObject *o, int flags, dp_host_t *h)
{
    char tn[128];
    bool writable = (flags & DP_HOST_WRITABLE) != 0;
    memset(h, 0, sizeof *h);
    if (PyObject_TypeCheck(o, dp_Tensor_Type)) { /* ours: its DLTensor, if it is alive */
        if (dp_tensor_check_live(o) < 0)
            return -1;
        TensorObject *t = (TensorObject *)o;
        h->t = t->dl;
        memcpy(h->shape, t->shape, sizeof h->shape);
        h->t.shape = h->shape;
        h->capsule = Py_NewRef(o);
        if ((flags & DP_HOST_CPU_ONLY) && h->t.device.device_type != kDLCPU) {
            dp_host_release(h);
            return refuse_device(t->dl.device);
        }
        return 0;
    }
    int rc = -1;
    /* The buffer protocol first (NumPy's bool and read-only arrays export
     * no DLPack), then __dlpack__ (PyTorch, device arrays). */
    if (PyObject_CheckBuffer(o)) {
        /* Asked before from_buffer: PyObject_HasAttrString clears a pending
         * error, and from_buffer's must stay when there is no __dlpack__
         * (bytes where disco writes: test_comm_misuse.py's buf_bytes). */
        bool dl = PyObject_HasAttrString(o, "__dlpack__");
        if (from_buffer(o, writable, h) == 0) {
            rc = 0;
        } else if (writable && read_only(o)) {
            /* Said so, not the DLPack fallback's words
             * (test_comm_misuse.py's readonly_dst). */
            PyErr_SetString(PyExc_BufferError,
                            "the array is read-only, and this call writes into it");
        } else if (dl) {
            PyErr_Clear();
            dp_host_release(h);
            memset(h, 0, sizeof *h);
            rc = from_dlpack(o, flags, h);
        }
    } else if (PyObject_HasAttrString(o, "__dlpack__")) {
        rc = from_dlpack(o, flags, h);
    } else {
        PyErr_Format(PyExc_TypeError,
                     "a host array is anything with __dlpack__ or the buffer protocol (numpy, "
                     "torch); got %s",
                     dp_type_name(o, tn, sizeof tn));
        return -1;
    }
    if (rc == 0)
        rc = check_layout(h);
    if (rc < 0)
        dp_host_release(h);
    return rc;
}

int dp_host_use(dp_host_t *h)
{
    if (h->capsule == NULL || !PyObject_TypeCheck(h->capsule, dp_Tensor_Type))
        return 0;
    if (dp_tensor_check_live(h->capsule) < 0)
        return -1;
    h->pinned = (TensorObject *)h->capsule;
    h->pinned->pins++; /* GIL held: the pair of the wait in _pyfunc.c's trampoline */
    return 0;
}

int dp_enter_host(SessionObject *so, dp_host_t *h)
{
    if (dp_enter(so) < 0)
        return -1;
    if (dp_host_use(h) < 0) {
        dp_leave(so);
        return -1;
    }
    return 0;
}

void dp_host_release(dp_host_t *h)
{
    if (h->pinned != NULL)
        h->pinned->pins--;
    h->pinned = NULL;
    if (h->has_view)
        PyBuffer_Release(&h->view);
    h->has_view = false;
    Py_CLEAR(h->capsule);
}
