"""disco.comm at its edges (docs/python-safety.md, "disco.comm"): what the
worker-side collectives and point-to-point do with a caller's mistakes.
Every misuse is an exception that names the function and the argument
(TypeError, ValueError, BufferError or disco's class), nothing is written,
nothing leaks, and a call that failed on its own arguments still takes its
place in the command's order, so the other members fail in the same
collective instead of pairing with the failing member's next one.

The worker functions are registered here (fork sessions see them; worker 0
is this process). Each probe runs a named case on every worker and returns
"OK ..." or "<class>: <message>", so one session checks many cases."""

import sys
import threading

import numpy as np
import pytest

import comm_funcs
import disco
from conftest import CODE, error_class, open_session
from disco import comm

INVAL = error_class(CODE["E_INVAL"])
MISMATCH = error_class(CODE["E_MISMATCH"])


def _ro(a):
    a.setflags(write=False)
    return a


class _RaisingDLPack:
    def __dlpack__(self, stream=None):
        raise RuntimeError("no export today")

    def __dlpack_device__(self):
        return (1, 0)


class _JunkDLPack:
    def __dlpack__(self, stream=None):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


class _UsedCapsule:
    """Hands out a capsule a consumer already took."""

    def __init__(self):
        self.a = np.ones(4, "float32")

    def __dlpack__(self, stream=None):
        import ctypes
        cap = self.a.__dlpack__()
        set_name = ctypes.pythonapi.PyCapsule_SetName
        set_name.argtypes = (ctypes.py_object, ctypes.c_char_p)
        set_name(cap, b"used_dltensor")  # what a consumer does when it takes it
        self.keep = cap
        return cap

    def __dlpack_device__(self):
        return (1, 0)


class _LyingDevice:
    """Says sim, exports CPU memory."""

    def __init__(self):
        self.a = np.ones(4, "float32")

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (12, 0)


def f32(n=4, v=1.0):
    return np.full(n, v, "float32")


def _pair(bad, worker1_sends):
    """Worker 0 runs bad; worker 1 the good send (receive) that meets it."""
    if comm.rank() == 0:
        return bad()
    return comm.send(f32(), 0) if worker1_sends else comm.recv(f32(), 0)


def _torch():
    import torch
    return torch


