"""disco.session - the Disco session, as TVM Disco's Python session.

The hot calls (a DPackedFunc's ``__call__``, ``call_packed``, ``sync_worker``,
the copies, DRef's debug calls) are in the C extension (``disco._core``);
this module adds what TVM's ``session.py`` does in Python: the collectives
with their destinations, ``empty``, ``load_library`` (TVM's
``load_vm_module``), the trace as Python data, and the context manager.
"""

import atexit
import contextlib
import json
import operator
import os
import sys
import weakref

from . import _core
from ._types import DataType, Device
from .errors import DiscoError, error_class

_E_INVAL = -1
_E_UNSUPPORTED = -31
InvalidArgumentError = error_class(_E_INVAL)
UnsupportedError = error_class(_E_UNSUPPORTED)

# init_ccl's names: the host's (disco's own collectives through the shared
# heap) and the GPUs' (disco's own device collectives; NCCL is not used).
CCL_CPU = ("cpu", "cpuccl", "disco", "shm")
CCL_DEVICE = {"nccl": 2, "cuda": 2, "sim": 12}

__all__ = ["Session", "ProcessSession", "ThreadedSession", "DRef", "DPackedFunc", "DModule",
           "Tensor", "register_func", "get_global_func", "REDUCE_OPS"]

DRef = _core.DRef
DPackedFunc = _core.DPackedFunc
Tensor = _core.Tensor

REDUCE_OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
"""The reduce operations of allreduce (TVM's numbering)."""

_live = weakref.WeakSet()


@atexit.register
def _shutdown_all():
    for sess in list(_live):
        try:
            sess.shutdown()
        except Exception:  # pylint: disable=broad-except
            pass


