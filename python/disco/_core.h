/*
 * _core.h - the CPython extension behind the disco package (internal).
 *
 * Objects:
 *   Session      a disco_session_t; the Python ProcessSession subclasses it
 *   DRef         a register of a session (frees it when collected)
 *   DPackedFunc  a DRef holding a function; calling it is the hot path
 *   Tensor       a tensor seen from this process, with __dlpack__ and the
 *                buffer protocol: a view of a session's heap, or a worker
 *                function's argument during the call
 *   RPCSession   a disco_rpc_t
 *
 * Threads and the GIL. The C session is used by one thread at a time, so
 * each Session has a lock; a method takes it (waiting without the GIL when
 * another thread holds it) and keeps the GIL unless it may block for long
 * (syncs, debug gets, copies, collectives), which it runs with the GIL
 * released. A DRef or Tensor collected while another thread holds the lock
 * does not wait: its register or view goes on the session's pending list,
 * which the next method empties first. Pending work and deferred errors
 * are only touched under the GIL. Taking a lock may release the GIL, so
 * every state a method depends on (closed, shut down, an argument's call
 * over) is checked again once the lock is held (test_safety.py's
 * test_rpc_close_races, test_expired_argument_refused).
 *
 * What C reads of a Python object with the GIL released stays valid and
 * unchanged until C is done: a Py_buffer export, a capsule or a reference
 * is held for that long, and mutable bytes (a bytearray argument) are
 * copied first (docs/python-safety.md).
 *
 * Processes. Workers are forked inside disco_session_open, with the GIL
 * held by the opening thread, so that thread's state is current in the
 * child; the child never returns to Python, it runs the worker loop, and
 * the first Python function it runs calls PyOS_AfterFork_Child first
 * (_pyfunc.c). Every object remembers the pid that made it: in a child,
 * collecting a parent's DRef, Tensor or Session touches nothing.
 */
#ifndef DISCO_PY_CORE_H
#define DISCO_PY_CORE_H

/* The stable ABI of 3.11 and later (abi3) when built with DP_STABLE_ABI
 * (make python PY_ABI3=1: python/disco/_core.abi3.so). Not the default,
 * because it costs: 3.11's limited API has no vectorcall for an
 * extension's type, so DPackedFunc.__call__ takes an argument tuple.
 * callgrind, 1 worker, a no-op call + sync_worker(0), instructions per
 * round: 4300 with this code on the full API, 4431 with abi3 (4242 with
 * static types, before the code moved to heap types for abi3's sake);
 * in time ~30-50 ns, below this VM's noise. Everything else is the same
 * code either way (heap types, no macro that reads a struct). */
#ifdef DP_STABLE_ABI
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <disco/disco.h>

/* Most arguments a call takes (the session's limit is 63: 64 less the
 * call's head); more is refused before conversion. */
#define DP_MAX_ARGS 64

/* A worker function's failure message, as long as a worker's error box
 * holds (DISCO_ERR_MSG_MAX in workers/core/protocol.h). */
#define DP_MSG_MAX 384

/* ---- Session ---- */

typedef struct {
    PyObject_HEAD disco_session_t *s; /* NULL once closed */
    pid_t pid;                        /* the process that opened it */
    bool busy;                        /* one thread in the C session at a time (the
                                         GIL orders it: see _core.c) */
    unsigned long owner;              /* the thread that holds it */
    int num_workers;
    int num_groups;
    bool shut;         /* disco_session_shutdown has run */
    bool forks;        /* launch "fork": open and recover fork the workers */
    uint64_t *pending; /* registers to free (collected while locked) */
    size_t npending, cap_pending;
    DLManagedTensor **pviews; /* views to release (collected while locked) */
    size_t npviews, cap_pviews;
    disco_status_t deferred; /* an error met while freeing in a dealloc */
    char deferred_msg[512];
} SessionObject;

/* The types, made at import from their specs (heap types: the stable ABI
 * has no static PyTypeObject). */
extern PyTypeObject *dp_Session_Type, *dp_DRef_Type, *dp_Func_Type, *dp_Tensor_Type, *dp_RPC_Type;
extern PyType_Spec dp_session_spec, dp_dref_spec, dp_func_spec, dp_tensor_spec, dp_rpc_spec;

/** Frees self with its type's tp_free and drops the reference an instance
 *  of a heap type holds on its type (every tp_dealloc ends with it). */
void dp_free_self(PyObject *self);

/** The name of o's type ("numpy.ndarray"), into buf (cap bytes). */
const char *dp_type_name(PyObject *o, char *buf, size_t cap);

/** Takes so's lock and empties its pending list; raises (returning -1)
 *  when the session is closed, belongs to another process, or a deferred
 *  or pending free failed (the lock is then not held). */
int dp_enter(SessionObject *so);

/** Takes so's lock only, without emptying the pending list (shutdown:
 *  the registers go with the workers); raises (returning -1) when this
 *  thread holds it already (a worker-0 function using its own session). */
