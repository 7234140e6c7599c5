"""The error model in Python: one exception class per disco status under
disco.DiscoError, carrying the code and the runtime's error text; each
reachable status raised by the call that meets it; dead and hung workers
end in an exception within the deadline, never a hang."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import disco
from conftest import (CODE, TESTLIB, error_class, error_classes, heap,
                      open_session, settle, status_table, sync_all)


@disco.register_func("pyt.err.die_on")
def _die_on(worker_pid, spin_ms):
    """On the worker of that pid: spin spin_ms, then SIGKILL itself."""
    if os.getpid() == worker_pid:
        end = time.monotonic() + spin_ms / 1000
        while time.monotonic() < end:
            pass
        os.kill(os.getpid(), signal.SIGKILL)


# ---- the classes ----


# Every status of include/disco/status.h has exactly one class, a subclass
# of DiscoError (itself an Exception) whose `code` is that status; the three
# the issue names are those of their codes.
def test_one_class_per_status():
    assert issubclass(disco.DiscoError, Exception)
    classes = error_classes()
    missing = [(n, c) for n, c, _ in status_table() if c not in classes]
    assert not missing, f"statuses without a class: {missing}"
    assert disco.RemoteError.code == CODE["E_REMOTE"]
    assert disco.WorkerDiedError.code == CODE["E_WORKER_DIED"]
    assert disco.SessionTimeoutError.code == CODE["E_SESSION_TIMEOUT"]
    for cls in classes.values():
        assert issubclass(cls, disco.DiscoError)


# ---- each status raised where it happens (the README's error table) ----


# Mistakes the controller sees fail the call itself: unknown function,
# argument count and type against the signature ("ii"), an oversized
# argument; the session goes on.
def test_call_refused(sess):
    with pytest.raises(error_class(CODE["E_NO_FUNC"])) as ei:
        sess.get_global_func("no.such.function")
    assert "no.such.function" in str(ei.value)
    add = sess.get_global_func("test.add")
    with pytest.raises(error_class(CODE["E_ARG_COUNT"])):
        add(1)
    with pytest.raises(error_class(CODE["E_BAD_TYPE"])):
        add(1, "two")
    with pytest.raises(error_class(CODE["E_MSG_TOO_BIG"])):
        sess.get_global_func("disco.echo")(b"x" * (1 << 20))
    assert add(2, 3).debug_get_from_remote(1) == 5


# A function that fails on a worker: RemoteError at the next sync, naming
# the worker, the function and its message, with the code on the instance.
def test_remote_error(sess):
    sess.get_global_func("test.fail_on")(1, "boom")
    with pytest.raises(disco.RemoteError) as ei:
        sess.sync_worker(1)
    e = ei.value
    assert e.code == CODE["E_REMOTE"]
    assert isinstance(e, disco.DiscoError)
    for part in ("worker 1", "test.fail_on", "boom"):
        assert part in str(e), f"{part!r} not in {str(e)!r}"
    sync_all(sess)  # reported once: the session goes on


# A library that does not load: LibraryError naming the path.
def test_library_error(bare):
    with pytest.raises(error_class(CODE["E_LIBRARY"])) as ei:
        bare.load_library("/nonexistent/libnope.so")
        bare.sync_worker_0()
    assert "/nonexistent/libnope.so" in str(ei.value)
    settle(bare, disco.DiscoError)


# Sizes are checked before allocation: a tensor larger than the heap, and a
# shape whose size overflows.
def test_heap_exhausted_and_overflow(bare):
    # more than the whole heap (the default is half the machine's memory)
    with pytest.raises(error_class(CODE["E_HEAP_EXHAUSTED"])):
        bare.empty((bare.heap_stats()["capacity"] // 4 + 1,), "float32", worker0_only=True)
        bare.sync_worker_0()
    settle(bare, disco.DiscoError)
    with pytest.raises(error_class(CODE["E_OVERFLOW"])):
        bare.empty((2**62 + 1,), "float32", worker0_only=True)
        bare.sync_worker_0()
    settle(bare, disco.DiscoError)
    x = bare.empty((4,), "float32")  # the heap is still usable
    sync_all(bare)
    assert x.debug_get_from_remote(1) is not None


# Collective members that disagree all fail with MismatchError naming the
# odd worker; a bad op is InvalError; the session goes on.
def test_mismatch_and_inval(sess):
    odd = sess.get_global_func("test.fill_odd")((8,), "float32", 1, "float32", 1)
    sess.get_global_func("disco.allreduce")(odd, "sum", False)
    mismatch = error_class(CODE["E_MISMATCH"])
    with pytest.raises(mismatch) as ei:
        sess.sync_worker(1)
    assert "worker" in str(ei.value)
    settle(sess, mismatch)
    x = sess.get_global_func("test.fill")((8,), "float32", 0)
    sess.get_global_func("disco.allreduce")(x, "bogus", False)
    inval = error_class(CODE["E_INVAL"])
    with pytest.raises(inval):
        sync_all(sess)
    settle(sess, inval)
    y = sess.get_global_func("disco.allreduce")(x, "sum", False)
    sync_all(sess)
    assert np.from_dlpack(y.debug_get_from_remote(0)).shape == (8,)


# A device that does not exist (sim without DISCO_SIM_GPUS): NoDeviceError
# naming it, from each worker; the session goes on.
def test_no_device(bare, monkeypatch):
    if os.environ.get("DISCO_SIM_GPUS"):
        pytest.skip("DISCO_SIM_GPUS is set: sim devices exist")
    no_dev = error_class(CODE["E_NO_DEVICE"])
    with pytest.raises(no_dev) as ei:
        bare.empty((4,), "float32", device=disco.sim(0))
        sync_all(bare)
    assert "sim" in str(ei.value)
    settle(bare, no_dev)
    assert bare.get_global_func("disco.worker_id")().debug_get_from_remote(1) == 1


# A DRef belongs to its session: passing it to another is refused before
# anything is sent (never read as that session's register of the same id).
def test_dref_of_another_session(bare):
    with open_session(2) as other:
        r = other.get_global_func("disco.worker_id")()
        with pytest.raises((ValueError, disco.DiscoError)):
            bare.get_global_func("disco.echo")(r)
        sync_all(bare)
        assert r.debug_get_from_remote(1) == 1


# ---- dead and hung workers ----


# A worker that crashes: WorkerDiedError naming it, its pid and the signal;
# every later call BrokenError; shutdown still works and the heap still
# answers.
def test_worker_segv(sess):
    pid = sess.worker_pid(1)
    sess.get_global_func("test.segv")(1)
    with pytest.raises(disco.WorkerDiedError) as ei:
        sess.sync_worker(1)
    text = str(ei.value)
    assert "worker 1" in text and str(pid) in text and "signal 11" in text, text
    with pytest.raises(error_class(CODE["E_BROKEN"])):
        sess.get_global_func("disco.noop")()
        sess.sync_worker(1)
    assert isinstance(heap(sess)["live_blocks"], int)


# kill -9 of a worker (by pid) before the sync: WorkerDiedError well within
# the deadline.
def test_worker_killed(bare):
    pid = bare.worker_pid(1)
    bare.get_global_func("disco.noop")()
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(disco.WorkerDiedError) as ei:
        bare.get_global_func("disco.noop")()
        bare.sync_worker(1)
    assert time.monotonic() - t0 < 2.0
    assert "signal 9" in str(ei.value)


# kill -9 of a worker from another thread while this one waits in
# sync_worker(1) for a call that never ends: the wait ends with
# WorkerDiedError (so it let the other thread run: the GIL is released).
def test_worker_killed_during_sync():
    with open_session(2, call_timeout_ms=20000) as s:
        s.load_library(TESTLIB)
        sync_all(s)
        pid = s.worker_pid(1)
        s.get_global_func("test.hang")(1)
        killer = threading.Timer(0.2, os.kill, (pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(disco.WorkerDiedError):
                s.sync_worker(1)
        finally:
            killer.join()
        assert time.monotonic() - t0 < 5.0, "the death took longer than 5 s to surface"


# A worker killed in the middle of a collective while worker 0 (this
# thread) waits for it there: the collective returns WorkerDiedError.
def test_worker_dies_mid_collective():
    with open_session(2, call_timeout_ms=20000) as s:
        x = s.empty((1024,), "float32")
        dst = s.empty((1024,), "float32")
        sync_all(s)
        s.get_global_func("pyt.err.die_on")(s.worker_pid(1), 100)
        t0 = time.monotonic()
        with pytest.raises(disco.WorkerDiedError):
            s.allreduce(x, dst, "sum")
            s.sync_worker(1)
        assert time.monotonic() - t0 < 5.0


# A worker that hangs: the sync gives up at call_timeout_ms with the timeout
# error naming it (the worker is killed); later calls are BrokenError.
def test_worker_hang_times_out():
    with open_session(2, call_timeout_ms=300) as s:
        s.load_library(TESTLIB)
        sync_all(s)
        pid = s.worker_pid(1)
        s.get_global_func("test.hang")(1)
        t0 = time.monotonic()
        with pytest.raises(error_class(CODE["E_TIMEOUT"])) as ei:
            s.sync_worker(1)
        assert 0.25 < time.monotonic() - t0 < 3.0
        assert "worker 1" in str(ei.value)
        with pytest.raises(error_class(CODE["E_BROKEN"])):
            s.sync_worker(1)
    assert not os.path.exists(f"/proc/{pid}")