# name -> (function run on every worker, what every worker must get: an
# exception class and words its message holds, or "OK").
CASES = {
    # tensors that are not tensors
    "src_none": (lambda: comm.allreduce(None), (TypeError, "allreduce: src")),
    "src_list": (lambda: comm.allreduce([1.0, 2.0]), (TypeError, "allreduce: src")),
    "src_int": (lambda: comm.allreduce(3), (TypeError, "allreduce: src")),
    "src_str": (lambda: comm.allreduce("abc"), (TypeError, "allreduce: src")),
    "dst_obj": (lambda: comm.allreduce(f32(), object()), (TypeError, "allreduce: dst")),
    "buf_bytes": (lambda: comm.broadcast(b"abcd"),
                  (BufferError, "broadcast: buf: the array is read-only")),
    # a failed send or receive still meets its peer's call (worker 1's,
    # good), which fails quoting it: the third entry is worker 1's
    "recv_bytes": (lambda: _pair(lambda: comm.recv(b"abcd", 1), True),
                   (BufferError, "recv: t: the array is read-only"),
                   (INVAL, "disco_ctx_send: worker 0 refused the tensor of worker 1: "
                           "BufferError: disco.comm.recv: t: the array is read-only")),
    "send_strided_view": (lambda: _pair(lambda: comm.send(memoryview(b"abcdefgh")[::2], 1),
                                        False),
                          (ValueError, "send: t: a host array must be C-contiguous"),
                          (INVAL, "disco_ctx_recv: worker 0 failed its send to worker 1: "
                                  "ValueError: disco.comm.send: t: a host array must be "
                                  "C-contiguous")),
    "dlpack_raises": (lambda: comm.allreduce(_RaisingDLPack()),
                      (RuntimeError, "allreduce: src: no export today")),
    "dlpack_junk": (lambda: comm.allgather(f32(), _JunkDLPack()),
                    (TypeError, "allgather: dst: __dlpack__() must return")),
    "dlpack_used": (lambda: comm.allreduce(_UsedCapsule()), (ValueError, "already consumed")),
    "dlpack_lies": (lambda: comm.allreduce(_LyingDevice()), (ValueError, "__dlpack_device__")),
    # NumPy arrays disco refuses
    "readonly_dst": (lambda: comm.allreduce(f32(), _ro(f32())),
                     (BufferError, "allreduce: dst: the array is read-only")),
    "readonly_inplace": (lambda: comm.allreduce(_ro(f32())),
                         (BufferError, "allreduce: src: the array is read-only")),
    "readonly_buf": (lambda: comm.broadcast(_ro(f32())),
                     (BufferError, "broadcast: buf: the array is read-only")),
    "readonly_recv": (lambda: _pair(lambda: comm.recv(_ro(f32()), 1), True),
                      (BufferError, "recv: t: the array is read-only"),
                      (INVAL, "worker 0 refused the tensor of worker 1: BufferError: "
                              "disco.comm.recv: t: the array is read-only")),
    "noncontig": (lambda: comm.allreduce(f32(8)[::2]), (INVAL, "allreduce: src")),
    "byteswapped": (lambda: comm.allreduce(np.ones(4, ">f4")), (BufferError, "allreduce: src")),
    "object_dtype": (lambda: comm.allreduce(np.array([1, None], object)),
                     (BufferError, "allreduce: src")),
    "complex": (lambda: comm.allreduce(np.ones(4, "complex64")),
                (error_class(CODE["E_BAD_TYPE"]), "allreduce: src")),
    # torch tensors disco refuses (torch's own words, named)
    "torch_noncontig": (lambda: comm.allreduce(_torch().ones(8)[::2]), (INVAL, "allreduce: src")),
    "torch_grad": (lambda: comm.allreduce(_torch().ones(4, requires_grad=True)),
                   (RuntimeError, "allreduce: src")),
    "torch_meta": (lambda: comm.allreduce(_torch().ones(4, device="meta")),
                   (ValueError, "allreduce: src")),
    # op
    "op_unknown": (lambda: comm.allreduce(f32(), op="mean"), (INVAL, "allreduce: op")),
    "op_none": (lambda: comm.allreduce(f32(), op=None), (TypeError, "allreduce: op")),
    "op_list": (lambda: comm.allreduce(f32(), op=["sum"]), (TypeError, "allreduce: op")),
    # integers: refused whole, never narrowed or truncated
    "root_float": (lambda: comm.broadcast(f32(), root=1.5), (TypeError, "broadcast: root")),
    "root_str": (lambda: comm.broadcast(f32(), root="1"), (TypeError, "broadcast: root")),
    "root_bool": (lambda: comm.broadcast(f32(), root=True), (TypeError, "broadcast: root")),
    "root_none": (lambda: comm.broadcast(f32(), root=None), (TypeError, "broadcast: root")),
    "root_huge": (lambda: comm.broadcast(f32(), root=2**64), (INVAL, "root")),
    "root_neg": (lambda: comm.broadcast(f32(), root=-1), (INVAL, "root -1")),
    "root_out": (lambda: comm.broadcast(f32(), root=7), (INVAL, "root 7")),
    "to_float": (lambda: comm.send(f32(), 0.5), (TypeError, "send: to")),
    "to_str": (lambda: comm.send(f32(), "1"), (TypeError, "send: to")),
    "to_bool": (lambda: comm.send(f32(), True), (TypeError, "send: to")),
    "to_none": (lambda: comm.send(f32(), None), (TypeError, "send: to")),
    "to_huge": (lambda: comm.send(f32(), 2**64), (INVAL, "send: to")),
    "to_neg": (lambda: comm.send(f32(), -1), (INVAL, "send: to")),
    "to_self": (lambda: comm.send(f32(), comm.rank()), (INVAL, "this is worker")),
    "to_out": (lambda: comm.send(f32(), 9), (INVAL, "send: to 9 is not a worker id (0 .. 1)")),
    "frm_huge": (lambda: comm.recv(f32(), -2**70), (INVAL, "recv: frm")),
    "frm_float": (lambda: comm.recv(f32(), 1.0), (TypeError, "recv: frm")),
    "gsize_zero": (lambda: comm.allgather(f32(), group_size=0), (ValueError, "group_size")),
    "gsize_neg": (lambda: comm.allgather(f32(), group_size=-2), (ValueError, "group_size")),
    "gsize_str": (lambda: comm.allgather(f32(), group_size="2"), (TypeError, "group_size")),
    "gsize_bool": (lambda: comm.allgather(f32(), group_size=True), (TypeError, "group_size")),
    # one group: the group is the world; there is no next group
    "next_group": (lambda: comm.send_to_next_group(f32()), (INVAL, "last group")),
    "prev_group": (lambda: comm.recv_from_prev_group(f32()), (INVAL, "first group")),
    "zero_d_gather": (lambda: comm.allgather(np.float32(1) * np.ones((), "float32")),
                      (ValueError, "allgather: src")),
}