int dp_lock(SessionObject *so);

/** Releases the lock taken by dp_enter. */
void dp_leave(SessionObject *so);

/** Frees register reg of so now if its lock is free, else later. Never
 *  raises (a failure is raised by the session's next method). */
void dp_release_reg(SessionObject *so, uint64_t reg);

/** Releases a view of so's heap now if its lock is free, else later. */
void dp_release_view(SessionObject *so, DLManagedTensor *view);

/* ---- DRef, DPackedFunc ---- */

typedef struct {
    PyObject_HEAD SessionObject *sess;
    uint64_t reg;
    pid_t pid;
    PyObject *name; /* DPackedFunc: the function's name */
#ifndef Py_LIMITED_API
    vectorcallfunc vectorcall; /* DPackedFunc: the call (the full API only) */
#endif
} DRefObject;

/** A new DRef (or DPackedFunc, type) owning register reg of so. On
 *  failure the register is freed and NULL returned with an error set. */
PyObject *dp_dref_new(PyTypeObject *type, SessionObject *so, uint64_t reg, PyObject *name);

/** disco_session_call of func with Python arguments: a new DRef. */
PyObject *dp_call(SessionObject *so, uint64_t func, PyObject *const *args, Py_ssize_t n);

/* dp_call, or with sync_all disco_session_call_sync_all (the call and a
 * sync of every worker as one command). */
PyObject *dp_call_as(SessionObject *so, uint64_t func, PyObject *const *args, Py_ssize_t n,
                     bool sync_all);

/* ---- Tensor ---- */

typedef struct {
    PyObject_HEAD DLTensor dl; /* what consumers see; shape points at shape */
    int64_t shape[DISCO_MAX_NDIM];
    Py_ssize_t pyshape[DISCO_MAX_NDIM], pystrides[DISCO_MAX_NDIM]; /* buffer protocol */
    DLManagedTensor *view; /* a session's view (owned), or NULL */
    DLTensor *orig;        /* a worker function's argument, or NULL */
    SessionObject *sess;   /* keeps the heap mapped while views live */
    pid_t pid;
    bool live; /* false: an argument after its call */
    int pins;  /* copies reading or writing an argument's bytes right now (with
                  the GIL released): its call does not end before they are
                  done (_pyfunc.c; test_safety.py's test_argument_pinned_*) */
} TensorObject;

/** A Tensor over a session's view (taken: released when the Tensor goes). */
PyObject *dp_tensor_from_view(SessionObject *so, DLManagedTensor *view);

/** A Tensor borrowing t (a worker function's argument) for one call. */
PyObject *dp_tensor_borrow(DLTensor *t);

/** Ends a borrowed Tensor's call: it refuses new exports (o may be any
 *  object; only a Tensor is touched). */
void dp_tensor_expire(PyObject *o);

/** Whether o (a Tensor) may be used here and now: a view, or an argument
 *  during its call, in the process that made it. Returns 0, or -1 with
 *  BufferError set. GIL held. */
int dp_tensor_check_live(PyObject *o);

/* ---- values ---- */

/* Scratch for one conversion of Python arguments: shapes and copies of
 * mutable arguments live here until the call returns. */
typedef struct {
    int64_t dims[256];
    size_t used;
    void *heap[DP_MAX_ARGS];
    int nheap;
} dp_scratch_t;

/** An empty scratch. */
static inline void dp_scratch_init(dp_scratch_t *sc)
{
    sc->used = 0;
    sc->nheap = 0;
}

/** Converts o to a value for a call of so. What the value points at stays
 *  valid, unchanged, until dp_scratch_free, whatever Python code runs
 *  meanwhile (the GIL may be released): immutable objects (str, bytes) are
 *  borrowed, so keep o alive; a bytearray is copied into sc (its bytes can
 *  be resized or freed by any thread once the GIL goes: test_safety.py's
 *  test_bytearray_*); shapes are copied into sc; mutable buffers (memoryview,
 *  array.array, numpy) are refused. Returns 0, or -1 with TypeError/
 *  ValueError/OverflowError set. */
int dp_to_value(SessionObject *so, PyObject *o, disco_value_t *v, dp_scratch_t *sc);

void dp_scratch_free(dp_scratch_t *sc);

/* ---- integers from Python, range-checked before they narrow ---- */

/** o (an int, or anything with __index__) in [lo, hi]; what names it in
 *  the error. Returns 0, or -1 with TypeError or OverflowError set. */
int dp_int_in(PyObject *o, long long lo, long long hi, const char *what, long long *out);

/** o as an unsigned integer at most hi. Returns 0, or -1 with TypeError,
 *  ValueError (negative) or OverflowError set. */
int dp_uint_in(PyObject *o, unsigned long long hi, const char *what, unsigned long long *out);

