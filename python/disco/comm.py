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
Calling these outside a worker function raises ``InvalidArgumentError``.
"""

from . import _core

_OPS = ("sum", "prod", "min", "max", "avg")


def rank():
    """This worker's id (global, across nodes)."""
    return _core._comm_rank()


def world_size():
    """The session's number of workers."""
    return _core._comm_world_size()


def in_worker():
    """Whether this thread runs a worker function (disco.comm is usable)."""
    return _core._comm_in_worker()


def allreduce(src, dst=None, op="sum", in_group=True):
    """Every member gets ``op`` over the members' ``src``, in ``dst`` (same
    dtype and shape), or in ``src`` itself when ``dst`` is None. Returns the
    tensor that holds the result."""
    if op not in _OPS:
        raise ValueError("disco.comm.allreduce: op must be one of %s" % (_OPS,))
    out = src if dst is None else dst
    _core._comm_allreduce(src, out, op, bool(in_group))
    return out


def _like(src, rows):
    """A new array like src with dimension 0 times rows: torch for torch (on
    src's device), else NumPy on the host; another device producer needs
    its dst given."""
    try:
        import torch  # noqa: F401 - only when src is a torch tensor
        if isinstance(src, torch.Tensor):
            return torch.empty((src.shape[0] * rows,) + tuple(src.shape[1:]), dtype=src.dtype,
                               device=src.device)
    except ImportError:
        pass
    if hasattr(src, "__dlpack_device__") and int(src.__dlpack_device__()[0]) != 1:  # not kDLCPU
        raise ValueError("disco.comm.allgather: src is on device %r: pass dst, an array on "
                         "the same device" % (tuple(src.__dlpack_device__()),))
    import numpy
    a = numpy.from_dlpack(src) if hasattr(src, "__dlpack__") else numpy.asarray(src)
    return numpy.empty((a.shape[0] * rows,) + a.shape[1:], dtype=a.dtype)


def allgather(src, dst=None, in_group=True, group_size=None):
    """Every member gets the members' ``src`` stacked along dimension 0, in
    ``dst`` (or a new array of src's kind: NumPy, or torch for torch, on
    src's device; another device producer needs ``dst``; then
    ``group_size``, the members, is needed with ``in_group`` unless the
    session has one group). Returns the tensor that holds the result."""
    if dst is None:
        rows = group_size if group_size is not None else world_size()
        dst = _like(src, rows)
    _core._comm_allgather(src, dst, bool(in_group))
    return dst


def broadcast(buf, root=0, in_group=True):
    """Every member's ``buf`` gets member ``root``'s bytes (root: a rank in
    the group with in_group, else a worker id). Returns ``buf``."""
    _core._comm_broadcast(buf, int(root), bool(in_group))
    return buf


def barrier(in_group=True):
    """Returns when every member has called it."""
    _core._comm_barrier(bool(in_group))


def send(t, to):
    """Sends ``t``'s bytes to worker ``to`` (which calls :func:`recv`);
    returns once they were received."""
    if int(to) < 0:
        raise ValueError("disco.comm.send: worker %d" % to)
    _core._comm_send(t, int(to))


def recv(t, frm):
    """Receives into ``t`` (same dtype and shape) what worker ``frm`` sends.
    Returns ``t``."""
    if int(frm) < 0:
        raise ValueError("disco.comm.recv: worker %d" % frm)
    _core._comm_recv(t, int(frm))
    return t


def send_to_next_group(t):
    """:func:`send` to the worker of this rank in the next group."""
    _core._comm_send(t, -1)


def recv_from_prev_group(t):
    """:func:`recv` from the worker of this rank in the previous group."""
    _core._comm_recv(t, -1)
    return t
