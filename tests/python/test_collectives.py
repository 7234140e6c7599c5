"""Every collective of the session, checked against NumPy, in TVM's calling
shapes (tests/python/disco/test_ccl.py in apache/tvm): broadcast, scatter,
gather_to_worker0, allreduce (every op), allgather; in groups too."""

import numpy as np
import pytest

from conftest import sync_all

OPS = [
    ("sum", np.add),
    ("prod", np.multiply),
    ("min", np.minimum),
    ("max", np.maximum),
    ("avg", lambda a, b: (a + b) * 0.5),
]


def get(dref, worker):
    return np.from_dlpack(dref.debug_get_from_remote(worker))


# allreduce(src, dst, op) writes op over the workers' src into every
# worker's dst, for every op (float32), as NumPy computes it.
@pytest.mark.parametrize("op,np_op", OPS, ids=[o for o, _ in OPS])
def test_allreduce_ops(sess, op, np_op):
    a1 = np.arange(12, dtype="float32").reshape(3, 4)
    a2 = np.arange(start=1, stop=-11, step=-1, dtype="float32").reshape(3, 4)
    src = sess.empty((3, 4), "float32")
    src.debug_copy_from(0, a1)
    src.debug_copy_from(1, a2)
    dst = sess.empty((3, 4), "float32")
    sess.allreduce(src, dst, op=op)
    sess.sync_worker(1)
    for w in range(2):
        np.testing.assert_equal(get(dst, w), np_op(a1, a2))


# Integer and half dtypes: sums and extrema as NumPy gives them.
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "float64", "uint8"])
def test_allreduce_dtypes(sess, dtype):
    a1 = (np.arange(10) % 7).astype(dtype)
    a2 = (np.arange(10)[::-1] % 5).astype(dtype)
    src = sess.empty((10,), dtype)
    src.debug_copy_from(0, a1)
    src.debug_copy_from(1, a2)
    for op, np_op in [("sum", np.add), ("max", np.maximum)]:
        dst = sess.empty((10,), dtype)
        sess.allreduce(src, dst, op)
        sess.sync_worker(1)
        for w in range(2):
            np.testing.assert_equal(get(dst, w), np_op(a1, a2).astype(dtype))


# A NumPy view of worker 0's dst taken before the allreduce shows its result
# afterwards: the collective writes the heap bytes the view maps.
def test_allreduce_into_live_view(sess):
    src = sess.empty((4,), "float32")
    src.debug_copy_from(0, np.ones(4, "float32"))
    src.debug_copy_from(1, np.full(4, 2.0, "float32"))
    dst = sess.empty((4,), "float32")
    dst.debug_copy_from(0, np.zeros(4, "float32"))
    view = get(dst, 0)
    sess.allreduce(src, dst, "sum")
    sess.sync_worker(1)
    assert view.tolist() == [3.0] * 4


# allgather(src, dst): every worker's dst holds the workers' src bytes one
# after the other (TVM's shapes: (3, 3, 2) each into (3, 4, 3)).
def test_allgather(sess):
    array = np.arange(36, dtype="float32")
    src = sess.empty((3, 3, 2), "float32")
    dst = sess.empty((3, 4, 3), "float32")
    src.debug_copy_from(0, array[:18].reshape(3, 3, 2))
    src.debug_copy_from(1, array[18:].reshape(3, 3, 2))
    sess.allgather(src, dst)
    sess.sync_worker(1)
    for w in range(2):
        np.testing.assert_equal(get(dst, w), array.reshape(3, 4, 3))


# broadcast(host array) copies it to worker 0 and shares it with everyone;
# with dst given it fills dst and returns it.
@pytest.mark.parametrize("explicit", [False, True])
def test_broadcast(sess, explicit):
    array = np.arange(12, dtype="float32").reshape(3, 4)
    if explicit:
        dst = sess.empty((3, 4), "float32")
        out = sess.broadcast(array, dst)
    else:
        out = sess.broadcast(array)
    sess.sync_worker(1)
    for w in range(2):
        np.testing.assert_equal(get(out, w), array)
    if explicit:
        np.testing.assert_equal(get(dst, 1), array)


# broadcast_from_worker0(src, dst) with src on worker 0 only.
def test_broadcast_from_worker0(sess):
    array = np.arange(12, dtype="int64").reshape(3, 4) - 6
    src = sess.empty((3, 4), "int64", worker0_only=True)
    src.debug_copy_from(0, array)
    dst = sess.empty((3, 4), "int64")
    sess.broadcast_from_worker0(src, dst)
    sess.sync_worker(1)
    np.testing.assert_equal(get(dst, 1), array)


# scatter(host array of shape (workers, ...)): worker i gets row i; with dst
# given, into dst.
@pytest.mark.parametrize("explicit", [False, True])
def test_scatter(sess, explicit):
    array = np.arange(36, dtype="float32").reshape(2, 6, 3)
    if explicit:
        d_src = sess.empty((2, 6, 3), "float32", worker0_only=True)
        d_dst = sess.empty((6, 3), "float32")
        d_src.debug_copy_from(0, array)
        sess.scatter_from_worker0(d_src, d_dst)
    else:
        d_dst = sess.scatter(array)
    sess.sync_worker(1)
    for w in range(2):
        np.testing.assert_equal(get(d_dst, w), array[w])


# gather_to_worker0(src, dst): worker 0's dst holds every worker's src
# stacked along dimension 0.
def test_gather_to_worker0(sess):
    parts = [np.arange(6, dtype="int32").reshape(2, 3) + 100 * w for w in range(2)]
    src = sess.empty((2, 3), "int32")
    for w in range(2):
        src.debug_copy_from(w, parts[w])
    dst = sess.empty((2, 2, 3), "int32", worker0_only=True)
    sess.gather_to_worker0(src, dst)
    sess.sync_worker(1)
    np.testing.assert_equal(get(dst, 0), np.stack(parts))


