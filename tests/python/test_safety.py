"""The Python extension against a careless or hostile caller (issue 33,
section 1; issue 32, section 4's DLPack streams).

Each test names the defect it holds. Where the defect was a crash, the
attack runs in a subprocess (safety_util.run_isolated), so that a segfault
fails the test instead of ending pytest.
"""

import gc
import os
import sys
import threading

import numpy as np
import pytest

import disco
from conftest import open_session, sync_all
from safety_util import fake_producer, run_isolated

_kept = []


@disco.register_func("safety.keep")
def _keep(x):
    _kept.append(x)


@disco.register_func("safety.give_kept")
def _give_kept():
    return _kept[-1]


@disco.register_func("safety.echo")
def _echo(x):
    return x


# ---- a mutable argument freed under the call ----

# A bytearray argument is read by the call with the GIL released (worker 0
# runs on the caller's values): Python code that runs after its conversion
# (here another argument's __index__; in general another thread) resizes it
# and frees its 1 MiB buffer. Before the fix the call read the freed (unmapped)
# buffer: a segfault. Now the call carries a copy made at conversion.
def test_bytearray_resized_during_call():
    run_isolated("""
@disco.register_func("t.blen")
def blen(b, k):
    return len(b) * 1000 + b[0] + b[-1] + k

N = 1 << 20
ba = bytearray(b"\\x07" * N)

class Shrink:
    def __index__(self):
        ba.clear()  # frees the old buffer (an mmap'd chunk: unmapped)
        return 1

s = open_session(2, max_msg=4 << 20)
r = s.get_global_func("t.blen")(ba, Shrink())
vals = [r.debug_get_from_remote(i) for i in range(2)]
assert vals == [N * 1000 + 15] * 2, vals
s.shutdown()
""")


# Every argument kind that shares a mutable buffer: bytearray travels as a
# copy (a later change does not reach the call); memoryview, array.array and
# numpy arrays are refused (tensors move by register).
def test_argument_kinds(bare):
    import array

    echo = bare.get_global_func("safety.echo")
    ba = bytearray(b"abc")
    r = echo(ba)
    ba[0] = ord("z")
    sync_all(bare)
    assert r.debug_get_from_remote(0) == r.debug_get_from_remote(1) == b"abc"
    for bad in (memoryview(b"abc"), memoryview(bytearray(b"abc")), array.array("i", [1, 2]),
                np.zeros(3), np.zeros(())):
        with pytest.raises(TypeError):
            echo(bad)


# A list shape whose element's __index__ shrinks the list: before the fix
# the conversion read past the list's end (PyList_GetItem gave NULL): a
# segfault. Now it reads a snapshot of the list.
def test_shape_list_mutated():
    run_isolated("""
@disco.register_func("t.echo")
def echo(x):
    return x

shape = [2, None, 3]

class Shrink:
    def __index__(self):
        shape.clear()
        return 5

shape[1] = Shrink()
s = open_session(2)
r = s.get_global_func("t.echo")(shape)
assert r.debug_get_from_remote(0) == (2, 5, 3), r.debug_get_from_remote(0)
s.shutdown()
""")


# ---- an expired worker-function argument ----

# A Tensor argument kept past its call refuses every path that takes a
# disco Tensor: copy_from_worker_0 into it (before the fix: a write into
# whatever reused its heap block, here another live tensor), copy_to_worker_0
# and debug_copy_from from it (stale bytes), and returning it from a later
# call (the register's tensor of another call).
def test_expired_argument_refused(bare):
    _kept.clear()
    x = bare.copy_to_worker_0(np.arange(8, dtype="float32"))
    bare.get_global_func("safety.keep")(x)
    sync_all(bare)
    kept = _kept[-1]
    del x
    gc.collect()
    sync_all(bare)
    z = bare.copy_to_worker_0(np.full(8, 5, dtype="float32"))  # may reuse x's block
    y = bare.copy_to_worker_0(np.full(8, 9, dtype="float32"))
    with pytest.raises(BufferError):
        bare.copy_from_worker_0(kept, y)
    out = np.zeros(8, dtype="float32")
    bare.copy_from_worker_0(out, z)
    assert (out == 5).all(), f"a live tensor changed under an expired argument: {out}"
    with pytest.raises(BufferError):
        bare.copy_to_worker_0(kept)
    with pytest.raises(BufferError):
        z.debug_copy_from(0, kept)
    with pytest.raises(BufferError):
        np.from_dlpack(kept)
    r = bare.get_global_func("safety.give_kept")()
    with pytest.raises(disco.RemoteError, match="not compact host memory|argument"):
        bare.sync_worker(0)
    del r
    _kept.clear()
    for w in range(2):  # worker 1 kept its own, and failed the same way
        try:
            bare.sync_worker(w)
        except disco.RemoteError:
            pass


