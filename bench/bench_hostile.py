#!/usr/bin/env python3
"""Inputs built to exhaust memory or time (issue 49): each at a half and at the full size the issue
gives, so that the table shows whether time and memory grow linearly, and each command's peak RSS
against the 1 GB bound.

    python bench/bench_hostile.py                          # the five cases, sizes 1/2 and 1
    python bench/bench_hostile.py --quick                  # sizes 1/64 and 1/32, nothing recorded
    python bench/bench_hostile.py --baseline ../pinbase    # also the same commands with another checkout
    python bench/bench_hostile.py --cases deep,name        # some of: deep, corr, tracks, name, bomb

The cases (generated into ``--scratch``, default ``$STREAMTRACE_BENCH_DIR`` or
``/tmp/streamtrace-bench``, then removed), each a small valid trace plus:

* ``deep``: one event whose ``args`` nest 100,000 levels deep (validate, analyze, merge);
* ``corr``: 500,000 launches and 500,000 kernels sharing one correlation id (analyze, merge);
* ``tracks``: 1,000,000 CPU events, each on its own pid and tid (analyze ``-j 1``, merge ``-j 1``);
* ``name``: one op whose name is 200,000,000 characters (validate, analyze, merge);
* ``bomb``: a gzip trace whose 4.56 GiB of whitespace compress to ~4.7 MB (its size field, the size
  modulo 4 GiB, says 0.56 GiB: past the 256 MB at which merge cuts a trace into byte ranges), merged
  with ``-j 2``; also the largest temporary disk the merge's output folder held, polled every 0.2 s.

Each command runs once under ``/usr/bin/time -v`` with its process tree polled (harness.measure):
wall and CPU seconds, peak RSS; a ``--baseline`` run is killed at ``--baseline-rss`` (default 3 GB)
or ``--baseline-timeout`` (default 300 s) and shows why.  Appends a section with the command line to
``bench/RESULTS.md`` (not for ``--quick`` or ``--no-record``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import shutil
import sys
import threading
from pathlib import Path

from harness import (ROOT, command_line, default_scratch, finish, fmt_s, git_describe, log, machine_info, mb, md_head,
                     md_row, measure, uptime)

CASES = ("deep", "corr", "tracks", "name", "bomb")
FULL = {"deep": 100_000, "corr": 500_000, "tracks": 1_000_000, "name": 200_000_000, "bomb": int(4.56 * 2**30)}
COMMANDS = {"deep": ("validate", "analyze", "merge"), "corr": ("analyze", "merge"),
            "tracks": ("analyze", "merge"), "name": ("validate", "analyze", "merge"), "bomb": ("merge",)}


def _base_events() -> list:
    """A tiny valid trace's events: a step, ten launches and their kernels."""
    evs = [{"name": "process_name", "ph": "M", "pid": 100, "tid": 0, "ts": 1000, "args": {"name": "python3"}},
           {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100, "ts": 1000,
            "dur": 200}]
    for i in range(10):
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
                    "ts": 1000 + 10 * i, "dur": 2, "args": {"correlation": i + 1}})
        evs.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i % 3}", "pid": 0, "tid": 7, "ts": 1003 + 10 * i,
                    "dur": 5, "args": {"correlation": i + 1, "device": 0, "stream": 7}})
    return evs


HEAD = b'{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": ['


def _write(path: Path, chunks):
    """A trace: the base events, then the byte chunks (event texts, each starting with a comma)."""
    with open(path, "wb") as f:
        f.write(HEAD + b",\n".join(json.dumps(e).encode() for e in _base_events()))
        for c in chunks:
            f.write(c)
        f.write(b"]}")


