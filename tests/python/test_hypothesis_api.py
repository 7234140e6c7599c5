"""Property-based tests of the public Python API as a careless or hostile
caller uses it (issue 33, section 1), with Debian's python3-hypothesis.

Random shapes, dtypes, strides, devices, argument kinds, worker ids and
register lifetimes against every public method of a session, a DRef and a
Tensor. The invariant: a Python exception or a correct result (the bytes
or the value that went in come back), never a crash or a silent wrong
value.

Each property runs in a fresh interpreter (safety_util.run_isolated), so a
crash fails its test and names the signal; hypothesis prints the
falsifying example there. Bounded for CI: derandomized (the same examples
every run), a fixed number of examples each, no deadline (a loaded machine
is slow, not wrong), no example database.
"""

import os
import tempfile

import pytest

from safety_util import run_isolated

hypothesis = pytest.importorskip("hypothesis")

EXAMPLES = int(os.environ.get("DISCO_HYPOTHESIS_EXAMPLES", "60"))

# Shared by every property: the strategies and a session with the test
# library (test.echo and friends) and a Python echo.
COMMON = """
import array, math
from hypothesis import given, settings, HealthCheck, strategies as st
from safety_util import fake_producer
import disco.rpc

EXAMPLES = {examples}
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)

@disco.register_func("hyp.echo")
def _echo(x):
    return x

kept = []

@disco.register_func("hyp.keep")
def _keep(x):
    kept.append(x)

s = open_session(2, heap_bytes=8 << 20)
s.load_library(os.environ["DISCO_TEST_LIB"])
W = s.num_workers
DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "bool"]

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
dtypes = st.sampled_from(DTYPES)
# worker ids: the valid ones, and what narrows badly or is out of range
worker_ids = st.one_of(st.integers(0, W - 1), st.integers(-2**70, 2**70),
                       st.sampled_from([2**32, 2**32 + 1, 2**31, -2**31, 2**63, 2**64, W]))

def make_array(shape, dtype, seed):
    n = int(np.prod(shape)) if shape else 1
    a = (np.arange(n) * 7 + seed) % 251
    return a.astype(dtype).reshape(shape)

def sync():
    for w in range(W):
        try:
            s.sync_worker(w)
        except disco.DiscoError:
            pass

def expect_worker_error(w):
    ok = isinstance(w, int) and 0 <= w < W
    return not ok
"""

HOST_ARRAYS = """
torch = None
try:
    import torch
except ImportError:
    pass

@st.composite
def host_arrays(draw):
    # (object, expected numpy array or None when it must be refused)
    shape = draw(shapes)
    dtype = draw(dtypes)
    a = make_array(shape, dtype, draw(st.integers(0, 250)))
    kind = draw(st.sampled_from(["numpy", "numpy_t", "numpy_slice", "torch", "torch_t",
                                 "fake_cpu", "fake_cpu_strided", "fake_dev", "fake_bad",
                                 "bytes", "memoryview", "array"]))
    if kind == "numpy":
        return a, a
    if kind == "numpy_t":
        t = a.T
        return t, (t if t.flags.c_contiguous else None)
    if kind == "numpy_slice":
        if a.ndim == 0 or a.shape[0] < 2:
            return a, a
        v = a[::2]
        return v, (v if v.flags.c_contiguous else None)
    if kind in ("torch", "torch_t"):
        if torch is None or dtype in ("uint16", "uint32", "uint64"):
            return a, a
        t = torch.from_numpy(a.copy())
        if kind == "torch_t" and t.dim() >= 2:
            t = t.t()
        return t, (np.array(t.numpy(), order="C") if t.is_contiguous() else None)
    if kind == "fake_cpu":
        p = fake_producer((1, 0), wrap=a)
        return p, a
    if kind == "fake_cpu_strided":
        # truthful about its memory, strides in elements, maybe not compact
        b = np.ascontiguousarray(a)
        st_ = [int(x) // max(b.itemsize, 1) for x in b.strides] if b.ndim else []
        if b.ndim >= 1 and draw(st.booleans()):
            st_ = list(reversed(st_))
        p = fake_producer((1, 0), data=b.ctypes.data if b.size else 0, shape=b.shape,
                          dtype=(int(dtype_code(b.dtype)), b.itemsize * 8, 1), strides=st_)
        p.keep = b
        compact = all(st_[i] == int(np.prod(b.shape[i + 1:])) for i in range(b.ndim)
                      if b.shape[i] != 1)
        return p, (b if compact else None)
    if kind == "fake_dev":
        dev = draw(st.sampled_from([(2, 0), (12, 0), (13, 0), (3, 0), (2, 7), (99, 1)]))
        return fake_producer(dev, data=0x1000, shape=shape or (1,), dtype=(2, 32, 1)), None
    if kind == "fake_bad":
        # lies about its layout: negative or huge dimensions, too many of them
        bad_shape = draw(st.lists(st.integers(-3, 2**62), min_size=1, max_size=3))
        ndim = draw(st.sampled_from([None, -1, 9, 100]))
        if ndim is None and all(0 <= d <= 8 for d in bad_shape):
            bad_shape = [-1]
        return fake_producer((1, 0), data=0x1000, shape=bad_shape, dtype=(2, 32, 1),
                             ndim=ndim), None
    if kind == "bytes":  # a uint8 array by the buffer protocol (a value in a call)
        return a.tobytes(), np.frombuffer(a.tobytes(), dtype="uint8")
    if kind == "memoryview":
        return memoryview(np.array(a, order="C")), a
    return array.array("b", [1, 2, 3]), np.array([1, 2, 3], dtype="int8")

def dtype_code(dt):
    return {"f": 2, "i": 0, "u": 1, "b": 6}[dt.kind]

def same(got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    return got.dtype == want.dtype and got.shape == want.shape and \\
        got.tobytes() == want.tobytes()
"""