def _run_case(name):
    fn = CASES[name][0]
    try:
        fn()
    except BaseException as e:  # noqa: B902 - the point is to see any of them
        return f"{type(e).__module__}.{type(e).__qualname__}: {e}"
    return "OK"


@disco.register_func("pyt.misuse.cases")
def _cases(names):
    """Runs each case of names (comma separated) in order; returns what
    each gave, one line each."""
    return "\n".join(_run_case(n) for n in names.split(","))


def _cls_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_cases(sess, names):
    r = sess.get_global_func("pyt.misuse.cases")(",".join(names))
    bad = []
    for w in range(sess.num_workers):
        got = r.debug_get_from_remote(w).split("\n")
        for name, line in zip(names, got):
            cls, words = CASES[name][2 if w == 1 and len(CASES[name]) > 2 else 1]
            head, _, msg = line.partition(": ")
            # the exact class, or a subclass of the one named (disco's
            # InvalidArgumentError is a ValueError)
            ok = head == _cls_name(cls) or any(
                head == _cls_name(c) for c in _subclasses(cls))
            if not (ok and words in msg):
                bad.append(f"worker {w}, case {name}: {line!r}; want {cls.__name__} with {words!r}")
    assert not bad, "\n".join(bad)


def _subclasses(cls):
    out = []
    for c in cls.__subclasses__():
        out.append(c)
        out.extend(_subclasses(c))
    return out


@pytest.fixture(scope="module")
def sess2():
    with open_session(2, 1, call_timeout_ms=10000) as s:
        yield s


@pytest.mark.parametrize("group", ["types", "numpy", "ints", "torch"])
def test_misuse_is_a_named_error(sess2, group):
    """Each misuse raises the class listed in CASES on every worker, with a
    message that names the function and the argument; afterwards the
    session still runs every operation (nothing broke it)."""
    names = {
        "types": ["src_none", "src_list", "src_int", "src_str", "dst_obj", "buf_bytes",
                  "recv_bytes", "send_strided_view", "dlpack_raises", "dlpack_junk", "dlpack_used",
                  "dlpack_lies"],
        "numpy": ["readonly_dst", "readonly_inplace", "readonly_buf", "readonly_recv", "noncontig",
                  "byteswapped", "object_dtype", "complex", "zero_d_gather"],
        "ints": ["op_unknown", "op_none", "op_list", "root_float", "root_str", "root_bool",
                 "root_none", "root_huge", "root_neg", "root_out", "to_float", "to_str",
                 "to_bool", "to_none", "to_huge", "to_neg", "to_self", "to_out", "frm_huge",
                 "frm_float", "gsize_zero", "gsize_neg", "gsize_str", "gsize_bool",
                 "next_group", "prev_group"],
        "torch": ["torch_noncontig", "torch_grad", "torch_meta"],
    }[group]
    if group == "torch":
        pytest.importorskip("torch")
    _check_cases(sess2, names)
    r = sess2.get_global_func("pyt.comm.all")("numpy", "float32", False, 2)
    assert [r.debug_get_from_remote(w) for w in range(2)] == ["ok", "ok"]


# ---- outside a worker function ----


def _every_call(bad):
    """Every disco.comm call, with arguments that are wrong too when bad
    (the missing worker is what is reported first)."""
    a = f32()
    return [
        lambda: comm.rank(),
        lambda: comm.world_size(),
        lambda: comm.allreduce(a, op="bogus" if bad else "sum"),
        lambda: comm.allreduce(None if bad else a),
        lambda: comm.allgather(a, group_size=0 if bad else None),
        lambda: comm.allgather(np.ones((), "float32") if bad else a),
        lambda: comm.broadcast(a, root=2**64 if bad else 0),
        lambda: comm.barrier(),
        lambda: comm.send(a, "x" if bad else 1),
        lambda: comm.recv(a, 2**64 if bad else 1),
        lambda: comm.send_to_next_group(a),
        lambda: comm.recv_from_prev_group(a),
    ]


