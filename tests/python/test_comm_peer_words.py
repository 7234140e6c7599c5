"""disco.comm: a call that fails in Python on its own argument fails its
peers with the Python reason (python/disco/_comm.c, disco__comm_fail_next
in workers/data/comm_impl.h), and that reason is the failed call's alone.
The send/recv cases are in test_comm_misuse.py (CASES, worker 1's entry)."""

import numpy as np
import pytest

import disco
from conftest import open_session
from disco import comm


def f32(n=4, v=1.0):
    return np.full(n, v, "float32")


@disco.register_func("pyt.peerwords.unpaired_then_allreduce")
def _unpaired_then_allreduce():
    """Every worker sends a bad array to itself (no peer: nothing to pair
    with, comm.h refuses the peer), then allreduces. Returns what each
    call did."""
    out = []
    try:
        comm.send(memoryview(b"abcdefgh")[::2], comm.rank())
        out.append("send passed")
    except BaseException as e:  # noqa: B902
        out.append(type(e).__name__)
    x = f32(4, 1.0)
    try:
        comm.allreduce(x, in_group=False)
        out.append(f"allreduce {x[0]:g}")
    except BaseException as e:  # noqa: B902
        out.append(f"{type(e).__name__}: {e}")
    return "; ".join(out)


def test_unpaired_failure_is_not_left_for_the_next_call():
    """The Python reason a refused send carries is that send's even when
    it has no peer to pair with: the command's next collective runs."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        r = sess.get_global_func("pyt.peerwords.unpaired_then_allreduce")()
        for w in range(2):
            assert r.debug_get_from_remote(w) == "ValueError; allreduce 2", \
                (w, r.debug_get_from_remote(w))


@disco.register_func("pyt.peerwords.bad_src")
def _bad_src(how):
    """Worker 1's call fails in Python on its argument (how: "allreduce", an
    src that is no tensor; "barrier_after", the same, then a barrier);
    worker 0's good call meets it. Returns what worker 0's call raised."""
    me = comm.rank()
    try:
        comm.allreduce(None if me == 1 else f32(), in_group=False)
    except BaseException as e:  # noqa: B902
        out = f"{type(e).__name__}: {e}"
    else:
        out = "no error"
    if how == "barrier_after":  # the failure was taken by the allreduce, not left for this
        comm.barrier(in_group=False)
        out += "; barrier ok"
    return out


@pytest.mark.parametrize("how", ["allreduce", "barrier_after"])
def test_peer_quotes_python_reason(how):
    """A collective whose src worker 1's disco.comm refused (TypeError,
    before C saw it) fails on worker 0 with an error that names worker 1
    and quotes the Python reason, not C's words for a call with no tensors
    ("in and out must have one dtype"); the next collective meets."""
    with open_session(2, 1, call_timeout_ms=10000) as sess:
        r = sess.get_global_func("pyt.peerwords.bad_src")(how)
        w0, w1 = r.debug_get_from_remote(0), r.debug_get_from_remote(1)
        assert "worker 1" in w0 and "TypeError: disco.comm.allreduce: src" in w0, w0
        assert "must have one dtype" not in w0, w0
        assert w1.startswith("TypeError: disco.comm.allreduce: src"), w1
        if how == "barrier_after":
            assert w0.endswith("; barrier ok") and w1.endswith("; barrier ok"), (w0, w1)
