#!/usr/bin/env python3
"""Scale benchmarks (issue: one huge trace on all cores, many ranks on Dask).

1. The split-point scanner's own throughput (MB/s over an in-memory buffer).
2. One big trace (default ~1 GB): ``streamtrace analyze -j 1`` vs ``-j 2`` (byte ranges
   parsed by 2 worker processes) — speed-up, peak RSS.
3. Many ranks (default 64 x ~100 MB): ``streamtrace analyze`` with the local process pool
   vs a 2-worker ``distributed.LocalCluster`` (loopback) — throughput (MB/s total),
   peak RSS per worker, overhead of the Dask path.

Results are appended to ``bench/RESULTS.md`` with the command line.  Inputs are made
by ``tools/inflate_trace.py`` into the scratch folder (never into the repository).

    python bench/bench_scale.py [--big-mb 1024] [--ranks 64] [--rank-mb 100] [--quick]
    python bench/bench_scale.py --many-only         # 3. alone (local pool and Dask, side by side)
    python bench/bench_scale.py --scanner-only      # 1. alone (best of 3 on the ~1 GB trace), recorded
                                                    # with the machine load (`uptime`)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from harness import (DEFAULT_SRC, ROOT, append_results, busy_seconds, code_id, command_line, default_scratch,
                     ensure_inputs, log, machine_info, measure, uptime, wait_idle)

SCRATCH = default_scratch()

DASK_DRIVER = r'''
import sys, time, json
import dask
from distributed import Client, LocalCluster
import streamtrace
from streamtrace.analyze import AnalyzeOptions, analyze
inp, out = sys.argv[1], sys.argv[2]
dask.config.set(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})   # the nannies hand it to the workers
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                  dashboard_address=None) as cluster:
    with Client(cluster) as c:      # the package the workers import (must be this checkout)
        mods = sorted(set(c.run(lambda: __import__("streamtrace").__file__).values()))
    t0 = time.perf_counter()
    s = analyze([inp], out, AnalyzeOptions(scheduler=cluster.scheduler_address))
    print(json.dumps({"analyze_s": time.perf_counter() - t0, "ranks": len(s["ranks"]), "failed": len(s["failed"]),
                      "client_module": streamtrace.__file__, "worker_modules": mods}))
'''
# --dask-quiet: the dask runtime's periodic work, slowed down (defaults: 10 ms, 20 ms, 100 ms, 500 ms);
# the README's "Scale" section recommends these for small worker machines
DASK_QUIET = {"distributed.worker.profile.enabled": False,          # statistical profiler of the task threads
              "distributed.admin.tick.interval": "500ms",            # event-loop health check
              "distributed.worker.memory.monitor-interval": "1s",    # nanny's memory check of each worker
              "distributed.admin.system-monitor.interval": "2s"}     # CPU/memory/network statistics


def scanner_throughput(path, log, repeat=3, split_points=None):
    """MB/s of the split-point scanner over the whole ``traceEvents`` array of ``path``
    (from just after its ``[`` to its closing ``]``), the file held in memory, so the
    kernel is measured, not the disk: as one buffer, and in ``streamtrace.trace.source.BLOCK``
    blocks as ``streamtrace.trace.ranges.split_ranges`` feeds it.  Best of ``repeat``
    per mode.  Returns ``{mode: (MB/s, seconds)}`` plus ``"bytes"`` and ``"boundaries"``."""
    from streamtrace.trace.source import BLOCK
    from streamtrace.kernels import scan as K
    from streamtrace.trace.reader import TraceReader
    split_points = split_points or K.split_points
    r = TraceReader(path)
    r.read_head()
    start = r.events_offset
    data = np.fromfile(path, np.uint8)
    every = max(1, (len(data) - start) // 4)
    out = np.empty(64, np.int64)
    split_points(data[start:start + 1000], 1000, start, every, out, np.zeros(5, np.int64))   # JIT / cache load
    res = {}
    for mode, block in (("one buffer", len(data)), (f"{BLOCK >> 20} MiB blocks", BLOCK)):
        best = 1e9
        for _ in range(repeat):
            st = np.zeros(5, np.int64)
            st[3] = start
            pos, end, nb = start, -1, 0
            t0 = time.perf_counter()
            while end < 0 and pos < len(data):
                chunk = data[pos:pos + block]
                k, end = split_points(chunk, len(chunk), pos, every, out, st)
                nb += k
                pos += block
            best = min(best, time.perf_counter() - t0)
        if end < 0:
            raise SystemExit(f"{path}: the traceEvents array is not closed")
        size = end + 1 - start
        res[mode] = (size / 1e6 / best, best)
        res["bytes"], res["boundaries"] = size, nb
        log(f"split_points ({mode}): {size / 1e6:,.0f} MB in {best:.3f} s = {size / 1e6 / best:,.0f} MB/s "
            f"(best of {repeat}; {nb} boundaries)")
    return res


def scanner_only(a, argv, big):
    """``--scanner-only``: the scanner's throughput alone, recorded with the machine load."""
    import numba
    if a.wait_idle:
        wait_idle(a.wait_idle, log)
    up0, cpu0, busy0 = uptime(), time.process_time(), busy_seconds()
    t0 = time.perf_counter()
    res = scanner_throughput(big, log, a.repeat)
    wall = time.perf_counter() - t0
    busy1, cpu1, up1 = busy_seconds(), time.process_time(), uptime()
    other = max(0.0, (busy1 - busy0 - (cpu1 - cpu0)) / wall) if busy0 is not None and busy1 is not None else None
    info = machine_info()
    modes = [m for m in res if m not in ("bytes", "boundaries")]
    lines = [f"## {dt.datetime.utcnow():%Y-%m-%d %H:%M} UTC: split-point scanner throughput\n",
             f"`{command_line(__file__, argv)}` — nproc {info['nproc']}, {info['cpu']}, "
             f"Python {info['python']}, numba {numba.__version__}, git {info.get('git', '?')}, "
             f"streamtrace source hash {code_id()}; input `{big}` ({Path(big).stat().st_size / 1e6:,.0f} MB, "
             f"inflated from `{Path(a.src).name}` with tools/inflate_trace.py), read into memory first.\n",
             *[f"- `split_points` over the {res['bytes'] / 1e6:,.0f} MB traceEvents array, {m}: "
               f"**{res[m][0]:,.0f} MB/s** ({res[m][1]:.3f} s, best of {a.repeat}, one thread) (target >= 1,000 MB/s)"
               for m in modes],
             f"- machine load: `uptime` before: `{up0}`; after: `{up1}`"
             + (f"; other processes used {other:.2f} cores on average during the measurement" if other is not None
                else "")]
    finish(lines, a)