@pytest.mark.parametrize("bad", [False, True])
def test_outside_a_worker_function(bad):
    """In the controller (no call running), every disco.comm function
    raises InvalidArgumentError, before it looks at its arguments; in a
    plain thread too."""
    assert not comm.in_worker()
    for i, f in enumerate(_every_call(bad)):
        with pytest.raises(INVAL, match="only inside a worker function"):
            f()
    got = []

    def thread():
        for f in _every_call(bad):
            try:
                f()
                got.append("no error")
            except BaseException as e:  # noqa: B902
                got.append(type(e))

    t = threading.Thread(target=thread)
    t.start()
    t.join()
    assert got == [INVAL] * len(got), got


_KEPT = {}


@disco.register_func("pyt.misuse.keep")
def _keep(x):
    """Keeps, on every worker: the Tensor argument, a generator that calls
    disco.comm when resumed, and what a thread started here gets from
    disco.comm while this call runs (the thread has no call of its own)."""
    _KEPT["x"] = x

    def later():
        yield comm.allreduce(f32())

    _KEPT["gen"] = later()
    seen = []

    def thread():
        try:
            comm.barrier()
            seen.append("no error")
        except BaseException as e:  # noqa: B902
            seen.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=thread)
    t.start()
    t.join()
    return seen[0]


@disco.register_func("pyt.misuse.use_kept")
def _use_kept():
    """A later call hands the kept Tensor to disco.comm."""
    try:
        comm.allreduce(_KEPT["x"], in_group=False)
    except BaseException as e:  # noqa: B902
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_kept_references():
    """A thread started by a worker function gets InvalidArgumentError; a
    Tensor argument kept past its call is refused with BufferError in a
    later call (as every other path refuses it: python-safety.md), and the
    later call's peers fail in the same collective; a generator made in a
    call and resumed in the controller after it gets InvalidArgumentError."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        x = sess.empty((4,), "float32")
        r = sess.call_sync_all(sess.get_global_func("pyt.misuse.keep"), x)
        for w in range(2):
            got = r.debug_get_from_remote(w)
            assert got.startswith(INVAL.__name__) and "only inside a worker" in got, (w, got)
        r = sess.get_global_func("pyt.misuse.use_kept")()
        for w in range(2):
            got = r.debug_get_from_remote(w)
            assert got.startswith("BufferError") and "allreduce: src" in got, (w, got)
        # worker 0's generator lives in this process
        with pytest.raises(INVAL, match="only inside a worker function"):
            next(_KEPT["gen"])


# ---- a failed call keeps its place ----


@disco.register_func("pyt.misuse.skip_one")
def _skip_one(how):
    """Worker 1's first collective fails on its own arguments (how says
    which); it catches the error and calls the second, as worker 0 does.
    Returns what each call did."""
    me, out = comm.rank(), []
    bad = me == 1
    calls = {
        "tensor": lambda y: comm.allreduce(None if bad else y, in_group=False),
        "op": lambda y: comm.allreduce(y, op=3 if bad else "sum", in_group=False),
        "root": lambda y: comm.broadcast(y, root=0.0 if bad else 0, in_group=False),
        "gsize": lambda y: comm.allgather(y, group_size=-1 if bad else 2, in_group=False),
        "gather_dst": lambda y: comm.allgather(y, None if not bad else [0.0] * 8,
                                               in_group=False),
    }
    y = f32(4, 1.0 + me)
    try:
        calls[how](y)
        out.append(f"first {y[0]:g}")
    except disco.DiscoError as e:
        out.append(f"first {type(e).__name__}")
    except (TypeError, ValueError) as e:
        out.append(f"first {type(e).__name__}")
    x = f32(4, 100.0)
    comm.allreduce(x, in_group=False)
    out.append(f"second {x[0]:g}")
    return "; ".join(out)


@pytest.mark.parametrize("how", ["tensor", "op", "root", "gsize", "gather_dst"])
def test_failed_call_keeps_its_place(how):
    """A collective that one member's arguments fail (here worker 1's, in
    Python, before C saw them) still fails on every member, in that
    collective: the members' next collective meets its own kind. Without
    this, worker 0's first allreduce silently took worker 1's second one's
    bytes (1 + 100) and worker 1 never saw an error in it. The session
    stays usable."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        r = sess.get_global_func("pyt.misuse.skip_one")(how)
        w0, w1 = r.debug_get_from_remote(0), r.debug_get_from_remote(1)
        assert w0.startswith("first ") and not w0.startswith("first 1") and \
            w0.endswith("second 200"), w0
        assert w1 in ("first TypeError; second 200", "first ValueError; second 200",
                      f"first {INVAL.__name__}; second 200"), w1
        r = sess.get_global_func("pyt.comm.all")("numpy", "float32", False, 2)
        assert r.debug_get_from_remote(1) == "ok"