def _run(body):
    with tempfile.TemporaryDirectory() as home:  # hypothesis's caches: not in the tree
        run_isolated(COMMON.format(examples=EXAMPLES) + HOST_ARRAYS + body, timeout=120,
                     env={"HYPOTHESIS_STORAGE_DIRECTORY": home})


# copy_to_worker_0 and copy_from_worker_0 of any host array: the bytes come
# back as they went in, or the copy raises (non-compact, device memory the
# copy cannot reach, a lying producer, a non-array).
def test_copies_round_trip():
    _run("""
@SETTINGS
@given(host_arrays())
def prop(case):
    x, want = case
    try:
        r = s.copy_to_worker_0(x)
    except Exception:  # an exception is always an answer; acceptance is checked below
        return
    assert want is not None, f"accepted {type(x).__name__}: {x!r}"
    out = np.empty(np.asarray(want).shape, dtype=np.asarray(want).dtype)
    s.copy_from_worker_0(out, r)
    assert same(out, want), (out, want)
    # into an existing register, and the view of worker 0
    s.copy_to_worker_0(x, r)
    assert same(np.asarray(r.debug_get_from_remote(0)), want)

prop()
s.shutdown()
""")


# debug_copy_from(worker, array) then debug_get_from_remote(worker): the
# bytes that went in (any worker id: a bad one raises), or an exception.
def test_debug_copy_round_trip():
    _run("""
@SETTINGS
@given(host_arrays(), worker_ids)
def prop(case, w):
    x, want = case
    n = np.asarray(want).size if want is not None else 4
    dt = str(np.asarray(want).dtype) if want is not None else "float32"
    try:
        r = s.empty((n,), dt)
    except disco.BadTypeError:
        return  # a dtype disco has no tensors of (uint16, ...)
    try:
        r.debug_copy_from(w, x)
    except (disco.DiscoError, TypeError, ValueError, BufferError, OverflowError):
        if want is not None and not expect_worker_error(w) and not isinstance(x, bytes):
            # a good array to a good worker: only a dtype it cannot hold may fail
            raise
        return
    assert not expect_worker_error(w), f"worker {w} accepted"
    if isinstance(x, bytes):
        return  # a value replaced the register: no tensor to compare
    assert want is not None, f"accepted {type(x).__name__}"
    got = np.asarray(r.debug_get_from_remote(w))
    assert got.tobytes() == np.array(want, order="C").tobytes()

prop()
s.shutdown()
""")


