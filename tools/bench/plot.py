#!/usr/bin/python3
"""plot.py - draws make bench's results (build/bench.json) with gnuplot.

Usage: plot.py BENCH_JSON OUT_DIR [DEMO_JSON]

Writes OUT_DIR/latency.svg (one SPMD step against the number of workers:
disco's call on all + sync of every worker, Open MPI's bcast + gather over
as many ranks, and disco over pipes, the transport TVM's ProcessSession
uses) and OUT_DIR/allreduce.svg (allreduce time against size, N = 2:
disco, Open MPI, and the memory-bandwidth floor: 3 bytes of traffic per
byte reduced (two inputs read, one output written) at twice memcpy_gbps,
memcpy itself moving 2 bytes per byte), and from py_peers.py's figures
OUT_DIR/py-peers-step.svg (a step from Python: disco, mpi4py, gloo, pipes)
and OUT_DIR/py-peers-allreduce.svg (their allreduce against size); the
in-worker allreduce (<disco/comm.h>) against the number of workers, beside
Open MPI's (the same loop statistic), the controller-issued allreduce and,
at 2 workers and 1 KiB, the exchange floor: OUT_DIR/in-worker-allreduce-1KiB.svg
and -1MiB.svg; and, given make demo's JSON, the decoder's tokens per second
in its two forms: OUT_DIR/decoder.svg. Figures missing from the JSON are
left out of the plots; a plot with nothing to show is not drawn. Standard
library only; gnuplot (Debian's gnuplot-nox) draws. Exits 0 and says so
when gnuplot is missing.
"""
import json
import os
import shutil
import subprocess
import sys


def value(results, key):
    v = results.get(key)
    if isinstance(v, dict):
        v = v.get('value')
    return float(v) if isinstance(v, (int, float)) else None


def series(results, keys):
    """[(x, y)] for the (x, key) pairs whose key has a value."""
    return [(x, value(results, k)) for x, k in keys if value(results, k) is not None]


def write_data(path, points):
    with open(path, 'w') as f:
        for x, y in points:
            f.write('%g %g\n' % (x, y))


def draw(out_dir, name, title, xlabel, ylabel, lines, logx=False):
    # logx: sizes (ticks 1, 4, 16, 64 MiB); else worker counts (2, 4, 8, 16)
    """lines: [(label, points)]; draws OUT_DIR/name.svg from those with points."""
    lines = [(label, pts) for label, pts in lines if pts]
    if not lines:
        print('plot: no figures for %s; not drawn' % name)
        return
    plots = []
    for i, (label, pts) in enumerate(lines):
        data = os.path.join(out_dir, '%s-%d.dat' % (name, i))
        write_data(data, pts)
        plots.append("'%s' using 1:2 with linespoints linewidth 2 pointsize 1.2 title '%s'"
                     % (data, label.replace("'", "")))
    svg = os.path.join(out_dir, name + '.svg')
    script = '\n'.join([
        "set terminal svg size 720,440 dynamic font 'sans,12' background rgb 'white'",
        "set output '%s'" % svg,
        "set title '%s'" % title,
        "set xlabel '%s'" % xlabel,
        "set ylabel '%s'" % ylabel,
        'set logscale y',
        'set logscale x 2',
        'set xtics (1, 4, 16, 64)' if logx else 'set xtics (2, 4, 8, 16)',
        'set key top left',
        'set grid',
        'plot ' + ', '.join(plots),
        ''])
    subprocess.run(['gnuplot'], input=script, text=True, check=True)
    print('plot: wrote %s' % svg)


def in_worker(out, r):
    """The in-worker allreduce against N, one plot per size (issue 34)."""
    for size in ('1KiB', '1MiB'):
        keys = lambda pre: series(r, [(n, '%s_allreduce_us_%s_n%d' % (pre, size, n))
                                      for n in (2, 4, 8)])
        lines = [('disco, in the worker function (comm.h)', keys('ctx')),
                 ('Open MPI (the same loop)', keys('mpi')),
                 ('disco, issued by the controller (command + sync)', keys('ctl'))]
        if size == '1KiB':
            lines.append(('the exchange alone, 2 pinned processes (floor)',
                          series(r, [(2, 'exchange_floor_us_1KiB_n2')])))
        draw(out, 'in-worker-allreduce-' + size,
             'Allreduce of %s (sum, float32) inside a worker function' % size,
             'workers', 'microseconds (median)', lines)


