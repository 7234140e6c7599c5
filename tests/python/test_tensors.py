"""Tensors through NumPy: copies to and from worker 0, empty, the debug
copies, and DLPack out of the shared heap without a copy (issue 18, items 2
and 3). PyTorch's side is test_torch.py."""

import array
import ctypes

import numpy as np
import pytest

import disco
from conftest import writable

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


@disco.register_func("pyt.tensors.fill")
def _fill(x, value):
    """Writes value into every element of this worker's x (null: nothing)."""
    if x is not None:
        writable(x)[...] = value


def sample(dtype, shape=(3, 5), seed=0):
    """Exact small values of dtype."""
    v = (np.arange(int(np.prod(shape))) * 7 + seed) % 17 - 8
    if dtype == "bool":
        return (v % 2 == 0).reshape(shape)
    if dtype == "uint8":
        v = v + 8
    return v.astype(dtype).reshape(shape)


def pattern(seed, worker, n, dtype="float32"):
    """test.fill's values (tests/testlib.c) for float dtypes."""
    i = np.arange(n)
    return (((i * 7 + worker * 13 + seed) % 17 - 8) * 0.5).astype(dtype)


def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype = ctypes.c_char_p
    get.argtypes = [ctypes.py_object]
    return get(cap)


# A NumPy array of every dtype goes to worker 0 and back unchanged (bool
# through the buffer protocol: NumPy 1.24 refuses to export it over DLPack),
# with no sync between (worker 0 runs in the controller's thread: a copy from it sees
# every command sent before); worker 1 holds nothing (worker0_only).
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_round_trip(sess, dtype):
    host = sample(dtype)
    x = sess.copy_to_worker_0(host)
    out = np.zeros_like(host)
    sess.copy_from_worker_0(out, x)
    np.testing.assert_array_equal(out, host)
    assert out.dtype == host.dtype
    assert x.debug_get_from_remote(1) is None


# copy_to_worker_0 into a given register fills it (and returns it); TVM's
# script shape: empty on every worker, copy, read back after a sync.
def test_copy_into_existing(sess):
    x = sess.empty((2, 3), "float32")
    host = np.arange(6, dtype="float32").reshape(2, 3)
    r = sess.copy_to_worker_0(host, x)
    assert r is not None
    sess.sync_worker_0()
    out = np.empty((2, 3), "float32")
    sess.copy_from_worker_0(out, r)
    np.testing.assert_array_equal(out, host)
    sess.copy_from_worker_0(out, x)
    np.testing.assert_array_equal(out, host)


# Host arrays through the buffer protocol: array.array, bytearray, and a
# read-only NumPy array (NumPy refuses to export those over DLPack).
def test_copy_buffer_protocol(sess):
    a = array.array("f", [1.0, 2.5, -3.0, 4.0])
    x = sess.copy_to_worker_0(a)
    out = np.empty(4, "float32")
    sess.copy_from_worker_0(out, x)
    assert out.tolist() == a.tolist()

    b = bytearray(b"disco\x00\xff")
    y = sess.copy_to_worker_0(b)
    back = bytearray(len(b))
    sess.copy_from_worker_0(back, y)
    assert back == b

    ro = np.frombuffer(np.arange(6, dtype="int32").tobytes(), dtype="int32")
    assert not ro.flags.writeable
    z = sess.copy_to_worker_0(ro)
    out = np.empty(6, "int32")
    sess.copy_from_worker_0(out, z)
    np.testing.assert_array_equal(out, ro)


# A copy into a host array of another size or dtype is refused, never cut.
def test_copy_from_mismatch_raises(sess):
    x = sess.copy_to_worker_0(np.arange(8, dtype="float32"))
    with pytest.raises((disco.DiscoError, ValueError, TypeError)):
        sess.copy_from_worker_0(np.empty(4, "float32"), x)
    with pytest.raises((disco.DiscoError, ValueError, TypeError)):
        sess.copy_from_worker_0(np.empty(8, "int64"), x)


# empty() makes a tensor on every worker, or on worker 0 only.
def test_empty(sess):
    x = sess.empty((4, 2), "int16")
    for i in range(2):
        v = np.from_dlpack(x.debug_get_from_remote(i))
        assert v.shape == (4, 2) and v.dtype == np.int16
    y = sess.empty((3,), "float64", worker0_only=True)
    assert np.from_dlpack(y.debug_get_from_remote(0)).shape == (3,)
    assert y.debug_get_from_remote(1) is None


