#!/usr/bin/env python3
"""Scaling benchmark: call tree + correlation linking + GPU-time propagation.

    python bench/bench_propagate.py                  # 8, 16, 32, 64 ranks; appends to bench/RESULTS.md
    python bench/bench_propagate.py --ranks 8,16 --shuffled-ranks '' --no-record
    python bench/bench_propagate.py --quick          # smoke run: tiny sizes, nothing recorded

A synthetic merged trace is built in memory: every rank has the same number of
CPU events (default 20k) in realistic nested stacks on 2 threads (forward on
the main thread under ``ProfilerStep#k``, backward on the autograd thread:
modules > layers > aten ops > runtime calls) and the same number of GPU events
(default 8k: compute kernels serialised on one stream, NCCL kernels overlapping
them on another, CUDA-graph replays of 4 kernels per ``cudaGraphLaunch``, and a
few memcpys without launch).  Correlation ids COLLIDE across ranks: every rank
numbers its launches 1..n, as real per-rank traces do.

The arrays are laid out as a merged trace file lists events (rank after
rank, each rank's CPU and GPU events in start order); the rank counts of
``--shuffled-ranks`` (default 8 and 64) are run again with every event at a
random index, the worst case for caches.

Timed (best of ``--repeat`` runs, after a warm-up call that JIT-compiles or
loads the numba cache): ``build_call_tree`` over all CPU events,
``link_by_correlation`` keyed by rank, ``propagate``.  Reported:
seconds per step and seconds per million events (CPU + GPU); linear scaling
means a constant time per event, so the ratio of time per event between the
largest and the smallest rank count should be close to 1.

For contrast, the TraceLens-style naive approach is measured at the two
smallest rank counts (``--naive-ranks``, default 8 and 16): the correlation id
alone links each kernel to the launches of ALL ranks sharing it, then every
(kernel, launch) pair walks up the launch's ancestor chain appending the kernel
to a Python list per node, and count / total / busy are computed from the
lists.  It reuses the call tree built above (its own tree building is not
timed).  It is stopped after ``--naive-timeout`` seconds (default 60) and
reported as "timed out".

The table is printed and appended, with the command line, date and ``nproc``,
to ``bench/RESULTS.md`` under "## Call tree, linking, propagation scaling"
(the file is created if missing; other sections are never touched).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time

import numpy as np

from harness import ROOT, append_results, command_line, git_describe

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streamtrace.kernels.tree import build_call_tree, link_by_correlation, propagate  # noqa: E402

HEADING = "## Call tree, linking, propagation scaling"

US = 1000  # ns


# --------------------------------------------------------------------------
# synthetic merged trace
# --------------------------------------------------------------------------

class _RankGen:
    """One rank's event lists, filled by a seeded generator of training steps: CPU
    (``tid``, ``s``, ``e``, ``corr``) and GPU (``g_corr``, ``g_s``, ``g_e``), times in ns."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.tid, self.s, self.e, self.corr = [], [], [], []
        self.g_corr, self.g_s, self.g_e = [], [], []
        self.last_corr = 0
        self.stream_free = {7: 0, 20: 0}          # compute stream, NCCL stream

    def cpu(self, tid, s, e, c=-1):
        self.tid.append(tid)
        self.s.append(s)
        self.e.append(e)
        self.corr.append(c)

    def kernel(self, c, launch_end, dur, stream):
        start = max(launch_end + int(self.rng.integers(2, 8)) * US, self.stream_free[stream])
        self.stream_free[stream] = start + dur
        self.g_corr.append(c)
        self.g_s.append(start)
        self.g_e.append(start + dur)

    def launch(self, tid, t, name_kernels, stream=7, dur_us=(5, 60)):
        """A runtime call at t (cudaLaunchKernel / cudaGraphLaunch), 4-8 us."""
        self.last_corr += 1
        c = self.last_corr
        d = int(self.rng.integers(4, 9)) * US
        self.cpu(tid, t, t + d, c)
        for _ in range(name_kernels):
            self.kernel(c, t + d, int(self.rng.integers(*dur_us)) * US, stream)
        return t + d

    def aten_op(self, tid, t):
        """aten op > (sub op > launch) | cpu-only; returns end time."""
        rng = self.rng
        kind = rng.random()
        s = t
        t += int(rng.integers(1, 4)) * US
        if kind < 0.62:                                   # linear > addmm > launch(es)
            sub = t
            t = self.launch(tid, t + 2 * US, 1) + 2 * US
            if rng.random() < 0.3:                        # e.g. layer_norm: two kernels
                t = self.launch(tid, t, 1) + 2 * US
            self.cpu(tid, sub, t)
            if rng.random() < 0.02:                       # rounding: child ends 300 ns late
                self.cpu(tid, s, t - 300)
                return t + int(rng.integers(1, 3)) * US
            t += 1 * US
        elif kind < 0.72:                                 # graph replay: 4 kernels
            t = self.launch(tid, t, 4, dur_us=(3, 20)) + 1 * US
        elif kind < 0.80:                                 # allreduce > comms > nccl launch
            sub = t
            t = self.launch(tid, t + 3 * US, 1, stream=20, dur_us=(80, 400)) + 2 * US
            self.cpu(tid, sub, t)
            t += 1 * US
        else:                                             # view / reshape: no kernel
            t += int(rng.integers(1, 5)) * US
        self.cpu(tid, s, t)
        return t + int(rng.integers(1, 3)) * US

    def module(self, tid, t, n_ops, level=0):
        """nn.Module > (sub-modules | layers > aten ops)."""
        s = t
        t += 2 * US
        if level < 3 and self.rng.random() < 0.4:
            for _ in range(int(self.rng.integers(1, 3))):
                t = self.module(tid, t, n_ops, level + 1)
        else:
            for _ in range(int(self.rng.integers(2, 5))):       # layers
                ls = t
                t += 1 * US
                for _ in range(n_ops):
                    t = self.aten_op(tid, t)
                self.cpu(tid, ls, t)
                t += 1 * US
        self.cpu(tid, s, t)
        return t + 2 * US

    def step(self, t):
        """One training step from t: forward, backward, optimizer, sync; returns its end."""
        rng, cpu = self.rng, self.cpu
        s = t
        t += 20 * US
        fwd_end = t
        for _ in range(int(rng.integers(20, 40))):        # forward modules, main thread
            fwd_end = self.module(0, fwd_end, int(rng.integers(2, 6)))
        bwd = fwd_end + 30 * US
        for _ in range(int(rng.integers(20, 40))):        # backward on the autograd thread
            bwd = self.module(1, bwd, int(rng.integers(2, 6)))
        cpu(1, fwd_end + 20 * US, bwd + 10 * US)          # autograd::engine::evaluate_function
        # optimizer step ends with a sync: the CPU waits for both streams
        t = self.launch(0, bwd + 20 * US, 1) + 5 * US
        sync_end = max(t, max(self.stream_free.values())) + 3 * US
        cpu(0, t, sync_end)                               # cudaStreamSynchronize
        t = sync_end + 50 * US
        cpu(0, s, t)                                      # ProfilerStep#step
        # a memcpy without launch (e.g. profiler-inserted, or from another thread)
        self.g_corr.append(-1)
        self.g_s.append(t - 10 * US)
        self.g_e.append(t - 5 * US)
        return t + 100 * US


