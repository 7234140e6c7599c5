"""Errors that arrive late (issue 33, section 3): a failure that is still
pending, not yet returned by a sync, is raised by the next read of a
tensor, whatever read it is. The Python front calls the C API, which
collects the workers' pending errors on every read path
(scheduler/session/session_tensor.c); before, worker 0's reads returned
the bytes a failed collective left behind and the error waited for the
next sync."""

import numpy as np
import pytest

import disco
from conftest import sync_all


def failed_allreduce(sess, dst):
    """An allreduce that fails on every worker (an op the C builtin does not
    know; the Python method checks its op first), copied into dst as the
    Python collectives do: dst keeps its old bytes."""
    res = sess.get_global_func("disco.allreduce")(dst, "no-such-op", True)
    sess.get_global_func("disco.copy_into")(dst, res)


# After a failed collective, debug_get_from_remote(0) of its destination and
# copy_from_worker_0 raise the failure instead of returning the stale bytes;
# once raised, the error is gone and the same reads work; the session goes on.
def test_reads_raise_pending_failure(sess):
    x = sess.empty((4,), "float32")
    x.debug_copy_from(0, np.arange(4, dtype="float32"))
    sync_all(sess)

    failed_allreduce(sess, x)
    with pytest.raises(disco.DiscoError) as e:
        x.debug_get_from_remote(0)
    assert "worker 0: disco.allreduce" in str(e.value)
    np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(0)),
                                  np.arange(4, dtype="float32"))
    sync_all(sess)  # worker 1's failure of the same call

    failed_allreduce(sess, x)
    out = np.full(4, -1.0, "float32")
    with pytest.raises(disco.DiscoError) as e:
        sess.copy_from_worker_0(out, x)
    assert "worker 0: disco.allreduce" in str(e.value)
    np.testing.assert_array_equal(out, np.full(4, -1.0, "float32"))  # untouched
    sess.copy_from_worker_0(out, x)
    np.testing.assert_array_equal(out, np.arange(4, dtype="float32"))
    sync_all(sess)
