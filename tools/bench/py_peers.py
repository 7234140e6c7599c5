#!/usr/bin/env python3
"""py_peers - the peers a Python user would pick instead of disco, side by
side with disco's Python figures of the same run (issue 35, part 5). `make
bench` runs it after py_bench.py.

  py_peers.py [--json PATH] [--quick] [--iters N] [--only PEER,...]

Every figure uses 2 processes, the first pinned to the first allowed CPU
and the second to the second (as disco-bench pins), and is timed on the
first process one iteration at a time after a warm-up: the median and the
99th percentile of the iterations.

  a step       disco: a no-op DPackedFunc call on every worker + sync of
               worker 1 (py_peer_disco_step_ns; py_bench.py's py_call_sync_ns is the
               same call measured as a mean per batch);
               mpi4py: comm.Bcast of one int64 from rank 0 + comm.Gather of
               one int64 to rank 0 (what a controller does to start a step
               and learn it ended);
               gloo: torch.distributed broadcast + gather of a one-element
               tensor (backend gloo);
               pipes: a 64-byte command sent down a multiprocessing Pipe to
               the worker and its 64-byte reply (what TVM's ProcessSession
               does per worker).
  allreduce    float32 sum of 1 MiB and 64 MiB; disco: sess.allreduce(x, y)
               + sync_all() from Python (py_peer_disco_allreduce_us_*); mpi4py:
               comm.Allreduce(MPI.IN_PLACE, buf); gloo: dist.all_reduce(t)
               (in place). The pipes have no allreduce.

Keys (merged into PATH's "results"): py_peer_disco_step_ns, py_peer_disco_step_p99_ns,
py_peer_disco_allreduce_us_1MiB, py_peer_disco_allreduce_p99_us_1MiB, ..._64MiB, and for each peer
(mpi4py, gloo, pipes) py_peer_<peer>_step_ns, py_peer_<peer>_step_p99_ns,
py_peer_<peer>_allreduce_us_1MiB, py_peer_<peer>_allreduce_p99_us_1MiB,
..._64MiB, and the ratios py_peer_<peer>_step_ratio,
py_peer_<peer>_allreduce_ratio_1MiB, ..._64MiB: the peer's median over
disco's (above 1: disco is faster). Goals (issue 35): a step at least 2.5x
faster than mpi4py; allreduce at least 4x faster than mpi4py at 1 MiB and
2.5x at 64 MiB; at least 10x faster than gloo everywhere. A peer that is
not installed (python3-mpi4py, python3-torch) or fails is skipped with a
line saying why.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
MIB = 1 << 20
SIZES = (("1MiB", MIB), ("64MiB", 64 * MIB))
PEERS = ("mpi4py", "gloo", "pipes")
now = time.perf_counter_ns


class Opts:
    step_iters = 20000
    ar_iters = {"1MiB": 400, "64MiB": 20}
    warm = 0.1  # warm-up iterations, as a fraction


def stats(lat):
    """(median, p99) of a list of ns."""
    lat = sorted(lat)
    return statistics.median(lat), lat[(len(lat) - 1) * 99 // 100]


def timed(fn, iters):
    """fn() iters times after a warm-up; each call timed alone (ns)."""
    for _ in range(max(1, int(iters * Opts.warm))):
        fn()
    lat = []
    for _ in range(iters):
        t0 = now()
        fn()
        lat.append(now() - t0)
    return lat


def pin_self(rank):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[rank % 2]})


# ---- disco ----


def run_disco():
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np  # pylint: disable=import-outside-toplevel

    import disco  # pylint: disable=import-outside-toplevel

    cpus = sorted(os.sched_getaffinity(0))
    got = {}
    with disco.ProcessSession(2, call_timeout_ms=60000) as sess:
        if len(cpus) >= 2:
            os.sched_setaffinity(sess.worker_pid(1), {cpus[1]})
            os.sched_setaffinity(0, {cpus[0]})
        noop = sess.get_global_func("disco.noop")

        def step():
            noop()  # the DRef is dropped at once: its register is freed
            sess.sync_worker(1)

        got["py_peer_disco_step_ns"], got["py_peer_disco_step_p99_ns"] = stats(timed(step, Opts.step_iters))
        for label, size in SIZES:
            x = sess.broadcast(np.ones(size // 4, dtype="float32"))
            y = sess.empty((size // 4,), "float32")

            def allreduce(x=x, y=y):
                sess.allreduce(x, y, op="sum")
                sess.sync_all()

            med, p99 = stats(timed(allreduce, Opts.ar_iters[label]))
            got[f"py_peer_disco_allreduce_us_{label}"] = med / 1000
            got[f"py_peer_disco_allreduce_p99_us_{label}"] = p99 / 1000
            del x, y
    os.sched_setaffinity(0, cpus)
    return got


# ---- the peers: each a child process group that prints its figures ----


def child_mpi4py():
    from mpi4py import MPI  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    pin_self(rank)
    one = np.zeros(1, dtype=np.int64)
    every = np.zeros(comm.Get_size(), dtype=np.int64) if rank == 0 else None

    def step():
        comm.Bcast(one, root=0)
        comm.Gather(one, every, root=0)

    got = {}
    got["step_ns"], got["step_p99_ns"] = stats(timed(step, Opts.step_iters))
    for label, size in SIZES:
        buf = np.ones(size // 4, dtype=np.float32)
        med, p99 = stats(timed(lambda buf=buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                               Opts.ar_iters[label]))
        got[f"allreduce_us_{label}"], got[f"allreduce_p99_us_{label}"] = med / 1000, p99 / 1000
    if rank == 0:
        print("PEER " + json.dumps(got), flush=True)


def gloo_rank(rank, init, conn):
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel

    pin_self(rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    one = torch.zeros(1, dtype=torch.int64)
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(2)] if rank == 0 else None

    def step():
        dist.broadcast(one, src=0)
        if rank == 0:
            dist.gather(one, gather_list=every, dst=0)
        else:
            dist.gather(one, dst=0)

    got = {}
    got["step_ns"], got["step_p99_ns"] = stats(timed(step, Opts.step_iters))
    for label, size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        med, p99 = stats(timed(lambda t=t: dist.all_reduce(t), Opts.ar_iters[label]))
        got[f"allreduce_us_{label}"], got[f"allreduce_p99_us_{label}"] = med / 1000, p99 / 1000
    dist.destroy_process_group()
    if rank == 0:
        conn.send(got)


def pipe_worker(conn):
    pin_self(1)
    while True:
        cmd = conn.recv_bytes()
        if cmd == b"stop":
            return
        conn.send_bytes(cmd)


def run_pipes():
    import multiprocessing as mp  # pylint: disable=import-outside-toplevel

    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=pipe_worker, args=(there,), daemon=True)
    proc.start()
    cpus = sorted(os.sched_getaffinity(0))
    pin_self(0)
    cmd = bytes(64)

    def step():
        here.send_bytes(cmd)
        here.recv_bytes()

    try:
        med, p99 = stats(timed(step, Opts.step_iters))
    finally:
        here.send_bytes(b"stop")
        proc.join(10)
        os.sched_setaffinity(0, cpus)
    return {"step_ns": med, "step_p99_ns": p99}


def run_gloo():
    import multiprocessing as mp  # pylint: disable=import-outside-toplevel

    try:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise RuntimeError(f"torch is not installed ({e}; Debian: python3-torch)") from e
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeError("this torch has no gloo backend")
    ctx = mp.get_context("spawn")  # torch and fork do not mix
    with tempfile.TemporaryDirectory(prefix="py-peers-") as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        here, there = ctx.Pipe()
        procs = [ctx.Process(target=gloo_rank, args=(r, init, there)) for r in range(2)]
        for p in procs:
            p.start()
        try:
            if not here.poll(600):
                raise RuntimeError("gloo: no figures within 600 s")
            return here.recv()
        finally:
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()


def run_mpi4py():
    try:
        import mpi4py  # pylint: disable=import-outside-toplevel,unused-import
    except ImportError as e:
        raise RuntimeError(f"mpi4py is not installed ({e}; Debian: python3-mpi4py)") from e
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is missing (Debian: openmpi-bin)")
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, __file__, "--child", "mpi4py", "--iters", str(Opts.step_iters),
            "--ar-iters", f"{Opts.ar_iters['1MiB']},{Opts.ar_iters['64MiB']}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("PEER "):
            return json.loads(line[5:])
    raise RuntimeError(f"mpirun exited {out.returncode}: {(out.stderr or out.stdout)[-300:]}")


# ---- the report ----


def ratios(got, res):
    """The peers' medians over disco's, where both are there."""
    for peer in PEERS:
        pairs = [("step_ratio", f"py_peer_{peer}_step_ns", "py_peer_disco_step_ns")]
        pairs += [(f"allreduce_ratio_{lab}", f"py_peer_{peer}_allreduce_us_{lab}",
                   f"py_peer_disco_allreduce_us_{lab}") for lab, _ in SIZES]
        for name, key, base in pairs:
            if res.get(key) and res.get(base):
                got[f"py_peer_{peer}_{name}"] = res[key] / res[base]


GOALS = {("mpi4py", "step"): 2.5, ("mpi4py", "1MiB"): 4.0, ("mpi4py", "64MiB"): 2.5,
         ("gloo", "step"): 10.0, ("gloo", "1MiB"): 10.0, ("gloo", "64MiB"): 10.0}


def table(res):
    def fig(key, scale=1.0):
        v = res.get(key)
        return "-" if v is None else f"{v * scale:.1f}"

    print(f"\n{'figure':<18} {'disco':>16} " + " ".join(f"{p:>24}" for p in PEERS))
    rows = [("step (us)", "py_peer_disco_step_ns", "py_peer_disco_step_p99_ns", "step_ns", "step_p99_ns", "step_ratio",
             "step", 1e-3)]
    rows += [(f"allreduce {lab} (us)", f"py_peer_disco_allreduce_us_{lab}", f"py_peer_disco_allreduce_p99_us_{lab}",
              f"allreduce_us_{lab}", f"allreduce_p99_us_{lab}", f"allreduce_ratio_{lab}", lab, 1.0)
             for lab, _ in SIZES]
    for name, dk, dp, pk, pp, rk, goal, scale in rows:
        cells = []
        for peer in PEERS:
            m = res.get(f"py_peer_{peer}_{pk}")
            if m is None:
                cells.append(f"{'-':>24}")
                continue
            r = res.get(f"py_peer_{peer}_{rk}")
            g = GOALS.get((peer, goal))
            verdict = "" if r is None or g is None else (" ok" if r >= g else " MISS")
            cell = f"{m * scale:.1f}/{fig(f'py_peer_{peer}_{pp}', scale)}"
            cells.append(f"{cell + (f' {r:.1f}x' if r else '') + verdict:>24}")
        print(f"{name:<18} {fig(dk, scale) + '/' + fig(dp, scale):>16} " + " ".join(cells))
    print("(median/p99; Nx: the peer's median over disco's; ok/MISS against issue 35's goals)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="merge the figures into PATH's results")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--iters", type=int, help="iterations of a step")
    ap.add_argument("--ar-iters", help="iterations of allreduce: N1MiB,N64MiB")
    ap.add_argument("--only", help="comma-separated: disco,mpi4py,gloo,pipes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        Opts.step_iters, Opts.ar_iters = 2000, {"1MiB": 50, "64MiB": 5}
    if args.iters:
        Opts.step_iters = args.iters
    if args.ar_iters:
        a, b = (int(v) for v in args.ar_iters.split(","))
        Opts.ar_iters = {"1MiB": a, "64MiB": b}
    if args.child == "mpi4py":
        child_mpi4py()
        return 0

    only = set(args.only.split(",")) if args.only else {"disco", *PEERS}
    print(f"py_peers: 2 processes each; {Opts.step_iters} steps, allreduce "
          f"{Opts.ar_iters['1MiB']} x 1 MiB and {Opts.ar_iters['64MiB']} x 64 MiB; "
          f"load {os.getloadavg()[0]:.2f} at start")
    got = {}
    if "disco" in only:
        try:
            got.update(run_disco())
        except ImportError as e:
            print(f"py_peers: disco skipped: the Python package is not built (make python): {e}")
    runners = {"mpi4py": run_mpi4py, "gloo": run_gloo, "pipes": run_pipes}
    for peer in PEERS:
        if peer not in only:
            continue
        t0 = time.monotonic()
        try:
            figs = runners[peer]()
        except Exception as e:  # pylint: disable=broad-except
            print(f"py_peers: {peer} skipped: {e}")
            continue
        got.update({f"py_peer_{peer}_{k}": v for k, v in figs.items()})
        print(f"py_peers: {peer} done in {time.monotonic() - t0:.1f} s")

    doc = {"results": {}}
    if args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            doc = json.load(f)
    res = doc.setdefault("results", {})
    res.update(got)
    ratios(got, res)
    res.update(got)
    table(res)
    if res.get("py_call_sync_ns"):
        print(f"py_bench's py_call_sync_ns (mean per batch, same run): {res['py_call_sync_ns']:.1f} ns")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.json)
        print(f"\nmerged into {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
