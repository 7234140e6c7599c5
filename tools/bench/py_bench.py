#!/usr/bin/python3
"""py_bench.py - what the Python front adds to a call, beside the C figure.

Usage: PYTHONPATH=python py_bench.py [--json BENCH_JSON] [--quick]

py_call_sync_ns: a no-op (disco.noop) called through DPackedFunc.__call__
plus sess.sync_worker(1), 2 workers, measured as disco-bench measures
call_sync_ns (tools/bench/bench_session.c): the controller (worker 0) on
the first CPU and worker 1 on the second, results kept in batches of 256
and freed between timed batches, rounds calibrated to ~30 ms (5 ms with
--quick), the median of 15 (5) rounds' means.

py_c_call_sync_ns: the same rounds in C (disco._core._c_call_sync: the
loop of bench_session.c) on the same session, each C round right after a
Python round, so that both see the same machine; py_call_overhead_ns is
the difference of the two medians: what the Python layer adds (target:
under 1 us). With --json the figures go into BENCH_JSON's "results" (the
file disco-bench wrote in the same `make bench`), beside call_sync_ns.
"""

import gc
import json
import os
import sys
import time

import disco
from disco import _core

BATCH = 256


def py_rounds(sess, f, iters):
    """ns for iters rounds of f() + sync_worker(1); results freed untimed."""
    sync = sess.sync_worker
    total = 0
    while iters > 0:
        n = min(iters, BATCH)
        res = [None] * n
        t0 = time.perf_counter_ns()
        for i in range(n):
            res[i] = f()
            sync(1)
        total += time.perf_counter_ns() - t0
        del res  # the registers are freed here, untimed
        iters -= n
    return total


def calibrate(fn, rep_ns):
    iters = 8
    while True:
        t = fn(iters)
        if t >= 2_000_000 or iters >= 1 << 22:
            break
        iters *= 2
    return int(min(max(rep_ns / max(t / iters, 1), 50), 1 << 22))


def median(vals):
    vals = sorted(vals)
    return vals[len(vals) // 2]


def main(argv):
    quick = "--quick" in argv
    path = argv[argv.index("--json") + 1] if "--json" in argv else None
    reps, rep_ns = (5, 5_000_000) if quick else (15, 30_000_000)
    cpus = sorted(os.sched_getaffinity(0))
    sess = disco.ProcessSession(2, call_timeout_ms=10000)
    pinned = len(cpus) >= 2
    if pinned:
        os.sched_setaffinity(sess.worker_pid(1), {cpus[1]})
        os.sched_setaffinity(0, {cpus[0]})
    f = sess.get_global_func("disco.noop")
    py = lambda n: py_rounds(sess, f, n)  # noqa: E731
    c = lambda n: _core._c_call_sync(sess, f, n)  # noqa: E731
    gc.disable()
    try:
        py_iters, c_iters = calibrate(py, rep_ns), calibrate(c, rep_ns)
        py_vals, c_vals = [], []
        for _ in range(reps):
            py_vals.append(py(py_iters) / py_iters)
            c_vals.append(c(c_iters) / c_iters)
    finally:
        gc.enable()
        sess.shutdown()
        if pinned:
            os.sched_setaffinity(0, cpus)
    py_ns, c_ns = median(py_vals), median(c_vals)
    results = {"py_call_sync_ns": py_ns, "py_c_call_sync_ns": c_ns,
               "py_call_overhead_ns": py_ns - c_ns}
    verdict = "PASS" if py_ns - c_ns < 1000 else "MISS"
    print(f"  {'py_call_sync_ns':<20} {py_ns:12.1f} ns   (DPackedFunc.__call__ + sync_worker(1))")
    print(f"  {'py_c_call_sync_ns':<20} {c_ns:12.1f} ns   (the same rounds in C, same session)")
    print(f"  {'py_call_overhead_ns':<20} {py_ns - c_ns:12.1f} ns   target < 1000 ns {verdict}")
    if path is not None and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
        c_bench = report.get("results", {}).get("call_sync_ns")
        if c_bench:
            print(f"  {'call_sync_ns':<20} {c_bench:12.1f} ns   (disco-bench, its own session)")
        report.setdefault("results", {}).update(results)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
