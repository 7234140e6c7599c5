"""Python worker functions that use disco.comm (test_comm.py); a spawned
worker gets them by importing this module, the controller (worker 0) by
importing it too."""

import ctypes

import numpy as np

import disco
from disco import comm


def _val(w, n, dtype):
    return (np.arange(n) % 7 + 1 + 10 * w).astype(dtype)


def _writable(t):
    """A writable NumPy view of a disco Tensor (NumPy 1.24 marks
    from_dlpack arrays read-only)."""
    ro = np.from_dlpack(t)
    buf = (ctypes.c_char * ro.nbytes).from_address(ro.ctypes.data)
    buf.keep = ro
    return np.frombuffer(buf, dtype=ro.dtype).reshape(ro.shape)


def _check(got, want, what):
    got = np.asarray(got)
    if not np.array_equal(got, want):
        raise AssertionError(f"{what} on worker {comm.rank()}: {got[:8]} != {want[:8]}")


def _array(kind, a):
    if kind == "torch":
        import torch
        return torch.from_numpy(a.copy())
    return a.copy()


def _np(x):
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x)


@disco.register_func("pyt.comm.all")
def _all(kind, dtype, in_group, gsize):
    """Every operation on host arrays of kind (numpy or torch), checked."""
    me, world, n = comm.rank(), comm.world_size(), 100
    size = gsize if in_group else world
    base = me // size * size
    members = range(base, base + size)
    x = _array(kind, _val(me, n, dtype))
    y = _array(kind, np.zeros(n, dtype))
    comm.allreduce(x, y, op="sum", in_group=in_group)
    _check(_np(y), sum(_val(w, n, dtype) for w in members), "allreduce")
    comm.allreduce(x, op="max", in_group=in_group)  # in place
    _check(_np(x), _val(base + size - 1, n, dtype), "allreduce max in place")
    x = _array(kind, _val(me, n, dtype))
    g = comm.allgather(x, in_group=in_group, group_size=size)
    _check(_np(g), np.concatenate([_val(w, n, dtype) for w in members]), "allgather")
    if comm.group_size() != gsize:
        raise AssertionError("group_size() is %d, not %d" % (comm.group_size(), gsize))
    g = comm.allgather(x, in_group=in_group)  # rows: group_size() or world_size()
    _check(_np(g), np.concatenate([_val(w, n, dtype) for w in members]), "allgather, no size")
    b = _array(kind, _val(me, n, dtype))
    comm.broadcast(b, root=size - 1, in_group=in_group)
    _check(_np(b), _val(base + size - 1, n, dtype), "broadcast")
    comm.barrier(in_group=in_group)
    peer = me + 1 if me % 2 == 0 else me - 1
    r = _array(kind, np.zeros(n, dtype))
    if peer < world:
        if me % 2 == 0:
            comm.send(x, peer)
        else:
            comm.recv(r, peer)
            _check(_np(r), _val(peer, n, dtype), "recv")
    if in_group and world // gsize >= 2:
        r = _array(kind, np.zeros(n, dtype))
        if me < gsize:
            comm.send_to_next_group(x)
        elif me < 2 * gsize:
            comm.recv_from_prev_group(r)
            _check(_np(r), _val(me - gsize, n, dtype), "recv_from_prev_group")
    return "ok"


@disco.register_func("pyt.comm.inplace")
def _inplace(t):
    """A disco Tensor argument, reduced in place (no staging)."""
    a = _writable(t)
    a[:] = _val(comm.rank(), a.shape[0], a.dtype)
    comm.allreduce(t, in_group=False)


@disco.register_func("pyt.comm.mismatch")
def _mismatch():
    """Worker 1 passes one element more: every member gets MismatchError."""
    n = 9 if comm.rank() == 1 else 8
    try:
        comm.allreduce(np.ones(n, "float32"), in_group=False)
    except disco.DiscoError as e:
        return f"{type(e).__name__}:{e.code}"
    return "no error"