def _make_rank(n_cpu, n_gpu, seed, trim=True):
    """One rank's events: CPU (tid, start, end, corr) and GPU (corr, start, end).

    The generator emits training steps until the CPU and GPU budgets are used;
    the lists are then cut to exactly n_cpu / n_gpu (cutting whole trailing
    events keeps every stack well nested).  Times are ns from 0."""
    r = _RankGen(seed)
    t = 0
    while len(r.s) < n_cpu or len(r.g_s) < n_gpu:
        t = r.step(t)
    cpu_arrays = [np.array(x, dtype=np.int64) for x in (r.tid, r.s, r.e, r.corr)]
    gpu_arrays = [np.array(x, dtype=np.int64) for x in (r.g_corr, r.g_s, r.g_e)]
    if not trim:
        return cpu_arrays, gpu_arrays
    # trim to the budgets by dropping the latest-starting events (a cut
    # through a stack only turns a few events into roots or orphan kernels)
    keep = np.sort(np.argsort(cpu_arrays[1], kind="stable")[:n_cpu])
    cpu_arrays = [a[keep] for a in cpu_arrays]
    keep = np.sort(np.argsort(gpu_arrays[1], kind="stable")[:n_gpu])
    gpu_arrays = [a[keep] for a in gpu_arrays]
    return cpu_arrays, gpu_arrays


