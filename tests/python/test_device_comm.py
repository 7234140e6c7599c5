"""disco.comm on device memory that disco did not allocate (issue 34): a
worker function hands disco.comm a DLPack producer of memory on its own
device, and every operation stages it through the worker's device arena
and copies the result back.

DISCO_TEST_DEVICE=sim (the default): each worker allocates sim memory
itself (disco_device_alloc through ctypes, outside the arena) and wraps it
in safety_util's FakeProducer, a DLPack producer of that address; the
values go in and out with disco_device_copy. DISCO_TEST_DEVICE=cuda (the
GPU kit's run of tests/python/test_device*.py): torch CUDA tensors on the
worker's GPU; without a CUDA device for torch every test skips (a failure
with DISCO_REQUIRE_GPU=1). Each test runs in a forked child
(device_util.isolated: see test_device.py's docstring for why)."""

import ctypes
import os

import numpy as np
import pytest

import disco
from device_util import CUDA, isolated, num_devices, open_dev, probe_gpus, require_device
from disco import comm
from safety_util import FakeProducer

N = 100  # elements a tensor: not a multiple of the members


@pytest.fixture(autouse=True)
def _device_ready():
    require_device()


# ---- device memory of the worker's own ----


class _Dev(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


def _lib():
    lib = ctypes.CDLL(disco._core.library_path())
    for name, args in [("disco_device_alloc", [_Dev, ctypes.c_size_t, ctypes.c_void_p]),
                       ("disco_device_free", [_Dev, ctypes.c_void_p]),
                       ("disco_device_copy", [ctypes.c_void_p, _Dev, ctypes.c_void_p, _Dev,
                                              ctypes.c_size_t, ctypes.c_void_p]),
                       ("disco_device_stream_sync", [_Dev, ctypes.c_void_p])]:
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    return lib


class SimArray(FakeProducer):
    """A float32 array in sim memory this process allocated itself
    (disco_device_alloc, not the session's arena), as a DLPack producer."""

    def __init__(self, dev_id, values, strides=None):
        self.lib, self.dev = _lib(), _Dev(12, dev_id)
        self.values = np.ascontiguousarray(values, dtype="float32")
        p = ctypes.c_void_p()
        assert self.lib.disco_device_alloc(self.dev, self.values.nbytes, ctypes.byref(p)) == 0
        self.ptr = p.value
        super().__init__((12, dev_id), data=self.ptr, shape=self.values.shape, strides=strides)
        self._copy(self.ptr, self.dev, self.values.ctypes.data, _Dev(1, 0))

    def _copy(self, dst, dst_dev, src, src_dev):
        n = self.values.nbytes
        assert self.lib.disco_device_copy(dst, dst_dev, src, src_dev, n, None) == 0
        assert self.lib.disco_device_stream_sync(self.dev, None) == 0

    def host(self):
        out = np.empty_like(self.values)
        self._copy(out.ctypes.data, _Dev(1, 0), self.ptr, self.dev)
        return out

    def free(self):
        assert self.lib.disco_device_free(self.dev, self.ptr) == 0


def ndev():
    """The devices of the run: torch's GPUs (asked here, in a worker that
    uses CUDA itself), or the 2 sim devices every session here has."""
    if CUDA:
        import torch
        return torch.cuda.device_count()
    return 2


def own_device():
    """The device index this worker's arena is on (disco_device_for_worker)."""
    return comm.rank() % ndev()


def dev_array(values, dev_id=None):
    """values in device memory of this worker's own: a torch CUDA tensor, or
    a SimArray."""
    dev_id = own_device() if dev_id is None else dev_id
    if CUDA:
        import torch
        return torch.tensor(np.asarray(values, dtype="float32"), device=f"cuda:{dev_id}")
    return SimArray(dev_id, values)


def host(a):
    return a.cpu().numpy() if CUDA else a.host()


def free(*arrays):
    for a in arrays:
        if not CUDA:
            a.free()


def _val(w, n=N):
    return (np.arange(n) % 7 + 1 + 10 * w).astype("float32")


def _check(got, want, what):
    if not np.array_equal(got, want):
        raise AssertionError(f"{what} on worker {comm.rank()}: {got[:8]} != {want[:8]}")


# ---- worker functions (fork sessions: registered before they open) ----


@disco.register_func("pyt.devcomm.all")
def _all(in_group, gsize):
    """Every operation on device memory of the worker's own, checked."""
    me, world = comm.rank(), comm.world_size()
    size = gsize if in_group else world
    base = me // size * size
    members = range(base, base + size)
    x, y = dev_array(_val(me)), dev_array(np.zeros(N))
    comm.allreduce(x, y, op="sum", in_group=in_group)
    _check(host(y), sum(_val(w) for w in members), "allreduce")
    comm.allreduce(x, op="max", in_group=in_group)  # in place
    _check(host(x), _val(base + size - 1), "allreduce max in place")
    g = dev_array(np.zeros(N * size))
    comm.allgather(dev_array(_val(me)), g, in_group=in_group)
    _check(host(g), np.concatenate([_val(w) for w in members]), "allgather")
    if CUDA:  # no dst: a torch tensor on src's device
        g2 = comm.allgather(dev_array(_val(me)), in_group=in_group, group_size=size)
        assert g2.device == g.device, (g2.device, g.device)
        _check(host(g2), np.concatenate([_val(w) for w in members]), "allgather, no dst")
    else:  # no dst for a device producer that is not torch: refused, saying so
        try:
            comm.allgather(dev_array(_val(me)), in_group=in_group, group_size=size)
            raise AssertionError("allgather of a sim producer without dst passed")
        except ValueError as e:
            assert "pass dst" in str(e), e
    b = dev_array(_val(me))
    comm.broadcast(b, root=size - 1, in_group=in_group)
    _check(host(b), _val(base + size - 1), "broadcast")
    peer = me + 1 if me % 2 == 0 else me - 1
    s, r = dev_array(_val(me)), dev_array(np.zeros(N))
    if me % 2 == 0:
        comm.send(s, peer)
    else:
        comm.recv(r, peer)
        _check(host(r), _val(peer), "recv")
    r2 = dev_array(np.zeros(N))
    if in_group:
        if me < gsize:
            comm.send_to_next_group(s)
        else:
            comm.recv_from_prev_group(r2)
            _check(host(r2), _val(me - gsize), "recv_from_prev_group")
    free(x, y, g, b, s, r, r2)
    return "ok"


@disco.register_func("pyt.devcomm.refused")
def _refused(kind):
    """kind "other": memory on another device than the worker's; kind
    "strided": on its own device, not compact. Returns the error's class
    name and message."""
    if kind == "other":
        a = dev_array(_val(0), dev_id=(own_device() + 1) % ndev())
    elif CUDA:
        a = dev_array(np.zeros((4, 4))).t()
    else:
        a = SimArray(own_device(), np.zeros((4, 4)), strides=(1, 4))
    try:
        comm.allreduce(a, in_group=False)
        out = "no error"
    except disco.DiscoError as e:
        out = f"{type(e).__name__}: {e}"
    free(a)
    return out


# ---- tests ----


@pytest.mark.parametrize("groups", [1, 2])
@isolated
def test_every_operation_on_device_memory(groups):
    """allreduce (into dst, in place), allgather, broadcast, send/recv and,
    with 2 groups, send_to_next_group/recv_from_prev_group on device memory
    disco did not allocate, 4 workers on 2 devices (sim): every worker checks
    its results in its own memory."""
    with open_dev(4, nsim=2, num_groups=groups) as sess:
        r = sess.get_global_func("pyt.devcomm.all")(groups == 2, 4 // groups)
        for w in range(4):
            assert r.debug_get_from_remote(w) == "ok", w


@isolated
def test_other_device_refused():
    """Memory on another device than the worker's is refused by every member
    of the allreduce with MismatchError naming both devices."""
    if num_devices(2) < 2:
        pytest.skip("one GPU: no other device to put a tensor on")
    with open_dev(2, nsim=2) as sess:
        r = sess.get_global_func("pyt.devcomm.refused")("other")
        name = "cuda" if CUDA else "sim"
        got = r.debug_get_from_remote(0)
        assert got.startswith("MismatchError"), got
        assert f"a tensor on {name}:1, and worker 0's device is {name}:0" in got, got


@isolated
def test_non_compact_refused():
    """A strided view of device memory is refused before anything is read,
    with InvalidArgumentError saying it must be compact."""
    with open_dev(2, nsim=2) as sess:
        r = sess.get_global_func("pyt.devcomm.refused")("strided")
        for w in range(2):
            got = r.debug_get_from_remote(w)
            assert got.startswith("InvalidArgumentError"), got
            assert "must be compact" in got, got

