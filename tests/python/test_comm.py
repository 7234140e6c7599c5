"""disco.comm: collectives and point-to-point inside Python worker
functions (issue 34, part 2), over NumPy arrays and torch CPU tensors,
fork and spawn, the world and 2 groups; disco Tensors in place; errors as
disco's exception classes."""

import numpy as np
import pytest

import comm_funcs  # noqa: F401  (registers pyt.comm.* for worker 0 and fork)
import disco
from conftest import CODE, error_class, open_session
from disco import comm


def _session(launch, groups=2):
    kw = {"launch": launch}
    if launch == "spawn":
        kw["imports"] = ("comm_funcs",)
    return open_session(4, groups, call_timeout_ms=30000, **kw)


@pytest.mark.parametrize("launch", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_every_operation(launch, kind):
    """allreduce (into dst, in place), allgather, broadcast, barrier,
    send/recv, send_to_next_group/recv_from_prev_group: float32 and int32,
    the world and 2 groups; each worker checks its results."""
    if kind == "torch":
        pytest.importorskip("torch")
    with _session(launch) as sess:
        f = sess.get_global_func("pyt.comm.all")
        for dtype in ("float32", "int32"):
            for in_group in (False, True):
                r = f(kind, dtype, in_group, 2)
                for w in range(4):
                    assert r.debug_get_from_remote(w) == "ok"


def test_disco_tensor_in_place():
    """A worker function's disco Tensor argument is reduced in place: the
    register holds the sum afterwards on every worker."""
    with _session("fork", 1) as sess:
        x = sess.empty((16,), "float32")
        sess.call_sync_all(sess.get_global_func("pyt.comm.inplace"), x)
        want = sum(comm_funcs._val(w, 16, "float32") for w in range(4))
        for w in range(4):
            got = np.from_dlpack(x.debug_get_from_remote(w))
            assert np.array_equal(got, want), (w, got)


def test_mismatch_is_disco_error():
    """Mismatched shapes: every member's call raises disco's MismatchError
    (code DISCO_E_MISMATCH) inside the function; the session stays usable."""
    with _session("fork", 1) as sess:
        r = sess.get_global_func("pyt.comm.mismatch")()
        cls = error_class(CODE["E_MISMATCH"])
        for w in range(4):
            assert r.debug_get_from_remote(w) == f"{cls.__name__}:{CODE['E_MISMATCH']}"
        r = sess.get_global_func("pyt.comm.all")("numpy", "float32", False, 4)
        assert r.debug_get_from_remote(3) == "ok"


def test_outside_a_worker_function():
    """Outside a worker function disco.comm raises disco's invalid-argument
    class, not a crash."""
    assert not comm.in_worker()
    with pytest.raises(error_class(CODE["E_INVAL"])):
        comm.rank()
    with pytest.raises(error_class(CODE["E_INVAL"])):
        comm.allreduce(np.ones(4, "float32"))
