/* _core.c - the Session type (see _core.h for the rules on threads, the GIL
 * and processes); its lock and the errors are _lock.c, the module's
 * functions and its init _module.c. */
#include "_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Session ---- */

static int parse_enum(PyObject *o, const char *what, const char *a, const char *b, int *out)
{
    if (o == NULL || o == Py_None)
        return 0;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
    if (s != NULL && strcmp(s, a) == 0)
        *out = 0;
    else if (s != NULL && strcmp(s, b) == 0)
        *out = 1;
    else {
        PyErr_Format(PyExc_ValueError, "%s must be \"%s\" or \"%s\"", what, a, b);
        return -1;
    }
    return 0;
}

static int session_init(SessionObject *so, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"num_workers", "num_groups",      "launch",     "worker_path",
                             "transport",   "call_timeout_ms", "heap_bytes", "device_arena_bytes",
                             "max_msg",     "trace",           "place",      "cpus",
                             NULL};
    int n, groups = 1, trace = 1;
    PyObject *launch = NULL, *transport = NULL;
    PyObject *timeout_o = NULL, *heap_o = NULL, *arena_o = NULL, *max_msg_o = NULL;
    const char *worker_path = NULL, *place = NULL, *cpus = NULL;
    unsigned long long timeout = 0, max_msg = 0, heap = 0, arena = 0;
    if (so->s != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "session already open");
        return -1;
    }
    /* The sizes as objects, range-checked here: PyArg's I and K formats
     * truncate without a word (test_safety.py's test_int_arguments_range). */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|i$OzOOOOOpzz", kwlist, &n, &groups, &launch,
                                     &worker_path, &transport, &timeout_o, &heap_o, &arena_o,
                                     &max_msg_o, &trace, &place, &cpus))
        return -1;
    if ((timeout_o != NULL && dp_uint_in(timeout_o, UINT32_MAX, "call_timeout_ms", &timeout) < 0) ||
        (heap_o != NULL && dp_uint_in(heap_o, UINT64_MAX, "heap_bytes", &heap) < 0) ||
        (arena_o != NULL && dp_uint_in(arena_o, UINT64_MAX, "device_arena_bytes", &arena) < 0) ||
        (max_msg_o != NULL && dp_uint_in(max_msg_o, UINT32_MAX, "max_msg", &max_msg) < 0))
        return -1;
    disco_session_config_t cfg = disco_session_config_default(n);
    int l = 0, t = 0;
    /* "thread": workers as threads of this process (ThreadedSession). */
    const char *ls =
        launch != NULL && PyUnicode_Check(launch) ? PyUnicode_AsUTF8AndSize(launch, NULL) : NULL;
    if (ls != NULL && strcmp(ls, "thread") == 0)
        l = 2;
    else if (parse_enum(launch, "launch", "fork", "spawn", &l) < 0 ||
             parse_enum(transport, "transport", "ring", "pipe", &t) < 0)
        return -1;
    cfg.num_groups = groups;
    cfg.launch = l == 2 ? DISCO_LAUNCH_THREAD : l ? DISCO_LAUNCH_SPAWN : DISCO_LAUNCH_FORK;
    cfg.transport = t ? DISCO_TRANSPORT_PIPE : DISCO_TRANSPORT_RING;
    cfg.worker_path = worker_path;
    cfg.call_timeout_ms = (uint32_t)timeout; /* in range: checked above */
    cfg.heap_bytes = heap;
    cfg.device_arena_bytes = arena;
    cfg.max_msg = (uint32_t)max_msg;
    cfg.trace_off = !trace;
    if (place != NULL && disco_place_policy_parse(place, &cfg.place.policy) != DISCO_OK) {
        dp_raise(DISCO_E_INVAL);
        return -1;
    }
    cfg.place.cpus = cpus;
    /* Forked workers start here, as os.fork starts a child: the at-fork
     * "before" hooks run and the import lock is taken first, the "parent"
     * hooks after; the GIL stays held throughout, so this thread's state
     * is current in each child, which runs the "child" hooks itself
     * (PyOS_AfterFork_Child) before its first Python function (_pyfunc.c). */
    disco_session_t *s;
    if (cfg.launch == DISCO_LAUNCH_FORK)
        PyOS_BeforeFork();
    disco_status_t st = disco_session_open(&cfg, &s);
    if (cfg.launch == DISCO_LAUNCH_FORK)
        PyOS_AfterFork_Parent();
    if (st != DISCO_OK) {
        dp_raise(st);
        return -1;
    }
    so->s = s;
    so->pid = dp_pid;
    so->num_workers = n;
    so->num_groups = groups;
    so->shut = false;
    so->forks = cfg.launch == DISCO_LAUNCH_FORK;
    return 0;
}