def make_input(case: str, n: int, folder: Path) -> Path:
    """The ``case`` input of size ``n`` (levels, launches, tracks, name characters, whitespace bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    if case == "bomb":
        path = folder / f"bomb_{n}.json.gz"
        blk = b" " * (64 << 20)
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as z:
            z.write(HEAD + b",\n".join(json.dumps(e).encode() for e in _base_events()))
            for _ in range(n // len(blk)):
                z.write(blk)
            z.write(b" " * (n % len(blk)) + b"]}")
        return path
    path = folder / f"{case}_{n}.json"
    if case == "deep":
        _write(path, [b',{"ph":"X","cat":"cpu_op","name":"deep","pid":100,"tid":100,"ts":1005,"dur":1,"args":{"a":',
                      b"[" * n, b"]" * n, b"}}"])
    elif case == "name":
        _write(path, [b',{"ph":"X","cat":"cpu_op","name":"', b"n" * n, b'","pid":100,"tid":100,"ts":1005,"dur":1}'])
    elif case == "corr":
        def pairs():
            for a in range(0, n, 10_000):
                yield b"".join(b',\n{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":100,'
                               b'"ts":%d,"dur":1,"args":{"correlation":7}},\n{"ph":"X","cat":"kernel","name":"k",'
                               b'"pid":0,"tid":7,"ts":%d,"dur":1,"args":{"correlation":7,"device":0,"stream":7}}'
                               % (2000 + 3 * i, 2002 + 3 * i) for i in range(a, min(n, a + 10_000)))
        _write(path, pairs())
    elif case == "tracks":
        def tracks():
            for a in range(0, n, 10_000):
                yield b"".join(b',\n{"ph":"X","cat":"cpu_op","name":"op","pid":%d,"tid":%d,"ts":%d,"dur":1}'
                               % (1000 + i, i, 2000 + i) for i in range(a, min(n, a + 10_000)))
        _write(path, tracks())
    return path


def _command(cmd: str, case: str, inp: Path, out: Path) -> list:
    jobs = {"tracks": ["-j", "1"], "bomb": ["-j", "2"]}.get(case, [])
    if cmd == "validate":
        return ["validate", inp]
    if cmd == "analyze":
        return ["analyze", inp, "-o", out / "analysis", *jobs]
    return ["merge", inp, "-o", out / "merged" / "merged.json", *jobs]


class DiskPoller(threading.Thread):
    """The largest number of bytes the files under ``folder`` held, polled every 0.2 s."""

    def __init__(self, folder: Path):
        super().__init__(daemon=True)
        self.folder, self.peak, self.stop = folder, 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            total = 0
            for dp, _, fns in os.walk(self.folder):
                for f in fns:
                    try:
                        total += os.lstat(os.path.join(dp, f)).st_size
                    except OSError:
                        pass
            self.peak = max(self.peak, total)


def run_one(checkout: Path, case, n, cmd, inp, scratch, args, baseline) -> dict:
    out = scratch / "out" / f"{'base' if baseline else 'this'}_{case}_{n}_{cmd}"
    shutil.rmtree(out, ignore_errors=True)
    (out / "merged").mkdir(parents=True)
    argv = [sys.executable, "-m", "streamtrace", *map(str, _command(cmd, case, inp, out))]
    disk = DiskPoller(out / "merged") if case == "bomb" else None
    if disk:
        disk.start()
    res = measure(argv, scratch / "logs", f"{'base' if baseline else 'this'}-{case}-{n}-{cmd}", cwd=checkout,
                  timeout=args.baseline_timeout if baseline else args.timeout,
                  max_rss=int(args.baseline_rss * 2**30) if baseline else None)
    if disk:
        disk.stop.set()
        disk.join()
        res["disk_peak"] = disk.peak
    shutil.rmtree(out, ignore_errors=True)
    return res


def row(case, n, cmd, res, who) -> str:
    cpu = res.get("cpu_s")
    last = ([ln for ln in res["stderr"].splitlines() if ln.strip()][-1:] or [""])[0]
    failed = res["rc"] not in (0, 1) or "error:" in last or "Traceback" in res["stderr"]
    why = "timed out" if res["timed_out"] else (f"killed ({res['killed']})" if res["killed"] else
                                                 (f"exit {res['rc']}: {last.replace('streamtrace: error: ', '')[:70]}"
                                                  if failed else "ok"))
    disk = f"{mb(res['disk_peak']):,.0f}" if "disk_peak" in res else "-"
    return md_row([case, f"{n:,}", cmd, who, fmt_s(res["wall"]), fmt_s(cpu) if cpu is not None else "-",
                   f"{mb(res['peak_rss']):,.0f}", disk, why])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--quick", action="store_true", help="sizes 1/64 and 1/32, nothing recorded")
    ap.add_argument("--baseline", type=Path, help="another checkout, run on the same inputs (killed at its limits)")
    ap.add_argument("--baseline-rss", type=float, default=3.0, help="GB at which a baseline run is killed")
    ap.add_argument("--baseline-timeout", type=float, default=300.0)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--scratch", type=Path, default=None)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    args.no_record = args.no_record or args.quick
    scratch = (args.scratch or default_scratch()) / "hostile"
    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"unknown case(s) {bad}: use {', '.join(CASES)}")
    fractions = (1 / 64, 1 / 32) if args.quick else (1 / 2, 1)
    lines = [f"## Inputs built to exhaust memory or time (issue 49), {_dt.date.today().isoformat()}", "",
             f"`{command_line(__file__, argv)}` at `{git_describe()}`"
             + (f", baseline `{args.baseline}`" if args.baseline else "") + f"; {machine_info().get('cpu', '')}, "
             f"load before: {uptime()}.  Peak RSS: the largest of the process tree's; temp disk: the merge's "
             "output folder.", ""]
    lines += md_head(["case", "size", "command", "checkout", "wall s", "CPU s", "peak RSS MB", "temp disk MB",
                      "result"])
    for case in cases:
        for frac in fractions:
            n = max(1, int(FULL[case] * frac))
            log(f"{case} {n:,}: writing the input")
            inp = make_input(case, n, scratch / "in")
            for cmd in COMMANDS[case]:
                for checkout, who in [(ROOT, "this")] + ([(args.baseline.resolve(), "baseline")] if args.baseline else []):
                    log(f"{case} {n:,}: {cmd} ({who})")
                    res = run_one(checkout, case, n, cmd, inp, scratch, args, who == "baseline")
                    lines.append(row(case, n, cmd, res, who))
                    log(lines[-1])
            inp.unlink()
    lines.append("")
    finish("\n".join(lines) + "\n", args, scratch if not args.keep else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