def make_trace(n_ranks, n_cpu, n_gpu, seed=0, layout="file"):
    """Merged arrays of n_ranks ranks with the same per-rank budgets.  Ranks
    cycle through 4 generated variants, each with its own clock offset.

    layout "file": as a merged trace file lists them, rank after rank, each
    rank's CPU events by start time (threads interleaved), GPU events by start.
    layout "shuffled": a random permutation of all events (worst case for
    caches: every step of every kernel then reads memory at random)."""
    pool = {}
    parts = []
    for rank in range(n_ranks):
        variant = rank % 4
        if variant not in pool:
            pool[variant] = _make_rank(n_cpu, n_gpu, seed * 100 + variant)
        (tid, s, e, corr), (g_corr, g_s, g_e) = pool[variant]
        off = 1_700_000_000_000_000_000 + rank * 137_000 + variant * 11
        parts.append((rank * 4 + tid, s + off, e + off, np.full(tid.shape, rank), corr,
                      np.full(g_s.shape, rank), g_corr, g_s + off, g_e + off))
    if layout == "file":
        parts = [_by_start(p) for p in parts]
    cols = [np.concatenate([p[k] for p in parts]).astype(np.int64) for k in range(9)]
    rng = np.random.default_rng(seed + 1)
    if layout == "shuffled":
        cpu_perm = rng.permutation(cols[0].shape[0])
        gpu_perm = rng.permutation(cols[5].shape[0])
    else:
        cpu_perm = np.arange(cols[0].shape[0])
        gpu_perm = np.arange(cols[5].shape[0])
    track, start, end, rank_of, corr = (c[cpu_perm] for c in cols[:5])
    g_rank, g_corr, g_s, g_e = (c[gpu_perm] for c in cols[5:])
    return dict(track=track, start=start, end=end, rank=rank_of, corr=corr,
                g_rank=g_rank, g_corr=g_corr, g_start=g_s, g_end=g_e)


def _by_start(part):
    """One rank's columns with CPU and GPU events each in start-time order."""
    c = np.argsort(part[1], kind="stable")
    g = np.argsort(part[7], kind="stable")
    return tuple(x[c] for x in part[:5]) + tuple(x[g] for x in part[5:])


# --------------------------------------------------------------------------
# the pipeline and the naive contrast
# --------------------------------------------------------------------------

def pipeline(tr):
    t0 = time.perf_counter()
    parent, depth, order, n_clamped, n_overrun = build_call_tree(tr["track"], tr["start"], tr["end"])
    t1 = time.perf_counter()
    launcher, n_dup = link_by_correlation(tr["rank"], tr["corr"], tr["g_rank"], tr["g_corr"])
    t2 = time.perf_counter()
    count, total, busy = propagate(parent, order, launcher, tr["g_start"], tr["g_end"])
    t3 = time.perf_counter()
    out = dict(parent=parent, depth=depth, order=order, launcher=launcher,
               count=count, total=total, busy=busy,
               n_clamped=n_clamped, n_overrun=n_overrun, n_dup=n_dup)
    return (t1 - t0, t2 - t1, t3 - t2), out


class NaiveTimeout(Exception):
    pass


def naive_propagate(tr, parent, deadline):
    """TraceLens-style: link by correlation id alone (collisions link a kernel
    to the launches of every rank), append each kernel to the list of every
    ancestor of each of its launches, then count / total / busy per node."""
    corr = tr["corr"].tolist()
    by_corr = {}
    for i, c in enumerate(corr):
        if c >= 0:
            by_corr.setdefault(c, []).append(i)
    par = parent.tolist()
    g_corr = tr["g_corr"].tolist()
    g_s = tr["g_start"].tolist()
    g_e = tr["g_end"].tolist()
    lists = [[] for _ in par]
    links = 0
    for j, c in enumerate(g_corr):
        if (j & 255) == 0 and time.perf_counter() > deadline:
            raise NaiveTimeout
        for v in by_corr.get(c, ()):
            links += 1
            while v != -1:
                lists[v].append(j)
                v = par[v]
    count = np.zeros(len(par), dtype=np.int64)
    total = np.zeros(len(par), dtype=np.int64)
    busy = np.zeros(len(par), dtype=np.int64)
    for v, lst in enumerate(lists):
        if (v & 255) == 0 and time.perf_counter() > deadline:
            raise NaiveTimeout
        if not lst:
            continue
        count[v] = len(lst)
        total[v] = sum(g_e[j] - g_s[j] for j in lst)
        cur_s = cur_e = None
        acc = 0
        for s, e in sorted((g_s[j], g_e[j]) for j in lst):
            if cur_e is not None and s <= cur_e:
                cur_e = max(cur_e, e)
            else:
                if cur_e is not None:
                    acc += cur_e - cur_s
                cur_s, cur_e = s, e
        if cur_e is not None:
            acc += cur_e - cur_s
        busy[v] = acc
    return count, total, busy, links


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def fmt(x, nd=3):
    return f"{x:.{nd}f}"