# A function's argument handed to a thread that copies it through another
# session with the GIL released: the call waits for that copy before it
# ends (its bytes stay valid: the pin), or the copy is refused because the
# call ended first (the liveness check). Never a copy of freed bytes. Before
# the fix, a copy that started after the call read the block that a new
# tensor (all -1) had reused. (The pin alone is exercised here, not proven:
# the copy and the reuse both run forwards, so without the pin the copy
# still stays ahead of the overwrite.)
def test_argument_pinned_during_copy():
    run_isolated("""
import queue
import threading
N = 1 << 22  # 16 MiB: the copy takes long enough for the caller to free and reuse src
other = open_session(1, heap_bytes=64 << 20)
s = open_session(1, heap_bytes=64 << 20)
out = queue.Queue()

@disco.register_func("t.handoff")
def handoff(x):
    def copy():
        try:
            out.put(other.copy_to_worker_0(x))
        except BufferError as e:
            out.put(e)
    threading.Thread(target=copy).start()
    return None  # the thread may still be copying: the call waits for it

copied = 0
for i in range(20):
    src = s.copy_to_worker_0(np.arange(N, dtype="int32") + i)
    s.get_global_func("t.handoff")(src)
    del src
    s.sync_worker(0)  # the free goes out with it
    s.copy_to_worker_0(np.full(N, -1, dtype="int32"))  # may reuse src's block
    r = out.get(timeout=30)
    if isinstance(r, BufferError):
        continue
    got = np.zeros(N, dtype="int32")
    other.copy_from_worker_0(got, r)
    assert (got == np.arange(N) + i).all(), (i, got[got != np.arange(N) + i][:4])
    copied += 1
print("copied", copied)
s.shutdown()
other.shutdown()
""")


# ---- close racing another method ----

# RPCSession: a method that passed the "closed?" check waits for the lock
# while close() holds it; before the fix it then called into the closed
# session (NULL): a segfault. Now the state is checked again under the
# lock: ConnectionClosedError. The race is run 30 times: without the fix,
# close wins the lock in about half the rounds.
def test_rpc_close_races():
    run_isolated("""
import threading
import disco.rpc

gate_in, gate_out = threading.Event(), threading.Event()

@disco.register_func("t.block")
def block():
    gate_in.set()
    gate_out.wait(10)
    return 1

def announced(fn, name, ev):
    def prof(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == name:
            ev.set()
    def run():
        sys.setprofile(prof)
        try:
            fn()
        except disco.DiscoError as e:
            assert e.code == -26, e  # ConnectionClosedError
        finally:
            sys.setprofile(None)
    return threading.Thread(target=run)

for rnd in range(30):
    core = disco.rpc.local()._s
    f = core.get_func("t.block")
    gate_in.clear()
    gate_out.clear()
    t1 = threading.Thread(target=lambda: core.call(f))
    t1.start()
    gate_in.wait()
    e2, e3, e4 = threading.Event(), threading.Event(), threading.Event()
    ts = [announced(core.close, "close", e2), announced(lambda: core.get_func("t.block"),
          "get_func", e3), announced(lambda: core.free_handle(f), "free_handle", e4)]
    for t, e in zip(ts, (e2, e3, e4)):
        t.start()
        e.wait()
    gate_out.set()
    for t in [t1] + ts:
        t.join()
    assert core.closed
""")


# Session.shutdown() from several threads while another holds the session:
# the state is checked again under the lock, so one shutdown runs and the
# others return; health() and worker_pid() read the C session under the
# lock (or in the thread that holds it) and stay consistent.
def test_shutdown_races():
    run_isolated("""
import threading
gate_in, gate_out = threading.Event(), threading.Event()
seen = []

MAIN = os.getpid()

@disco.register_func("t.hold")
def hold():
    if os.getpid() != MAIN:
        return 0
    gate_in.set()
    gate_out.wait(10)
    seen.append(s.health())  # the holding thread reads without waiting for itself
    return 0

s = open_session(2)
f = s.get_global_func("t.hold")
t1 = threading.Thread(target=f)
t1.start()
gate_in.wait()
ts = [threading.Thread(target=s.shutdown) for _ in range(3)]
ts.append(threading.Thread(target=lambda: seen.append(s.worker_pid(1))))
for t in ts:
    t.start()
gate_out.set()
for t in [t1] + ts:
    t.join()
assert s.is_shutdown and s.health()[0] == -19, s.health()
assert seen[0] == (0, "DISCO_OK"), seen
""")


