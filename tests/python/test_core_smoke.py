"""test_core_smoke.py - the package's core paths, one test each (the
extension's own smoke tests; the API's tests proper live beside it).

Run by `make test` (PYTHONPATH=python, DISCO_TEST_LIB=the test library)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import disco

TESTLIB = os.environ.get("DISCO_TEST_LIB",
                         os.path.join(os.path.dirname(__file__), "../../build/lib/"
                                      "libdisco_testlib.so"))


@disco.register_func("smoke.scale")
def _scale(x, k):
    a = np.asarray(x)  # writable: the buffer protocol (numpy.from_dlpack is read-only in 1.x)
    a *= k


@disco.register_func("smoke.boom")
def _boom(n):
    raise ValueError(f"bad input {n}")


@disco.register_func("smoke.make")
def _make(n):
    return np.arange(n, dtype=np.float32)


@pytest.fixture
def sess():
    with disco.ProcessSession(2, call_timeout_ms=10000) as s:
        yield s


# A call through a DPackedFunc runs on every worker; a string where the
# signature wants a dtype is parsed; a library loads on every worker.
def test_call_and_dtype_string(sess):
    mod = sess.load_library(TESTLIB)
    r = mod["test.add"](2, 3)
    sess.sync_worker(1)
    assert r.debug_get_from_remote(0) == 5 and r.debug_get_from_remote(1) == 5
    x = sess.get_global_func("test.fill")((6,), "float32", 1)
    t = x.debug_get_from_remote(1)
    assert t.shape == (6,) and t.dtype == "float32" and t.is_view


# debug_get_from_remote views the worker's heap bytes: a worker's write in
# place is seen by numpy and torch arrays made before it.
def test_zero_copy_views(sess):
    torch = pytest.importorskip("torch")
    sess.load_library(TESTLIB)
    x = sess.get_global_func("test.fill")((6,), "float32", 1)
    a = np.from_dlpack(x.debug_get_from_remote(1))
    b = torch.from_dlpack(x.debug_get_from_remote(1))
    before = a.copy()
    sess.get_global_func("smoke.scale")(x, 10.0)
    sess.sync_worker(1)
    assert np.array_equal(a, before * 10) and b[1].item() == a[1]


# Copies to and from worker 0 and the collectives with destinations.
def test_copies_and_collectives(sess):
    host = np.arange(8, dtype=np.float32)
    d = sess.copy_to_worker_0(host)
    out = np.zeros_like(host)
    sess.copy_from_worker_0(out, d)
    assert np.array_equal(out, host)
    x = sess.broadcast(host)
    y = sess.empty((8,), "float32")
    assert sess.allreduce(x, y, op="sum") is y
    assert np.array_equal(y.debug_get_from_remote(1).numpy(), 2 * host)
    s = sess.scatter(host.reshape(2, 4))
    assert np.array_equal(s.debug_get_from_remote(1).numpy(), host[4:])
    g = sess.empty((16,), "float32")
    sess.allgather(x, g)
    assert np.array_equal(g.debug_get_from_remote(0).numpy(), np.concatenate([host, host]))


# A Python exception on a worker is a RemoteError naming the worker, the
# function and the exception; the session goes on. A returned array
# becomes a heap tensor.
def test_worker_exception_and_result(sess):
    sess.get_global_func("smoke.boom")(42)
    with pytest.raises(disco.RemoteError) as e:
        sess.sync_worker(1)
    assert "worker 1: smoke.boom: ValueError: bad input 42" in str(e.value)
    assert e.value.code == -16 and e.value.name == "DISCO_E_REMOTE"
    m = sess.get_global_func("smoke.make")(5)
    sess.sync_worker(1)
    assert np.array_equal(m.debug_get_from_remote(1).numpy(), np.arange(5, dtype=np.float32))


# A killed worker raises WorkerDiedError at once (no hang), then
# SessionBrokenError.
def test_killed_worker(sess):
    f = sess.get_global_func("disco.noop")
    f()
    sess.sync_worker(1)
    os.kill(sess.worker_pid(1), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(disco.WorkerDiedError, match="signal 9"):
        f()
        sess.sync_worker(1)
    assert time.monotonic() - t0 < 5
    with pytest.raises(disco.SessionBrokenError):
        sess.sync_worker(1)


# Two threads share a session: each call waits for the other's (GIL
# released meanwhile), results stay right.
def test_threads(sess):
    f = sess.get_global_func("disco.worker_id")
    got = []

    def run():
        for _ in range(200):
            r = f()
            sess.sync_worker(1)
        got.append(r.debug_get_from_remote(1))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [1, 1, 1]


# Spawned Python workers have what they import, not what this process
# registered; the trace comes back as Python data.
def test_spawn_and_trace(tmp_path, monkeypatch):
    (tmp_path / "smoke_spawned.py").write_text(
        "import disco, os\n"
        "@disco.register_func('spawned.pid')\n"
        "def pid():\n    return os.getpid()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("smoke_spawned")  # worker 0 is this process
    with disco.ProcessSession(2, launch="spawn", imports=["smoke_spawned"]) as s:
        r = s.get_global_func("spawned.pid")()
        s.sync_worker(1)
        assert r.debug_get_from_remote(1) == s.worker_pid(1) != os.getpid()
        s.get_global_func("smoke.make")(3)
        with pytest.raises(disco.NoFunctionError):
            s.sync_worker(1)
        assert "per_worker" in s.trace()
