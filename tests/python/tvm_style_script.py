"""A TVM Disco user's script, run by test_tvm_script.py in a fresh
interpreter: written against tvm.runtime.disco, with only the import
(`import tvm.runtime.disco as di` -> `import disco as di`) and the module
loading (`sess.load_vm_module(path)` -> `sess.load_library(path)`) changed.

usage: tvm_style_script.py LIBRARY   (tests/testlib.c, built)
"""

import sys

import numpy as np

import disco as di


def numpy_to_worker_0(sess, np_array):
    x_array = sess.empty(np_array.shape, "float32")
    sess.copy_to_worker_0(np_array, x_array)
    return x_array


def numpy_from_worker_0(sess, remote_array, shape, dtype):
    host_array = np.empty(shape, dtype)
    sess.copy_from_worker_0(host_array, remote_array)
    sess.sync_worker_0()
    return host_array


def main(library):
    num_workers = 2
    sess = di.ProcessSession(num_workers=num_workers)
    assert sess.num_workers == num_workers
    sess.load_library(library)  # TVM: mod = sess.load_vm_module(path)

    func: di.DPackedFunc = sess.get_global_func("test.add")
    result: di.DRef = func(1, 1)
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == 2

    result = sess.call_packed(sess.get_global_func("test.concat"), "hello", "_suffix")
    for i in range(num_workers):
        assert result.debug_get_from_remote(i) == "hello_suffix"

    # tensors in and out of worker 0
    x_np = np.arange(6).astype("float32").reshape([2, 3])
    x_disc = numpy_to_worker_0(sess, x_np)
    y_nd = numpy_from_worker_0(sess, x_disc, shape=x_np.shape, dtype=x_np.dtype)
    np.testing.assert_equal(y_nd, x_np)
    z_disc = sess.copy_to_worker_0(x_np)  # remote_array=None: made on worker 0
    np.testing.assert_equal(numpy_from_worker_0(sess, z_disc, (2, 3), "float32"), x_np)

    # test_ccl.py's allreduce
    array_1 = np.arange(12, dtype="float32").reshape(3, 4)
    array_2 = np.arange(start=1, stop=-11, step=-1, dtype="float32").reshape(3, 4)
    d_array = sess.empty((3, 4), "float32")
    d_array.debug_copy_from(0, array_1)
    d_array.debug_copy_from(1, array_2)
    for op, np_op in [
        ("sum", np.add),
        ("prod", np.multiply),
        ("min", np.minimum),
        ("max", np.maximum),
        ("avg", lambda a, b: (a + b) * 0.5),
    ]:
        dst_array = sess.empty((3, 4), "float32")
        sess.allreduce(d_array, dst_array, op=op)
        result = dst_array.debug_get_from_remote(0).numpy()
        np.testing.assert_equal(result, np_op(array_1, array_2))

    # allgather
    array = np.arange(36, dtype="float32")
    d_src = sess.empty((3, 3, 2), "float32")
    d_dst = sess.empty((3, 4, 3), "float32")
    d_src.debug_copy_from(0, array[:18])
    d_src.debug_copy_from(1, array[18:])
    sess.allgather(d_src, d_dst)
    np.testing.assert_equal(d_dst.debug_get_from_remote(0).numpy(), array.reshape(3, 4, 3))
    np.testing.assert_equal(d_dst.debug_get_from_remote(1).numpy(), array.reshape(3, 4, 3))

    # broadcast, both ways
    array = np.arange(12, dtype="float32").reshape(3, 4)
    src_array = sess.empty((3, 4), "float32", worker0_only=True)
    src_array.debug_copy_from(0, array)
    dst_array = sess.empty((3, 4), "float32")
    sess.broadcast_from_worker0(src_array, dst_array)
    np.testing.assert_equal(dst_array.debug_get_from_remote(1).numpy(), array)
    dst_array = sess.broadcast(array)
    np.testing.assert_equal(dst_array.debug_get_from_remote(1).numpy(), array)

    # scatter, both ways
    array = np.arange(36, dtype="float32").reshape(2, 6, 3)
    d_src = sess.empty((2, 6, 3), "float32", worker0_only=True)
    d_dst = sess.empty((6, 3), "float32")
    d_src.debug_copy_from(0, array)
    sess.scatter_from_worker0(d_src, d_dst)
    np.testing.assert_equal(d_dst.debug_get_from_remote(0).numpy(), array[0, :, :])
    np.testing.assert_equal(d_dst.debug_get_from_remote(1).numpy(), array[1, :, :])
    d_dst = sess.scatter(array)
    np.testing.assert_equal(d_dst.debug_get_from_remote(1).numpy(), array[1, :, :])

    # gather
    d_src = sess.empty((6, 3), "float32")
    d_src.debug_copy_from(0, array[0])
    d_src.debug_copy_from(1, array[1])
    d_dst = sess.empty((2, 6, 3), "float32", worker0_only=True)
    sess.gather_to_worker0(d_src, d_dst)
    np.testing.assert_equal(d_dst.debug_get_from_remote(0).numpy(), array)

    sess.sync_worker_0()
    sess.shutdown()
    print("tvm-style script: ok")


if __name__ == "__main__":
    main(sys.argv[1])
