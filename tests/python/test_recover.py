"""sess.recover(): a session broken by a killed worker comes back without
closing (disco_session_recover). Each test says what it proves."""

import gc
import os
import signal

import numpy as np
import pytest

import disco
import spawn_funcs  # noqa: F401  (worker 0's copy of the spawned workers' functions)
from conftest import TESTLIB, heap, open_session, pid_alive, sync_all


def kill_and_see(sess, worker):
    os.kill(sess.worker_pid(worker), signal.SIGKILL)
    with pytest.raises(disco.WorkerDiedError, match="signal 9"):
        sess.sync_worker(worker)
    with pytest.raises(disco.SessionBrokenError):
        sess.sync_worker(0)


def allreduce_ok(sess):
    """An allreduce over every worker gives n * x exactly."""
    x = sess.broadcast(np.arange(16, dtype="float32"))
    y = sess.empty((16,), "float32")
    sess.allreduce(x, y, op="sum")
    out = np.empty(16, "float32")
    sess.copy_from_worker_0(out, y)
    assert np.array_equal(out, sess.num_workers * np.arange(16, dtype="float32"))


# Kill -9 a worker, recover, run again: the library's function answers on
# every worker (the library was loaded again), the collectives work (their
# cached functions were dropped), every worker 1..N-1 is a new process, and
# an old DRef raises BadRegisterError saying it was lost in a recovery.
@pytest.mark.parametrize("launch", ["fork", "spawn"])
def test_kill_recover_run(launch):
    with open_session(4, launch=launch, worker_path=disco.worker_program() if launch == "spawn"
                      else None) as sess:
        sess.load_library(TESTLIB)
        add = sess.get_global_func("test.add")
        old = add(1, 2)
        allreduce_ok(sess)
        pids = [sess.worker_pid(i) for i in range(4)]
        kill_and_see(sess, 2)
        sess.recover()
        assert sess.health()[0] == 0
        for i in range(1, 4):
            assert sess.worker_pid(i) != pids[i]
            assert not pid_alive(pids[i])
        with pytest.raises(disco.BadRegisterError, match="lost in a recovery") as e:
            old.debug_get_from_remote(1)
        assert e.value.code == -15
        with pytest.raises(disco.BadRegisterError, match="lost in a recovery"):
            add(1, 2)
        add = sess.get_global_func("test.add")
        wid = sess.get_global_func("disco.worker_id")()
        r = add(wid, 10)
        sync_all(sess)
        assert [r.debug_get_from_remote(i) for i in range(4)] == [10, 11, 12, 13]
        allreduce_ok(sess)
        del old  # a lost DRef collected: quiet
        gc.collect()
        sync_all(sess)


# The heap after a recovery holds only what Python still holds: a Tensor
# view of a dead worker's tensor keeps its bytes; once it goes, nothing.
def test_heap_and_views():
    with open_session(3) as sess:
        x = sess.broadcast(np.arange(64, dtype="float32"))
        y = sess.empty((64,), "float32")
        sess.allreduce(x, y, op="sum")
        sync_all(sess)
        view = y.debug_get_from_remote(1)  # worker 1's block, held by this view
        before = np.array(view.numpy())
        kill_and_see(sess, 1)
        sess.recover()
        assert heap(sess)["live_blocks"] == 1
        allreduce_ok(sess)
        sync_all(sess)
        assert np.array_equal(view.numpy(), before)
        del view, x, y
        gc.collect()
        sync_all(sess)
        assert heap(sess)["live_blocks"] == 0


# recover after shutdown raises SessionShutdownError.
def test_after_shutdown():
    sess = open_session(2)
    sess.shutdown()
    with pytest.raises(disco.SessionShutdownError):
        sess.recover()


# Spawned Python workers (disco-py-worker, imports=...) are spawned again
# with the same environment: the imported module's functions run on the
# new workers, and a module imported later (import_python_module) is
# imported again.
def test_spawned_python_workers():
    with open_session(3, launch="spawn", imports=("spawn_funcs",)) as sess:
        pid = sess.get_global_func("pyt.spawn.pid")
        r = pid()
        sync_all(sess)
        before = [r.debug_get_from_remote(i) for i in range(3)]
        kill_and_see(sess, 1)
        sess.recover()
        r = sess.get_global_func("pyt.spawn.pid")()
        sync_all(sess)
        after = [r.debug_get_from_remote(i) for i in range(3)]
        assert after[0] == before[0] == os.getpid()
        assert after[1:] == [sess.worker_pid(1), sess.worker_pid(2)]
        assert after[1] != before[1]
