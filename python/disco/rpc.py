"""disco.rpc - RPC sessions (disco/rpc.h) from Python.

``disco.rpc.connect(address)`` opens a client session to a
``disco-rpc-server`` (``shm:/path``, ``unix:/path``, ``tcp:HOST:PORT``),
with the same authentication as the C client: a token file
(``token_file=`` or ``$DISCO_TOKEN_FILE``, mode 0600) or the token's bytes
(``token=``); the server proves it holds the token too. The calls are the C
session's: get a function, call it, allocate remote memory, copy to and
from it, free, sync a device stream::

    with disco.rpc.connect("tcp:127.0.0.1:9090", token_file=path) as s:
        add = s.get_function("my.add")
        assert add(2, 3) == 5
        mem = s.alloc(1024)
        s.copy_to_remote(b"x" * 1024, mem)
        data = s.copy_from_remote(mem, 1024)
        s.free(mem)

A call that outlives the server's --session-timeout raises
disco.SessionTimeoutError; a refused token disco.AuthError; a protocol
mismatch disco.VersionError (both versions named).
"""

from . import _core

__all__ = ["RPCSession", "RPCFunction", "connect", "local", "from_worker"]


class RPCFunction:
    """A function of an RPC session: call it with Python values (int,
    float, bool, str, bytes, None, shapes, dtypes, devices); it returns the
    result as a Python value. Its handle is freed when it is collected."""

    def __init__(self, session, name, handle):
        self.session = session
        self.name = name
        self.handle = handle

    def __call__(self, *args):
        return self.session._s.call(self.handle, *args)

    def __del__(self):
        try:
            if not self.session._s.closed:
                self.session._s.free_handle(self.handle)
        except Exception:  # pylint: disable=broad-except
            pass

    def __repr__(self):
        return f"<disco.rpc.RPCFunction {self.name}>"


class RPCSession:
    """An RPC session: local (this process), a client of a server, or a view
    of a Disco session's worker. Used by one thread at a time."""

    def __init__(self, core):
        self._s = core

    def get_function(self, name):
        """The function ``name`` of the remote registry (NoFunctionError
        if there is none)."""
        return RPCFunction(self, name, self._s.get_func(name))

    get_func = get_function

    def call(self, func, *args):
        """Calls func (an RPCFunction or a handle) with args."""
        handle = func.handle if isinstance(func, RPCFunction) else int(func)
        return self._s.call(handle, *args)

    def load_library(self, path):
        """Calls disco.load_library on the remote side (servers refuse it
        unless started with --allow-load DIR)."""
        return self.call(self.get_function("disco.load_library"), str(path))

    def alloc(self, nbytes, device=None, align=64):
        """nbytes of remote memory on device (default: its host memory):
        a memory handle (int)."""
        return self._s.alloc(nbytes, device, align)

    def free(self, handle, device=None):
        """Frees memory from :meth:`alloc`."""
        self._s.free(handle, device)

    def free_handle(self, handle):
        """Frees a function or memory handle."""
        self._s.free_handle(handle)

    def copy_to_remote(self, data, handle, offset=0):
        """Copies a buffer (bytes, bytearray, a numpy array...) into remote
        memory at offset."""
        self._s.copy_to_remote(data, handle, offset)

    def copy_from_remote(self, handle, out, offset=0):
        """Copies remote memory out: ``out`` is a byte count (returns bytes)
        or a writable buffer (filled; returns None)."""
        return self._s.copy_from_remote(handle, out, offset)

    def stream_sync(self, device=None):
        """Waits for the remote device's stream."""
        self._s.stream_sync(device)

    def wait(self):
        """Waits for every outstanding asynchronous operation."""
        self._s.wait()

    @property
    def is_local(self):
        """Whether the session runs in this process."""
        return self._s.is_local

    def close(self):
        """Closes the session (a client says goodbye to its server)."""
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def connect(address, timeout_ms=0, token=None, token_file=None):
    """A client session to the server at address ("shm:/path",
    "unix:/path", "tcp:HOST:PORT"), after the version handshake and mutual
    authentication (token bytes, else token_file, else $DISCO_TOKEN_FILE).
    timeout_ms: each call's deadline (0: none)."""
    return RPCSession(_core.rpc_connect(address, timeout_ms, token, token_file))


def local(allow_load_dir=None):
    """The in-process session (this process's functions); it loads libraries
    (disco.load_library) only from inside allow_load_dir."""
    return RPCSession(_core.rpc_local(allow_load_dir))


def from_worker(session, worker):
    """Worker ``worker`` of a Disco session as an RPC session over the
    session's rings (a call runs on every worker and answers with this
    worker's result)."""
    return RPCSession(_core.rpc_from_worker(session, worker))