def split_only(a, argv, big, big_bytes, logdir):
    """``--split-only``: ``analyze -j 1`` and ``-j 2`` on the one big trace, alternating,
    ``--split-repeat`` times each; the speed-up is the ratio of the median walls."""
    out = SCRATCH / "out_scale"
    runs = {1: [], 2: []}
    for i in range(a.split_repeat):
        for jobs in (1, 2):
            if a.wait_idle:
                wait_idle(a.wait_idle, log)
            shutil.rmtree(out, ignore_errors=True)
            runs[jobs].append(run([sys.executable, "-m", "streamtrace", "analyze", big, "-o", out, "-j", jobs],
                                  f"analyze 1 x {a.big_mb:g}MB -j{jobs} run {i + 1}", logdir))
    shutil.rmtree(out, ignore_errors=True)
    med = {j: statistics.median(r["wall"] for r in runs[j]) for j in runs}
    info = machine_info()
    fmt = lambda rs: ", ".join(f"{r['wall']:.1f} s (CPU {r.get('cpu_s', 0):.1f} s, other load "  # noqa: E731
                               f"{r.get('other_cores', 0):.2f})" for r in rs)
    lines = [f"## {dt.datetime.utcnow():%Y-%m-%d %H:%M} UTC: one big trace on all cores (split speed-up)\n",
             f"`{command_line(__file__, argv)}` — nproc {info['nproc']}, {info['cpu']}, "
             f"git {info.get('git', '?')}, streamtrace source hash {code_id()}; input `{big}` "
             f"({big_bytes / 1e6:,.0f} MB, inflated from `{Path(a.src).name}`); `streamtrace analyze TRACE -o OUT -j J`, "
             f"J = 1 and 2 alternating, {a.split_repeat} runs each; wall of the whole process.\n",
             f"- -j 1: median **{med[1]:.1f} s** (max RSS {max(r['max_single_rss'] for r in runs[1]) / 2**20:.0f} MB); "
             f"runs: {fmt(runs[1])}",
             f"- -j 2: median **{med[2]:.1f} s** (max single-process RSS "
             f"{max(r['max_single_rss'] for r in runs[2]) / 2**20:.0f} MB, summed "
             f"{max(r['peak_sum_rss'] for r in runs[2]) / 2**20:.0f} MB); runs: {fmt(runs[2])}",
             f"- speed-up (ratio of medians): **{med[1] / med[2]:.2f}x** (target >= 1.7x); per pair: "
             + ", ".join(f"{x['wall'] / y['wall']:.2f}x" for x, y in zip(runs[1], runs[2]))]
    finish(lines, a)


