#!/usr/bin/env python3
"""Reading an Nsight Systems export's integer tables: the stdlib ``sqlite3`` path (``ORDER BY start`` +
``fetchmany`` into numpy, ``NsysExport(pages=False)``) against the page reader (``pages=True``:
``streamtrace/trace/nsys/pages.py``, the start-order merge of ``pagerows.py``), on the same file.

    python bench/bench_nsys_pages.py EXPORT.sqlite [--repeat 3]

Each measurement runs in a fresh process (``--one MODE STREAM``) that drains one stream of
``NsysExport`` (``gpu``: kernels, memcpy, memset; ``runtime``: CUDA runtime/driver calls; ``nvtx``: the
NVTX ranges, which both modes read with SQL: there for scale)
and reports its CPU seconds (after the imports and the export's opening), rows and peak RSS; modes
alternate, medians of ``--repeat`` runs are printed as a Markdown table.  The numba kernels are
compiled (cached) by a first untimed run."""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(path, mode, stream):
    sys.path.insert(0, ROOT)
    from streamtrace.trace.nsys import NsysExport
    ex = NsysExport(path, pages=(mode == "pages"))
    t0 = time.process_time()
    it = (ex.gpu_batches() if stream == "gpu" else ex.cpu_batches(nvtx=False) if stream == "runtime"
          else ex.cpu_batches(runtime=False))
    n = sum(len(b) for b in it)
    cpu = time.process_time() - t0
    print(json.dumps({"cpu": cpu, "rows": n, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "read_by": ex.read_by}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", nargs=2, metavar=("MODE", "STREAM"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        return one(a.export, *a.one)

    def run(mode, stream):
        out = subprocess.run([sys.executable, __file__, a.export, "--one", mode, stream], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        return json.loads(out.strip().splitlines()[-1])

    run("pages", "gpu")                          # compile / load the kernels once
    res = {}
    for _ in range(a.repeat):
        for stream in ("gpu", "runtime", "nvtx"):
            for mode in ("sql", "pages") if stream != "nvtx" else ("sql",):
                res.setdefault((stream, mode), []).append(run(mode, stream))
    print(f"input {a.export}: {os.path.getsize(a.export) / 1e6:,.0f} MB; medians of {a.repeat} runs; "
          f"load average {os.getloadavg()[0]:.2f} at the end\n")
    print("| stream | path | rows | CPU (s) | ns a row | peak RSS (MB) | tables read by |")
    print("|---|---|---|---|---|---|---|")
    for (stream, mode), rs in res.items():
        cpu = statistics.median(r["cpu"] for r in rs)
        rows = rs[0]["rows"]
        rss = statistics.median(r["rss_mb"] for r in rs)
        by = ", ".join(sorted(set(rs[0]["read_by"].values())))
        print(f"| {stream} | {mode} | {rows:,} | {cpu:.2f} | {cpu / max(rows, 1) * 1e9:.0f} | {rss:.0f} | {by} |")
    for stream in ("gpu", "runtime"):
        s = statistics.median(r["cpu"] for r in res[(stream, "sql")])
        p = statistics.median(r["cpu"] for r in res[(stream, "pages")])
        print(f"\n{stream}: sqlite3 / pages = {s / max(p, 1e-9):.1f}x", end="")
    print()


if __name__ == "__main__":
    main()
