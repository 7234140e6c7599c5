"""The session's collectives with a destination write it directly (issue 35
part 2): sess.allreduce(x, y), allgather, broadcast_from_worker0,
scatter_from_worker0, gather_to_worker0 and broadcast/scatter from a host
array call the builtins with an output argument (disco.allreduce_into and
the others), never a by-value builtin followed by disco.copy_into; the
destination is the caller's DRef, written in place; a wrong destination is
a named error."""

import numpy as np
import pytest

import disco
from conftest import heap, sync_all


def get(dref, worker):
    return np.from_dlpack(dref.debug_get_from_remote(worker))


def calls(sess):
    """{function name: calls so far} from the trace."""
    sync_all(sess)
    return {f["name"]: f["count"] for f in sess.trace()["per_function"]}


def new_calls(sess, before):
    """The functions (disco.*) called since before, with their counts."""
    after = calls(sess)
    return {k: v - before.get(k, 0) for k, v in after.items()
            if v != before.get(k, 0) and k.startswith("disco.")}


def filled(sess, shape, dtype, parts):
    x = sess.empty(shape, dtype)
    for w, part in enumerate(parts):
        x.debug_copy_from(w, np.asarray(part, dtype).reshape(shape))
    return x


# allreduce into y: y is returned (the same DRef), its bytes are the sum on
# every worker, a NumPy view of worker 0's y taken before shows it, and the
# only collective run is disco.allreduce_into (no copy_into, no new tensor).
def test_allreduce_writes_dst(sess):
    a = [np.arange(8, dtype="float32"), np.arange(8, dtype="float32") * 10]
    x = filled(sess, (8,), "float32", a)
    y = sess.empty((8,), "float32")
    view = get(y, 0)
    before = calls(sess)
    assert sess.allreduce(x, y) is y
    ran = new_calls(sess, before)
    assert ran.get("disco.allreduce_into") == 1, ran
    assert "disco.copy_into" not in ran and "disco.allreduce" not in ran, ran
    for w in range(2):
        np.testing.assert_equal(get(y, w), a[0] + a[1])
    np.testing.assert_equal(view, a[0] + a[1])


# allreduce in place (dst is src) is allowed and gives the reduction.
def test_allreduce_in_place(sess):
    a = [np.full(6, 2.0, "float32"), np.full(6, 5.0, "float32")]
    x = filled(sess, (6,), "float32", a)
    assert sess.allreduce(x, x, "max") is x
    sync_all(sess)
    for w in range(2):
        np.testing.assert_equal(get(x, w), np.full(6, 5.0, "float32"))


# allgather, gather_to_worker0, broadcast_from_worker0 and
# scatter_from_worker0 with a destination: each returns it, writes it, and
# runs its _into builtin only. Scatter splits by element count, as TVM does
# ((3, 4, 3) into two (3, 3, 2)); allgather accepts any shape of the count.
def test_each_into_builtin(sess):
    full = np.arange(36, dtype="float32")
    parts = [full[:18], full[18:]]
    x = filled(sess, (3, 3, 2), "float32", parts)
    dst = sess.empty((3, 4, 3), "float32")
    g0 = sess.empty((6, 3, 2), "float32", worker0_only=True)
    b = sess.empty((3, 3, 2), "float32")
    src0 = sess.empty((3, 4, 3), "float32", worker0_only=True)
    src0.debug_copy_from(0, full.reshape(3, 4, 3))
    sc = sess.empty((3, 3, 2), "float32")
    before = calls(sess)
    assert sess.allgather(x, dst) is dst
    assert sess.gather_to_worker0(x, g0) is g0
    assert sess.broadcast_from_worker0(x, b) is b
    assert sess.scatter_from_worker0(src0, sc) is sc
    ran = new_calls(sess, before)
    for name in ("allgather", "gather_to_worker0", "broadcast_from_worker0",
                 "scatter_from_worker0"):
        assert ran.get(f"disco.{name}_into") == 1, ran
        assert f"disco.{name}" not in ran, ran
    assert "disco.copy_into" not in ran, ran
    for w in range(2):
        np.testing.assert_equal(get(dst, w).ravel(), full)
        np.testing.assert_equal(get(b, w).ravel(), parts[0])
        np.testing.assert_equal(get(sc, w).ravel(), parts[w])
    np.testing.assert_equal(get(g0, 0).ravel(), full)