@contextlib.contextmanager
def _environ(env):
    """os.environ with env's variables set, as it was afterwards (spawned
    workers inherit the environment of the call that starts them)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class DModule:
    """What :meth:`Session.load_library` returns: ``mod["name"]`` is the
    function ``name`` (a DPackedFunc), as TVM's DModule. Functions are
    global in disco: every function a library registers is also
    ``sess.get_global_func(name)``."""

    def __init__(self, session, path):
        self.session = session
        self.path = path

    def __getitem__(self, name):
        return self.session.get_global_func(name)

    def get_function(self, name):
        """``mod[name]``."""
        return self.session.get_global_func(name)

    def __repr__(self):
        return f"<disco.DModule {self.path}>"


class Session(_core.Session):
    """A Disco session: one controller (this process, which is worker 0) and
    workers 1..N-1, all running every command in the same order (SPMD).

    Calls return at once with a :class:`DRef` (a register that exists on
    every worker); :meth:`sync_worker` waits for a worker and raises the
    errors any worker reported (a :class:`disco.RemoteError` naming the
    worker, the function and the message). A worker that dies raises
    :class:`disco.WorkerDiedError` from the next call that meets it (within
    about 5 ms of a wait), never a hang; the session is then broken and
    later calls raise :class:`disco.SessionBrokenError`.

    Use :class:`ProcessSession` to open one. A session is used by one
    thread at a time (others wait for it); the methods that may block
    release the GIL.
    """

    def _get_cached_method(self, name):
        cache = self.__dict__.setdefault("_cache", {})
        func = cache.get(name)
        if func is None:
            func = cache[name] = self.get_global_func(name)
        return func

    # ---- tensors ----

    def empty(self, shape, dtype, device=None, worker0_only=False, in_group=True):
        """A new tensor on every worker (contents unspecified), as a DRef.

        shape: a sequence of ints; dtype: "float32", a DataType, a numpy or
        torch dtype; device: None (the shared heap, cpu), disco.cpu(),
        disco.cuda(i) or disco.sim(i) (each worker uses its own device of
        that type: worker i -> device i mod count). worker0_only: only on
        worker 0 (null elsewhere), or with in_group and several groups, on
        each group's first worker.
        """
        if device is None:  # init_ccl's device, else the shared heap
            device = self.__dict__.get("_ccl_device")
        return self._empty(tuple(shape), dtype, device, bool(worker0_only), bool(in_group))

    def init_ccl(self, ccl, *device_ids):
        """Chooses the collectives and each worker's default device, as
        TVM's ``init_ccl``: ``device_ids[i]`` is worker i's device, which
        :meth:`empty` then uses when given no device.

        ccl: "cpu", "cpuccl", "disco" or "shm" (host tensors in the shared
        heap; the ids name host devices and are only checked) or "nccl",
        "cuda" (CUDA GPUs), "sim" (the simulated GPU). Every name maps to
        disco's own collectives: NCCL is never used. disco gives worker i
        device i mod (number of devices): an id that differs is refused
        (InvalidArgumentError), never silently replaced. One id per
        worker, each an int >= 0. "rccl" (ROCm) raises UnsupportedError, as
        does a GPU name in a :class:`ThreadedSession`.
        """
        if not isinstance(ccl, str):
            raise TypeError(f"init_ccl: ccl must be a str, not {type(ccl).__name__}")
        name = ccl.lower()
        if name not in CCL_CPU and name not in CCL_DEVICE:
            if name == "rccl":
                raise UnsupportedError("init_ccl: rccl (ROCm GPUs) is not supported by disco",
                                       _E_UNSUPPORTED)
            raise InvalidArgumentError(
                f"init_ccl: unknown ccl {ccl!r}: disco accepts "
                f"{', '.join(CCL_CPU + tuple(CCL_DEVICE))}", _E_INVAL)
        if len(device_ids) != self.num_workers:
            raise InvalidArgumentError(
                f"init_ccl: {len(device_ids)} device ids for {self.num_workers} workers "
                "(one per worker)", _E_INVAL)
        ids = []
        for i, dev in enumerate(device_ids):
            dev = operator.index(dev)
            if dev < 0:
                raise InvalidArgumentError(f"init_ccl: device id {dev} of worker {i} is "
                                           "negative", _E_INVAL)
            ids.append(dev)
        if name in CCL_CPU:
            self._ccl_device = None
            self._ccl = name
            return
        if isinstance(self, ThreadedSession):
            raise UnsupportedError(f"init_ccl({ccl!r}): device tensors are not supported in "
                                   "a ThreadedSession (use a ProcessSession)", _E_UNSUPPORTED)
        dev_type = CCL_DEVICE[name]
        count = _core._device_count(dev_type)
        for i, dev in enumerate(ids):
            if dev != i % count:
                raise InvalidArgumentError(
                    f"init_ccl: worker {i} would get {name} device {dev}, but disco puts "
                    f"worker i on device i mod {count} (device {i % count})", _E_INVAL)
        self._ccl_device = Device(dev_type, 0)
        self._ccl = name

    def broadcast(self, src, dst=None, in_group=True):
        """Copies src (a host array; or a DRef on worker 0) to every worker.

        Into dst (a DRef of a tensor of src's dtype and element count on
        every worker) when given, else into a new tensor on each worker.
        Returns the destination's DRef. From a host array the bytes go
        straight into worker 0's dst, and from there into every other
        worker's dst: no tensor is made on the way (without groups).
        """
        if isinstance(src, DRef):
            return self.broadcast_from_worker0(src, dst, in_group)
        if dst is None:
            dst = self.empty(src.shape, _dtype_of(src))
        if in_group and self.num_groups > 1:  # each group's first worker needs src
            src_ref = self.copy_to_worker_0(src)
        else:
            src_ref = self.copy_to_worker_0(src, dst)
        self._get_cached_method("disco.broadcast_from_worker0_into")(src_ref, dst,
                                                                     bool(in_group))
        return dst

    def broadcast_from_worker0(self, src, dst=None, in_group=True):
        """Worker 0's tensor src (a DRef) into dst on every worker (TVM's
        in-place form: the builtin disco.broadcast_from_worker0_into writes
        dst directly; worker 0's dst may be src). Without dst it returns the
        broadcast by reference (O(1) in the size: every worker's register
        shares worker 0's bytes; treat it as read-only), a disco
        extension."""
        if dst is None:
            return self._get_cached_method("disco.broadcast_from_worker0")(src, bool(in_group))
        self._get_cached_method("disco.broadcast_from_worker0_into")(src, dst, bool(in_group))
        return dst

    def scatter(self, src, dst=None, in_group=True):
        """Splits src (a host array whose dimension 0 is the number of
        workers, or of a group's workers with in_group and groups) along
        dimension 0: worker i gets src[i], into dst (a DRef of shape
        src.shape[1:]) or into a new tensor. Returns the destination."""
        size = self.num_workers // self.num_groups if in_group else self.num_workers
        if not isinstance(src, DRef) and src.shape[0] != size:
            raise ValueError(f"scatter: dimension 0 of src is {src.shape[0]}, "
                             f"not the number of workers ({size})")
        src_ref = src if isinstance(src, DRef) else self.copy_to_worker_0(src)
        if dst is None and not isinstance(src, DRef):
            dst = self.empty(tuple(src.shape[1:]), _dtype_of(src))
        return self.scatter_from_worker0(src_ref, dst, in_group)

    def scatter_from_worker0(self, from_array, to_array=None, in_group=True):
        """Worker 0's tensor split by element count, as TVM: piece i (the
        i-th run of numel / n elements) into to_array on worker i, which
        needs that many elements, in any shape (TVM's in-place form: a
        (3,4,3) tensor scatters into two (3,3,2) ones; the builtin
        disco.scatter_from_worker0_into writes to_array directly). Without
        to_array: the pieces by reference (each worker's register views
        worker 0's bytes), shaped as rows when dimension 0 divides by n,
        else flat."""
        if to_array is None:
            return self._get_cached_method("disco.scatter_from_worker0")(from_array,
                                                                         bool(in_group))
        self._get_cached_method("disco.scatter_from_worker0_into")(from_array, to_array,
                                                                   bool(in_group))
        return to_array

    def gather_to_worker0(self, from_array, to_array=None, in_group=True):
        """Every worker's from_array stacked along dimension 0 into
        to_array on worker 0 (each group's first worker with in_group;
        disco.gather_to_worker0_into writes it directly, and to_array may
        be null on the others); without to_array, a new tensor there (null
        elsewhere)."""
        if to_array is None:
            return self._get_cached_method("disco.gather_to_worker0")(from_array, bool(in_group))
        self._get_cached_method("disco.gather_to_worker0_into")(from_array, to_array,
                                                                bool(in_group))
        return to_array

    def allreduce(self, src, dst=None, op="sum", in_group=True):
        """op ("sum", "prod", "min", "max", "avg") over every worker's src,
        into dst on every worker (written directly by
        disco.allreduce_into; dst may be src: in place), or without dst
        into a new tensor. Returns the destination."""
        if op not in REDUCE_OPS:
            raise ValueError(f"Unsupported reduce op: {op}. Available ops are: "
                             f"{REDUCE_OPS.keys()}")
        if dst is None:
            return self._get_cached_method("disco.allreduce")(src, op, bool(in_group))
        self._get_cached_method("disco.allreduce_into")(src, dst, op, bool(in_group))
        return dst

    def allgather(self, src, dst=None, in_group=True):
        """Every worker's src stacked along dimension 0, into dst on every
        worker (written directly by disco.allgather_into), or without dst
        into a new tensor. Returns the destination."""
        if dst is None:
            return self._get_cached_method("disco.allgather")(src, bool(in_group))
        self._get_cached_method("disco.allgather_into")(src, dst, bool(in_group))
        return dst

    def send_recv(self, src, src_worker, dst_worker):
        """Worker dst_worker gets worker src_worker's tensor src (by
        reference); the others get null. Returns the result's DRef. Worker
        ids are checked here, whole: the builtin narrows them to C ints."""
        ids = []
        for name, worker in (("src_worker", src_worker), ("dst_worker", dst_worker)):
            worker = operator.index(worker)
            if not 0 <= worker < self.num_workers:
                raise InvalidArgumentError(
                    f"send_recv: {name} {worker} is no worker of a session of "
                    f"{self.num_workers}", _E_INVAL)
            ids.append(worker)
        return self._get_cached_method("disco.send_recv")(src, ids[0], ids[1])

    # ---- code ----

    def load_library(self, path, device=None):
        """Loads a shared library into every worker; its DISCO_FUNC
        functions register themselves (TVM: load_vm_module). Waits for
        every worker and raises LibraryError naming the worker that could
        not load it. Returns a DModule (``mod["fn"]``). device is accepted
        for TVM's signature and not used."""
        del device
        path = os.fspath(path)
        self._get_cached_method("disco.load_library")(path)
        for worker in range(self.num_workers):
            self.sync_worker(worker)
        return DModule(self, path)

    def import_python_module(self, module_name):
        """Imports a Python module on every worker (TVM's
        import_python_module): a spawned worker then has the functions the
        module registers."""
        self._get_cached_method("disco._import_python_module")(module_name)
        for worker in range(self.num_workers):
            self.sync_worker(worker)
        imported = self.__dict__.setdefault("_imported", [])
        if module_name not in imported:
            imported.append(module_name)

    def _sync_all(self):
        """TVM's name of :meth:`sync_all`: waits for every worker."""
        self.sync_all()

    # ---- failures ----

    def recover(self):
        """Brings a broken session back without closing it (after a worker
        died, or was killed at a deadline): every worker 1..N-1 is killed
        and started again as at open, the libraries loaded with
        :meth:`load_library` are loaded again on every worker, and so are
        the modules of :meth:`import_python_module`. Every DRef made before
        is lost: using it raises :class:`disco.BadRegisterError` saying it
        "was lost in a recovery" (get functions again); collecting it is
        quiet. Views of tensors (``di.Tensor``, arrays from them) keep their
        bytes. A healthy session is reset the same way. Raises
        SessionShutdownError after :meth:`shutdown`; another error when the
        recovery failed (the session stays broken and recover may be tried
        again)."""
        with _environ(self.__dict__.get("_spawn_env", {})):
            self.__dict__.pop("_cache", None)  # functions of the old run: lost
            self._recover()
        for module_name in list(self.__dict__.get("_imported", ())):
            self.import_python_module(module_name)

    # ---- profiling ----

    def trace(self):
        """The trace summary as plain Python data (the JSON of ``disco trace
        --json``): per worker busy % and queue delay p50/p99, per function
        count and time, the worst straggler step. Needs tracing on (the
        default)."""
        return json.loads(self._trace_json())

    # ---- lifetime ----

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False

    def __repr__(self):
        state = "shut down" if self.is_shutdown else f"{self.num_workers} workers"
        return f"<disco.{type(self).__name__} {state}>"


class ProcessSession(Session):
    """A session of forked (or spawned) worker processes on this machine.

    ``ProcessSession(num_workers, num_groups=1)`` as in TVM, plus keyword
    options: launch ("fork", the default, or "spawn"), imports (modules a
    spawned worker imports), worker_path, call_timeout_ms (each wait's
    deadline; 0: 60 s), heap_bytes (the shared tensor heap; 0: half the
    machine's memory, reserved and backed as tensors use it),
    device_arena_bytes, max_msg, transport ("ring" or "pipe"), trace
    (command stamps, on by default), place (a placement policy: "spread",
    "compact", "gpu", "list", "none") and cpus (for "list").

    Forked workers are copies of this process at the time of the call:
    they have every module it imported and every function registered
    with :func:`disco.register_func` so far (functions registered later do
    not exist in them), and run Python functions in their own interpreter.
    Open sessions before starting threads or initializing CUDA here, as
    with any fork. Spawned workers (launch="spawn") are fresh Python
    processes (``disco-py-worker``, this interpreter) that import disco,
    then each module in imports, and have only what those register; with
    worker_path they run that program instead (the C ``disco-worker``:
    ``disco.worker_program()``), which has only builtins and libraries.

    Also a context manager: ``with disco.ProcessSession(2) as sess:`` shuts
    the workers down at the end.
    """

    def __init__(self, num_workers, num_groups=1, entrypoint=None, *, launch="fork",
                 imports=(), worker_path=None, build_ring=True, **options):
        del build_ring  # TVM's option: disco's collectives need no ring set up
        if entrypoint is not None and entrypoint != "tvm.exec.disco_worker":
            imports = tuple(imports) + (entrypoint,)
        env = {}
        if launch == "spawn" and worker_path is None:
            worker_path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "disco-py-worker")
            env = {"DISCO_PYTHON": sys.executable,
                   "DISCO_PY_IMPORTS": ",".join(imports),
                   "DISCO_PY_PATH": os.pathsep.join(p for p in sys.path if p)}
        with _environ(env):
            super().__init__(num_workers, num_groups, launch=launch, worker_path=worker_path,
                             **options)
        self._spawn_env = env  # a recovery spawns the workers again
        _live.add(self)