# The C builtins are functions like any other: disco.allreduce(x, op,
# in_group) returns a new register, here over test.fill's per-worker values.
def test_builtin_collective_call(sess):
    x = sess.get_global_func("test.fill")((64,), "float64", 2)
    y = sess.get_global_func("disco.allreduce")(x, "sum", False)
    sess.sync_worker(1)
    want = sum(((np.arange(64) * 7 + w * 13 + 2) % 17 - 8) * 0.5 for w in range(2))
    for w in range(2):
        np.testing.assert_equal(get(y, w), want)


# ---- groups: 4 workers in 2 groups, {0, 1} and {2, 3} ----

A1 = np.arange(12, dtype="float32").reshape(3, 4)
A2 = np.arange(start=1, stop=-11, step=-1, dtype="float32").reshape(3, 4)
A3 = np.arange(30, dtype="float32").reshape(5, 6)
A4 = np.arange(start=1, stop=-29, step=-1, dtype="float32").reshape(5, 6)


# allreduce in groups: each group reduces its own members' tensors (TVM's
# test_group_allreduce, every op).
def test_group_allreduce(sess4):
    d1 = sess4.empty((3, 4), "float32")
    d2 = sess4.empty((5, 6), "float32")
    d1.debug_copy_from(0, A1)
    d1.debug_copy_from(1, A2)
    d2.debug_copy_from(2, A3)
    d2.debug_copy_from(3, A4)
    for op, np_op in OPS:
        o1 = sess4.empty((3, 4), "float32")
        o2 = sess4.empty((5, 6), "float32")
        sess4.allreduce(d1, o1, op=op, in_group=True)
        sess4.allreduce(d2, o2, op=op, in_group=True)
        sync_all(sess4)
        np.testing.assert_equal(get(o1, 0), np_op(A1, A2))
        np.testing.assert_equal(get(o1, 1), np_op(A1, A2))
        np.testing.assert_equal(get(o2, 2), np_op(A3, A4))
        np.testing.assert_equal(get(o2, 3), np_op(A3, A4))


# in_group=False reduces over all four workers.
def test_global_allreduce_in_groups(sess4):
    x = sess4.empty((4,), "float32")
    for w in range(4):
        x.debug_copy_from(w, np.full(4, w + 1, "float32"))
    y = sess4.empty((4,), "float32")
    sess4.allreduce(x, y, "sum", in_group=False)
    sync_all(sess4)
    for w in range(4):
        assert get(y, w).tolist() == [10.0] * 4


# allgather in groups (TVM's test_group_allgather).
def test_group_allgather(sess4):
    a1 = np.arange(36, dtype="float32")
    a2 = np.arange(48, dtype="float32")
    s1 = sess4.empty((3, 3, 2), "float32")
    o1 = sess4.empty((3, 4, 3), "float32")
    s2 = sess4.empty((2, 4, 3), "float32")
    o2 = sess4.empty((2, 6, 4), "float32")
    s1.debug_copy_from(0, a1[:18].reshape(3, 3, 2))
    s1.debug_copy_from(1, a1[18:].reshape(3, 3, 2))
    s2.debug_copy_from(2, a2[:24].reshape(2, 4, 3))
    s2.debug_copy_from(3, a2[24:].reshape(2, 4, 3))
    sess4.allgather(s1, o1, in_group=True)
    sess4.allgather(s2, o2, in_group=True)
    sync_all(sess4)
    for w in (0, 1):
        np.testing.assert_equal(get(o1, w), a1.reshape(3, 4, 3))
    for w in (2, 3):
        np.testing.assert_equal(get(o2, w), a2.reshape(2, 6, 4))


# broadcast in groups: each group's first worker is its source (TVM's
# test_group_broadcast: worker0_only with in_group makes it on 0 and 2).
def test_group_broadcast(sess4):
    src = sess4.empty((3, 4), "float32", worker0_only=True, in_group=True)
    src.debug_copy_from(0, A1)
    src.debug_copy_from(2, -A1)
    dst = sess4.empty((3, 4), "float32")
    sess4.broadcast_from_worker0(src, dst)
    sync_all(sess4)
    np.testing.assert_equal(get(dst, 1), A1)
    np.testing.assert_equal(get(dst, 3), -A1)


# scatter in groups (TVM's test_group_scatter).
def test_group_scatter(sess4):
    a1 = np.arange(36, dtype="float32").reshape(2, 6, 3)
    src = sess4.empty((2, 6, 3), "float32", worker0_only=True, in_group=True)
    src.debug_copy_from(0, a1)
    src.debug_copy_from(2, -a1)
    dst = sess4.empty((6, 3), "float32")
    sess4.scatter_from_worker0(src, dst)
    sync_all(sess4)
    np.testing.assert_equal(get(dst, 0), a1[0])
    np.testing.assert_equal(get(dst, 1), a1[1])
    np.testing.assert_equal(get(dst, 2), -a1[0])
    np.testing.assert_equal(get(dst, 3), -a1[1])


# gather in groups: each group's first worker gets its members' tensors.
def test_group_gather(sess4):
    src = sess4.empty((3,), "int32")
    for w in range(4):
        src.debug_copy_from(w, np.full(3, w, "int32"))
    dst = sess4.empty((2, 3), "int32", worker0_only=True, in_group=True)
    sess4.gather_to_worker0(src, dst, in_group=True)
    sync_all(sess4)
    np.testing.assert_equal(get(dst, 0), [[0] * 3, [1] * 3])
    np.testing.assert_equal(get(dst, 2), [[2] * 3, [3] * 3])