void dp_free_self(PyObject *self)
{
    PyTypeObject *t = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(t, Py_tp_free);
    f(self);
    Py_DECREF(t);
}

static void session_dealloc(SessionObject *so)
{
    if (so->s != NULL && so->pid == dp_pid) {
        /* No view is left (each holds the session); pending ones go first. */
        while (so->npviews > 0) {
            DLManagedTensor *v = so->pviews[--so->npviews];
            v->deleter(v);
        }
        disco_session_t *s = so->s;
        so->s = NULL;
        Py_BEGIN_ALLOW_THREADS disco_session_close(s);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(so->pending);
    PyMem_Free(so->pviews);
    dp_free_self((PyObject *)so);
}

static PyObject *session_shutdown(SessionObject *so, PyObject *unused)
{
    (void)unused;
    if (so->s == NULL || so->shut || so->pid != dp_pid)
        Py_RETURN_NONE;
    if (dp_lock(so) < 0)
        return NULL;
    /* Again under the lock: another thread may have shut it down while this
     * one waited (test_safety.py's test_shutdown_races). */
    if (so->shut) {
        dp_leave(so);
        Py_RETURN_NONE;
    }
    so->npending = 0; /* the registers go with the workers */
    so->deferred = DISCO_OK;
    so->shut = true;
    disco_session_t *s = so->s;
    Py_BEGIN_ALLOW_THREADS disco_session_shutdown(s);
    Py_END_ALLOW_THREADS dp_leave(so);
    Py_RETURN_NONE;
}

/* _recover(): disco_session_recover, its forks made as open's are (the GIL
 * held, the at-fork hooks run). The registers of every DRef go: their
 * frees are quiet from now on (session.py drops its cached functions). */
static PyObject *session_recover(SessionObject *so, PyObject *unused)
{
    (void)unused;
    if (dp_enter(so) < 0)
        return NULL;
    if (so->shut) {
        dp_leave(so);
        return dp_raise_msg(DISCO_E_SHUTDOWN, "session is shut down");
    }
    if (so->forks)
        PyOS_BeforeFork();
    disco_status_t st = disco_session_recover(so->s);
    if (so->forks)
        PyOS_AfterFork_Parent();
    dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

/* A sync of worker w, or of every worker when w is -1. */
static PyObject *sync_on(SessionObject *so, int w)
{
    if (dp_enter(so) < 0)
        return NULL;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st =
        w < 0 ? disco_session_sync_all(so->s) : disco_session_sync(so->s, w);
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *session_sync_worker(SessionObject *so, PyObject *arg)
{
    int w;
    if (dp_worker_id(so, arg, &w) < 0)
        return NULL;
    return sync_on(so, w);
}

static PyObject *session_sync_worker_0(SessionObject *so, PyObject *unused)
{
    (void)unused;
    return sync_on(so, 0);
}

static PyObject *session_sync_all(SessionObject *so, PyObject *unused)
{
    (void)unused;
    return sync_on(so, -1);
}

static PyObject *session_get_global_func(SessionObject *so, PyObject *name)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    if (n == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "get_global_func(name): name must be a str");
        return NULL;
    }
    if (dp_enter(so) < 0)
        return NULL;
    disco_dref_t f;
    disco_status_t st;
    /* Without the GIL: a full ring waits for worker threads of a threaded
     * session, which may be waiting for the GIL to run a Python function. */
    Py_BEGIN_ALLOW_THREADS st = disco_session_get_func(so->s, n, &f);
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return dp_dref_new(dp_Func_Type, so, f, name);
}

/* call_packed and call_sync_all: what names the method in messages. */
static PyObject *call_with(SessionObject *so, PyObject *const *args, Py_ssize_t n, bool sync_all,
                           const char *what)
{
    if (n < 1 || !PyObject_TypeCheck(args[0], dp_DRef_Type)) {
        PyErr_Format(PyExc_TypeError, "%s(func, *args): func must be a DPackedFunc", what);
        return NULL;
    }
    DRefObject *f = (DRefObject *)args[0];
    if (f->sess != so) {
        PyErr_Format(PyExc_ValueError, "%s: the function is another session's", what);
        return NULL;
    }
    return dp_call_as(so, f->reg, args + 1, n - 1, sync_all);
}

static PyObject *session_call_packed(SessionObject *so, PyObject *const *args, Py_ssize_t n)
{
    return call_with(so, args, n, false, "call_packed");
}

static PyObject *session_call_sync_all(SessionObject *so, PyObject *const *args, Py_ssize_t n)
{
    return call_with(so, args, n, true, "call_sync_all");
}

/* Reads of the C session's state (worker pids, health) that a thread
 * running a call, a shutdown or a recovery with the GIL released may write:
 * under the lock, or in the thread that holds it (a worker-0 function). */
static int peek_begin(SessionObject *so, bool *took)
{
    *took = false;
    if (so->busy && so->owner == PyThread_get_thread_ident())
        return 0;
    if (dp_lock(so) < 0)
        return -1;
    *took = true;
    return 0;
}

static PyObject *session_worker_pid(SessionObject *so, PyObject *arg)
{
    int w;
    bool took;
    if (so->pid != dp_pid)
        return dp_raise_msg(DISCO_E_INVAL, "a session of another process");
    if (dp_worker_id(so, arg, &w) < 0 || peek_begin(so, &took) < 0)
        return NULL;
    int pid = so->s != NULL ? disco_session_worker_pid(so->s, w) : -1;
    if (took)
        dp_leave(so);
    if (so->s == NULL)
        return dp_raise_msg(DISCO_E_SHUTDOWN, "session is closed");
    return PyLong_FromLong(pid);
}

/* _empty(shape, dtype, device, worker0_only, in_group) */
static PyObject *session_empty(SessionObject *so, PyObject *args)
{
    PyObject *shape_o, *dtype_o, *dev_o;
    int w0 = 0, in_group = 1;
    if (!PyArg_ParseTuple(args, "OOO|pp", &shape_o, &dtype_o, &dev_o, &w0, &in_group))
        return NULL;
    DLDataType dt;
    DLDevice dev;
    if (dp_to_dtype(dtype_o, &dt) < 0 || dp_to_device(dev_o, &dev) < 0)
        return NULL;
    Py_ssize_t nd = PySequence_Size(shape_o);
    if (nd < 0)
        return NULL;
    if (nd > DISCO_MAX_NDIM)
        return dp_raise_msg(DISCO_E_INVAL, "at most 8 dimensions");
    int64_t dims[DISCO_MAX_NDIM];
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *d = PySequence_GetItem(shape_o, i);
        dims[i] = d != NULL ? PyLong_AsLongLong(d) : -1;
        Py_XDECREF(d);
        if (dims[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (dp_enter(so) < 0)
        return NULL;
    disco_dref_t r;
    disco_status_t st;
    if (w0 && in_group && so->num_groups > 1) { /* each group's first worker */
        disco_value_t a[5] = {disco_value_shape(dims, (uint32_t)nd), disco_value_dtype(dt),
                              disco_value_device(dev), disco_value_bool(true),
                              disco_value_bool(true)};
        Py_BEGIN_ALLOW_THREADS st = disco_session_call_by_name(so->s, "disco.empty", a, 5, &r);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS st =
            disco_session_empty_device(so->s, dims, (int)nd, dt, dev, w0 != 0, &r);
        Py_END_ALLOW_THREADS
    }
    dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return dp_dref_new(dp_DRef_Type, so, r, NULL);
}

static int own_dref(SessionObject *so, PyObject *o, const char *what, DRefObject **out)
{
    if (!PyObject_TypeCheck(o, dp_DRef_Type)) {
        PyErr_Format(PyExc_TypeError, "%s must be a DRef", what);
        return -1;
    }
    if (((DRefObject *)o)->sess != so) {
        PyErr_Format(PyExc_ValueError, "%s is another session's DRef", what);
        return -1;
    }
    *out = (DRefObject *)o;
    return 0;
}

/* copy_to_worker_0(host_array, remote_array=None) */
static PyObject *session_copy_to_worker_0(SessionObject *so, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"host_array", "remote_array", NULL};
    PyObject *host_o, *remote_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &host_o, &remote_o))
        return NULL;
    DRefObject *remote = NULL;
    if (remote_o != Py_None && own_dref(so, remote_o, "remote_array", &remote) < 0)
        return NULL;
    dp_host_t h;
    if (dp_host_get(host_o, 0, &h) < 0)
        return NULL;
    if (dp_enter_host(so, &h) < 0) {
        dp_host_release(&h);
        return NULL;
    }
    disco_dref_t r = remote != NULL ? remote->reg : 0;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = remote != NULL ? disco_session_copy_into_worker0(so->s, &h.t, r)
                                               : disco_session_copy_to_worker0(so->s, &h.t, &r);
    Py_END_ALLOW_THREADS dp_leave(so);
    dp_host_release(&h);
    if (st != DISCO_OK)
        return dp_raise(st);
    if (remote != NULL) {
        Py_INCREF(remote_o);
        return remote_o;
    }
    return dp_dref_new(dp_DRef_Type, so, r, NULL);
}