/** o as a worker id of so: 0 <= id < so->num_workers. Returns 0, or -1 with
 *  TypeError or disco's InvalidArgumentError set. */
int dp_worker_id(SessionObject *so, PyObject *o, int *out);

/** A Python object for v (copies str, bytes and shape payloads); a tensor
 *  value becomes a borrowed Tensor (for worker functions). */
PyObject *dp_from_value(const disco_value_t *v);

/* A host array (anything with __dlpack__ or the buffer protocol) as a
 * DLTensor, for one copy. */
typedef struct {
    DLTensor t;
    int64_t shape[DISCO_MAX_NDIM], strides[DISCO_MAX_NDIM];
    Py_buffer view;
    bool has_view;
    PyObject *capsule;    /* the DLPack capsule, or a disco Tensor */
    TensorObject *pinned; /* the disco Tensor dp_host_use pinned, or NULL */
} dp_host_t;

/* dp_host_get's flags. */
#define DP_HOST_WRITABLE 1 /* the copy writes into the array */
#define DP_HOST_CPU_ONLY 2 /* the host reads the bytes itself: CPU memory only */

/** Fills h from o: a compact array of at most DISCO_MAX_NDIM dimensions
 *  whose size does not overflow (else InvalidArgumentError). A disco Tensor
 *  must be alive (dp_tensor_check_live). A DLPack producer is asked its
 *  device first (__dlpack_device__): with DP_HOST_CPU_ONLY anything but CPU
 *  memory is refused before __dlpack__ is called; a CUDA array is exported
 *  with stream= this process's copy stream of its device, which waits for
 *  the producer's work, and that stream is synced before this returns, so a
 *  copy queued on any stream afterwards reads or writes the array after its
 *  producer's kernels (test_safety.py's test_dlpack_stream_*); CPU and
 *  other devices are exported with no stream (the protocol's None). Returns
 *  0, or -1 with an error set. GIL held (released while it syncs). */
int dp_host_get(PyObject *o, int flags, dp_host_t *h);

/** Call after taking the session's lock, just before the GIL is released
 *  for the copy: re-checks a disco Tensor (its call may have ended while
 *  this thread waited for the lock) and pins it until dp_host_release, so
 *  its call cannot end while the copy runs. Returns 0, or -1 with
 *  BufferError set. */
int dp_host_use(dp_host_t *h);

/** dp_enter(so), then dp_host_use(h); on failure the lock is not held.
 *  Returns 0, or -1 with an error set. */
int dp_enter_host(SessionObject *so, dp_host_t *h);

void dp_host_release(dp_host_t *h);

/** Whether o looks like an array (has __dlpack__ or the buffer protocol,
 *  and is not str or bytes). */
bool dp_is_array(PyObject *o);

/** DLDataType of a dtype-like object (str, DataType, numpy or torch dtype).
 *  Returns 0, or -1 with an error set. */
int dp_to_dtype(PyObject *o, DLDataType *out);

/** DLDevice of None (cpu), a Device, or a (type, id) pair. */
int dp_to_device(PyObject *o, DLDevice *out);

PyObject *dp_dtype_obj(DLDataType t);
PyObject *dp_device_obj(DLDevice d);

/* ---- errors ---- */

/** Raises the exception class of st with disco_last_error()'s text; returns
 *  NULL (for `return dp_raise(st);`). */
PyObject *dp_raise(disco_status_t st);

/** Raises the class of st with msg. */
PyObject *dp_raise_msg(disco_status_t st, const char *msg);

/* Classes the Python part hands over (_core._set_types): DataType, Device,
 * and the error classes by code. */
extern PyObject *dp_DataType, *dp_Device, *dp_error_classes, *dp_DiscoError;

/* ---- Python functions on workers (_pyfunc.c) ---- */

extern PyMethodDef dp_pyfunc_methods[];

/* ---- disco.comm (_comm.c) ---- */

/* The ctx of the worker function running on this thread (set by _pyfunc.c's
 * trampoline for the call), or NULL; and that call's argument tuple
 * (borrowed: the trampoline holds it for the call), whose Tensors are the
 * only ones disco.comm uses in place (test_comm_misuse.py's
 * test_tensor_of_another_workers_call). */
extern __thread disco_ctx_t *dp_comm_ctx;
extern __thread PyObject *dp_comm_args;
extern PyMethodDef dp_comm_methods[];

/** Whether calls release the GIL around disco_session_call (1). */
extern int dp_call_nogil;

/** This process's pid, without a system call (glibc's getpid() makes one):
 *  set at import and by a pthread_atfork child handler, so it is right in
 *  every fork, disco's and os.fork's alike. */
extern pid_t dp_pid;

/** The pid whose Python runtime is set up (the module's process, or a fork
 *  that ran PyOS_AfterFork_Child). */
extern pid_t dp_python_pid;

/* ---- RPC (_rpc.c) ---- */

extern PyMethodDef dp_rpc_methods[];

#endif
