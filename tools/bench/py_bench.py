#!/usr/bin/env python3
"""py_bench - what the Python layer costs, beside disco-bench's C figures of
the same run (issue 18, item 4). `make bench` runs it after disco-bench.

  py_bench.py [--json PATH] [--quick]

Figures (ns or GB/s; merged into PATH's "results", whose other keys
disco-bench wrote just before; the same flat key -> number shape):
  py_call_sync_ns          a no-op DPackedFunc.__call__ (disco.noop on every
                           worker) + sync_worker(1), 2 workers, pinned as
                           disco-bench pins call_sync_ns (controller on the
                           first CPU, worker 1 on the second); the results'
                           DRefs are dropped between timed batches of 256, as
                           the C bench frees its registers; median over reps
                           of the mean per round. Baseline: call_sync_ns.
  py_c_call_sync_ns        the same rounds in C on the same session
                           (disco._core._c_call_sync: bench_session.c's loop),
                           each C rep right after a Python rep, so both see
                           the same machine; py_call_overhead_ns is the
                           difference of the two medians: what the Python
                           layer adds. (The cyclic GC is off while both run.)
  py_call_sync_p99_ns      the same round with the defaults (nothing pinned),
                           each round timed alone: the 99th percentile of
                           reps x 2000 rounds after 2000 warm-up rounds, as
                           disco-bench's call_sync_p99_ns (its baseline).
  py_copy_to_worker0_gbps  copy_to_worker_0 of a 64 MiB float32 NumPy array,
                           the returned DRef dropped (which frees it), both
                           timed; 4 warm-up rounds, then the median of reps
                           single rounds, pinned: as copy_to_worker0_gbps
                           (its baseline), in the same heap size.
  py_allreduce_us_1MiB     sess.allreduce(x, y) (float32 sum, y made once:
                           disco.allreduce_into) + sync_worker(1), 2 workers,
                           pinned: the median of single rounds after warm-up
                           (10 x reps after 50 at 1 MiB; reps after 4 at
                           64 MiB), as disco-bench's allreduce_us_1MiB;
                           py_allreduce_p99_us_1MiB their p99; _64MiB too.
  py_allgather_us_1MiB     sess.allgather(x, g) of 1 MiB each into 2 MiB
                           (disco.allgather_into); _p99_ too.
  py_broadcast_us_1MiB     sess.broadcast_from_worker0(x, y) of 1 MiB
                           (disco.broadcast_from_worker0_into); _p99_ too.
  py_c_allreduce_us_1MiB   the same rounds in C on the same session
                           (disco._core._c_coll_rounds: bench_tensor.c's
                           coll_rounds), each right after a Python round, so
                           both see the same machine; _p99_, and for
                           allgather, broadcast and 64 MiB too.
  py_allreduce_ratio_1MiB  py_allreduce_us_1MiB / py_c_allreduce_us_1MiB;
                           _64MiB; py_allgather_ratio_1MiB,
                           py_broadcast_ratio_1MiB. Target: <= 1.1 (issue
                           35). Also shown beside disco-bench's
                           allreduce_us_1MiB, _64MiB, allgather_into_us_1MiB
                           and bcast_into_us_1MiB when PATH holds them.
Target: the Python layer adds under 1 us to a call + sync
(py_call_overhead_ns < 1000 ns; also shown against disco-bench's own
call_sync_ns, another session a few seconds earlier).

Without the package (not built: `make python`) it prints one line saying so
and exits 0, writing nothing.
"""

import argparse
import gc
import json
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

MIB = 1 << 20
BIG = 64 * MIB
HEAP_BYTES = 6 * BIG + 16 * MIB  # bench_tensor.c's heap
BATCH = 256
CALIBRATE_NS = 2_000_000
MIN_ITERS, MAX_ITERS = 50, 1 << 22
WARM_BIG = 4
CALL_TARGET_NS = 1000.0  # what the Python layer may add to a call + sync