# debug_copy_from(i, array) fills worker i's tensor only; debug_get_from_remote
# reads each worker's own bytes.
def test_debug_copy_from(sess):
    x = sess.empty((2, 3), "int32")
    a0 = sample("int32", (2, 3), seed=1)
    a1 = sample("int32", (2, 3), seed=2)
    x.debug_copy_from(0, a0)
    x.debug_copy_from(1, a1)
    np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(0)), a0)
    np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(1)), a1)


# As in TVM (whose test_ccl.py does this), debug_copy_from takes a host
# array of the tensor's dtype and size in another shape: the bytes are
# copied in order.
def test_debug_copy_from_other_shape(sess):
    x = sess.empty((3, 3, 2), "float32")
    flat = np.arange(18, dtype="float32")
    x.debug_copy_from(0, flat)
    x.debug_copy_from(1, flat.reshape(9, 2))
    for w in range(2):
        np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(w)),
                                      flat.reshape(3, 3, 2))


# Tensors that a C function made on each worker (test.fill) read back with
# each worker's own values.
def test_worker_made_tensor(sess):
    x = sess.get_global_func("test.fill")((10,), "float32", 3)
    for w in range(2):
        np.testing.assert_array_equal(
            np.from_dlpack(x.debug_get_from_remote(w)), pattern(3, w, 10)
        )


# The DLPack protocol: the device is (kDLCPU, 0); __dlpack__ answers with
# and without max_version, with a capsule of the standard names.
def test_dlpack_protocol(sess):
    x = sess.copy_to_worker_0(np.arange(4, dtype="float32"))
    v = x.debug_get_from_remote(0)
    assert tuple(int(d) for d in v.__dlpack_device__()) == (1, 0)
    assert capsule_name(v.__dlpack__()) == b"dltensor"
    assert capsule_name(v.__dlpack__(stream=None)) == b"dltensor"
    assert capsule_name(v.__dlpack__(stream=None, max_version=(1, 0))) in (
        b"dltensor",
        b"dltensor_versioned",
    )


# Zero copy: two consumers of worker 0's register see the same heap bytes,
# and a consumer sees writes made on worker 0 afterwards, by a copy into the
# register and by a function running on the worker.
def test_from_dlpack_sees_worker_writes(sess):
    x = sess.copy_to_worker_0(np.arange(8, dtype="float32"))
    a = np.from_dlpack(x.debug_get_from_remote(0))
    b = np.from_dlpack(x.debug_get_from_remote(0))
    assert a.ctypes.data == b.ctypes.data, "two views of one register at different addresses"
    np.testing.assert_array_equal(a, np.arange(8, dtype="float32"))

    sess.copy_to_worker_0(np.full(8, 7.0, "float32"), x)
    np.testing.assert_array_equal(a, np.full(8, 7.0, "float32"))

    sess.get_global_func("pyt.tensors.fill")(x, 3.0)
    sess.sync_worker_0()
    np.testing.assert_array_equal(a, np.full(8, 3.0, "float32"))


# ... and the other way: a consumer's write is what worker 0 holds.
def test_consumer_writes_reach_worker(sess):
    x = sess.copy_to_worker_0(np.zeros(6, "int64"))
    a = writable(x.debug_get_from_remote(0))
    a[:] = [5, 4, 3, 2, 1, 0]
    out = np.empty(6, "int64")
    sess.copy_from_worker_0(out, x)
    assert out.tolist() == [5, 4, 3, 2, 1, 0]
    s = sess.get_global_func("test.checksum")(x)
    fnv = 1469598103934665603
    for byte in a.tobytes():
        fnv = ((fnv ^ byte) * 1099511628211) % 2**64
    got = s.debug_get_from_remote(0)
    assert got % 2**64 == fnv, "worker 0 read other bytes than the consumer wrote"


# The buffer protocol too: numpy.asarray(t) and memoryview(t) are writable
# views of the same bytes (NumPy 1.24's from_dlpack arrays are read-only).
def test_buffer_protocol_view(sess):
    x = sess.copy_to_worker_0(np.zeros(4, "float32"))
    v = x.debug_get_from_remote(0)
    a = np.asarray(v)
    assert a.flags.writeable and a.ctypes.data == np.from_dlpack(v).ctypes.data
    a[1] = 5.0
    memoryview(v).cast("B")[0:4] = np.float32(2.0).tobytes()
    out = np.empty(4, "float32")
    sess.copy_from_worker_0(out, x)
    assert out.tolist() == [2.0, 5.0, 0.0, 0.0]


# Worker 1's tensor (another process) reads back through DLPack too.
def test_from_dlpack_of_worker1(sess):
    x = sess.empty((5,), "float32")
    sess.get_global_func("pyt.tensors.fill")(x, 2.5)
    sess.sync_worker(1)
    np.testing.assert_array_equal(np.from_dlpack(x.debug_get_from_remote(1)), np.full(5, 2.5))