# Call arguments of every kind, echoed by a C function (test.echo) and a
# Python one (hyp.echo) on every worker: the value that went in comes back
# from every worker, or the call raises before anything is sent.
def test_call_arguments_echo():
    _run("""
ints = st.integers(-2**70, 2**70)
scalars = st.one_of(ints, st.floats(allow_nan=False), st.booleans(), st.none(),
                    st.text(max_size=40), st.binary(max_size=200),
                    st.binary(max_size=200).map(bytearray))
shape_like = st.lists(st.one_of(st.integers(-2**65, 2**65), st.booleans()), max_size=6)
args = st.one_of(scalars, shape_like, shape_like.map(tuple),
                 st.sampled_from([memoryview(b"ab"), array.array("i", [1]), np.zeros(2),
                                  np.int64(3), np.float32(1.5), object(), 1j]))

def expected(a):
    if isinstance(a, bool) or a is None or isinstance(a, float):
        return a
    if isinstance(a, int):
        if not -2**63 <= a < 2**63:
            raise OverflowError
        return a
    if isinstance(a, (bytes, bytearray)):
        return bytes(a)
    if isinstance(a, str):
        return a
    if isinstance(a, (list, tuple)):
        if any(not -2**63 <= int(v) < 2**63 for v in a):
            raise OverflowError
        return tuple(int(v) for v in a)
    raise TypeError  # numpy scalars too: they export a buffer, and arrays move by register

@SETTINGS
@given(args, st.sampled_from(["test.echo", "hyp.echo"]))
def prop(a, fname):
    try:
        want = expected(a)
    except (OverflowError, TypeError):
        want = Exception
    f = s.get_global_func(fname)
    try:
        r = f(a)
    except (TypeError, OverflowError, ValueError, UnicodeError, disco.DiscoError) as e:
        assert want is Exception or isinstance(e, UnicodeError) or \\
            isinstance(e, disco.DiscoError), (a, e)
        return
    assert want is not Exception, f"accepted {a!r}"
    for w in range(W):
        try:
            got = r.debug_get_from_remote(w)
        except disco.DiscoError:
            sync()
            raise
        if isinstance(want, float) and math.isnan(want):
            continue
        assert got == want and type(got) is type(want), (w, a, got, want)

prop()
s.shutdown()
""")


# empty() of any shape, dtype and device, then sync and views: a tensor of
# that shape and dtype on every worker, or an exception.
def test_empty_any_layout():
    _run("""
devices = st.one_of(st.none(), st.sampled_from(["cpu", "cuda:0", "sim:0", "gpu", "tpu",
                                                 "cpu:99999999999999999999"]),
                    st.tuples(st.integers(-2, 2**33), st.integers(-2, 2**33)))
@SETTINGS
@given(st.lists(st.integers(-2, 2**40), max_size=9), st.one_of(dtypes, st.text(max_size=8)),
       devices, st.booleans())
def prop(shape, dtype, dev, w0):
    try:
        r = s.empty(shape, dtype, device=dev, worker0_only=w0)
    except (disco.DiscoError, TypeError, ValueError, OverflowError):
        return
    sync()
    for w in range(1 if w0 else W):
        try:
            t = r.debug_get_from_remote(w)
        except disco.DiscoError:
            continue  # the worker could not make it (reported at its sync)
        assert tuple(t.shape) == tuple(shape), (t.shape, shape)
        assert str(t.dtype) == str(disco.DataType(dtype)), (t.dtype, dtype)

prop()
s.shutdown()
""")


# Register lifetimes: DRefs made, viewed, freed and used in random order,
# views and a worker function's kept arguments outliving their registers.
# Every live view shows its register's bytes as they were made; an expired
# argument refuses every use.
def test_register_lifetimes():
    _run("""
ops = st.lists(st.tuples(st.sampled_from(["make", "view", "free", "check", "keep", "use_kept",
                                          "collect", "allreduce"]),
                         st.integers(0, 1000)), min_size=1, max_size=25)

@SETTINGS
@given(ops)
def prop(seq):
    refs, views = {}, []
    for op, k in seq:
        if op == "make":
            a = make_array((k % 7 + 1,), "int32", k)
            refs[k] = (s.copy_to_worker_0(a), a)
        elif op == "view" and refs:
            key = sorted(refs)[k % len(refs)]
            views.append((refs[key][0].debug_get_from_remote(0), refs[key][1]))
        elif op == "free" and refs:
            del refs[sorted(refs)[k % len(refs)]]
        elif op == "check":
            for t, a in views:
                assert same(np.asarray(t), a)
            for r, a in refs.values():
                out = np.empty_like(a)
                s.copy_from_worker_0(out, r)
                assert same(out, a)
        elif op == "keep" and refs:
            r = refs[sorted(refs)[k % len(refs)]][0]
            s.get_global_func("hyp.keep")(r)
        elif op == "use_kept" and kept:
            t = kept[k % len(kept)]
            for use in (lambda: np.from_dlpack(t), lambda: s.copy_to_worker_0(t),
                        lambda: memoryview(t)):
                try:
                    use()
                except BufferError:
                    continue
                raise AssertionError("an expired argument was used")
            if refs:
                r, a = next(iter(refs.values()))
                try:
                    s.copy_from_worker_0(t, r)
                except BufferError:
                    pass
                else:
                    raise AssertionError("an expired argument was written")
        elif op == "collect":
            gc.collect()
            sync()
        elif op == "allreduce" and refs:
            a = refs[sorted(refs)[k % len(refs)]][1]
            res = s.allreduce(s.broadcast(a))
            for w in range(W):
                assert same(np.asarray(res.debug_get_from_remote(w)), a * W)
    for t, a in views:
        assert same(np.asarray(t), a)
    kept.clear()
    sync()

prop()
s.shutdown()
""")