/* copy_from_worker_0(host_array, remote_array) */
static PyObject *session_copy_from_worker_0(SessionObject *so, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"host_array", "remote_array", NULL};
    PyObject *host_o, *remote_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO", kwlist, &host_o, &remote_o))
        return NULL;
    DRefObject *remote;
    if (own_dref(so, remote_o, "remote_array", &remote) < 0)
        return NULL;
    dp_host_t h;
    if (dp_host_get(host_o, DP_HOST_WRITABLE, &h) < 0)
        return NULL;
    if (dp_enter_host(so, &h) < 0) {
        dp_host_release(&h);
        return NULL;
    }
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_session_copy_from_worker0(so->s, remote->reg, &h.t);
    Py_END_ALLOW_THREADS dp_leave(so);
    dp_host_release(&h);
    if (st != DISCO_OK)
        return dp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *session_alloc_reg(SessionObject *so, PyObject *unused)
{
    (void)unused;
    if (dp_enter(so) < 0)
        return NULL;
    disco_dref_t r;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_session_alloc_reg(so->s, &r); /* as get_func */
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return dp_dref_new(dp_DRef_Type, so, r, NULL);
}

/* The trace: the summary as disco_trace_summary_print's JSON (text), or
 * the Perfetto JSON written to a path. */
static PyObject *trace_op(SessionObject *so, const char *path)
{
    if (dp_enter(so) < 0)
        return NULL;
    disco_trace_t *t = NULL;
    disco_trace_summary_t *sum = NULL;
    char *buf = NULL;
    size_t len = 0;
    disco_status_t st;
    Py_BEGIN_ALLOW_THREADS st = disco_session_trace(so->s, &t);
    if (st == DISCO_OK && path != NULL) {
        FILE *f = fopen(path, "w");
        st = f == NULL ? disco_set_error(DISCO_E_SYS, "cannot write %s", path)
                       : disco_trace_write_json(t, f);
        if (f != NULL && fclose(f) != 0 && st == DISCO_OK)
            st = disco_set_error(DISCO_E_SYS, "cannot write %s", path);
    } else if (st == DISCO_OK && (st = disco_trace_summarize(t, &sum)) == DISCO_OK) {
        FILE *f = open_memstream(&buf, &len);
        st = f == NULL ? disco_set_error(DISCO_E_NOMEM, "trace summary")
                       : disco_trace_summary_print(sum, f, true);
        if (f != NULL)
            fclose(f);
    }
    disco_trace_summary_free(sum);
    disco_trace_free(t);
    Py_END_ALLOW_THREADS dp_leave(so);
    if (st != DISCO_OK) {
        free(buf);
        return dp_raise(st);
    }
    if (path != NULL)
        Py_RETURN_NONE;
    PyObject *r = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return r;
}

