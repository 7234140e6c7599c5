"""Shared fixtures of the Python suite (issue 18, item 3).

Every session a test opens has a short call deadline (CALL_TIMEOUT_MS), so a
bug in a wait fails the test instead of hanging it; on top of that each test
runs under a SIGALRM watchdog (TEST_DEADLINE_S) that dumps every thread's
stack and ends the run, for the hangs a deadline cannot cover (a hang on
worker 0, which is the controller's own thread). The watchdog is a signal,
not a thread, so the controller stays single-threaded for fork-mode opens.

The sessions are opened through open_session() only: the keyword arguments
beyond TVM's (num_workers, num_groups) are disco's session config, spelled
as in disco_session_config_t (call_timeout_ms, heap_bytes, launch).

The checks that need a registered status, class or builtin name look the
class up by its status code (error_class(CODE["E_TIMEOUT"])), from the
C table in include/disco/status.h, so they hold whatever the package
calls the class; only the names issue 18 gives are used by name.
"""

import faulthandler
import gc
import os
import pathlib
import re
import signal

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
# make test names the build's test library and tools (SANITIZE builds live
# elsewhere); by hand, the default build's.
TESTLIB = os.environ.get("DISCO_TEST_LIB", str(BUILD / "lib" / "libdisco_testlib.so"))
BIN = pathlib.Path(os.environ.get("DISCO_TEST_BIN", str(BUILD / "bin")))
STATUS_H = ROOT / "include" / "disco" / "status.h"

CALL_TIMEOUT_MS = 5000  # every wait of a test session ends by then
TEST_DEADLINE_S = 60  # the watchdog: no single test may take longer

try:
    import disco  # noqa: E402
except ImportError as e:  # pragma: no cover - the message is the point
    raise pytest.UsageError(
        f"cannot import the disco package ({e}); build it with `make python` and run "
        "with PYTHONPATH=python"
    ) from e

def status_table():
    """[(name, code, message)] of every error of include/disco/status.h,
    e.g. ("E_REMOTE", -16, "function failed on a worker")."""
    rows = re.findall(r'X\((E_\w+), (-\d+), "([^"]*)"\)', STATUS_H.read_text())
    assert len(rows) >= 30, f"{STATUS_H}: the X-macro table was not found"
    return [(n, int(c), m) for n, c, m in rows]


def error_classes():
    """{code: class} of the DiscoError subclasses the package exports."""
    found = {}
    for name in dir(disco):
        obj = getattr(disco, name)
        if isinstance(obj, type) and issubclass(obj, disco.DiscoError) and obj is not disco.DiscoError:
            code = getattr(obj, "code", None)
            if isinstance(code, int):
                assert code not in found or found[code] is obj, (
                    f"two classes for code {code}: {found[code].__name__} and {name}"
                )
                found[code] = obj
    return found


def error_class(code):
    """The exception class of one disco status code (e.g. -6, DISCO_E_TIMEOUT)."""
    cls = error_classes().get(code)
    assert cls is not None, f"disco exports no DiscoError subclass with code {code}"
    return cls


CODE = {name: code for name, code, _ in status_table()}


def open_session(num_workers=2, num_groups=1, **config):
    """A ProcessSession with the suite's deadline unless the test gives one."""
    config.setdefault("call_timeout_ms", CALL_TIMEOUT_MS)
    return disco.ProcessSession(num_workers, num_groups, **config)


def sync_all(sess):
    """Waits until every worker has run every command sent so far (frees
    included), so the heap statistics are final."""
    for i in range(sess.num_workers):
        sess.sync_worker(i)


def heap(sess):
    """The shared heap's statistics as a dict (disco_heap_stats_t's fields)."""
    st = sess.heap_stats()
    assert isinstance(st, dict), f"heap_stats() returned {type(st).__name__}, want a dict"
    return st


def settle(sess, cls, rounds=3):
    """Collects the reports of a failure that every worker made (each worker's
    error comes back at a sync of it), so later syncs start clean."""
    for i in range(sess.num_workers):
        for _ in range(rounds):
            try:
                sess.sync_worker(i)
                break
            except cls:
                continue
    sync_all(sess)


def writable(t):
    """A writable NumPy view of a DLPack tensor t, with no copy. NumPy 1.24
    (Debian 12's) marks the arrays of np.from_dlpack read-only; the view is
    the same bytes through a ctypes buffer, and keeps t's array alive."""
    import ctypes

    import numpy as np

    ro = np.from_dlpack(t)
    buf = (ctypes.c_char * ro.nbytes).from_address(ro.ctypes.data)
    buf.keep = ro
    return np.frombuffer(buf, dtype=ro.dtype).reshape(ro.shape)


def pid_alive(pid):
    """True while pid exists (a zombie counts: close must reap)."""
    return os.path.exists(f"/proc/{pid}")


@pytest.fixture(autouse=True)
def _watchdog():
    signal.alarm(TEST_DEADLINE_S)
    yield
    signal.alarm(0)


def pytest_configure(config):
    # The watchdog's signal dumps every thread's stack, then the default
    # action (chain=True re-raises it) ends the process.
    faulthandler.register(signal.SIGALRM, all_threads=True, chain=True)


def _close(sess):
    gc.collect()  # DRefs of the test die first: their frees go to live workers
    sess.shutdown()


def _opener(request):
    """How the requesting test's module opens sessions: its OPEN_SESSION
    (test_threaded.py: threaded workers), else open_session (forked)."""
    return getattr(request.module, "OPEN_SESSION", open_session)


@pytest.fixture
def bare(request):
    """A 2-worker session (forked unless the module says) with nothing loaded."""
    sess = _opener(request)(2)
    yield sess
    _close(sess)


@pytest.fixture
def sess(request):
    """A 2-worker session (forked unless the module says) with the test
    library (tests/testlib.c) loaded."""
    s = _opener(request)(2)
    s.load_library(TESTLIB)
    sync_all(s)
    yield s
    _close(s)


@pytest.fixture
def sess4(request):
    """4 workers in 2 groups ({0, 1} and {2, 3}), the test library loaded."""
    s = _opener(request)(4, num_groups=2)
    s.load_library(TESTLIB)
    sync_all(s)
    yield s
    _close(s)