def run_size(k, layout, args):
    tr = make_trace(k, args.cpu_per_rank, args.gpu_per_rank, layout=layout)
    n_cpu = tr["start"].shape[0]
    n_gpu = tr["g_start"].shape[0]
    best = None
    for _ in range(args.repeat):
        times, out = pipeline(tr)
        if best is None or sum(times) < sum(best):
            best = times
    # sanity: no GPU event linked across ranks; per rank, the roots' counts add
    # up to the rank's own linked kernels (collided ids did not leak)
    ok = out["launcher"] >= 0
    assert np.all(tr["rank"][out["launcher"][ok]] == tr["g_rank"][ok])
    roots = out["parent"] < 0
    per_rank_roots = np.bincount(tr["rank"][roots], weights=out["count"][roots], minlength=k)
    per_rank_owned = np.bincount(tr["g_rank"][ok], minlength=k)
    assert np.array_equal(per_rank_roots.astype(np.int64), per_rank_owned)
    assert out["n_dup"] == 0
    total_s = sum(best)
    row = dict(layout=layout, ranks=k, cpu=n_cpu, gpu=n_gpu, build=best[0], link=best[1], prop=best[2],
               total=total_s, per_m=total_s / ((n_cpu + n_gpu) / 1e6),
               depth=int(out["depth"].max()), clamped=out["n_clamped"],
               overrun=out["n_overrun"], owned=int(ok.sum()))
    print(f"{layout:8s} {k:3d} ranks: {n_cpu} CPU + {n_gpu} GPU events, build {fmt(best[0])} s, "
          f"link {fmt(best[1])} s, propagate {fmt(best[2])} s, total {fmt(total_s)} s, "
          f"{fmt(row['per_m'])} s per M events (max depth {row['depth']})", flush=True)
    return row, tr, out


