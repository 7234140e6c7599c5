"""Tensors through PyTorch (Debian's python3-torch): copies both ways,
bfloat16, and torch.from_dlpack of worker 0's registers without a copy.
torch is used in the controller only: forked workers never run it."""

import numpy as np
import pytest
import torch  # Debian's python3-torch is a dependency of the suite: no skip

from conftest import writable

# torch.bool is left out: torch 1.13 cannot export it over DLPack ("Bool type
# is not supported by dlpack") and has no buffer protocol.
TORCH_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                torch.int16, torch.int32, torch.int64, torch.uint8]


def sample(dtype, n=12):
    v = torch.arange(n, dtype=torch.int64) * 7 % 17 - 8
    if dtype == torch.uint8:
        v = v + 8
    return v.to(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()


# A torch tensor of every dtype (bfloat16 included, which NumPy lacks) goes
# to worker 0 and comes back into another torch tensor unchanged.
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_round_trip(sess, dtype):
    host = sample(dtype).reshape(3, 4)
    x = sess.copy_to_worker_0(host)
    out = torch.zeros((3, 4), dtype=dtype)
    sess.copy_from_worker_0(out, x)
    assert same(out, host), (out, host)


# torch.from_dlpack sees worker 0's heap bytes: a copy into the register
# and a C function's result are visible through it, and its writes are what
# worker 0 holds.
def test_torch_from_dlpack_zero_copy(sess):
    x = sess.copy_to_worker_0(np.arange(6, dtype="float32"))
    t = torch.from_dlpack(x.debug_get_from_remote(0))
    assert t.dtype == torch.float32 and t.tolist() == [0, 1, 2, 3, 4, 5]
    assert t.data_ptr() == np.from_dlpack(x.debug_get_from_remote(0)).ctypes.data

    sess.copy_to_worker_0(np.full(6, -2.0, "float32"), x)
    assert t.tolist() == [-2.0] * 6

    t.copy_(torch.tensor([9, 8, 7, 6, 5, 4], dtype=torch.float32))
    out = np.empty(6, "float32")
    sess.copy_from_worker_0(out, x)
    assert out.tolist() == [9, 8, 7, 6, 5, 4]


# A bfloat16 tensor made on the workers reads through torch.from_dlpack with
# test.fill's values (small halves: exact in bfloat16).
def test_torch_bfloat16_from_worker(sess):
    x = sess.get_global_func("test.fill")((8,), "bfloat16", 1)
    t = torch.from_dlpack(x.debug_get_from_remote(0))
    assert t.dtype == torch.bfloat16
    want = [(((i * 7 + 1) % 17) - 8) * 0.5 for i in range(8)]
    assert t.float().tolist() == want


# NumPy and torch views of one register share the bytes: a write through one
# is read through the other.
def test_numpy_and_torch_share(sess):
    x = sess.copy_to_worker_0(np.zeros(4, "int32"))
    v = x.debug_get_from_remote(0)
    a = writable(v)
    t = torch.from_dlpack(v)
    a[2] = 77
    assert t.tolist() == [0, 0, 77, 0]
