"""Reference counting: a DRef frees its register (and with it the heap
blocks its tensors hold on every worker) when it is collected; a DLPack
consumer keeps the register it views alive; nothing is left once the
objects die, by the heap's statistics and by the register ids."""

import gc
import os
import weakref

import numpy as np
import pytest

from conftest import heap, open_session, pid_alive, sync_all


def live(sess):
    """Live heap blocks once every worker has run every free sent so far."""
    gc.collect()
    sync_all(sess)
    return heap(sess)["live_blocks"]


# heap_stats() is disco_heap_stats_t as a dict.
def test_heap_stats_fields(sess):
    st = heap(sess)
    for k in ("capacity", "used_bytes", "free_bytes", "largest_free", "live_blocks",
              "free_blocks", "recoveries", "backed_bytes"):
        assert isinstance(st[k], int), k
    assert st["used_bytes"] + st["free_bytes"] == st["capacity"]


# The heap is backed as tensors reach it: a tensor past the backed mark
# raises backed_bytes to cover it, and its bytes round-trip.
def test_heap_backed_as_used(sess):
    before = heap(sess)["backed_bytes"]
    n = (before // 4) + (1 << 20)  # past what is backed now
    assert n * 4 * 2 < heap(sess)["capacity"], "the fixture's heap is too small for this test"
    x = sess.empty((n,), "float32", worker0_only=True)
    after = heap(sess)["backed_bytes"]
    assert after > before and after >= n * 4
    host = np.arange(n, dtype=np.float32)
    x.debug_copy_from(0, host)
    assert np.array_equal(np.from_dlpack(x.debug_get_from_remote(0)), host)
    del x


# A tensor on every worker is one block per worker, freed with its DRef; on
# worker 0 only, one block.
def test_empty_freed(sess):
    base = live(sess)
    x = sess.empty((256,), "float32")
    assert live(sess) == base + 2
    del x
    assert live(sess) == base
    y = sess.empty((256,), "float32", worker0_only=True)
    assert live(sess) == base + 1
    del y
    assert live(sess) == base


# Results dropped at once, call after call (C and Python functions, copies,
# collectives into given outputs), leave no block behind.
def test_dropped_results_leave_nothing(sess):
    base = live(sess)
    used = heap(sess)["used_bytes"]
    fill = sess.get_global_func("test.fill")
    for i in range(200):
        fill((64,), "float32", i)
    for _ in range(50):
        sess.copy_to_worker_0(np.arange(32, dtype="float32"))
    src = fill((32,), "float32", 1)
    for _ in range(20):
        dst = sess.empty((32,), "float32")
        sess.allreduce(src, dst, "sum")
        sess.broadcast(np.zeros(8, "int32"))
        sess.scatter(np.zeros((2, 4), "int32"))
    del src, dst
    assert live(sess) == base
    assert heap(sess)["used_bytes"] == used


# A tensor shared by two registers (test.echo returns its argument) lives
# until the last of them dies.
def test_shared_block_lives_until_last_ref(sess):
    base = live(sess)
    y = sess.get_global_func("test.fill")((16,), "float32", 0)
    z = sess.get_global_func("test.echo")(y)
    del y
    assert live(sess) == base + 2
    np.testing.assert_equal(np.from_dlpack(z.debug_get_from_remote(1)).shape, (16,))
    del z
    assert live(sess) == base


# Register ids come back: a thousand results dropped one by one never push
# the ids beyond a few past the first (ids are reused last-in first-out), so
# no register is left behind; function DRefs the same.
def test_register_ids_recycled(sess):
    f = sess.get_global_func("disco.worker_id")
    r = f()
    first = r.reg
    del r
    top = first
    for _ in range(1000):
        top = max(top, f().reg)
    for _ in range(100):
        top = max(top, sess.get_global_func("test.add").reg)
    sync_all(sess)
    assert top <= first + 8, f"register ids grew from {first} to {top}: registers leak"


# The DLPack lifetime rule: a consumer's array keeps worker 0's heap block
# alive after the DRef dies (its register is freed), and frees it when it
# dies.
def test_view_keeps_register_alive(sess):
    base = live(sess)
    x = sess.copy_to_worker_0(np.arange(1000, dtype="float64"))
    a = np.from_dlpack(x.debug_get_from_remote(0))
    del x
    assert live(sess) == base + 1, "the block was freed under a live view"
    np.testing.assert_equal(a, np.arange(1000, dtype="float64"))
    del a
    assert live(sess) == base


# A view keeps the heap mapped after shutdown(): its bytes stay readable
# until it goes (the Tensor holds the session object).
def test_view_outlives_shutdown():
    s = open_session(2)
    x = s.copy_to_worker_0(np.arange(16, dtype="int32"))
    a = np.from_dlpack(x.debug_get_from_remote(0))
    del x
    s.shutdown()
    del s
    gc.collect()
    assert a.tolist() == list(range(16))


# A tensor value fetched from worker 1 stays valid after its DRef dies, and
# nothing is left once both are gone.
def test_worker1_value_outlives_dref(sess):
    base = live(sess)
    x = sess.empty((10,), "int32")
    x.debug_copy_from(1, np.arange(10, dtype="int32"))
    a = np.from_dlpack(x.debug_get_from_remote(1))
    del x
    gc.collect()
    sync_all(sess)
    assert a.tolist() == list(range(10))
    del a
    assert live(sess) == base


# A session nobody refers to any more is closed when collected: its workers
# are reaped.
def test_session_collected():
    s = open_session(2)
    pid = s.worker_pid(1)
    s.get_global_func("disco.noop")()
    del s
    gc.collect()
    assert not pid_alive(pid)


def _segment_maps():
    """Mappings of this process that are disco segments (memfds)."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
        return sum(1 for line in f if "memfd:" in line)


# A session that ran a collective caches the collective's function, which
# refers back to the session: the cycle collector still frees it once
# nobody else refers to it (DRef and DPackedFunc take part in it), shut
# down first or not. Its segment fd and mapping go with it.
@pytest.mark.parametrize("shut", [True, False])
def test_session_with_collective_collected(shut):
    gc.collect()
    fds, maps = len(os.listdir("/proc/self/fd")), _segment_maps()
    s = open_session(2)
    pid = s.worker_pid(1)
    x = s.empty((16,), "float32")
    s.allreduce(x, op="sum")
    sync_all(s)
    del x
    if shut:
        s.shutdown()
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None, "the session outlived its last reference"
    assert not pid_alive(pid)
    assert len(os.listdir("/proc/self/fd")) == fds
    assert _segment_maps() == maps