def run_naive(k, tr, out, args):
    t0 = time.perf_counter()
    try:
        cnt, _, _, links = naive_propagate(tr, out["parent"], t0 + args.naive_timeout)
    except NaiveTimeout:
        print(f"    naive: timed out after {args.naive_timeout:.0f} s", flush=True)
        return dict(ranks=k, secs=args.naive_timeout, timed_out=True)
    dt = time.perf_counter() - t0
    roots = np.flatnonzero((out["parent"] < 0) & (out["count"] > 0))
    inflation = float(cnt[roots].sum()) / max(1, int(out["count"][roots].sum()))
    wrong = int(np.count_nonzero(cnt != out["count"]))
    print(f"    naive: {fmt(dt, 2)} s, {links} kernel-launch links for {tr['g_start'].shape[0]} kernels, "
          f"root counts inflated x{inflation:.1f}, {wrong} of {len(cnt)} counts wrong", flush=True)
    return dict(ranks=k, secs=dt, links=links, inflation=inflation, wrong=wrong, n=len(cnt),
                timed_out=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,16,32,64", help="rank counts, file layout (default 8,16,32,64)")
    ap.add_argument("--shuffled-ranks", default="8,64",
                    help="rank counts also run with all events shuffled ('' for none; default 8,64)")
    ap.add_argument("--cpu-per-rank", type=int, default=20_000)
    ap.add_argument("--gpu-per-rank", type=int, default=8_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per size; the best is reported")
    ap.add_argument("--naive-ranks", default="8,16", help="rank counts for the naive approach ('' for none)")
    ap.add_argument("--naive-timeout", type=float, default=60.0)
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 and 4 ranks of 2,000 CPU + 800 GPU events, naive at 2 ranks, one run "
                         "each, nothing recorded")
    args = ap.parse_args(argv)
    if args.quick:
        args.ranks, args.shuffled_ranks, args.naive_ranks = "2,4", "4", "2"
        args.cpu_per_rank, args.gpu_per_rank, args.repeat, args.no_record = 2_000, 800, 1, True
    ranks = [int(x) for x in args.ranks.split(",") if x]
    shuffled = [int(x) for x in args.shuffled_ranks.split(",") if x]
    naive_ranks = {int(x) for x in args.naive_ranks.split(",") if x}

    # warm-up: compile or load the numba cache on a small trace
    pipeline(make_trace(2, 500, 200, seed=99))

    rows = []
    naive_rows = []
    for k in ranks:
        row, tr, out = run_size(k, "file", args)
        rows.append(row)
        if k in naive_ranks:
            naive_rows.append(run_naive(k, tr, out, args))
        del tr, out
    for k in shuffled:
        rows.append(run_size(k, "shuffled", args)[0])

    text = report(rows, naive_rows, args, argv)
    print()
    print(text)
    if not args.no_record:
        append_results(text, header="# Benchmark results")
    return 0


def report(rows, naive_rows, args, argv=None):
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load = os.getloadavg()
    lines = [
        HEADING,
        "",
        f"`{command_line(__file__, argv)}` — {now}, `nproc` = {os.cpu_count()}, {platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}, git {git_describe()}, load average "
        f"{load[0]:.2f} at the end (shared machine).",
        "",
        f"Synthetic merged trace held in memory: per rank {args.cpu_per_rank:,} CPU events on 2 threads "
        f"(nested stacks, up to 8 deep) and {args.gpu_per_rank:,} GPU events (compute stream, overlapping "
        "NCCL stream, 4-kernel CUDA-graph replays), correlation ids colliding across ranks (each rank uses "
        f"1..n).  Best of {args.repeat} runs after a JIT warm-up; single-threaded (numba cores plus numpy "
        "sorts).  Events = CPU + GPU.  Layout *file*: rank after rank, each rank's events in start order, "
        "as in a merged trace file; *shuffled*: all events randomly permuted (cache worst case).",
        "",
        "| layout | ranks | CPU events | GPU events | build_call_tree s | link_by_correlation s "
        "| propagate s | total s | s per M events |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['ranks']} | {r['cpu']:,} | {r['gpu']:,} | {fmt(r['build'])} "
                     f"| {fmt(r['link'])} | {fmt(r['prop'])} | {fmt(r['total'])} | {fmt(r['per_m'])} |")
    lines.append("")
    for layout in ("file", "shuffled"):
        sel = [r for r in rows if r["layout"] == layout]
        if len(sel) >= 2:
            a, b = sel[0], sel[-1]
            lines.append(
                f"Time per event, {layout} layout, {b['ranks']} vs {a['ranks']} ranks: "
                f"**{b['per_m'] / a['per_m']:.2f}x** ({b['cpu'] + b['gpu']:,} vs {a['cpu'] + a['gpu']:,} "
                "events; 1.00 = perfectly linear).")
            lines.append("")
    last = [r for r in rows if r["layout"] == "file"][-1:] or rows[-1:]
    if last:
        b = last[0]
        lines.append(f"At {b['ranks']} ranks: max call depth {b['depth']}, {b['clamped']:,} clamped and "
                     f"{b['overrun']:,} overrun events, {b['owned']:,} of {b['gpu']:,} GPU events linked.")
        lines.append("")
    if naive_rows:
        lines += [
            "TraceLens-style naive propagation, file layout (correlation id alone, so every kernel links to "
            "the launches of all ranks sharing its id; per (kernel, launch) an ancestor walk appending to "
            "per-node Python lists; count / total / busy from the lists; the call tree is ours and not "
            f"timed; stopped after {args.naive_timeout:.0f} s):",
            "",
            "| ranks | naive s | kernel-launch links | root counts inflated | wrong counts "
            "| streamtrace link + propagate s | speed-up |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        by_k = {r["ranks"]: r for r in rows if r["layout"] == "file"}
        for n in naive_rows:
            ours = by_k[n["ranks"]]["link"] + by_k[n["ranks"]]["prop"]
            if n["timed_out"]:
                lines.append(f"| {n['ranks']} | timed out (> {n['secs']:.0f}) | | | | {fmt(ours)} "
                             f"| > {n['secs'] / ours:,.0f}x |")
            else:
                lines.append(f"| {n['ranks']} | {fmt(n['secs'], 2)} | {n['links']:,} | x{n['inflation']:.1f} "
                             f"| {n['wrong']:,} of {n['n']:,} | {fmt(ours)} | {n['secs'] / ours:,.0f}x |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