def finish(lines, a):
    """Print the section and, unless ``--quick``, append it to bench/RESULTS.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.quick:
        append_results(text)


def run(cmd, label, logdir):
    log(f"-- {label}: {' '.join(map(str, cmd))}")
    r = measure(cmd, logdir, label)
    if r["rc"] != 0:
        log(r["stderr"][-2000:])
        raise SystemExit(f"{label} failed (exit {r['rc']})")
    log(f"   {r['wall']:.1f} s, max single-process RSS {r['max_single_rss'] / 2**20:.0f} MB, "
        f"peak summed RSS {r['peak_sum_rss'] / 2**20:.0f} MB")
    return r


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(DEFAULT_SRC))
    ap.add_argument("--big-mb", type=float, default=1024)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rank-mb", type=float, default=100)
    ap.add_argument("--quick", action="store_true", help="small sizes, record nothing")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--dask-quiet", action="store_true",
                    help="also run the Dask part with the quieter dask settings of DASK_QUIET")
    ap.add_argument("--many-only", action="store_true",
                    help="run only the many-ranks comparison (local pool, then Dask, same run) and record it")
    ap.add_argument("--scanner-only", action="store_true",
                    help="measure only the split-point scanner's MB/s on the --big-mb trace and record it")
    ap.add_argument("--split-only", action="store_true",
                    help="measure only analyze -j 1 against -j 2 on the --big-mb trace (alternating, "
                         "--split-repeat runs each, medians) and record it")
    ap.add_argument("--split-repeat", type=int, default=3, help="--split-only: runs per -j value")
    ap.add_argument("--repeat", type=int, default=3, help="scanner runs per mode (best is reported)")
    ap.add_argument("--wait-idle", type=float, default=300,
                    help="--scanner-only, --many-only, --split-only: wait up to this many seconds for other processes to go "
                         "quiet (before each run)")
    a = ap.parse_args(argv)
    if a.quick:
        a.big_mb, a.ranks, a.rank_mb = 60, 4, 20
    return a


def many_ranks(a, src, out, logdir):
    """The many-ranks comparison: the local pool, then Dask (and Dask with ``DASK_QUIET``);
    returns ``(input bytes, local run, dask run, quiet run or None)``."""
    many_dir, _, many_bytes, _ = ensure_inputs(SCRATCH, src, a.ranks, a.rank_mb, log)
    label = f"analyze {a.ranks} x {a.rank_mb:g}MB"
    todo = [("local", [sys.executable, "-m", "streamtrace", "analyze", many_dir, "-o", out, "-j", 2],
             f"{label} local pool"),
            ("dask", [sys.executable, "-c", DASK_DRIVER, many_dir, out], f"{label} dask LocalCluster")]
    if a.dask_quiet:
        todo.append(("quiet", [sys.executable, "-c", DASK_DRIVER, many_dir, out, json.dumps(DASK_QUIET)],
                     f"{label} dask LocalCluster quiet"))
    runs = {}
    for key, cmd, lab in todo:
        shutil.rmtree(out, ignore_errors=True)
        if a.many_only and a.wait_idle:
            wait_idle(a.wait_idle, log)
        runs[key] = run(cmd, lab, logdir)
    pkg = str(ROOT / "streamtrace")
    for key in ("dask", "quiet"):
        if key in runs:
            runs[key]["inner"] = inner = json.loads(runs[key]["stdout"].strip().splitlines()[-1])
            if not all(m.startswith(pkg) for m in [inner["client_module"], *inner["worker_modules"]]):
                raise SystemExit(f"the Dask run imported streamtrace from {inner}, not from {pkg}")
    return many_bytes, runs["local"], runs["dask"], runs.get("quiet")


def split_lines(scan, res, big_bytes):
    mbs, speedup = scan["one buffer"][0], res[1]["wall"] / res[2]["wall"]
    return [
        f"- split-point scanner (numba, in memory): **{mbs:,.0f} MB/s** (target >= 1,000 MB/s)",
        f"- one {big_bytes / 1e6:,.0f} MB trace, `streamtrace analyze`: -j 1 {res[1]['wall']:.1f} s "
        f"(max RSS {res[1]['max_single_rss'] / 2**20:.0f} MB), -j 2 {res[2]['wall']:.1f} s "
        f"(max single-process RSS {res[2]['max_single_rss'] / 2**20:.0f} MB, summed {res[2]['peak_sum_rss'] / 2**20:.0f} MB)"
        f" -> speed-up **{speedup:.2f}x** (target >= 1.7x); other load during the runs: "
        f"{res[1].get('other_cores', 0):.2f} / {res[2].get('other_cores', 0):.2f} cores"]


def many_lines(a, many):
    many_bytes, local, dask, quiet = many
    inner = dask["inner"]
    over = dask["wall"] / local["wall"] - 1
    m = re.search(r"analysed \d+ ranks in ([\d.]+) s", local["stdout"])
    local_in = float(m.group(1)) if m else None      # the CLI's own analyze time (no interpreter start-up)
    lines = [
        f"- {a.ranks} ranks x {a.rank_mb:g} MB ({many_bytes / 1e9:.2f} GB): local pool (2 workers) "
        f"{local['wall']:.1f} s = {many_bytes / 1e6 / local['wall']:,.0f} MB/s, max worker RSS "
        f"{local['max_single_rss'] / 2**20:.0f} MB; dask LocalCluster (2 worker processes, loopback) "
        f"{dask['wall']:.1f} s wall incl. cluster start-up ({inner['analyze_s']:.1f} s inside analyze) = "
        f"{many_bytes / 1e6 / inner['analyze_s']:,.0f} MB/s, max worker RSS {dask['max_single_rss'] / 2**20:.0f} MB"
        f" -> Dask overhead **{(inner['analyze_s'] / local['wall'] - 1) * 100:+.1f} %** inside analyze, "
        f"{over * 100:+.1f} % including cluster start-up (target within 15 %)"
        + (f"; vs the local pool's own analyze time ({local_in:.1f} s, without interpreter start-up): "
           f"{(inner['analyze_s'] / local_in - 1) * 100:+.1f} %" if local_in else ""),
        f"- CPU of the whole process tree (user+sys / sys / minor page faults): local pool "
        f"{local.get('cpu_s', 0):.0f} s / {local.get('sys_s') or 0:.0f} s / {(local.get('minflt') or 0) / 1e6:.1f} M; "
        f"dask {dask.get('cpu_s', 0):.0f} s / {dask.get('sys_s') or 0:.0f} s / {(dask.get('minflt') or 0) / 1e6:.1f} M "
        f"(dask includes the cluster start-up); other load during the runs: "
        f"{local.get('other_cores', 0):.2f} / {dask.get('other_cores', 0):.2f} cores"]
    if quiet:
        qi = quiet["inner"]
        lines += [
            f"- dask LocalCluster with `DASK_QUIET` settings ({', '.join(f'{k}={v}' for k, v in DASK_QUIET.items())}): "
            f"{quiet['wall']:.1f} s wall ({qi['analyze_s']:.1f} s inside analyze) -> overhead "
            f"**{(qi['analyze_s'] / local['wall'] - 1) * 100:+.1f} %** inside analyze; CPU {quiet.get('cpu_s', 0):.0f} s / "
            f"{quiet.get('sys_s') or 0:.0f} s / {(quiet.get('minflt') or 0) / 1e6:.1f} M; other load "
            f"{quiet.get('other_cores', 0):.2f} cores"]
    return lines


def main(argv=None):
    a = parse_args(argv)
    argv = argv if argv is not None else sys.argv[1:]
    SCRATCH.mkdir(parents=True, exist_ok=True)
    logdir = SCRATCH / "logs_scale"
    src = Path(a.src)
    _, (big,), big_bytes, _ = ensure_inputs(SCRATCH, src, 1, a.big_mb, log)
    if a.scanner_only:
        return scanner_only(a, argv, big)
    if a.split_only:
        return split_only(a, argv, big, big_bytes, logdir)
    out = SCRATCH / "out_scale"
    res = {}
    scan = scanner_throughput(big, log) if not a.many_only else None
    for jobs in (1, 2) if not a.many_only else ():
        shutil.rmtree(out, ignore_errors=True)
        res[jobs] = run([sys.executable, "-m", "streamtrace", "analyze", big, "-o", out, "-j", jobs],
                        f"analyze 1 x {a.big_mb:g}MB -j{jobs}", logdir)
    many = many_ranks(a, src, out, logdir) if not a.skip_dask else None
    shutil.rmtree(out, ignore_errors=True)
    info = machine_info()
    lines = ["## Scale: one big trace on all cores, many ranks on Dask\n",
             f"`{command_line(__file__, argv)}` — "
             f"{dt.datetime.utcnow():%Y-%m-%d %H:%M} UTC, nproc {info['nproc']}, {info['ram_gib']:.1f} GiB, "
             f"{info['cpu']}, git {info.get('git', '?')}; source `{src.name}` inflated with tools/inflate_trace.py.\n"]
    if not a.many_only:
        lines += split_lines(scan, res, big_bytes)
    if many:
        lines += many_lines(a, many)
    finish(lines, a)


if __name__ == "__main__":
    main()
