"""A default session's heap fits real tensors (issue 35, part 3): with no
heap_bytes, sess.empty((4096, 4096), "float32") (64 MiB) works on every
worker, where the old 16 MiB default raised HeapExhaustedError; the heap is
reserved (little backed at open) and backed as tensors use it."""

import numpy as np

from conftest import heap, open_session

def mem_total():
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0

def test_64mib_tensor_in_default_session():
    with open_session(2) as sess:
        st = heap(sess)
        assert st["capacity"] > 3 * 64 << 20, st
        total = mem_total()
        assert total == 0 or st["capacity"] <= total // 2, (st, total)
        assert st["backed_bytes"] < 1 << 20, st
        x = sess.empty((4096, 4096), "float32")
        a = np.random.default_rng(0).random((4096, 4096), dtype=np.float32)
        y = sess.broadcast(a)
        sess.allreduce(y, x, op="sum")
        out = np.empty_like(a)
        sess.copy_from_worker_0(out, x)
        np.testing.assert_array_equal(out, a + a)
        assert heap(sess)["backed_bytes"] >= 3 * 64 << 20
        del x, y
        sess.sync_all()