# ---- device memory where the host reads ----

# debug_copy_from memcpys the array's bytes on the host: a CUDA array (here
# a producer that says so, with a device pointer the host cannot read) is
# refused before it is even exported. Before the fix: a segfault.
def test_debug_copy_from_device_array_refused():
    run_isolated("""
from safety_util import fake_producer
s = open_session(2)
x = s.empty((4,), "float32")
for w in (0, 1):
    p = fake_producer((2, 0), data=0x1000, shape=(4,), dtype=(2, 32, 1))
    try:
        x.debug_copy_from(w, p)
    except disco.InvalidArgumentError as e:
        assert "CPU memory" in str(e), e
    else:
        raise AssertionError("a device array was read on the host")
    assert p.calls == [], p.calls  # refused before __dlpack__
s.shutdown()
""")


# debug_copy_from of a strided (non-compact) DLPack array: before the fix
# its first n bytes were copied as if compact, a silent wrong value.
def test_debug_copy_from_strided_refused(bare):
    torch = pytest.importorskip("torch")
    x = bare.empty((16,), "float32")
    with pytest.raises(disco.InvalidArgumentError, match="compact"):
        x.debug_copy_from(0, torch.arange(16.0).reshape(4, 4).t())
    x.debug_copy_from(0, torch.arange(16.0).reshape(4, 4).t().contiguous())
    assert (np.from_dlpack(x.debug_get_from_remote(0)).reshape(4, 4)
            == np.arange(16.0).reshape(4, 4).T).all()


# A worker function that returns a device array: refused before the
# producer exports it (the host copies a result's bytes).
def test_device_array_result_refused():
    run_isolated("""
from safety_util import fake_producer
made = []

@disco.register_func("t.dev")
def dev():
    p = fake_producer((2, 0), data=0x1000, shape=(4,), dtype=(2, 32, 1))
    made.append(p)
    return p

s = open_session(1)
s.get_global_func("t.dev")()
try:
    s.sync_worker(0)
except disco.RemoteError as e:
    assert "CPU memory" in str(e), e
else:
    raise AssertionError("a device array became a result")
assert made[0].calls == [], made[0].calls
s.shutdown()
""")


# ---- DLPack streams ----

# A copy from a DLPack producer asks its device first, then exports with
# the stream the protocol wants: none (None) for CPU and sim, disco's own
# copy stream (an int > 2) for CUDA. Before the fix no stream was passed,
# so a CUDA producer ordered nothing before the copy.
def test_dlpack_stream_argument(bare):
    a = np.arange(4, dtype="float32")
    cpu = fake_producer((1, 0), wrap=a)
    r = bare.copy_to_worker_0(cpu)
    out = np.zeros(4, dtype="float32")
    bare.copy_from_worker_0(out, r)
    assert (out == a).all()
    assert [c.get("stream") for c in cpu.calls] == [None], cpu.calls
    # sim (kDLExtDev): no stream either; the bogus pointer is then refused
    sim = fake_producer((12, 0), data=0x1000, shape=(4,), dtype=(2, 32, 1))
    with pytest.raises(disco.DiscoError):
        bare.copy_to_worker_0(sim)
    assert [c.get("stream") for c in sim.calls] == [None], sim.calls
    # CUDA: a stream of disco's, or (no GPU) refused before exporting
    cuda = fake_producer((2, 0), data=0x1000, shape=(4,), dtype=(2, 32, 1))
    try:
        bare.copy_to_worker_0(cuda)
    except disco.DiscoError:
        pass
    for c in cuda.calls:
        assert isinstance(c.get("stream"), int) and c["stream"] > 2, cuda.calls
    # into a CUDA array (copy_from_worker_0): the same
    cuda.calls.clear()
    try:
        bare.copy_from_worker_0(cuda, r)
    except disco.DiscoError:
        pass
    for c in cuda.calls:
        assert isinstance(c.get("stream"), int) and c["stream"] > 2, cuda.calls


