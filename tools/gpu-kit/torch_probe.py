"""torch_probe.py - the Python package with device registers and torch CUDA
tensors, run by the GPU kit (run-gpu.sh's torch_mps step).

Each check prints one line, "NAME: ok ..." or "NAME: FAILED: ...". Exit
status: 0 when every check passed; 1 when one failed, or when there is no
CUDA device and DISCO_REQUIRE_GPU is not "0" (a line says "no CUDA device");
0 with a "skipped" line when there is none and DISCO_REQUIRE_GPU=0, or
torch is missing then. DEV=sim runs the same checks on the simulated
device (disco.sim, DISCO_SIM_GPUS=2) with torch tensors on the CPU: how
the probe itself is tried without a GPU.
"""
import ctypes
import os
import sys

import numpy as np

import disco

DEV = os.environ.get("DEV", "cuda")
REQUIRED = os.environ.get("DISCO_REQUIRE_GPU", "1") not in ("", "0")
N = 1 << 20  # elements of the tensors below (4 MiB of float32)


def skip_or_fail(why):
    """No GPU (or no torch): a failure unless DISCO_REQUIRE_GPU=0."""
    print(("FAIL: " if REQUIRED else "skipped: ") + why, flush=True)
    sys.exit(1 if REQUIRED else 0)


def cuda_count():
    """disco's own probe (disco_device_probe, in a forked child, so that
    this process may still fork workers): (count, why)."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(disco.__file__), "..", "..", "build",
                                   "libdisco.so.3"))
    lib.disco_last_error.restype = ctypes.c_char_p
    n = ctypes.c_int(0)
    if lib.disco_device_probe(2, ctypes.byref(n)) != 0:  # 2: kDLCUDA
        return 0, lib.disco_last_error().decode(errors="replace")
    return n.value, "%d CUDA devices" % n.value


if DEV == "sim":
    os.environ.setdefault("DISCO_SIM_GPUS", "2")
else:
    count, why = cuda_count()
    print("probe: " + why, flush=True)
    if count < 1:
        skip_or_fail(why if why.startswith("no CUDA device") else "no CUDA device: " + why)
bad = 0


def check(name, fn):
    global bad
    try:
        print("%s: ok: %s" % (name, fn()), flush=True)
    except Exception as e:  # noqa: BLE001 - what the package says is the point
        bad += 1
        print("%s: FAILED: %s: %s" % (name, type(e).__name__, e), flush=True)


def same(a, b, what):
    if not np.array_equal(a, b):
        diff = np.flatnonzero(a != b)
        raise AssertionError("%s: %d of %d elements differ, first at %d: %r != %r"
                             % (what, diff.size, a.size, diff[0], a[diff[0]], b[diff[0]]))
    return what


# The session is opened (its workers forked) before torch touches CUDA: a
# process that initialized CUDA must not fork workers that use it.
with disco.ProcessSession(2, call_timeout_ms=20000) as s:
    try:
        import torch
    except ImportError as e:
        skip_or_fail("no torch (%s)" % e)
    tdev = "cuda" if DEV == "cuda" else "cpu"
    if DEV == "cuda" and not torch.cuda.is_available():
        skip_or_fail("no CUDA device: torch.cuda.is_available() is False (torch %s)"
                     % torch.__version__)
    ddev = disco.cuda(0) if DEV == "cuda" else disco.sim(0)
    print("torch %s, tensors on %s; disco registers on %s" % (torch.__version__, tdev, ddev),
          flush=True)
    ref = np.arange(N, dtype="float32")
    src = torch.arange(N, dtype=torch.float32, device=tdev)
    x = s.empty((N,), "float32", device=ddev)

    def round_trip():
        s.copy_to_worker_0(src, x)
        back = torch.empty_like(src)
        s.copy_from_worker_0(back, x)
        return same(back.cpu().numpy(), ref, "equal after the round trip")

    check("%s tensor -> %s register -> %s tensor" % (tdev, DEV, tdev), round_trip)

    def after_producer():
        # The copy must wait for the kernel that makes its source (issue 32:
        # __dlpack__ with the consumer's stream): a large product, queued on
        # torch's stream just before, not synchronized by anything here.
        big = torch.ones(N, dtype=torch.float32, device=tdev)
        if tdev == "cuda" and hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU spin ahead of the kernels below
        for _ in range(8):
            big = big * 2.0 + 1.0  # 1 -> 3 -> 7 -> ... -> 511
        s.copy_to_worker_0(big, x)
        out = np.empty(N, "float32")
        s.copy_from_worker_0(out, x)
        return same(out, np.full(N, 511.0, "float32"), "the producer's values, all 511")

    check("copy of a tensor its producer's kernel just queued", after_producer)

    def dlpack_view():
        s.copy_to_worker_0(src, x)
        v = x.debug_get_from_remote(0)
        t = torch.from_dlpack(v)
        same(t.cpu().numpy(), ref, "worker 0's values")
        return "device %s, __dlpack_device__ %s, same values" % (t.device, v.__dlpack_device__())

    check("torch.from_dlpack of worker 0's %s register" % DEV, dlpack_view)

    def allreduce():
        s.copy_to_worker_0(src, x)
        s.broadcast_from_worker0(x, x)  # worker 0's values into x on every worker
        y = s.allreduce(x, op="sum")
        s.sync_worker(1)
        out = np.empty(N, "float32")
        s.copy_from_worker_0(out, y)
        return same(out, 2 * ref, "2x on worker 0")

    check("broadcast + allreduce of %s registers, 2 workers" % DEV, allreduce)

    def to_host_register():
        h = s.copy_to_worker_0(src)  # a host register made from a device tensor
        out = np.empty(N, "float32")
        s.copy_from_worker_0(out, h)
        return same(out, ref, "equal")

    check("%s tensor -> new host register" % tdev, to_host_register)
print("torch_probe: %d check(s) failed" % bad if bad else "torch_probe: every check passed",
      flush=True)
sys.exit(1 if bad else 0)
