"""The session: opening and closing, functions and their arguments, syncs,
libraries, spawned workers, profiling (issue 18, item 2's session calls)."""

import json
import os

import numpy as np
import pytest

import disco
from conftest import BIN, CODE, TESTLIB, error_class, open_session, pid_alive, sync_all


# num_workers is TVM's, and so are DPackedFunc (a DRef) and its session.
def test_open_num_workers_types(bare):
    assert bare.num_workers == 2
    f = bare.get_global_func("disco.worker_id")
    assert isinstance(f, disco.DPackedFunc)
    assert isinstance(f, disco.DRef)
    r = f()
    assert isinstance(r, disco.DRef)
    assert [r.debug_get_from_remote(i) for i in range(2)] == [0, 1]


# Each worker is its own process: worker 0 is the controller, the others are
# forked children, and worker_pid(i) names them.
def test_worker_pids(bare):
    assert bare.worker_pid(0) == os.getpid()
    p1 = bare.worker_pid(1)
    assert p1 != os.getpid() and pid_alive(p1)
    with open(f"/proc/{p1}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid == os.getpid()


# The session is a context manager: leaving the block shuts it down and
# reaps every worker.
def test_context_manager_reaps_workers():
    with open_session(3) as s:
        assert s.num_workers == 3
        pids = [s.worker_pid(i) for i in (1, 2)]
        assert all(pid_alive(p) for p in pids)
        s.get_global_func("disco.noop")()
        s.sync_worker(2)
    assert not any(pid_alive(p) for p in pids), "workers left after the with block"


# shutdown() reaps the workers; a later call raises ShutdownError; a second
# shutdown is harmless.
def test_shutdown(bare):
    p1 = bare.worker_pid(1)
    bare.shutdown()
    assert not pid_alive(p1)
    with pytest.raises(error_class(CODE["E_SHUTDOWN"])):
        bare.get_global_func("disco.noop")
    bare.shutdown()


# Sessions of 1 worker (the controller alone) and 4 work alike.
@pytest.mark.parametrize("n", [1, 4])
def test_world_size(n):
    with open_session(n) as s:
        ws = s.get_global_func("disco.world_size")()
        wid = s.get_global_func("disco.worker_id")()
        sync_all(s)
        assert [ws.debug_get_from_remote(i) for i in range(n)] == [n] * n
        assert [wid.debug_get_from_remote(i) for i in range(n)] == list(range(n))


# The pipe transport (as TVM's ProcessSession) runs the same calls.
def test_pipe_transport():
    with open_session(2, transport="pipe") as s:
        r = s.get_global_func("disco.worker_id")()
        s.sync_worker(1)
        assert r.debug_get_from_remote(1) == 1


# Arguments of every kind the issue lists reach the workers and come back as
# the same Python values (test.echo returns its argument).
@pytest.mark.parametrize(
    "value",
    [0, -(2**63), 2**63 - 1, 1.5, float("-inf"), "", "héllo wörld", b"", b"\x00\xffbytes",
     True, False],
    ids=repr,
)
def test_echo_scalars(sess, value):
    r = sess.get_global_func("test.echo")(value)
    for i in range(2):
        got = r.debug_get_from_remote(i)
        assert type(got) is type(value) and got == value, f"worker {i}: {got!r}"


# A tuple of ints is a shape.
def test_echo_shape(sess):
    r = sess.get_global_func("test.echo")((1, 2, 3))
    assert tuple(r.debug_get_from_remote(1)) == (1, 2, 3)


# "float32" strings stand for dtypes where the signature asks for one
# (test.fill's is "Sti": shape, dtype, int), and so do shapes as lists.
def test_dtype_string_and_shape_list(sess):
    x = sess.get_global_func("test.fill")([2, 3], "float32", 5)
    v = np.from_dlpack(x.debug_get_from_remote(1))
    assert v.shape == (2, 3) and v.dtype == np.float32


# A device argument: disco.cpu(0), as tvm.cpu(0).
def test_device_argument(sess):
    x = sess.empty((4,), "float32", device=disco.cpu(0))
    v = x.debug_get_from_remote(0)
    assert tuple(int(d) for d in v.__dlpack_device__()) == (1, 0)


# A DRef argument stands for the register's value on each worker.
def test_dref_argument(sess):
    wid = sess.get_global_func("disco.worker_id")()
    r = sess.get_global_func("test.add")(wid, 10)
    assert [r.debug_get_from_remote(i) for i in range(2)] == [10, 11]


# call_packed(func, *args) is the same call as func(*args).
def test_call_packed(sess):
    add = sess.get_global_func("test.add")
    r = sess.call_packed(add, 2, 40)
    assert r.debug_get_from_remote(1) == 42


# Calls are asynchronous and ordered: a slow call on worker 1 is finished by
# sync_worker(1), and a chain of calls sees every earlier result.
def test_sync_worker_orders_calls(sess):
    spin = sess.get_global_func("test.spin_on")
    add = sess.get_global_func("test.add")
    spin(1, 30)
    acc = add(0, 1)
    for _ in range(50):
        acc = add(acc, 1)
    sess.sync_worker(1)
    sess.sync_worker_0()
    assert acc.debug_get_from_remote(1) == 51


# sync_all waits for every worker with one command, and raises what any
# worker reported, naming it.
def test_sync_all(sess):
    spin = sess.get_global_func("test.spin_on")
    add = sess.get_global_func("test.add")
    spin(sess.num_workers - 1, 20)  # the last worker straggles
    acc = add(0, 1)
    for _ in range(20):
        acc = add(acc, 1)
    sess.sync_all()
    for w in range(sess.num_workers):
        assert acc.debug_get_from_remote(w) == 21
    sess.get_global_func("test.fail_on")(1, "boom all")
    with pytest.raises(disco.RemoteError) as ei:
        sess.sync_all()
    assert "worker 1" in str(ei.value) and "boom all" in str(ei.value)
    sess.sync_all()


# call_sync_all(f, *args) is the call and a sync of every worker in one: it
# returns once every worker ran it (a straggler too), with the result there;
# a failing call raises as sync_all does, naming the worker.
def test_call_sync_all(sess):
    spin = sess.get_global_func("test.spin_on")
    add = sess.get_global_func("test.add")
    acc = add(0, 1)
    for _ in range(5):
        acc = add(acc, 1)
    done = sess.call_sync_all(spin, sess.num_workers - 1, 20)  # waits for the straggler
    assert done.debug_get_from_remote(sess.num_workers - 1) is None
    r = sess.call_sync_all(add, acc, 10)
    for w in range(sess.num_workers):
        assert r.debug_get_from_remote(w) == 16
    with pytest.raises(disco.RemoteError) as ei:
        sess.call_sync_all(sess.get_global_func("test.fail_on"), 1, "boom fused")
    assert "worker 1" in str(ei.value) and "boom fused" in str(ei.value)
    with pytest.raises(disco.BadRegisterError):
        sess.call_sync_all(acc)  # a DRef that holds no function
    with pytest.raises(TypeError):
        sess.call_sync_all(3)
    sess.sync_all()


# load_library (TVM's load_vm_module) loads a library of DISCO_FUNCs into
# every worker.
def test_load_library(bare):
    bare.load_library(TESTLIB)
    sync_all(bare)
    r = bare.get_global_func("test.concat")("ab", "cd")
    assert r.debug_get_from_remote(1) == "abcd"


# Spawned workers are fresh processes (launch="spawn": a Python worker
# program, not a fork of this interpreter's image) that run the builtins
# and the libraries they load; so is the C worker program (worker_path).
@pytest.mark.parametrize("c_worker", [False, True], ids=["python-worker", "c-worker"])
def test_spawned_session(c_worker):
    kw = {"worker_path": str(BIN / "disco-worker")} if c_worker else {}
    with open_session(2, launch="spawn", **kw) as s:
        s.load_library(TESTLIB)
        sync_all(s)  # the workers have started (open does not wait for them)
        with open(f"/proc/{s.worker_pid(1)}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if c_worker:
            assert argv[0].endswith(b"disco-worker"), argv
        else:
            assert any(b"disco.worker" in a for a in argv), argv
        r = s.get_global_func("test.add")(s.get_global_func("disco.worker_id")(), 5)
        assert r.debug_get_from_remote(1) == 6
        x = s.broadcast(np.arange(4, dtype="float32"))
        y = s.allreduce(x, s.empty((4,), "float32"), "sum")
        sync_all(s)
        assert np.from_dlpack(y.debug_get_from_remote(1)).tolist() == [0, 2, 4, 6]


# trace() is the profiling summary as plain data (the shape of `disco trace
# --json`); write_trace() writes Perfetto's Chrome JSON.
def test_trace(bare, tmp_path):
    noop = bare.get_global_func("disco.noop")
    for _ in range(20):
        noop()
    bare.sync_worker(1)
    summary = bare.trace()
    json.dumps(summary)  # plain data: no wrapper objects
    assert summary["workers"] == 2
    funcs = {f["name"]: f["count"] for f in summary["per_function"]}
    assert funcs.get("disco.noop", 0) >= 20, funcs
    path = tmp_path / "trace.json"
    bare.write_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert any(e.get("name") == "disco.noop" for e in events)
