"""ThreadedSession (workers as threads of this process, issue 35): a
representative subset of the ProcessSession tests (calls, values, errors,
every collective, groups) run again here with the suite's fixtures opening
ThreadedSessions, then what is particular to threads: Python worker
functions on the worker threads, a hang that ends at the deadline, close
that leaves no thread behind, device tensors refused, init_ccl."""

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import disco
from conftest import CALL_TIMEOUT_MS, CODE, TESTLIB, error_class, sync_all

# The ProcessSession tests that take their session from a fixture (bare,
# sess, sess4), collected here again: conftest opens those with OPEN_SESSION.
from test_collectives import (  # noqa: F401
    test_allgather, test_allreduce_dtypes, test_allreduce_ops, test_broadcast,
    test_broadcast_from_worker0, test_builtin_collective_call, test_gather_to_worker0,
    test_global_allreduce_in_groups, test_group_allgather, test_group_allreduce,
    test_group_broadcast, test_group_gather, test_group_scatter, test_scatter)
from test_errors import (  # noqa: F401
    test_call_refused, test_heap_exhausted_and_overflow, test_library_error,
    test_mismatch_and_inval, test_remote_error)
from test_session import (  # noqa: F401
    test_call_packed, test_call_sync_all, test_device_argument, test_dref_argument,
    test_dtype_string_and_shape_list, test_echo_scalars, test_echo_shape, test_load_library,
    test_sync_all, test_sync_worker_orders_calls)


def open_threaded(num_workers=2, num_groups=1, **config):
    config.setdefault("call_timeout_ms", CALL_TIMEOUT_MS)
    return disco.ThreadedSession(num_workers, num_groups, **config)


# conftest's bare, sess and sess4 open their sessions with this module's opener.
OPEN_SESSION = open_threaded


def threads_now():
    return len(os.listdir("/proc/self/task"))


# ---- what is particular to threads ----


# A Python worker function runs on every worker, each on its own thread of
# this process (worker 0 on the caller's), with the GIL taken for the call.
def test_python_function_on_worker_threads():
    seen = {}

    @disco.register_func("tests.threaded.where", override=True)
    def where(tag):
        seen[threading.get_ident()] = tag
        return os.getpid()

    with open_threaded(3) as s:
        r = s.get_global_func("tests.threaded.where")("x")
        assert [r.debug_get_from_remote(i) for i in range(3)] == [os.getpid()] * 3
        assert len(seen) == 3 and threading.get_ident() in seen
        assert [s.worker_pid(i) for i in range(3)] == [os.getpid()] * 3


# A function registered after the session opened exists on its workers
# (they share this process's table), unlike forked workers.
def test_function_registered_after_open():
    with open_threaded(2) as s:
        @disco.register_func("tests.threaded.late", override=True)
        def late(x):
            return x * 2

        r = s.get_global_func("tests.threaded.late")(21)
        assert r.debug_get_from_remote(1) == 42


# A Python exception on a worker thread: RemoteError naming the worker and
# the function; the session goes on.
def test_python_exception_names_worker():
    @disco.register_func("tests.threaded.fail_on_1", override=True)
    def fail_on_1():
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("thread says no")

    with open_threaded(2) as s:
        s.get_global_func("tests.threaded.fail_on_1")()
        with pytest.raises(error_class(CODE["E_REMOTE"])) as ei:
            s.sync_worker(1)
        assert "worker 1" in str(ei.value) and "thread says no" in str(ei.value)
        assert s.get_global_func("disco.worker_id")().debug_get_from_remote(1) == 1


# A C worker function that hangs ends the sync at the deadline
# (DeadlineError), not in a hang; shutdown then leaves no thread behind.
def test_hang_times_out():
    before = threads_now()
    s = open_threaded(2, call_timeout_ms=1000)
    s.load_library(TESTLIB)
    sync_all(s)
    s.get_global_func("test.hang")(1)
    with pytest.raises(error_class(CODE["E_TIMEOUT"])):
        s.sync_worker(1)
    s.shutdown()
    del s
    gc.collect()
    assert threads_now() == before


# Open, use and close many sessions: no thread and no fd is left behind.
def test_close_leaves_nothing():
    threads, fds = threads_now(), len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with open_threaded(4) as s:
            s.allreduce(s.empty((16,), "float32"), op="sum")
            sync_all(s)
    del s
    gc.collect()
    assert threads_now() == threads
    assert len(os.listdir("/proc/self/fd")) == fds


# Device tensors are refused in a threaded session, saying why.
def test_device_tensors_refused(bare):
    with pytest.raises(error_class(CODE["E_UNSUPPORTED"])) as ei:
        bare.empty((4,), "float32", device=disco.sim(0))
        sync_all(bare)
    assert "threaded session" in str(ei.value)


# ---- init_ccl (both session kinds) ----

KINDS = [disco.ProcessSession, disco.ThreadedSession]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("ccl", ["cpu", "cpuccl", "disco", "shm", "CPU"])
def test_init_ccl_cpu(kind, ccl):
    with kind(2, call_timeout_ms=CALL_TIMEOUT_MS) as s:
        s.init_ccl(ccl, 0, 1)
        x = s.empty((3,), "float32")
        dev = x.debug_get_from_remote(1).__dlpack_device__()
        assert tuple(int(d) for d in dev) == (1, 0)


# Arguments are checked: one id per worker, ints >= 0, a known name.
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_init_ccl_checks(kind):
    inval = error_class(CODE["E_INVAL"])
    with kind(2, call_timeout_ms=CALL_TIMEOUT_MS) as s:
        with pytest.raises(inval, match="2 workers"):
            s.init_ccl("cpu", 0)
        with pytest.raises(inval, match="negative"):
            s.init_ccl("cpu", 0, -1)
        with pytest.raises(TypeError):
            s.init_ccl("cpu", 0, 1.5)
        with pytest.raises(TypeError):
            s.init_ccl(3, 0, 1)
        with pytest.raises(inval, match="unknown ccl"):
            s.init_ccl("mpi", 0, 1)
        with pytest.raises(error_class(CODE["E_UNSUPPORTED"])):
            s.init_ccl("rccl", 0, 1)


# A GPU name: the ids must be disco's (worker i on device i mod count),
# else refused; then empty() with no device makes device tensors. On the
# simulated GPU (2 devices), in a child process: the sim device count,
# once read, stays for the process (test_errors' test_no_device needs none).
SIM_CHILD = """
import disco, pytest
with disco.ProcessSession(3, call_timeout_ms=5000) as s:
    with pytest.raises(disco.InvalidArgumentError, match="mod 2"):
        s.init_ccl("sim", 1, 0, 0)
    s.init_ccl("sim", 0, 1, 0)
    x = s.empty((4,), "float32")
    stats = s.get_global_func("disco.arena_stats")()  # [.., .., .., .., type, id, ...]
    for w in range(3):
        st = tuple(stats.debug_get_from_remote(w))
        assert st[4:6] == (12, w % 2), st
print("ok")
"""


def test_init_ccl_device_ids():
    env = dict(os.environ, DISCO_SIM_GPUS="2", DISCO_QUIET="1")
    r = subprocess.run([sys.executable, "-c", SIM_CHILD], env=env, capture_output=True,
                       text=True, timeout=50, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_init_ccl_device_refused_in_threads(monkeypatch):
    monkeypatch.setenv("DISCO_SIM_GPUS", "2")
    with open_threaded(2) as s:
        with pytest.raises(error_class(CODE["E_UNSUPPORTED"]), match="ThreadedSession"):
            s.init_ccl("sim", 0, 1)
