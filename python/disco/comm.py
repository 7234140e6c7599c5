"""disco.comm - collectives and point-to-point inside Python worker functions.

Inside a function registered with :func:`disco.register_func` and run by a
session's workers (``sess.call_packed``, or one SPMD step with
``call_sync_all``), the workers talk to each other without the controller::

    import disco, numpy
    from disco import comm

    @disco.register_func("demo.step")
    def step(x):                      # x: a disco Tensor argument
        h = numpy.from_dlpack(x) * 2  # any host array
        comm.allreduce(h)             # in place: every worker gets the sum
        return h

Every member of a collective calls the same functions in the same order
(``in_group=True``: the worker's group, else every worker). Tensors are
disco Tensors (a worker function's arguments: used in place, in the shared
heap or on the device) or anything with ``__dlpack__`` or the buffer
protocol on the host (NumPy arrays, torch CPU tensors: staged through the
shared heap and copied back), or a DLPack producer on the worker's own
device (a torch CUDA tensor on the worker's GPU; sim memory on sim: staged
through the worker's device arena by device copies and copied back; a
CUDA producer's work is ordered before disco reads, through the DLPack
stream argument). Device arrays must be compact and on the worker's own
device (worker i uses device i mod the number of devices). Errors are disco's exception classes
(:mod:`disco.errors`): members that disagree get ``MismatchError``
(``DISCO_E_MISMATCH``), a member that dies or never arrives breaks the
session (``WorkerDiedError``, ``BrokenError``, ``DeadlineError``).
Calling these outside a worker function (or in another thread than the
one that runs it) raises ``InvalidArgumentError``. An argument a call
cannot take raises ``TypeError``, ``ValueError``, ``BufferError`` or
disco's class, naming the function and the argument; the collective still
fails on every member (so the members' next collectives meet each other),
and nothing is written. docs/python-safety.md, "disco.comm".
"""

import operator

from . import _core


def rank():
    """This worker's id (global, across nodes)."""
    return _core._comm_rank()


def world_size():
    """The session's number of workers."""
    return _core._comm_world_size()


def group_size():
    """The workers of this worker's group: the members of an ``in_group``
    collective (the session's workers over its ``num_groups``). Groups are
    consecutive ids; this worker's starts at ``rank() // group_size() *
    group_size()``."""
    return _core._comm_group_size()


def in_worker():
    """Whether this thread runs a worker function (disco.comm is usable)."""
    return _core._comm_in_worker()


def allreduce(src, dst=None, op="sum", in_group=True):
    """Every member gets ``op`` (``"sum"``, ``"prod"``, ``"min"``, ``"max"``
    or ``"avg"``) over the members' ``src``, in ``dst`` (same dtype and
    shape), or in ``src`` itself when ``dst`` is None. ``in_group`` is
    taken as a truth value. Returns the tensor that holds the result."""
    out = src if dst is None else dst
    _core._comm_allreduce(src, out, op, bool(in_group))
    return out


def _rows(group_size, in_group):
    """The members allgather stacks: group_size (an int from 1 to the world
    size), or when it is None this worker's group's size (in_group) or the
    world size."""
    world = world_size()
    if group_size is None:
        return _core._comm_group_size() if in_group else world
    if isinstance(group_size, bool) or not hasattr(type(group_size), "__index__"):
        raise TypeError("disco.comm.allgather: group_size must be an int (the members), not %s"
                        % type(group_size).__name__)
    n = operator.index(group_size)
    if not 1 <= n <= world:
        raise ValueError("disco.comm.allgather: group_size %d is not a number of members "
                         "(1 .. %d)" % (n, world))
    return n


def _like(src, rows):
    """A new array like src with dimension 0 times rows: torch for torch (on
    src's device), else NumPy on the host; another device producer needs
    its dst given."""
    try:
        import torch  # noqa: F401 - only when src is a torch tensor
        if isinstance(src, torch.Tensor):
            if src.dim() == 0:
                raise ValueError("disco.comm.allgather: src is 0-d: it has no dimension 0 to "
                                 "stack on (reshape it to 1 element, or pass dst)")
            return torch.empty((src.shape[0] * rows,) + tuple(src.shape[1:]), dtype=src.dtype,
                               device=src.device)
    except ImportError:
        pass
    import numpy
    if isinstance(src, numpy.ndarray):
        a = src
    elif hasattr(src, "__dlpack__"):
        dev = src.__dlpack_device__() if hasattr(src, "__dlpack_device__") else (1, 0)
        if int(dev[0]) != 1:  # not kDLCPU
            raise ValueError("disco.comm.allgather: src is on device %r: pass dst, an array "
                             "on the same device" % (tuple(dev),))
        a = numpy.from_dlpack(src)
    else:
        try:
            a = numpy.asarray(memoryview(src))
        except TypeError:
            raise TypeError("disco.comm.allgather: src: a host array is anything with "
                            "__dlpack__ or the buffer protocol (numpy, torch); got %s"
                            % type(src).__name__) from None
    if a.ndim == 0:
        raise ValueError("disco.comm.allgather: src is 0-d: it has no dimension 0 to stack on "
                         "(reshape it to 1 element, or pass dst)")
    return numpy.empty((a.shape[0] * rows,) + a.shape[1:], dtype=a.dtype)


def allgather(src, dst=None, in_group=True, group_size=None):
    """Every member gets the members' ``src`` stacked along dimension 0, in
    ``dst`` (or a new array of src's kind: NumPy, or torch for torch, on
    src's device; another device producer needs ``dst``). ``group_size``,
    the members, defaults to this worker's group's (``group_size()``) with
    ``in_group``, else the world's. Returns the tensor that holds the
    result."""
    in_group = bool(in_group)
    try:
        rows = _rows(group_size, in_group)  # outside a worker function: InvalidArgumentError, first
    except (TypeError, ValueError):
        _core._comm_forfeit("allgather", in_group)
        raise
    if dst is None:
        try:
            dst = _like(src, rows)
        except Exception:
            _core._comm_forfeit("allgather", in_group)
            raise
    _core._comm_allgather(src, dst, in_group)
    return dst


def broadcast(buf, root=0, in_group=True):
    """Every member's ``buf`` gets member ``root``'s bytes (root: an int, a
    rank in the group with in_group, else a worker id). Returns ``buf``."""
    _core._comm_broadcast(buf, root, bool(in_group))
    return buf


def barrier(in_group=True):
    """Returns when every member has called it."""
    _core._comm_barrier(bool(in_group))


def send(t, to):
    """Sends ``t``'s bytes to worker ``to`` (an int, which calls
    :func:`recv`); returns once they were received."""
    _core._comm_send(t, to, False)


def recv(t, frm):
    """Receives into ``t`` (same dtype and shape) what worker ``frm`` (an
    int) sends. Returns ``t``."""
    _core._comm_recv(t, frm, False)
    return t


def send_to_next_group(t):
    """:func:`send` to the worker of this rank in the next group."""
    _core._comm_send(t, None, True)


def recv_from_prev_group(t):
    """:func:`recv` from the worker of this rank in the previous group.
    Returns ``t``."""
    _core._comm_recv(t, None, True)
    return t
