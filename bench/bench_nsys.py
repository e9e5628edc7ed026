#!/usr/bin/env python3
"""``streamtrace analyze`` of an Nsight Systems export of >= 1 GB vs a plain ``sqlite3`` + pandas
script computing the same per-device metrics (``bench/nsys_pandas_metrics.py``): MB/s and peak RSS.

    python bench/bench_nsys.py                     # 1,024 MB, 1 run each; appends to bench/RESULTS.md
    python bench/bench_nsys.py --size-mb 200 --no-record
    python bench/bench_nsys.py --quick             # 40 MB, nothing recorded
    python bench/bench_nsys.py --jobs 1c,1cg       # analyze -j 1 --chunked, full and --gpu-only

The input is ``../shared/traces/nsys/nsysai_mfu_2gpu_before.sqlite`` (2 x H100, NCCL) inflated by
``tools/inflate_nsys.py`` (its activity rows replicated in SQL, shifted in time, fresh correlation
ids) into the scratch folder (``$STREAMTRACE_BENCH_DIR`` or ``/tmp/streamtrace-bench``), made at run
time and kept while the size is the same; never committed.  Both commands run under the harness's
``measure`` (wall and CPU seconds, peak RSS of the process tree); the per-device busy, compute,
communication, memory and overlap of both are compared (they must agree to 1 ns)."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys

from harness import (ROOT, append_results, command_line, default_scratch, fmt_s, log, machine_info, mb, md_head,
                     md_row, measure, read_through)

HEADING = "## analyze of a 1 GB Nsight Systems export vs sqlite3 + pandas"
SOURCE = ROOT.parent / "shared" / "traces" / "nsys" / "nsysai_mfu_2gpu_before.sqlite"
KEYS = ("gpu_events", "busy_us", "compute_us", "comm_us", "memory_us", "overlap_us")


def inflate(scratch, size_mb):
    out = scratch / f"nsys_mfu_{int(size_mb)}mb.sqlite"
    if not (out.is_file() and out.stat().st_size >= size_mb * 1e6):
        log(f"inflating {SOURCE.name} to >= {size_mb:,.0f} MB")
        subprocess.run([sys.executable, str(ROOT / "tools" / "inflate_nsys.py"), str(SOURCE), str(out),
                        "--size-mb", str(size_mb)], check=True, cwd=ROOT)
    return out


def agree(analysis, pandas_out) -> bool:
    """Every device's metrics equal in both (pandas keys ``pid/device``, analyze's rank order = pid order)."""
    s = json.loads((analysis / "summary.json").read_text())
    ours = [m for r in sorted(s["ranks"], key=lambda r: r["rank"]) for _, m in sorted(r["devices"].items())]
    theirs = [m for _, m in sorted(json.loads(pandas_out).items(), key=lambda kv: tuple(map(int, kv[0].split("/"))))]
    return len(ours) == len(theirs) and all(abs(a[k] - b[k]) < 1e-3 for a, b in zip(ours, theirs) for k in KEYS)


def parse_run(v):
    """``"1cg"`` -> ``("1", {"c", "g"})``: the -j value and the flags' letters (c: --chunked,
    g: --gpu-only); SystemExit for anything else."""
    j = v.rstrip("cg")
    letters = set(v[len(j):])
    if not j.isdigit() or len(v) - len(j) != len(letters):
        sys.exit(f"--jobs: {v!r} is not a -j value followed by c (--chunked) and/or g (--gpu-only)")
    return j, letters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=1024)
    ap.add_argument("--jobs", default="1,1c,0", help="analyze runs to measure, comma-separated: a -j value (0: all "
                    "cores) followed by any of the letters c (--chunked) and g (--gpu-only), e.g. 1c,1cg")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-record", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.size_mb, a.no_record = 40, True
    scratch = default_scratch()
    scratch.mkdir(parents=True, exist_ok=True)
    src = inflate(scratch, a.size_mb)
    size = src.stat().st_size
    logs = scratch / "nsys-logs"
    rows, ok = [], True
    read_through(src)
    r = measure([sys.executable, str(ROOT / "bench" / "nsys_pandas_metrics.py"), str(src)], logs, "pandas")
    pandas_out = r["stdout"]
    rows.append(("sqlite3 + pandas (GPU tables only)", r))
    for v in a.jobs.split(","):
        j, letters = parse_run(v)
        out = scratch / f"nsys-analysis-{v}"
        read_through(src)
        flags = ["-j", j] + (["--chunked"] if "c" in letters else []) + (["--gpu-only"] if "g" in letters else [])
        r = measure([sys.executable, "-m", "streamtrace", "analyze", str(src), "-o", str(out), "-q", *flags],
                    logs, f"analyze {' '.join(flags)}")
        ok &= r["rc"] == 0 and agree(out, pandas_out)
        what = ("GPU tables only: kernels Parquet, per-device metrics" if "g" in letters
                else "GPU + CPU tables, Parquet, call trees")
        rows.append((f"streamtrace analyze {' '.join(flags)} ({what})", r))
    table = md_head(["command", "wall (s)", "CPU (s)", "MB/s", "peak RSS (MB)", "other cores busy"])
    for label, r in rows:
        table.append(md_row([label, fmt_s(r["wall"]), fmt_s(r.get("cpu_s", 0)), f"{size / 1e6 / r['wall']:,.1f}",
                             f"{mb(r['peak_rss']):,.0f}", f"{r.get('other_cores', 0):.2f}"]))
    info = machine_info(["pandas"])
    text = "\n".join([HEADING, "", f"`{command_line(__file__, argv)}` at {_dt.datetime.now():%Y-%m-%d %H:%M}, "
                      f"git {info.get('git')}, {info.get('nproc')} cores (shared with other sessions: the "
                      f"'other cores busy' column), input {size / 1e6:,.0f} MB "
                      f"({SOURCE.name} inflated by tools/inflate_nsys.py); per-device metrics of both agree: "
                      f"{'yes' if ok else 'NO'}.", ""] + table + [""])
    print(text)
    if not a.no_record:
        append_results(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