def decoder(out, path):
    """make demo's decoder: tokens per second, one command a token against
    the controller-driven form (demo.json)."""
    if not path or not os.path.exists(path):
        print('plot: no demo JSON; decoder.svg not drawn (make demo writes build/demo.json)')
        return
    with open(path) as f:
        d = json.load(f)
    rows = [(label, d[key]) for label, key in
            (('one command a token', 'one_command_tokens_per_s'),
             ('controller-driven', 'controller_driven_tokens_per_s'))
            if isinstance(d.get(key), (int, float))]
    bars(out, 'decoder', 'Sharded decoder, %s workers on %s: tokens per second'
         % (d.get('workers', '?'), d.get('device', '?')), 'tokens per second', rows)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit('usage: plot.py BENCH_JSON OUT_DIR [DEMO_JSON]')
    if shutil.which('gnuplot') is None:
        print('plot: gnuplot is missing; plots skipped (Debian: gnuplot-nox)')
        return
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    r = doc.get('results', {})
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    machine = doc.get('machine', {})
    where = machine.get('cpu', '') if isinstance(machine, dict) else ''
    ns = [2, 4, 8, 16]
    us = lambda pts: [(x, y / 1000.0) for x, y in pts]
    draw(out, 'latency', 'One SPMD step (call on every worker + sync of every worker) %s' % where,
         'workers', 'microseconds (median)', [
             ('disco', us(series(r, [(n, 'call_sync_all_ns_n%d' % n) for n in ns]))),
             ('disco p99', us(series(r, [(n, 'call_sync_all_p99_ns_n%d' % n) for n in ns]))),
             ('disco, a sync of each worker',
              us(series(r, [(n, 'call_sync_each_ns_n%d' % n) for n in ns]))),
             ('disco, call and sync as one command',
              us(series(r, [(n, 'call_sync_fused_ns_n%d' % n) for n in ns]))),
             ('Open MPI bcast + gather', us(series(r, [(n, 'mpi_bcast_gather_ns_n%d' % n)
                                                       for n in ns]))),
             ('disco over pipes (sync of worker 1)',
              us(series(r, [(2, 'call_sync_pipe_ns'), (4, 'call_sync_pipe_ns_n4'),
                            (8, 'call_sync_pipe_ns_n8')]))),
         ])
    sizes = [(1, '1MiB'), (64, '64MiB')]
    bw = value(r, 'memcpy_gbps')
    floor = [(mib, 3.0 * mib * 2**20 / (2.0 * bw * 1e9) * 1e3) for mib, _ in sizes] if bw else []
    draw(out, 'allreduce', 'Allreduce (sum, float32), 2 workers', 'MiB',
         'milliseconds (median)', [
             ('disco', [(m, y / 1000.0) for m, y in
                        series(r, [(mib, 'allreduce_us_' + k) for mib, k in sizes])]),
             ('Open MPI', [(m, y / 1000.0) for m, y in
                           series(r, [(mib, 'mpi_allreduce_us_' + k) for mib, k in sizes])]),
             ('memory-bandwidth floor (DRAM rate; 1 MiB fits in cache)', floor),
         ], logx=True)
    peers = [('disco', 'py_peer_disco_step_ns', 'py_peer_disco_allreduce_us_'),
             ('mpi4py', 'py_peer_mpi4py_peer_disco_step_ns', 'py_peer_mpi4py_peer_disco_allreduce_us_'),
             ('torch gloo', 'py_peer_gloo_step_ns', 'py_peer_gloo_allreduce_us_'),
             ('multiprocessing pipes', 'py_peer_pipes_step_ns', None)]
    bars(out, 'py-peers-step', 'From Python, 2 processes: one step (command + reply)',
         'microseconds (median)',
         [(label, value(r, key) / 1000.0) for label, key, _ in peers
          if value(r, key) is not None])
    draw(out, 'py-peers-allreduce', 'From Python, 2 processes: allreduce (sum, float32)', 'MiB',
         'milliseconds (median)', [
             (label, [(m, y / 1000.0) for m, y in
                      series(r, [(mib, pre + k) for mib, k in sizes])])
             for label, _, pre in peers if pre is not None] + [
             ('memory-bandwidth floor', floor)], logx=True)
    in_worker(out, r)
    decoder(out, sys.argv[3] if len(sys.argv) == 4 else None)


def bars(out_dir, name, title, ylabel, rows):
    """rows: [(label, value)]; draws OUT_DIR/name.svg as bars (log y)."""
    if not rows:
        print('plot: no figures for %s; not drawn' % name)
        return
    data = os.path.join(out_dir, name + '.dat')
    with open(data, 'w') as f:
        for i, (label, v) in enumerate(rows):
            f.write('%d "%s" %g\n' % (i, label.replace('"', ''), v))
    svg = os.path.join(out_dir, name + '.svg')
    script = '\n'.join([
        "set terminal svg size 720,440 dynamic font 'sans,12' background rgb 'white'",
        "set output '%s'" % svg,
        "set title '%s'" % title,
        "set ylabel '%s'" % ylabel,
        'set logscale y',
        'set style fill solid 0.6',
        'set boxwidth 0.6',
        'set grid ytics',
        'set xrange [-0.6:%g]' % (len(rows) - 0.4),
        "plot '%s' using 1:3:xtic(2) with boxes notitle, "
        "'' using 1:3:(sprintf('%%.1f', $3)) with labels offset 0,1 notitle" % data,
        ''])
    subprocess.run(['gnuplot'], input=script, text=True, check=True)
    print('plot: wrote %s' % svg)


if __name__ == '__main__':
    main()