class ThreadedSession(Session):
    """A session whose workers 1..N-1 are threads of this process (TVM's
    ThreadedSession), for debugging and single-process use.

    ``ThreadedSession(num_workers, num_groups=1)`` and the keyword options
    of :class:`ProcessSession` but launch. The same calls, errors and
    collectives as a ProcessSession; Python worker functions run on the
    worker threads (each takes the GIL for its call, so they run one at a
    time), and every function registered in this process exists on every
    worker, even one registered after the session opened. What differs:
    device tensors are refused (UnsupportedError); a worker function that
    crashes the process takes everything down; one that hangs ends the
    call at its deadline (DeadlineError), but its thread cannot be killed:
    a C function is cancelled at its next cancellation point (sleep, read,
    poll), a Python function keeps running and the session's memory is
    kept until the process exits. A worker function must not use its own
    session. ``worker_pid(i)`` is this process's pid for every worker.
    """

    def __init__(self, num_workers, num_groups=1, *, build_ring=True, **options):
        del build_ring  # TVM's option: disco's collectives need no ring set up
        super().__init__(num_workers, num_groups, launch="thread", **options)
        _live.add(self)


def _dtype_of(array):
    return DataType(array.dtype)


_registered = {}


def register_func(func_name, f=None, override=False, sig=None):
    """Registers a Python function that workers run, by name (TVM's
    register_func)::

        @disco.register_func("my.scale")
        def scale(x, k):
            a = numpy.from_dlpack(x)   # x: a disco.Tensor, valid during the call
            a *= k                     # in place, in the shared heap

    A session's ``get_global_func("my.scale")`` then finds it on worker 0
    (this process) and on forked workers opened afterwards. Arguments
    arrive as Python values (tensors as :class:`disco.Tensor`, usable with
    numpy.from_dlpack / torch.from_dlpack during the call only); the result
    may be None, a bool, int, float, str, bytes, a shape (tuple of ints), a
    DataType, a Device, one of the tensor arguments, or an array (anything
    with __dlpack__ or the buffer protocol), which is copied into a new
    tensor of the shared heap. An exception fails the call on that worker:
    the next sync raises RemoteError "worker 1: my.scale: ValueError:
    message (file.py:12 in scale)", and the session goes on.

    sig (optional): a disco signature string (disco/func.h: "iS" for an int
    and a shape...), checked before each call. override: replace an earlier
    Python registration of the name (else ValueError). Usable as
    ``@register_func`` (the function's name) or ``register_func(name, f)``.
    """
    if callable(func_name) and f is None:
        f, func_name = func_name, func_name.__name__

    def register(fn):
        if func_name in _registered and not override:
            raise ValueError(f"register_func: {func_name} is already registered "
                             "(override=True replaces it)")
        _core.register_func(func_name, fn, sig)
        _registered[func_name] = fn
        return fn

    return register(f) if f is not None else register