def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# On a GPU: a copy from a torch CUDA tensor whose producer kernel is still
# running (a spin, then a fill, on torch's stream) sees the fill; a copy
# into one waits for the kernels queued on it before. Before the fix the
# copy ran on a non-blocking stream, unordered with the producer's.
@pytest.mark.skipif(_cuda() is None, reason="needs a CUDA GPU and torch with CUDA")
def test_dlpack_stream_orders_cuda_producer():
    torch = _cuda()
    sess = open_session(1)
    try:
        n = 1 << 22
        for k in range(3):
            a = torch.zeros(n, device="cuda")
            torch.cuda._sleep(50_000_000)  # ~tens of ms of spinning on torch's stream
            a.fill_(k + 1)
            r = sess.copy_to_worker_0(a)
            out = torch.empty(n, device="cuda")
            torch.cuda._sleep(50_000_000)
            out.fill_(-1)  # queued before the copy into out: must land first
            sess.copy_from_worker_0(out, r)
            torch.cuda.synchronize()
            assert bool((out == k + 1).all()), f"round {k}: {out[:4]}"
    finally:
        sess.shutdown()


# ---- integers from Python ----

# Worker ids are range-checked whole: before the fix 2**32 narrowed to 0
# and debug_get_from_remote(2**32) read worker 0's value.
def test_worker_id_range(bare):
    r = bare.get_global_func("safety.echo")(7)
    sync_all(bare)
    for bad in (2**32, 2**32 + 1, -1, -(2**32), 2**64, 2**100, 2):
        with pytest.raises(disco.InvalidArgumentError):
            r.debug_get_from_remote(bad)
        with pytest.raises(disco.InvalidArgumentError):
            r.debug_copy_from(bad, 3)
        with pytest.raises(disco.InvalidArgumentError):
            bare.sync_worker(bad)
        with pytest.raises(disco.InvalidArgumentError):
            bare.worker_pid(bad)
    assert r.debug_get_from_remote(np.int64(1)) == 7
    with pytest.raises(TypeError):
        r.debug_get_from_remote(1.0)


# send_recv's worker ids travel to a builtin that narrows them to C ints:
# session.send_recv checks them whole first (before, send_recv(x, 2**32, 1)
# sent worker 0's tensor).
def test_send_recv_worker_range(sess):
    x = sess.broadcast(np.arange(4, dtype="float32"))
    for src, dst in ((2**32, 1), (0, 2**32 + 1), (-1, 1), (0, 2), (2**64, 0)):
        with pytest.raises(disco.InvalidArgumentError):
            sess.send_recv(x, src, dst)
    r = sess.send_recv(x, 0, 1)
    assert (np.asarray(r.debug_get_from_remote(1)) == np.arange(4)).all()


# Every other integer that narrows: device fields, dtype fields, session
# sizes, RPC handles and sizes. Before the fix each wrapped silently
# (device_type 2**32 + 1 became 1, the CPU; a timeout of 2**32 ms became 0,
# the default).
def test_int_arguments_range(bare):
    import disco.rpc

    with pytest.raises(OverflowError):
        bare.empty((4,), "float32", device=(2**32 + 1, 0))
    with pytest.raises(OverflowError):
        bare.empty((4,), "float32", device=(1, 2**31))
    with pytest.raises(TypeError):
        bare.empty((4,), "float32", device="cpu:99999999999999999999")
    with pytest.raises(OverflowError):
        disco._core.dtype_str(256 + 2, 32)
    with pytest.raises(OverflowError):
        disco._core.dtype_str(2, 32, 2**16)
    assert disco._core.dtype_str(2, 32) == "float32"
    with pytest.raises(OverflowError):
        disco.ProcessSession(1, call_timeout_ms=2**32)
    with pytest.raises(ValueError):
        disco.ProcessSession(1, heap_bytes=-1)
    with pytest.raises(OverflowError):
        disco.ProcessSession(1, max_msg=2**32 + 65536)
    t = bare.empty((2,), "float32").debug_get_from_remote(0)
    with pytest.raises(OverflowError):
        t.__dlpack__(dl_device=(2**32 + 1, 0))
    s = disco.rpc.local()
    try:
        for call in (lambda: s.alloc(-1), lambda: s.free(2**64), lambda: s.free_handle(-1),
                     lambda: s.copy_from_remote(2**64, 4), lambda: s.call(-1),
                     lambda: s.copy_to_remote(b"x", 1, offset=-1)):
            with pytest.raises((OverflowError, ValueError)):
                call()
    finally:
        s.close()