static PyObject *session_trace_json(SessionObject *so, PyObject *unused)
{
    (void)unused;
    return trace_op(so, NULL);
}

static PyObject *session_write_trace(SessionObject *so, PyObject *path)
{
    PyObject *b;
    if (!PyUnicode_FSConverter(path, &b))
        return NULL;
    PyObject *r = trace_op(so, PyBytes_AsString(b));
    Py_DECREF(b);
    return r;
}

static PyObject *session_heap_stats(SessionObject *so, PyObject *unused)
{
    (void)unused;
    if (dp_enter(so) < 0)
        return NULL;
    disco_heap_stats_t hs;
    disco_status_t st = disco_session_heap_stats(so->s, &hs);
    dp_leave(so);
    if (st != DISCO_OK)
        return dp_raise(st);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "live_blocks", (unsigned long long)hs.live_blocks,
        "free_blocks", (unsigned long long)hs.free_blocks, "used_bytes",
        (unsigned long long)hs.used_bytes, "free_bytes", (unsigned long long)hs.free_bytes,
        "largest_free", (unsigned long long)hs.largest_free, "capacity",
        (unsigned long long)hs.capacity, "recoveries", (unsigned long long)hs.recoveries,
        "backed_bytes", (unsigned long long)hs.backed_bytes);
}