now = time.perf_counter_ns


class Opts:
    reps = 15
    rep_ns = 30_000_000


def calibrate(fn):
    """disco-bench's calibration: iters doubling (the warm-up) until a run
    takes 2 ms, then as many as make one rep ~rep_ns."""
    iters = 8
    while True:
        t = fn(iters)
        if t >= CALIBRATE_NS or iters >= MAX_ITERS:
            break
        iters *= 2
    per = t / iters
    return int(min(max(Opts.rep_ns / max(per, 1), MIN_ITERS), MAX_ITERS))


def median_single(fn, warm, reps):
    for _ in range(warm):
        fn(1)
    return statistics.median(fn(1) for _ in range(reps))


def pin(sess, cpus):
    """The controller on the first allowed CPU, worker 1 on the second."""
    if len(cpus) >= 2:
        os.sched_setaffinity(sess.worker_pid(1), {cpus[1]})
        os.sched_setaffinity(0, {cpus[0]})


def call_rounds(sess, noop):
    """A round function: iters no-op calls + sync of worker 1, timed; the
    results are dropped between batches, untimed."""

    def rounds(iters):
        total, held = 0, []
        while iters > 0:
            n = min(iters, BATCH)
            t0 = now()
            for _ in range(n):
                held.append(noop())
                sess.sync_worker(1)
            total += now() - t0
            held.clear()
            iters -= n
        return total

    return rounds


def py_call_sync(disco, cpus):
    """(py_call_sync_ns, py_c_call_sync_ns or None): Python reps and, when
    the extension has it, C reps on the same session, alternated."""
    c_loop = getattr(disco._core, "_c_call_sync", None)  # pylint: disable=protected-access
    os.sched_setaffinity(0, cpus)  # worker 1 inherits the controller's mask
    with disco.ProcessSession(2, call_timeout_ms=10000) as sess:
        pin(sess, cpus)
        noop = sess.get_global_func("disco.noop")
        py = call_rounds(sess, noop)
        gc.disable()
        try:
            py_iters = calibrate(py)
            py_vals, c_vals = [], []
            c_iters = calibrate(lambda n: c_loop(sess, noop, n)) if c_loop else 0
            for _ in range(Opts.reps):
                py_vals.append(py(py_iters) / py_iters)
                if c_loop:
                    c_vals.append(c_loop(sess, noop, c_iters) / c_iters)
        finally:
            gc.enable()
    os.sched_setaffinity(0, cpus)
    return statistics.median(py_vals), statistics.median(c_vals) if c_vals else None


