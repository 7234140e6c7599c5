"""Helpers of test_device.py (issue 32, section 5): the device of the run
(DISCO_TEST_DEVICE=sim | cuda), running a test in a forked child, sessions
with device tensors, host tensors of the mode, and a DLPack producer of a
tensor on any device. See test_device.py's docstring for why each test
runs in a child."""

import ctypes
import faulthandler
import functools
import os
import pickle
import select
import signal
import sys
import time
import traceback

import numpy as np
import pytest
import torch

import disco
from conftest import CALL_TIMEOUT_MS
from safety_util import FakeProducer

DEVICE = os.environ.get("DISCO_TEST_DEVICE", "sim")
if DEVICE not in ("sim", "cuda"):
    raise pytest.UsageError(f"DISCO_TEST_DEVICE={DEVICE!r}: sim or cuda")
CUDA = DEVICE == "cuda"
DEV_TYPE = 2 if CUDA else 12  # kDLCUDA, kDLExtDev
OTHER_TYPE = 12 if CUDA else 2  # the device type a session of DEVICE refuses
CHILD_DEADLINE_S = 40  # a test's child is killed after this (conftest's watchdog: 60)


def ddev(i=0):
    """The device that empty() is given: each worker uses its own anyway."""
    return disco.cuda(i) if CUDA else disco.sim(i)


# ---- running a test in a forked child ----


def _libdisco():
    return ctypes.CDLL(disco._core.library_path())


def set_sim_count(n):
    """n sim devices in this process (a test's child) and in the workers it
    starts (forked ones inherit the count, spawned ones read the variable)."""
    os.environ["DISCO_SIM_GPUS"] = str(n)
    assert _libdisco().disco_device_sim_set_count(ctypes.c_int(n)) == 0


def _child_main(fn, args, kwargs, wfd):
    result = ("fail", "the test's child ended without a result")
    try:
        fn(*args, **kwargs)
        result = ("ok", "")
    except pytest.skip.Exception as e:
        result = ("skip", str(e))
    except BaseException:  # noqa: BLE001 - reported to the parent whole
        result = ("fail", traceback.format_exc())
    finally:
        try:
            data = pickle.dumps(result)
            while data:
                data = data[os.write(wfd, data):]
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def isolated(fn=None, *, crashes=False):
    """Runs the test in a forked child (see the top) with its own process
    group, which a hang past CHILD_DEADLINE_S kills whole. crashes: the test
    is known to crash the child (an xfail): no faulthandler dump."""
    if fn is None:
        return functools.partial(isolated, crashes=crashes)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        rfd, wfd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(rfd)
            os.setpgid(0, 0)
            if crashes:
                faulthandler.disable()
            signal.alarm(CHILD_DEADLINE_S)  # conftest's handler dumps the stacks
            _child_main(fn, args, kwargs, wfd)
        os.close(wfd)
        data, deadline = b"", time.monotonic() + CHILD_DEADLINE_S + 5
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    os.killpg(pid, signal.SIGKILL)
                    break
                if select.select([rfd], [], [], left)[0]:
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        break
                    data += chunk
        finally:
            os.close(rfd)
            _, status = os.waitpid(pid, 0)
            try:  # workers a crashed or killed child left behind
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not data:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                how = f"was killed by signal {sig} ({signal.Signals(sig).name})"
            else:
                how = f"exited with {os.WEXITSTATUS(status)}"
            pytest.fail(f"the test's child process {how} before it reported a result",
                        pytrace=False)
        kind, text = pickle.loads(data)
        if kind == "skip":
            pytest.skip(text)
        if kind == "fail":
            pytest.fail(f"in the test's child process:\n{text}", pytrace=False)

    return wrapper


_GPUS = []


def probe_gpus():
    """torch's CUDA device count, asked in a forked child so that this
    process never initializes CUDA."""
    if not _GPUS:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            n = 0
            try:
                n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            finally:
                os.write(wfd, str(n).encode())
                os._exit(0)
        os.close(wfd)
        out = os.read(rfd, 64)
        os.close(rfd)
        os.waitpid(pid, 0)
        _GPUS.append(int(out or b"0"))
    return _GPUS[0]


def num_devices(nsim):
    return probe_gpus() if CUDA else nsim


def open_dev(num_workers, nsim=2, **config):
    """A session whose device tensors are DEVICE's: on sim, nsim devices.
    Open it before anything here touches CUDA (a forked worker cannot use
    CUDA after its parent did)."""
    set_sim_count(nsim)
    config.setdefault("call_timeout_ms", CALL_TIMEOUT_MS)
    return disco.ProcessSession(num_workers, **config)


# ---- host tensors of the mode, values ----

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "int8": torch.int8, "int32": torch.int32,
                "int64": torch.int64, "uint8": torch.uint8}


def host_tensor(values, dtype=None):
    """values as the mode's producer tensor: a torch CUDA tensor with cuda, a
    torch CPU tensor on sim."""
    t = torch.as_tensor(np.ascontiguousarray(values))
    if dtype is not None:
        t = t.to(TORCH_DTYPES[dtype])
    return t.cuda() if CUDA else t


def part(worker, shape, dtype="float32"):
    """Worker's values: small integers, exact in every dtype and under a
    product over 4 workers."""
    n = int(np.prod(shape))
    return (((np.arange(n) * 7 + worker * 13 + 3) % 11) - 5).astype(dtype).reshape(shape)


def get(dref, worker):
    """Worker's tensor of dref as a NumPy copy."""
    return dref.debug_get_from_remote(worker).numpy()


def on_device(dref, worker):
    """Whether worker's tensor of dref is a device tensor (its view is a host
    copy) rather than a heap tensor (its view is the heap bytes)."""
    return not dref.debug_get_from_remote(worker).is_view


def fill(sess, x, shape, dtype="float32"):
    """Each worker's part into x; returns the parts."""
    parts = [part(w, shape, dtype) for w in range(sess.num_workers)]
    for w, p in enumerate(parts):
        x.debug_copy_from(w, p)
    return parts


# ---- a DLPack producer of a tensor on any device (never to be read) ----


class FakeDeviceTensor(FakeProducer):
    """A float32 tensor of shape on device (type, id) at address data, as a
    DLPack producer (safety_util's): a consumer that dereferences data as
    host memory crashes (0x1000 is never mapped), as it would with a GPU
    pointer."""

    def __init__(self, device, shape, data=0x1000):
        super().__init__(device, data=data, shape=shape)


def require_device():
    """Under DISCO_TEST_DEVICE=cuda without a CUDA device: skip the test,
    or fail it when DISCO_REQUIRE_GPU=1 (the GPU kit's runs)."""
    import pytest
    if CUDA and probe_gpus() == 0:
        msg = "DISCO_TEST_DEVICE=cuda: torch.cuda is unavailable (no CUDA device)"
        if os.environ.get("DISCO_REQUIRE_GPU") == "1":
            pytest.fail(msg + " and DISCO_REQUIRE_GPU=1", pytrace=False)
        pytest.skip(msg)