@register_func("disco._import_python_module")
def _import_python_module(module_name):
    __import__(module_name)


# TVM's name of it (the C builtins' TVM names are in workers/data/tvm_names.c).
register_func("runtime.disco._import_python_module", _import_python_module)

_local = None


def get_global_func(name, allow_missing=False):
    """A function registered in this process, callable here (TVM's
    ``tvm.get_global_func``): a Python function of :func:`register_func` as
    it is, else a C function (a builtin, or one of a library this process
    loaded) run in this process through ``disco.rpc.local()``; builtins
    that need a session worker (the collectives, ``disco.empty``) refuse
    to run there and are for ``Session.get_global_func``. Without such a
    function: None with allow_missing, else ValueError."""
    fn = _registered.get(name)
    if fn is not None:
        return fn
    global _local  # pylint: disable=global-statement
    if _local is None:
        from . import rpc  # pylint: disable=import-outside-toplevel
        _local = rpc.local()
    try:
        return _local.get_function(name)
    except DiscoError as e:
        if allow_missing:
            return None
        raise ValueError(f"Cannot find global function {name}") from e


def worker_program():
    """The path of the C worker program (``disco-worker``) beside the
    libdisco.so in use (for ``ProcessSession(launch="spawn",
    worker_path=...)``), or None."""
    lib = _core.library_path()
    if lib is None:
        return None
    libdir = os.path.dirname(os.path.realpath(lib))
    for cand in (os.path.join(libdir, "bin", "disco-worker"),
                 os.path.join(os.path.dirname(libdir), "bin", "disco-worker")):
        if os.access(cand, os.X_OK):
            return cand
    return None