def py_call_sync_p99(disco, cpus):
    os.sched_setaffinity(0, cpus)
    with disco.ProcessSession(2, call_timeout_ms=10000) as sess:
        noop = sess.get_global_func("disco.noop")
        call_rounds(sess, noop)(2000)  # warm-up
        lat, held = [], []
        for _ in range(Opts.reps * 2000 // BATCH + 1):
            for _ in range(BATCH):
                t0 = now()
                held.append(noop())
                sess.sync_worker(1)
                lat.append(now() - t0)
            held.clear()
    lat.sort()
    return float(lat[(len(lat) - 1) * 99 // 100])


def py_copy(disco, np, cpus):
    os.sched_setaffinity(0, cpus)
    host = np.ones(BIG // 4, dtype="float32")
    with disco.ProcessSession(2, call_timeout_ms=30000, heap_bytes=HEAP_BYTES) as sess:
        pin(sess, cpus)

        def rounds(iters):
            t0 = now()
            for _ in range(iters):
                sess.copy_to_worker_0(host)  # the DRef dies at once: freed
            return now() - t0

        ns = median_single(rounds, WARM_BIG, Opts.reps)
    os.sched_setaffinity(0, cpus)
    return BIG / ns


COLLS = [("allreduce", "1MiB"), ("allgather", "1MiB"), ("broadcast", "1MiB"),
         ("allreduce", "64MiB")]
# The C figures of disco-bench's tensor section the Python ones are also
# shown beside (another session, a few seconds earlier in `make bench`).
BENCH_BASE = {"py_allreduce_us_1MiB": "allreduce_us_1MiB",
              "py_allreduce_us_64MiB": "allreduce_us_64MiB",
              "py_allgather_us_1MiB": "allgather_into_us_1MiB",
              "py_broadcast_us_1MiB": "bcast_into_us_1MiB"}
COLL_TARGET = 1.1  # Python within 1.1x of C (issue 35)
WARM_SMALL = 50


def stats(lat):
    """(median, p99) in us of single-round times in ns."""
    lat = sorted(lat)
    return statistics.median(lat) / 1e3, lat[(len(lat) - 1) * 99 // 100] / 1e3


def py_collectives(disco, np, cpus):
    """The collectives into a destination made once, each rep a Python
    round then the same round in C (disco._core._c_coll_rounds) on the same
    session: {key: us}."""
    c_rounds = getattr(disco._core, "_c_coll_rounds", None)  # pylint: disable=protected-access
    os.sched_setaffinity(0, cpus)
    got = {}
    with disco.ProcessSession(2, call_timeout_ms=30000, heap_bytes=HEAP_BYTES) as sess:
        pin(sess, cpus)
        f32 = "float32"
        x = sess.broadcast(np.ones(MIB // 4, f32), sess.empty((MIB // 4,), f32), in_group=False)
        xb = sess.broadcast(np.ones(BIG // 4, f32), sess.empty((BIG // 4,), f32), in_group=False)
        y, g = sess.empty((MIB // 4,), f32), sess.empty((MIB // 2,), f32)
        yb = sess.empty((BIG // 4,), f32)
        sess.sync_worker(1)
        sync = sess.sync_worker
        # name, size: (the Python round, the builtin and its arguments)
        rounds = {
            ("allreduce", "1MiB"): (lambda: (sess.allreduce(x, y, "sum", False), sync(1)),
                                    "disco.allreduce_into", (x, y, "sum", False)),
            ("allgather", "1MiB"): (lambda: (sess.allgather(x, g, False), sync(1)),
                                    "disco.allgather_into", (x, g, False)),
            ("broadcast", "1MiB"): (lambda: (sess.broadcast_from_worker0(x, y, False), sync(1)),
                                    "disco.broadcast_from_worker0_into", (x, y, False)),
            ("allreduce", "64MiB"): (lambda: (sess.allreduce(xb, yb, "sum", False), sync(1)),
                                     "disco.allreduce_into", (xb, yb, "sum", False)),
        }
        gc.disable()
        try:
            for name, size in COLLS:
                fn, builtin, args = rounds[(name, size)]
                func = sess.get_global_func(builtin)
                big = size == "64MiB"
                for _ in range(WARM_BIG if big else WARM_SMALL):
                    fn()
                    if c_rounds:
                        c_rounds(sess, func, args, 1)
                py, c = [], []
                for _ in range(Opts.reps if big else 10 * Opts.reps):
                    t0 = now()
                    fn()
                    py.append(now() - t0)
                    if c_rounds:
                        c.extend(c_rounds(sess, func, args, 1))
                got[f"py_{name}_us_{size}"], got[f"py_{name}_p99_us_{size}"] = stats(py)
                if c:
                    med, p99 = stats(c)
                    got[f"py_c_{name}_us_{size}"], got[f"py_c_{name}_p99_us_{size}"] = med, p99
                    got[f"py_{name}_ratio_{size}"] = got[f"py_{name}_us_{size}"] / med
        finally:
            gc.enable()
    os.sched_setaffinity(0, cpus)
    return got


ROW = "{:<27} {:>12} {:<4} {:<27} {:>12} {:<18} {}"


def row(results, key, unit, base, ratio_label, target=None):
    v, b = results.get(key), results.get(base)
    if v is None:
        return
    bv, ratio, verdict = "-", "-", ""
    if b is not None:
        bv, ratio = f"{b:.1f}", f"{v / b:.2f} {ratio_label}"
        if target is not None:
            verdict = f"{v - b:+.0f} ns < {target:g} ns  {'PASS' if v - b < target else 'MISS'}"
    elif target is not None:
        verdict = f"< {target:g} ns over C  no baseline"
    print(ROW.format(key, f"{v:.1f}", unit, base, bv, ratio, verdict))


def coll_row(results, key, base, ratio):
    """A collective's row: its ratio to the C figure against COLL_TARGET."""
    v, b, r = results.get(key), results.get(base), results.get(ratio)
    if v is None:
        return
    if r is None:
        print(ROW.format(key, f"{v:.1f}", "us", base, "-", "-", "no C figure in this run"))
        return
    verdict = f"<= {COLL_TARGET:g}x  {'PASS' if r <= COLL_TARGET else 'MISS'}"
    print(ROW.format(key, f"{v:.1f}", "us", base, f"{b:.1f}", f"{r:.2f} py/C", verdict))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="merge the figures into PATH's results")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter repetitions")
    args = ap.parse_args()
    if args.quick:
        Opts.reps, Opts.rep_ns = 5, 5_000_000

    sys.path.insert(0, str(ROOT / "python"))
    try:
        import numpy as np

        import disco
    except ImportError as e:
        print(f"py_bench: skipped: the Python package is not built (make python): {e}")
        return 0

    cpus = sorted(os.sched_getaffinity(0))
    load1 = os.getloadavg()[0]
    print(f"py_bench: {Opts.reps} reps per figure{' (quick)' if args.quick else ''}, "
          f"{len(cpus)} CPUs, load {load1:.2f} at start")
    if len(cpus) < 2:
        print("warning: only one CPU allowed; nothing is pinned")
    py_ns, c_ns = py_call_sync(disco, cpus)
    got = {"py_call_sync_ns": py_ns}
    if c_ns is not None:
        got["py_c_call_sync_ns"] = c_ns
        got["py_call_overhead_ns"] = py_ns - c_ns
    got["py_call_sync_p99_ns"] = py_call_sync_p99(disco, cpus)
    got["py_copy_to_worker0_gbps"] = py_copy(disco, np, cpus)
    got.update(py_collectives(disco, np, cpus))
    for k, v in got.items():
        unit = ("GB/s" if k.endswith("gbps") else "us" if "_us_" in k
                else "x" if "_ratio_" in k else "ns")
        print(f"  {k:<27} {v:12.1f} {unit}")

    doc = {"results": {}}
    if args.json and os.path.exists(args.json):
        with open(args.json) as f:
            doc = json.load(f)
    results = doc.setdefault("results", {})
    results.update(got)
    print()
    print(ROW.format("name", "value", "unit", "baseline", "base value", "ratio", "target"))
    row(results, "py_call_sync_ns", "ns", "py_c_call_sync_ns", "py/C", CALL_TARGET_NS)
    row(results, "py_call_sync_ns", "ns", "call_sync_ns", "py/C", CALL_TARGET_NS)
    row(results, "py_call_sync_p99_ns", "ns", "call_sync_p99_ns", "py/C")
    row(results, "py_copy_to_worker0_gbps", "GB/s", "copy_to_worker0_gbps", "py/C")
    for name, size in COLLS:
        coll_row(results, f"py_{name}_us_{size}", f"py_c_{name}_us_{size}",
                 f"py_{name}_ratio_{size}")
        row(results, f"py_{name}_p99_us_{size}", "us", f"py_c_{name}_p99_us_{size}", "py/C")
    for key, base in BENCH_BASE.items():
        row(results, key, "us", base, "py/C")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.json)
        print(f"\nmerged into {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
