"""disco._types - DataType and Device, the values that name element types
and devices (TVM's DataType and Device, reduced to what disco uses)."""

from . import _core

__all__ = ["DataType", "Device", "cpu", "cuda", "sim"]


class DataType(str):
    """An element type, a str ("float32") that disco passes as a dtype.

    ``DataType("float32")``, ``DataType(numpy.float32)``,
    ``DataType(torch.float16)``; ``.type_code``, ``.bits``, ``.lanes`` as in
    DLPack (and TVM). A plain str argument stays a str, except where the
    function's signature wants a dtype ('t'), where the session parses it.
    Supported by the data plane: float16, bfloat16, float32, float64,
    int8/16/32/64, uint8, bool.
    """

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, DataType):
            return value
        name = value if isinstance(value, str) else _dtype_name(value)
        code, bits, lanes = _core.dtype_parse(name)
        return super().__new__(cls, _core.dtype_str(code, bits, lanes))

    @property
    def type_code(self):
        """DLPack type code (0 int, 1 uint, 2 float, 4 bfloat, 6 bool)."""
        return _core.dtype_parse(self)[0]

    @property
    def bits(self):
        """Bits per lane."""
        return _core.dtype_parse(self)[1]

    @property
    def lanes(self):
        """Lanes (1 for scalars)."""
        return _core.dtype_parse(self)[2]

    @property
    def itemsize(self):
        """Bytes per element."""
        return (self.bits * self.lanes + 7) // 8

    def __repr__(self):
        return f"DataType({str(self)!r})"


def _dtype_name(value):
    """The name of a numpy or torch dtype (or numpy scalar type)."""
    mod = type(value).__module__
    if mod.startswith("torch"):
        return str(value).replace("torch.", "")
    if isinstance(value, type) or mod.startswith("numpy"):
        import numpy  # pylint: disable=import-outside-toplevel
        return str(numpy.dtype(value))
    raise TypeError(f"not a dtype: {value!r}")


class Device:
    """A device: (device_type, device_id), DLPack's DLDevice.

    Types: 1 cpu, 2 cuda, 12 sim (kDLExtDev: disco's simulated GPU, see
    DISCO_SIM_GPUS). Make them with :func:`cpu`, :func:`cuda`, :func:`sim`.
    """

    __slots__ = ("device_type", "device_id")
    NAMES = {1: "cpu", 2: "cuda", 12: "sim"}

    def __init__(self, device_type, device_id=0):
        self.device_type = int(device_type)
        self.device_id = int(device_id)

    def __eq__(self, other):
        return (isinstance(other, Device) and self.device_type == other.device_type
                and self.device_id == other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __iter__(self):
        return iter((self.device_type, self.device_id))

    def __repr__(self):
        name = self.NAMES.get(self.device_type, f"device_type={self.device_type}")
        return f"{name}({self.device_id})"

    def _dlpack_device(self):
        return (self.device_type, self.device_id)


def cpu(dev_id=0):
    """The host (DLPack kDLCPU)."""
    return Device(1, dev_id)


def cuda(dev_id=0):
    """A CUDA GPU (kDLCUDA). Worker i uses GPU i mod (number of GPUs)."""
    return Device(2, dev_id)


def sim(dev_id=0):
    """disco's simulated GPU (kDLExtDev; DISCO_SIM_GPUS=N enables N)."""
    return Device(12, dev_id)