# ---- Tensors of another call ----

_SHARED = {}


@disco.register_func("pyt.misuse.other_worker")
def _other_worker(x):
    """Threaded session: each worker fills its own Tensor argument with
    rank + 1 and shares it; worker 0 then hands worker 1's Tensor to an
    allreduce (worker 1 its own)."""
    me = comm.rank()
    comm_funcs._writable(x)[:] = me + 1
    _SHARED[me] = x
    comm.barrier(in_group=False)
    t = _SHARED[1] if me == 0 else x
    try:
        comm.allreduce(t, in_group=False)
    except BaseException as e:  # noqa: B902
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_tensor_of_another_workers_call():
    """In a threaded session every worker's Tensor arguments live in this
    process. A Tensor that is not an argument of the running call (here
    worker 1's, used by worker 0) is refused with BufferError, and nothing
    is written: before, worker 0 reduced into worker 1's register in place
    (worker 1's bytes became 6, worker 0's stayed 1)."""
    sess = disco.ThreadedSession(2, 1)
    try:
        x = sess.empty((4,), "float32")
        r = sess.call_sync_all(sess.get_global_func("pyt.misuse.other_worker"), x)
        w0, w1 = r.debug_get_from_remote(0), r.debug_get_from_remote(1)
        assert w0.startswith("BufferError") and "allreduce: src" in w0 and \
            "not an argument of this call" in w0, w0
        # worker 1's allreduce fails too, quoting worker 0's Python reason
        assert w1.startswith(INVAL.__name__) and "worker 0: BufferError: disco.comm.allreduce: " \
            "src" in w1, w1
        for w in range(2):
            got = np.from_dlpack(x.debug_get_from_remote(w))
            assert np.array_equal(got, np.full(4, w + 1.0, "float32")), (w, got)
    finally:
        sess.shutdown()
        _SHARED.clear()


# ---- what is fine stays fine ----


@disco.register_func("pyt.misuse.edges")
def _edges():
    """Arrays at the edge of what disco takes: each result checked here."""
    me, out = comm.rank(), []
    z = np.array(me + 1.0, "float32")  # 0-d
    comm.allreduce(z)
    out.append(float(z) == 3.0)
    e = np.ones(0, "float32")  # empty
    out.append(comm.allreduce(e).shape == (0,) and comm.allgather(e).shape == (0,))
    b = np.array([me == 0, False, True])  # bool: max is "any"
    comm.allreduce(b, op="max")
    out.append(b.tolist() == [True, False, True])
    g = comm.allgather(_ro(np.array([me == 1, True])))  # no dst: NumPy's export is not needed
    out.append(g.tolist() == [False, True, True, True] and g.dtype == bool)
    h = np.full(4, me + 1, "float16")
    comm.allreduce(h)
    out.append(h.tolist() == [3.0] * 4)
    a = np.arange(12, dtype="float32")  # dst overlaps src: staged, so as if copied first
    comm.allreduce(a[0:8], a[4:12])
    out.append(a.tolist() == [0, 1, 2, 3] + [2.0 * i for i in range(8)])
    try:
        import torch
        t = torch.full((4,), me + 1.0, dtype=torch.bfloat16)  # a dtype NumPy lacks
        comm.allreduce(t)
        out.append(t.float().tolist() == [3.0] * 4)
    except ImportError:
        out.append(True)
    r = np.zeros(3, "float32")  # recv into another shape: refused, nothing written
    try:
        if me == 0:
            comm.send(f32(4), 1)
        else:
            comm.recv(r, 0)
        out.append(False)
    except MISMATCH:
        out.append(r.tolist() == [0.0] * 3)
    return str(out)