static PyObject *session_health(SessionObject *so, PyObject *unused)
{
    (void)unused;
    bool took = false;
    if (so->s != NULL && so->pid == dp_pid && peek_begin(so, &took) < 0)
        return NULL;
    disco_status_t st =
        so->s == NULL || so->pid != dp_pid ? DISCO_E_SHUTDOWN : disco_session_health(so->s);
    if (took)
        dp_leave(so);
    return Py_BuildValue("(is)", (int)st, disco_err_name(st));
}

static PyObject *get_num_workers(SessionObject *so, void *unused)
{
    (void)unused;
    return PyLong_FromLong(so->num_workers);
}

static PyObject *get_num_groups(SessionObject *so, void *unused)
{
    (void)unused;
    return PyLong_FromLong(so->num_groups);
}

static PyObject *get_is_shutdown(SessionObject *so, void *unused)
{
    (void)unused;
    return PyBool_FromLong(so->s == NULL || so->shut);
}

static PyMethodDef session_methods[] = {
    {"shutdown", (PyCFunction)session_shutdown, METH_NOARGS,
     "shutdown()\n--\n\nShuts the workers down (asks, then kills stragglers after a grace period)\n"
     "and reaps them. Harmless twice. Later calls raise SessionShutdownError. Views of\n"
     "the shared heap (Tensors, arrays made from them) stay readable until they go."},
    {"sync_worker", (PyCFunction)session_sync_worker, METH_O,
     "sync_worker(worker_id)\n--\n\nWaits until worker worker_id has run every command sent "
     "before;\nraises the error any worker reported since the last report (RemoteError\n"
     "naming the worker, the function and the message), WorkerDiedError, DeadlineError."},
    {"_sync_worker", (PyCFunction)session_sync_worker, METH_O, "TVM's name of sync_worker."},
    {"sync_worker_0", (PyCFunction)session_sync_worker_0, METH_NOARGS,
     "sync_worker_0()\n--\n\nsync_worker(0)."},
    {"sync_all", (PyCFunction)session_sync_all, METH_NOARGS,
     "sync_all()\n--\n\nWaits until every worker has run every command sent before, with one\n"
     "command they all answer; raises as sync_worker."},
    {"get_global_func", (PyCFunction)session_get_global_func, METH_O,
     "get_global_func(name)\n--\n\nLooks a function up by name on every worker: a DPackedFunc "
     "(a DRef\nholding it; call it to run it on every worker). Raises NoFunctionError when\n"
     "worker 0 does not know it (another worker that lacks it reports at the next sync)."},
    {"call_packed", (PyCFunction)(void (*)(void))session_call_packed, METH_FASTCALL,
     "call_packed(func, *args)\n--\n\nCalls func (a DPackedFunc) on every worker with args and "
     "returns the\nresult register at once, as a DRef. args: int, float, bool, str, bytes,\n"
     "None, shapes (tuples or lists of ints), dtypes (DataType, numpy or torch dtypes;\n"
     "\"float32\" strings where the function's signature wants one), devices, DRefs."},
    {"call_sync_all", (PyCFunction)(void (*)(void))session_call_sync_all, METH_FASTCALL,
     "call_sync_all(func, *args)\n--\n\nOne SPMD step: call_packed(func, *args), then sync_all(), "
     "sent as one\ncommand that every worker answers once it ran the call. Returns the\nresult's "
     "DRef when every worker is done; raises as sync_all does (the\nresult is then freed)."},
    {"_recover", (PyCFunction)session_recover, METH_NOARGS, NULL},
    {"worker_pid", (PyCFunction)session_worker_pid, METH_O,
     "worker_pid(worker_id)\n--\n\nProcess id of a worker (this process for worker 0)."},
    {"_empty", (PyCFunction)session_empty, METH_VARARGS, NULL},
    {"copy_to_worker_0", (PyCFunction)(void (*)(void))session_copy_to_worker_0,
     METH_VARARGS | METH_KEYWORDS,
     "copy_to_worker_0(host_array, remote_array=None)\n--\n\nCopies a host array (anything with "
     "__dlpack__ or the buffer protocol,\ncompact) into worker 0: into remote_array (a DRef of a "
     "tensor of the same\nshape and dtype), or into a new register (null on the other workers).\n"
     "Returns the DRef. The host array may be reused when this returns."},
    {"copy_from_worker_0", (PyCFunction)(void (*)(void))session_copy_from_worker_0,
     METH_VARARGS | METH_KEYWORDS,
     "copy_from_worker_0(host_array, remote_array)\n--\n\nCopies worker 0's tensor in "
     "remote_array into host_array (writable, same\nshape and dtype). No sync is needed first: "
     "worker 0 runs every command\nbefore the call that sent it returns."},
    {"_alloc_reg", (PyCFunction)session_alloc_reg, METH_NOARGS, NULL},
    {"_trace_json", (PyCFunction)session_trace_json, METH_NOARGS, NULL},
    {"write_trace", (PyCFunction)session_write_trace, METH_O,
     "write_trace(path)\n--\n\nWrites the trace so far (the last 8192 commands per worker) as "
     "Chrome\nTrace Event JSON, which Perfetto (ui.perfetto.dev) opens."},
    {"heap_stats", (PyCFunction)session_heap_stats, METH_NOARGS,
     "heap_stats()\n--\n\nThe shared heap: live blocks, used and free bytes, capacity, "
     "recoveries, and the bytes of its memory backed so far (backed_bytes)."},
    {"health", (PyCFunction)session_health, METH_NOARGS,
     "health()\n--\n\n(code, name): (0, 'DISCO_OK') while usable, else what broke or ended it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
    {"num_workers", (getter)get_num_workers, NULL, "Number of workers, worker 0 included.", NULL},
    {"num_groups", (getter)get_num_groups, NULL, "Worker groups (in-group collectives).", NULL},
    {"is_shutdown", (getter)get_is_shutdown, NULL, "Whether shutdown() has run.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_doc, "A disco session (the C part of ProcessSession; subclasses add __dict__ and\n"
                "__weakref__)."},
    {Py_tp_methods, session_methods},
    {Py_tp_getset, session_getset},
    {Py_tp_init, session_init},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL},
};

PyType_Spec dp_session_spec = {
    .name = "disco._core.Session",
    .basicsize = sizeof(SessionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = session_slots,
};
