"""Several Python threads drive one session (calls, copies, collectives,
debug reads, frees, a shared bytearray that one thread resizes while the
others pass it) while another thread closes it (issue 33, section 1).

The invariant: every operation gives a correct result until the close,
and an exception (SessionShutdownError, ConnectionClosedError) after it;
never a crash, never a hang, never a torn or wrong value. Each scenario
runs in a fresh interpreter (safety_util.run_isolated): a crash fails the
test, and a hang is caught by the joins' timeouts and the run's own.
The close comes once every thread has done OPS operations (counted, not
timed), so each run exercises the same amount of work before it.
"""

from safety_util import run_isolated

COMMON = """
import random

OPS = 100         # operations per thread before the close
THREADS = 4
failures = []
done = [0] * THREADS  # operations each thread completed
reached = [threading.Event() for _ in range(THREADS)]
closing = threading.Event()

def fail(why):
    failures.append(why)
    for e in reached:
        e.set()

def join_all(ts, what):
    for t in ts:
        t.join(30)
        if t.is_alive():
            print(f"HANG: a {what} thread did not end", flush=True)
            os._exit(3)
"""


def test_session_threads_while_closed():
    run_isolated(COMMON + """
@disco.register_func("stress.echo")
def echo(x):
    return x

s = open_session(2, max_msg=1 << 20)
s.load_library(os.environ["DISCO_TEST_LIB"])
f_echo = s.get_global_func("stress.echo")
shared = bytearray(b"\\x01" * 4096)

def one_op(i, rng, refs):
    op = rng.choice(["call", "call", "copy", "collective", "view", "free", "sync", "peek",
                     "resize", "debug_set"])
    if op == "call":  # a bytearray another thread resizes: one snapshot of it, whole
        r = f_echo(shared)
        refs.append(r)
        b = r.debug_get_from_remote(rng.randrange(2))
        assert len(set(b)) <= 1, f"a torn bytearray: {set(b)}"
    elif op == "copy":
        a = np.arange(256, dtype="float32") + i
        r = s.copy_to_worker_0(a)
        out = np.empty_like(a)
        s.copy_from_worker_0(out, r)
        assert (out == a).all()
        refs.append(r)
    elif op == "collective":
        b = s.broadcast(np.full(32, i + 1, dtype="float32"))
        res = s.allreduce(b)
        got = np.asarray(res.debug_get_from_remote(rng.randrange(2)))
        assert (got == 2 * (i + 1)).all(), got
        refs.append(res)
    elif op == "view" and refs:
        r = rng.choice(refs)
        try:
            v = r.debug_get_from_remote(0)
        except disco.BadTypeError:
            return
        if isinstance(v, disco.Tensor):
            np.asarray(v).sum()
    elif op == "free":
        refs.clear()
        gc.collect()
    elif op == "sync":
        s.sync_worker(rng.randrange(2))
    elif op == "peek":
        assert s.health()[0] in (0, -19)
        s.worker_pid(1)
    elif op == "resize":
        shared[:] = bytes([rng.randrange(1, 255)]) * rng.randrange(1, 8192)
    elif op == "debug_set" and refs:
        r = s.empty((8,), "int32")
        r.debug_copy_from(rng.randrange(2), np.arange(8, dtype="int32"))
        refs.append(r)

def driver(i):
    rng = random.Random(i)
    refs = []
    for n in range(100000):
        try:
            one_op(i, rng, refs)
        except disco.SessionShutdownError:
            if not closing.is_set():
                fail(f"thread {i}: shut down before the close")
            return
        except disco.DiscoError as e:
            if not closing.is_set():
                fail(f"thread {i}: {e!r}")
                return
        except Exception as e:  # a wrong value, or an unexpected kind of error
            fail(f"thread {i}: {type(e).__name__}: {e}")
            return
        done[i] = n + 1
        if n + 1 == OPS:
            reached[i].set()
    fail(f"thread {i}: never saw the close")

def closer():
    for e in reached:
        e.wait(60)
    closing.set()
    s.shutdown()

ts = [threading.Thread(target=driver, args=(i,)) for i in range(THREADS)]
tc = threading.Thread(target=closer)
for t in ts + [tc]:
    t.start()
join_all(ts + [tc], "session")
assert not failures, failures
assert min(done) >= OPS, done
assert s.is_shutdown
print("ops", done)
""", timeout=120)


def test_rpc_threads_while_closed():
    run_isolated(COMMON + """
import disco.rpc

@disco.register_func("stress.add")
def add(a, b):
    return a + b

core = disco.rpc.local()._s

def one_op(i, rng, handles):
    op = rng.choice(["get", "call", "mem", "free_handle"])
    if op == "get":
        handles.append(core.get_func("stress.add"))
    elif op == "call" and handles:
        assert core.call(rng.choice(handles), i, 1) == i + 1
    elif op == "mem":
        h = core.alloc(64)
        core.copy_to_remote(bytes([i]) * 64, h)
        assert core.copy_from_remote(h, 64) == bytes([i]) * 64
        core.free(h)
    elif op == "free_handle" and handles:
        core.free_handle(handles.pop())

def driver(i):
    rng = random.Random(i)
    handles = []
    for n in range(100000):
        try:
            one_op(i, rng, handles)
        except disco.DiscoError as e:
            if not closing.is_set() or e.code != -26:  # ConnectionClosedError
                fail(f"thread {i}: {e!r}")
            return
        except Exception as e:
            fail(f"thread {i}: {type(e).__name__}: {e}")
            return
        done[i] = n + 1
        if n + 1 == OPS:
            reached[i].set()
    fail(f"thread {i}: never saw the close")

def closer():
    for e in reached:
        e.wait(60)
    closing.set()
    core.close()

ts = [threading.Thread(target=driver, args=(i,)) for i in range(THREADS)]
tc = threading.Thread(target=closer)
for t in ts + [tc]:
    t.start()
join_all(ts + [tc], "RPC")
assert not failures, failures
assert min(done) >= OPS, done
assert core.closed
print("ops", done)
""", timeout=120)
