"""disco - SPMD sessions over forked worker processes, from Python.

The Python front of the disco C runtime, mirroring TVM Disco's Python
session (``import tvm.runtime.disco as di`` -> ``import disco as di``;
``load_vm_module`` -> ``load_library``)::

    import disco, numpy

    with disco.ProcessSession(num_workers=2) as sess:
        x = sess.broadcast(numpy.arange(8, dtype="float32"))   # on every worker
        y = sess.allreduce(x, sess.empty((8,), "float32"), op="sum")
        out = numpy.empty(8, "float32")
        sess.copy_from_worker_0(out, y)                          # 2 * arange(8)
        t = y.debug_get_from_remote(1)                           # worker 1's bytes
        a = numpy.from_dlpack(t)                                 # no copy

What is here:

- :class:`ProcessSession` (forked or spawned workers; a context manager),
  :class:`ThreadedSession` (workers as threads of this process),
  :class:`Session` its methods: ``get_global_func``, ``call_packed``,
  ``sync_worker``/``sync_worker_0``, ``empty``, ``copy_to_worker_0``,
  ``copy_from_worker_0``, ``broadcast``, ``scatter``, ``gather_to_worker0``,
  ``allreduce``, ``allgather`` (``in_group`` as in TVM), ``load_library``,
  ``trace``/``write_trace``, ``shutdown``, ``num_workers``, ``worker_pid``.
- :class:`DRef` (``debug_get_from_remote``, ``debug_copy_from``; freed when
  collected) and :class:`DPackedFunc` (call it).
- :class:`Tensor`: a worker's tensor seen from here, with ``__dlpack__``
  and the buffer protocol (numpy.from_dlpack, torch.from_dlpack share the
  bytes; see its docstring for the lifetime rule).
- :func:`register_func`: Python functions that workers run.
- :class:`DataType`, :class:`Device`, :func:`cpu`, :func:`cuda`, :func:`sim`.
- Errors: one class per disco status under :class:`DiscoError`
  (:mod:`disco.errors` lists them): ``RemoteError``, ``WorkerDiedError``,
  ``DeadlineError``, ``SessionTimeoutError``...
- :mod:`disco.rpc`: RPC sessions (``disco.rpc.connect``).

The C library is ``libdisco.so`` (``make python`` builds the extension in
place: ``PYTHONPATH=python``; ``make install PREFIX=...`` installs the
package into ``PREFIX/lib/python3/dist-packages``).
"""

import os as _os

from . import _core
from . import errors
from .errors import *  # noqa: F401,F403  (the exception classes)
from .errors import DiscoError, ERROR_CLASSES
from ._types import DataType, Device, cpu, cuda, sim
from .session import (DModule, DPackedFunc, DRef, ProcessSession, REDUCE_OPS, Session, Tensor,
                      ThreadedSession, get_global_func, register_func, worker_program)
from . import rpc
from . import comm

_core._set_types(DataType, Device, ERROR_CLASSES, DiscoError)
# os.fork (and multiprocessing's fork) set a child's Python up: note it, so
# that a Python function run there does not do it twice (_pyfunc.c).
_os.register_at_fork(after_in_child=_core._forked)

__version__ = "0.4.0"

__all__ = ["ProcessSession", "ThreadedSession", "Session", "DRef", "DPackedFunc", "DModule",
           "Tensor", "register_func", "get_global_func", "DataType", "Device", "cpu", "cuda",
           "sim", "DiscoError",
           "REDUCE_OPS", "errors", "rpc", "worker_program"] + errors.__all__


def last_error():
    """disco_last_error() of this thread: the detail of the last C error."""
    return _core.last_error()
