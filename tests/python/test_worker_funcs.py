"""Python functions on workers: @disco.register_func("name") before the
session opens, run by every forked worker when called through the session;
tensors arrive as DLPack-capable objects; an exception comes back as an
error naming the worker, the function and the exception."""

import os

import numpy as np
import pytest

import disco
import spawn_funcs  # noqa: F401  (pyt.spawn.pid on worker 0)
from conftest import CODE, error_class, open_session, settle, sync_all

# Registered at import, so before any session of the suite forks.


@disco.register_func("pyt.wf.pid")
def _pid():
    return os.getpid()


@disco.register_func("pyt.wf.scalars")
def _scalars(i, f, s, b):
    return f"{i + 1}|{f * 2}|{s.upper()}|{bytes(b)[::-1].hex()}"


@disco.register_func("pyt.wf.sum")
def _sum(x):
    return float(np.from_dlpack(x).sum())


@disco.register_func("pyt.wf.describe")
def _describe(x):
    a = np.from_dlpack(x)
    return f"{a.dtype}{list(a.shape)}"


@disco.register_func("pyt.wf.arange")
def _arange(n):
    return np.arange(n, dtype="int16") * (os.getpid() % 7)


@disco.register_func("pyt.wf.none")
def _none():
    return None


_kept = []


@disco.register_func("pyt.wf.keep")
def _keep(x):
    _kept.append(x)


@disco.register_func("pyt.wf.raise_on")
def _raise_on(worker_pid, message):
    if os.getpid() == worker_pid:
        raise ValueError(message)
    return 0


@disco.register_func("pyt.wf.raise_everywhere")
def _raise_everywhere():
    raise KeyError("missing-key")


# Each worker runs the function in its own process: worker 0 in the
# controller, worker 1 in its forked child.
def test_runs_on_every_worker(bare):
    r = bare.get_global_func("pyt.wf.pid")()
    sync_all(bare)
    assert [r.debug_get_from_remote(i) for i in range(2)] == [bare.worker_pid(0), bare.worker_pid(1)]


# ints, floats, strings and bytes arrive as Python values; a str result comes
# back as one.
def test_scalar_arguments(bare):
    r = bare.get_global_func("pyt.wf.scalars")(41, 1.25, "abc", b"\x01\x02")
    sync_all(bare)
    for i in range(2):
        assert r.debug_get_from_remote(i) == "42|2.5|ABC|0201"


# A function with no result leaves null in the register.
def test_none_result(bare):
    r = bare.get_global_func("pyt.wf.none")()
    sync_all(bare)
    assert r.debug_get_from_remote(1) is None


# An array result is copied into a new tensor of the heap on each worker.
def test_array_result(bare):
    r = bare.get_global_func("pyt.wf.arange")(5)
    sync_all(bare)
    for i in range(2):
        k = bare.worker_pid(i) % 7
        assert np.from_dlpack(r.debug_get_from_remote(i)).tolist() == [k * j for j in range(5)]


# A tensor argument (a DRef holding a tensor on every worker) arrives as an
# object numpy.from_dlpack reads, with each worker's own values.
def test_tensor_argument(bare):
    x = bare.empty((2, 5), "float32")
    x.debug_copy_from(0, np.ones((2, 5), "float32"))
    x.debug_copy_from(1, np.arange(10, dtype="float32").reshape(2, 5))
    s = bare.get_global_func("pyt.wf.sum")(x)
    d = bare.get_global_func("pyt.wf.describe")(x)
    sync_all(bare)
    assert [s.debug_get_from_remote(i) for i in range(2)] == [10.0, 45.0]
    assert d.debug_get_from_remote(1) == "float32[2, 5]"


# A tensor argument is valid during its call only: kept past it, it refuses
# to export its bytes (BufferError) instead of handing out memory that the
# call no longer owns.
def test_tensor_argument_expires(bare):
    _kept.clear()
    x = bare.empty((4,), "float32")
    bare.get_global_func("pyt.wf.keep")(x)
    sync_all(bare)
    assert len(_kept) == 1  # worker 0's (this process); worker 1 kept its own
    with pytest.raises(BufferError):
        np.from_dlpack(_kept[0])
    _kept.clear()


# A Python function's result feeds C functions and collectives: the chain
# runs in order on every worker.
def test_chain_with_c_functions(sess):
    x = sess.get_global_func("test.fill")((16,), "float32", 0)
    y = sess.get_global_func("disco.allreduce")(x, "sum", False)
    s = sess.get_global_func("pyt.wf.sum")(y)
    sync_all(sess)
    want = float(sum(((np.arange(16) * 7 + w * 13) % 17 - 8) * 0.5 for w in range(2)).sum())
    assert s.debug_get_from_remote(0) == s.debug_get_from_remote(1) == want


# An exception on worker 1 comes back as RemoteError at the sync of worker 1,
# naming the worker, the function and the exception; the session goes on.
def test_exception_on_worker1(bare):
    f = bare.get_global_func("pyt.wf.raise_on")
    f(bare.worker_pid(1), "bad input 7")
    with pytest.raises(error_class(CODE["E_REMOTE"])) as ei:
        bare.sync_worker(1)
    text = str(ei.value)
    for part in ("worker 1", "pyt.wf.raise_on", "ValueError", "bad input 7"):
        assert part in text, f"{part!r} not in {text!r}"
    assert ei.value.code == CODE["E_REMOTE"]
    sync_all(bare)
    r = bare.get_global_func("pyt.wf.pid")()
    sync_all(bare)
    assert r.debug_get_from_remote(1) == bare.worker_pid(1)


# An exception on worker 0 (the controller's thread) too: reported, not
# propagated raw out of the call, and the session goes on.
def test_exception_on_worker0(bare):
    with pytest.raises(error_class(CODE["E_REMOTE"])) as ei:
        bare.get_global_func("pyt.wf.raise_on")(os.getpid(), "zero says no")
        bare.sync_worker_0()
    text = str(ei.value)
    for part in ("worker 0", "pyt.wf.raise_on", "ValueError", "zero says no"):
        assert part in text, f"{part!r} not in {text!r}"
    settle(bare, disco.DiscoError)
    assert bare.get_global_func("disco.worker_id")().debug_get_from_remote(1) == 1


# Every worker failing: each one's report names it.
def test_exception_everywhere(bare):
    bare.get_global_func("pyt.wf.raise_everywhere")()
    seen = set()
    for i in range(2):
        try:
            bare.sync_worker(i)
        except disco.RemoteError as e:
            assert "KeyError" in str(e) and "missing-key" in str(e)
            seen |= {w for w in range(2) if f"worker {w}" in str(e)}
    settle(bare, disco.RemoteError)
    assert seen == {0, 1}


# Spawned workers have only what they import: a Python function of this
# process is not there (the call says there is no such function) until the
# worker imports the module that registers it.
def test_spawned_workers_have_what_they_import():
    with open_session(2, launch="spawn") as s:
        with pytest.raises(error_class(CODE["E_NO_FUNC"])):
            s.get_global_func("pyt.wf.pid")()
            sync_all(s)
    with open_session(2, launch="spawn", imports=("spawn_funcs",)) as s:
        r = s.get_global_func("pyt.spawn.pid")()
        sync_all(s)
        assert r.debug_get_from_remote(1) == s.worker_pid(1) != os.getpid()