# broadcast(host array, dst): the bytes go into worker 0's dst and from
# there into worker 1's; no tensor is made on the way (no disco.empty, no
# copy_into), and the heap holds the same blocks after.
def test_broadcast_host_into_dst(sess):
    array = np.arange(12, dtype="float32").reshape(3, 4)
    dst = sess.empty((3, 4), "float32")
    sync_all(sess)
    blocks = heap(sess)["live_blocks"]
    before = calls(sess)
    assert sess.broadcast(array, dst) is dst
    ran = new_calls(sess, before)
    assert ran == {"disco.broadcast_from_worker0_into": 1}, ran
    assert heap(sess)["live_blocks"] == blocks
    for w in range(2):
        np.testing.assert_equal(get(dst, w), array)


# scatter(host array, dst): worker i gets row i in dst, by the _into builtin.
def test_scatter_host_into_dst(sess):
    array = np.arange(24, dtype="int32").reshape(2, 4, 3)
    dst = sess.empty((4, 3), "int32")
    before = calls(sess)
    assert sess.scatter(array, dst) is dst
    ran = new_calls(sess, before)
    assert ran.get("disco.scatter_from_worker0_into") == 1 and "disco.copy_into" not in ran, ran
    for w in range(2):
        np.testing.assert_equal(get(dst, w), array[w])


# A destination of another dtype, element count, or one that overlaps the
# source, is a named error from the sync (the builtin and "out" in the
# message), and the session goes on.
@pytest.mark.parametrize("case", ["allreduce_shape", "allreduce_dtype", "allgather_count",
                                  "scatter_overlap", "broadcast_dtype", "scatter_count",
                                  "gather_count"])
def test_bad_destination(sess, case):
    x = filled(sess, (4,), "float32", [np.ones(4), np.ones(4)])
    wrong = {
        "allreduce_shape": (lambda: sess.allreduce(x, sess.empty((2, 2), "float32")),
                            disco.MismatchError, "allreduce_into: out is float32 of shape [2, 2]"),
        "allreduce_dtype": (lambda: sess.allreduce(x, sess.empty((4,), "int32")),
                            disco.MismatchError, "out is int32"),
        "allgather_count": (lambda: sess.allgather(x, sess.empty((4,), "float32")),
                            disco.MismatchError, "allgather_into: out is float32 with 4 "
                                                 "elements on device type 0; it must be "
                                                 "float32 with 8"),
        "scatter_overlap": (lambda: sess.scatter_from_worker0(x, x), disco.InvalidArgumentError,
                            "scatter_from_worker0_into: out overlaps x"),
        "broadcast_dtype": (lambda: sess.broadcast_from_worker0(x, sess.empty((4,), "float64")),
                            disco.MismatchError, "it must be float32 with 4 elements"),
        "scatter_count": (lambda: sess.scatter_from_worker0(x, sess.empty((3,), "float32")),
                          disco.MismatchError, "it must be float32 with 2 elements"),
        "gather_count": (lambda: sess.gather_to_worker0(x, sess.empty((4,), "float32")),
                         disco.MismatchError, "it must be float32 with 8 elements"),
    }
    call, cls, says = wrong[case]
    call()
    with pytest.raises(cls, match=says.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        sync_all(sess)
    sync_all(sess)  # reported once
    y = sess.empty((4,), "float32")
    sess.allreduce(x, y)
    sync_all(sess)
    np.testing.assert_equal(get(y, 1), np.full(4, 2.0, "float32"))
