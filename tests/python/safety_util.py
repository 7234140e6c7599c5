"""Helpers of the safety, hypothesis and stress suites (test_safety*.py,
test_hypothesis*.py, test_stress*.py).

run_isolated(code): runs code in a fresh interpreter (disco imported, a
conftest-like open_session), so that a crash (a segfault, an abort) fails
the calling test with its signal named, instead of ending pytest.

fake_producer(device, ...): a DLPack producer that records the keyword
arguments of every __dlpack__ call (the stream a consumer passed) and
reports the device it is told to; it exports a wrapped array's capsule, or
a capsule of its own over any pointer (a device pointer the host must
never read).
"""

import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import disco

_PKG_ROOT = str(pathlib.Path(disco.__file__).resolve().parents[1])
_HERE = str(pathlib.Path(__file__).resolve().parent)

PRELUDE = """
import gc, os, sys, threading
import numpy as np
import disco

def open_session(n=2, **kw):
    kw.setdefault("call_timeout_ms", 5000)
    return disco.ProcessSession(n, **kw)
"""

MARK = "SAFETY-RUN-DONE"


def run_isolated(code, timeout=60, env=None):
    """Runs PRELUDE + code in a new interpreter; fails the caller unless it
    exits 0 having run to its end."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([_PKG_ROOT, _HERE, e.get("PYTHONPATH", "")])
    e.setdefault("DISCO_QUIET", "1")
    e.update(env or {})
    src = PRELUDE + textwrap.dedent(code) + f"\nprint({MARK!r}, flush=True)\n"
    try:
        p = subprocess.run([sys.executable, "-c", src], env=e, capture_output=True, text=True,
                           timeout=timeout, check=False)
    except subprocess.TimeoutExpired as ex:
        raise AssertionError(f"the isolated run hung past {timeout} s:\n{ex.stdout}\n{ex.stderr}")
    why = ""
    if p.returncode < 0:
        why = f"killed by {signal.Signals(-p.returncode).name}"
    elif p.returncode != 0:
        why = f"exit status {p.returncode}"
    elif MARK not in p.stdout:
        why = "it did not run to its end"
    assert not why, f"the isolated run failed ({why}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p


# ---- a DLPack producer of any device ----


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAME = b"dltensor"


class FakeProducer:
    """See fake_producer."""

    def __init__(self, device, wrap=None, data=0, shape=(), dtype=(2, 32, 1), strides=None,
                 export_device=None, ndim=None):
        self.device = tuple(device)
        self.wrap = wrap
        self.calls = []
        if wrap is not None:
            return
        ed = export_device if export_device is not None else device
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(*strides) if strides is not None else None
        self._m = _DLManagedTensor()
        t = self._m.dl_tensor
        t.data = data
        t.device = _DLDevice(*ed)
        t.ndim = n if ndim is None else ndim
        t.dtype = _DLDataType(*dtype)
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if self._strides is not None:
            t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kw):
        self.calls.append(dict(kw))
        if self.wrap is not None:
            return self.wrap.__dlpack__()
        return _capsule_new(ctypes.addressof(self._m), _NAME, None)


def fake_producer(device, **kw):
    """A FakeProducer reporting device (a (type, id) pair): over wrap (an
    array with __dlpack__) or over data (an address), shape, dtype (code,
    bits, lanes) and strides (in elements). Its .calls lists the keyword
    arguments of each __dlpack__ call."""
    return FakeProducer(device, **kw)
