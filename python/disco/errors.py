"""disco.errors - one exception class per disco status.

Every failure of a disco call raises a subclass of :class:`DiscoError`
chosen by the status code the C library returned, built from the library's
own table (``_core.status_table()``, the X-macro table behind
``disco_strerror``), so no code can lack a class. Each exception carries

- ``code``: the status (a negative int, e.g. -16),
- ``name``: its symbolic name (``"DISCO_E_REMOTE"``),
- ``detail``: ``disco_last_error()``'s text, which names the worker, the
  function and the message (``"worker 1: my.fn: ValueError: bad input"``),
- ``strerror``: the code's message (``"function failed on a worker"``).

``str(e)`` is ``"NAME: detail"``.

The classes (code, C name, class):

====  ====================  ==========================================
  -1  E_INVAL               InvalidArgumentError (also a ValueError)
  -2  E_NOMEM               OutOfMemoryError (also a MemoryError)
  -3  E_SYS                 SystemCallError
  -4  E_NOSPACE             NoSpaceError
  -5  E_BAD_MAGIC           BadMagicError
  -6  E_TIMEOUT             DeadlineError (a call deadline passed)
  -7  E_PEER_DEAD           PeerDeadError
  -8  E_MSG_TOO_BIG         MessageTooBigError
  -9  E_AGAIN               AgainError
 -10  E_BUF_TOO_SMALL       BufferTooSmallError
 -11  E_TRUNCATED           TruncatedError
 -12  E_BAD_TYPE            BadTypeError (also a TypeError)
 -13  E_ARG_COUNT           ArgCountError (also a TypeError)
 -14  E_NO_FUNC             NoFunctionError (also a LookupError)
 -15  E_BAD_REG             BadRegisterError
 -16  E_REMOTE              RemoteError (a function failed on a worker)
 -17  E_WORKER_DIED         WorkerDiedError
 -18  E_BROKEN              SessionBrokenError
 -19  E_SHUTDOWN            SessionShutdownError
 -20  E_LIBRARY             LibraryError
 -21  E_VERSION             VersionError
 -22  E_SESSION_TIMEOUT     SessionTimeoutError (an RPC server's session expired)
 -23  E_HEAP_EXHAUSTED      HeapExhaustedError
 -24  E_NO_DEVICE           NoDeviceError
 -25  E_MISMATCH            MismatchError (also a ValueError)
 -26  E_CLOSED              ConnectionClosedError
 -27  E_PROTOCOL            ProtocolError
 -28  E_AUTH                AuthError
 -29  E_BUSY                BusyError
 -30  E_OVERFLOW            SizeOverflowError (also an OverflowError)
 -31  E_UNSUPPORTED         UnsupportedError (also a NotImplementedError)
====  ====================  ==========================================

A code the table gains later gets a class named after it (``E_FOO_BAR`` ->
``FooBarError``). Names avoid the builtins' (``DeadlineError``, not
``TimeoutError``; ``SizeOverflowError``, not ``OverflowError``).
"""

from . import _core

__all__ = ["DiscoError", "error_class", "ERROR_CLASSES"]


class DiscoError(Exception):
    """Base class of every disco error; see the module's table."""

    code = None
    name = "DISCO_E_UNKNOWN"
    strerror = "unknown status"

    def __init__(self, detail="", code=None):
        if code is not None:
            self.code = int(code)
            self.name, self.strerror = _NAMES.get(self.code, (self.name, self.strerror))
        self.detail = str(detail)
        super().__init__(self.detail)

    def __str__(self):
        return f"{self.name}: {self.detail or self.strerror}"

    def __reduce__(self):
        return (type(self), (self.detail, self.code))


# Classes for the codes, and extra bases that make them catchable as the
# builtin family they belong to.
_CLASS_NAMES = {
    "E_INVAL": ("InvalidArgumentError", (ValueError,)),
    "E_NOMEM": ("OutOfMemoryError", (MemoryError,)),
    "E_SYS": ("SystemCallError", ()),
    "E_NOSPACE": ("NoSpaceError", ()),
    "E_BAD_MAGIC": ("BadMagicError", ()),
    "E_TIMEOUT": ("DeadlineError", ()),
    "E_PEER_DEAD": ("PeerDeadError", ()),
    "E_MSG_TOO_BIG": ("MessageTooBigError", ()),
    "E_AGAIN": ("AgainError", ()),
    "E_BUF_TOO_SMALL": ("BufferTooSmallError", ()),
    "E_TRUNCATED": ("TruncatedError", ()),
    "E_BAD_TYPE": ("BadTypeError", (TypeError,)),
    "E_ARG_COUNT": ("ArgCountError", (TypeError,)),
    "E_NO_FUNC": ("NoFunctionError", (LookupError,)),
    "E_BAD_REG": ("BadRegisterError", ()),
    "E_REMOTE": ("RemoteError", ()),
    "E_WORKER_DIED": ("WorkerDiedError", ()),
    "E_BROKEN": ("SessionBrokenError", ()),
    "E_SHUTDOWN": ("SessionShutdownError", ()),
    "E_LIBRARY": ("LibraryError", ()),
    "E_VERSION": ("VersionError", ()),
    "E_SESSION_TIMEOUT": ("SessionTimeoutError", ()),
    "E_HEAP_EXHAUSTED": ("HeapExhaustedError", ()),
    "E_NO_DEVICE": ("NoDeviceError", ()),
    "E_MISMATCH": ("MismatchError", (ValueError,)),
    "E_CLOSED": ("ConnectionClosedError", ()),
    "E_PROTOCOL": ("ProtocolError", ()),
    "E_AUTH": ("AuthError", ()),
    "E_BUSY": ("BusyError", ()),
    "E_OVERFLOW": ("SizeOverflowError", (OverflowError,)),
    "E_UNSUPPORTED": ("UnsupportedError", (NotImplementedError,)),
}

_NAMES = {}
ERROR_CLASSES = {}
"""Status code -> exception class."""


def _class_name(short):
    known = _CLASS_NAMES.get(short)
    if known is not None:
        return known
    words = short[2:].split("_") if short.startswith("E_") else short.split("_")
    return "".join(w.capitalize() for w in words) + "Error", ()


for _code, _name, _msg in _core.status_table():
    _NAMES[_code] = (_name, _msg)
    if _code == 0:
        continue
    _short = _name[len("DISCO_"):]
    _cls_name, _bases = _class_name(_short)
    _doc = f"{_name} ({_code}): {_msg}."
    _cls = type(_cls_name, (DiscoError,) + _bases,
                {"code": _code, "name": _name, "strerror": _msg, "__doc__": _doc,
                 "__module__": "disco"})
    ERROR_CLASSES[_code] = _cls
    globals()[_cls_name] = _cls
    __all__.append(_cls_name)

del _code, _name, _msg, _short, _cls_name, _bases, _doc, _cls


def error_class(code):
    """The exception class of a status code (DiscoError for an unknown one)."""
    return ERROR_CLASSES.get(int(code), DiscoError)
