"""TVM's builtin names over disco's (issue 35, part 1): a TVM script's
``sess.get_global_func("runtime.disco.*")`` calls, in TVM's argument forms
(reduce kind as a ShapeTuple of one, destinations written in place, scatter
by element count), module-level ``disco.get_global_func`` and
``Session._sync_all``."""

import numpy as np
import pytest

import disco
from conftest import CODE, error_class, open_session


@pytest.fixture
def sess():
    s = open_session(2)
    yield s
    s.shutdown()


def tvm_empty(sess, shape, dtype="float32", worker0_only=False):
    # TVM's session.py: func(ShapeTuple(shape), dtype, device, worker0_only, in_group)
    return sess.get_global_func("runtime.disco.empty")(tuple(shape), dtype, None, worker0_only,
                                                       False)


# worker_id is a ShapeTuple of one, worker_rank an int, device cpu(0).
def test_identity(sess):
    wid = sess.get_global_func("runtime.disco.worker_id")()
    rank = sess.get_global_func("runtime.disco.worker_rank")()
    dev = sess.get_global_func("runtime.disco.device")()
    sess._sync_all()
    for w in range(2):
        assert tuple(wid.debug_get_from_remote(w)) == (w,)
        assert rank.debug_get_from_remote(w) == w
        assert dev.debug_get_from_remote(w) == disco.cpu(0)


# The collectives as TVM's session.py calls them, into the destination.
def test_collectives_in_tvm_form(sess):
    a = np.arange(36, dtype="float32").reshape(3, 4, 3)
    src = tvm_empty(sess, a.shape)
    src.debug_copy_from(0, a)
    src.debug_copy_from(1, a + 100)
    bcast = tvm_empty(sess, a.shape)
    sess.get_global_func("runtime.disco.broadcast_from_worker0")(src, False, bcast)
    red = tvm_empty(sess, a.shape)
    for kind, want in ((0, a + a + 100), (3, a + 100), (2, a)):  # sum, max, min
        sess.get_global_func("runtime.disco.allreduce")(src, (kind,), False, red)
        sess._sync_all()
        for w in range(2):
            np.testing.assert_array_equal(np.from_dlpack(red.debug_get_from_remote(w)), want)
    gat = tvm_empty(sess, (6, 4, 3))
    sess.get_global_func("runtime.disco.allgather")(src, False, gat)
    # TVM scatters by element count: (3,4,3) into two (3,3,2)
    piece = tvm_empty(sess, (3, 3, 2))
    sess.get_global_func("runtime.disco.scatter_from_worker0")(src, False, piece)
    back = tvm_empty(sess, (36,), worker0_only=True)
    sess.get_global_func("runtime.disco.gather_to_worker0")(piece, False, back)
    sess._sync_all()
    for w in range(2):
        np.testing.assert_array_equal(np.from_dlpack(bcast.debug_get_from_remote(w)), a)
        np.testing.assert_array_equal(np.from_dlpack(gat.debug_get_from_remote(w)),
                                      np.concatenate([a, a + 100]))
        np.testing.assert_array_equal(np.from_dlpack(piece.debug_get_from_remote(w)).ravel(),
                                      a.ravel()[18 * w:18 * (w + 1)])
    out = np.empty(36, "float32")
    sess.copy_from_worker_0(out, back)
    np.testing.assert_array_equal(out, a.ravel())


# A destination of another element count is refused on every worker with
# the counts named; the session goes on.
def test_wrong_destination(sess):
    src = tvm_empty(sess, (4,))
    bad = tvm_empty(sess, (3,))
    sess.get_global_func("runtime.disco.allreduce")(src, (0,), False, bad)
    with pytest.raises(error_class(CODE["E_MISMATCH"])) as ei:
        sess._sync_all()
    assert "3 elements" in str(ei.value) and "worker 1" in str(ei.value)
    sess._sync_all()


# runtime.disco._import_python_module imports on every worker.
def test_import_python_module(sess):
    sess.get_global_func("runtime.disco._import_python_module")("colorsys")
    sess._sync_all()


# disco.get_global_func: this process's functions, callable here.
def test_module_get_global_func():
    assert disco.get_global_func("disco.echo")(5) == 5
    assert disco.get_global_func("runtime.disco.worker_rank")() == 0
    assert disco.get_global_func("no.such.function", allow_missing=True) is None
    with pytest.raises(ValueError):
        disco.get_global_func("no.such.function")

    @disco.register_func("test_tvm_aliases.twice", override=True)
    def twice(x):
        return 2 * x

    assert disco.get_global_func("test_tvm_aliases.twice")(4) == 8