def test_edges_that_work():
    """0-d, empty, bool, float16, torch bfloat16 and overlapping src/dst
    arrays work, and allgather without dst of a read-only bool array (its
    dst was made through NumPy's DLPack export, which refuses both); a
    receive into another shape fails on both ends and writes nothing."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        r = sess.get_global_func("pyt.misuse.edges")()
        for w in range(2):
            assert r.debug_get_from_remote(w) == str([True] * 8), w


@disco.register_func("pyt.misuse.leak")
def _leak(n):
    """n failing calls of each kind: the arrays' reference counts and the
    heap are as before."""
    a, bad_dst = f32(), f32(5)
    before = sys.getrefcount(a), sys.getrefcount(bad_dst)
    for _ in range(n):
        for f in (lambda: comm.allreduce(a, bad_dst), lambda: comm.allreduce(a, op=None),
                  lambda: comm.broadcast(a, root=1.5), lambda: comm.allreduce(_ro(f32()))):
            try:
                f()
            except (TypeError, ValueError, BufferError, disco.DiscoError):
                pass
    return str((sys.getrefcount(a), sys.getrefcount(bad_dst)) == before)


def test_failures_leak_nothing():
    """Failing calls hold no reference to their arrays afterwards, and the
    heap's staging is given back."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        f = sess.get_global_func("pyt.misuse.leak")
        f(2)
        sess.sync_worker(0), sess.sync_worker(1)
        used = sess.heap_stats()["used_bytes"]
        r = f(40)
        assert [r.debug_get_from_remote(w) for w in range(2)] == ["True", "True"]
        del r
        sess.sync_worker(0), sess.sync_worker(1)
        assert sess.heap_stats()["used_bytes"] <= used


# ---- a worker that fails mid-way ----


@disco.register_func("pyt.misuse.raise_mid")
def _raise_mid():
    x = f32()
    comm.allreduce(x, in_group=False)
    if comm.rank() == 1:
        raise RuntimeError("worker 1 gives up")
    comm.allreduce(x, in_group=False)  # worker 1 never comes
    return "no error"


def test_worker_raises_mid_collective():
    """A worker that raises between two collectives: the others' second
    collective fails at once with MismatchError naming it (not at the
    deadline), and the call raises."""
    import time
    with open_session(3, 1, call_timeout_ms=20000) as sess:
        t0 = time.monotonic()
        with pytest.raises(disco.DiscoError) as ei:
            sess.get_global_func("pyt.misuse.raise_mid")()
            sess.sync_worker(0)
        assert time.monotonic() - t0 < 10, "waited for the deadline"
        assert "worker 1" in str(ei.value), str(ei.value)


def test_strided_buffer_in_the_controller(sess2):
    """The controller's copies share dp_host_get with disco.comm: a strided
    buffer without __dlpack__ is a ValueError there too (before, the
    __dlpack__ probe cleared the error: SystemError)."""
    with pytest.raises(ValueError, match="C-contiguous"):
        sess2.copy_to_worker_0(memoryview(b"abcdefgh")[::2])


_VIEW = {}


@disco.register_func("pyt.misuse.view")
def _view():
    """Hands another session's view Tensor (made in the controller before
    this session forked) to an allreduce as src; dst is a fresh array."""
    a = np.zeros(4, "float32")
    try:
        comm.allreduce(_VIEW["v"], a, in_group=False)
    except BaseException as e:  # noqa: B902
        comm.allreduce(f32(4, 0.0), a, in_group=False)  # the others' collective goes on
        return f"{type(e).__name__}: {e}"
    return str(a.tolist())


def test_view_of_another_session():
    """A view Tensor of another session (debug_get_from_remote) is host
    memory that the view keeps: worker 0, in the process that made it,
    stages its bytes; a forked worker, whose copy of the view is not its
    own, gets BufferError naming src (and its peers' collective fails in
    its words, not silently)."""
    with open_session(2, 1, call_timeout_ms=10000) as a:
        x = a.empty((4,), "float32")
        _VIEW["v"] = x.debug_get_from_remote(0)
        with open_session(2, 1, call_timeout_ms=10000) as b:
            r = b.get_global_func("pyt.misuse.view")()
            w0, w1 = r.debug_get_from_remote(0), r.debug_get_from_remote(1)
        _VIEW.clear()
    assert w1.startswith("BufferError") and "allreduce: src" in w1, w1
    assert w0.startswith(INVAL.__name__) and "worker 1: BufferError: disco.comm.allreduce: src" \
        in w0, w0
