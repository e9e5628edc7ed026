#!/usr/bin/env python3
"""Validation benchmarks (issue 16, parts 1, 2 and 6): the default merge, which validates while it
rewrites, against the json.load merge; ``streamtrace validate`` of a >= 500 MB merged file and of one
twice that size, against the per-event validate it replaced.

    python bench/bench_validate.py                  # 2 ranks x 280 MB; merged files of ~700 MB and ~1.4 GB
    python bench/bench_validate.py --quick          # 2 x 30 MB, nothing recorded
    python bench/bench_validate.py --larger 8 16    # also ~2.8 GB and ~5.7 GB merged files

Inputs (``tools/inflate_trace.py``, from ``--src``) and the merged files (``streamtrace merge
--no-validate``) are generated into ``--scratch`` (default ``$STREAMTRACE_BENCH_DIR`` or
``/tmp/streamtrace-bench``) and reused.  Measured, each under ``/usr/bin/time -v`` with the process
tree polled (bench_merge.py's ``measure``: wall, CPU, largest single-process RSS, peak RSS and PSS
summed over the tree, other load on the machine), the streamtrace commands ``--repeat`` times (the
row is the run with the median wall time, every run is listed):

  * ``streamtrace merge DIR -o OUT.json`` (default: validating, all cores), the same with ``-j 1``
    (MB/s per worker process, part 6) and with ``--no-validate`` (what validating costs);
  * ``python bench/megatron_merge.py -i DIR -o OUT.json`` once (the json.load merge);
  * ``streamtrace validate MERGED`` on the ~700 MB and the ~1.4 GB merged file (default: all cores;
    ``--validate-only``: only these, each also with ``-j 1``);
  * ``streamtrace validate`` of one input rank gzipped at level 1 (as jobs write them: the
    decompression's memory counts, MB/s of JSON);
  * the previous per-event validate (``tests/validate_reference.py``) once on the ~700 MB file.

Appends a section with the command line to ``bench/RESULTS.md`` (not for ``--quick``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import (BENCH, DEFAULT_SRC, ROOT, append_results, code_id, command_line, default_scratch,
                     ensure_inputs, machine_info, measure, uptime, wait_idle)

MEGATRON = BENCH / "megatron_merge.py"

TARGET_MERGE_SPEEDUP = 8.0
TARGET_RSS_MB = 250.0
TARGET_VALIDATE_MBPS = 150.0
TARGET_WORKER_MBPS = 200.0
FLAT_MB = 3.0            # "the same peak": within run-to-run noise of the largest process's RSS
MB = 1e6
MIB = 1 << 20


def merged_file(scratch: Path, indir: Path, name: str, log) -> Path:
    """The merged trace of ``indir`` (made once with --no-validate, then reused)."""
    out = scratch / name
    newest = max(p.stat().st_mtime for p in indir.glob("*.json"))
    if out.exists() and out.stat().st_mtime > newest:
        log(f"reusing {out}")
        return out
    log(f"merging {indir} into {out} ...")
    subprocess.run([sys.executable, "-m", "streamtrace", "merge", str(indir), "-o", str(out), "--no-validate"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out


def gzipped(path: Path, scratch: Path, log) -> Path:
    """``path`` gzipped at level 1 into ``scratch`` (made once, then reused while newer than ``path``)."""
    out = scratch / f"{path.parent.name}_{path.name}.gz"
    if out.exists() and out.stat().st_mtime > path.stat().st_mtime:
        log(f"reusing {out}")
        return out
    log(f"gzipping {path} into {out} ...")
    tmp = out.with_suffix(".part")
    with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    tmp.replace(out)
    return out


def worker_mbps(stdout: str) -> list:
    m = re.search(r"per worker process ([\d,. ]+) MB/s", stdout)
    return [float(x.replace(",", "")) for x in m.group(1).split(", ")] if m else []


class Runner:
    def __init__(self, args, log):
        self.args = args
        self.log = log
        self.logdir = Path(args.scratch) / "logs-validate"
        self.rows = []
        self.notes = []

    def run(self, label, cmd, size, out=None, repeat=None):
        runs = []
        for k in range(repeat or self.args.repeat):
            wait_idle(self.args.wait_idle, self.log)
            r = measure(cmd, self.logdir, f"{label} {k}")
            if out is not None and Path(out).exists():
                os.unlink(out)
            if r["rc"] != 0 and "merge" in label and "PROBLEMS added" not in r["stdout"]:
                raise SystemExit(f"{label} failed ({r['rc']}): {r['stderr'][-2000:]}")
            r["size"] = size
            runs.append(r)
            self.log(f"  {label}: {r['wall']:.2f} s wall, {r.get('cpu_s', float('nan')):.2f} s CPU, "
                     f"{r['max_single_rss'] / MIB:.0f} MB max RSS, other load {r.get('other_cores', 0):.2f} cores")
        runs.sort(key=lambda r: r["wall"])
        row = dict(runs[len(runs) // 2], label=label, runs=runs)
        row["cpu_median"] = statistics.median(r.get("cpu_s", float("nan")) for r in runs)
        row["wall_median"] = statistics.median(r["wall"] for r in runs)
        row["rss_median"] = statistics.median(r["max_single_rss"] for r in runs)
        if len(runs) > 1:
            self.notes.append(f"{label}: {len(runs)} runs, wall " + ", ".join(f"{r['wall']:.2f}" for r in runs)
                              + " s; CPU " + ", ".join(f"{r.get('cpu_s', 0):.2f}" for r in runs) + " s; max RSS "
                              + ", ".join(f"{r['max_single_rss'] / MIB:.0f}" for r in runs) + " MB"
                              + (("; per worker " + "; ".join(", ".join(f"{x:g}" for x in worker_mbps(r["stdout"]))
                                                               for r in runs) + " MB/s") if label.startswith("streamtrace merge") else ""))
        self.rows.append(row)
        return row


def table(rows, base_wall, base_cpu) -> str:
    head = ("| what | input MB | wall s (median) | CPU s (median) | MB/s wall | MB/s per CPU-s | vs json.load merge "
            "(wall / CPU) | max single-process RSS MB | peak summed RSS MB | peak summed PSS MB | other load, cores |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ratio = ""
        if base_wall and r["label"].startswith("streamtrace merge"):
            ratio = f"{base_wall / r['wall_median']:.1f}x / {base_cpu / r['cpu_median']:.1f}x"
        pss = r.get("peak_sum_pss")
        lines.append(f"| {r['label']} | {r['size'] / MB:,.0f} | {r['wall_median']:.2f} | {r['cpu_median']:.2f} | "
                     f"{r['size'] / MB / r['wall_median']:.0f} | {r['size'] / MB / r['cpu_median']:.0f} | {ratio} | "
                     f"{r['rss_median'] / MIB:.0f} | {r['peak_sum_rss'] / MIB:.0f} | "
                     f"{(pss / MIB) if pss else float('nan'):.0f} | {r.get('other_cores', 0):.2f} |")
    return "\n".join(lines)


def verdicts(rows) -> list:
    by = {r["label"]: r for r in rows}
    out = []
    meg = by.get("megatron json.load merge")
    dm = by.get("streamtrace merge (default: validating, -j 2)")
    if meg and dm:
        rw, rc = meg["wall_median"] / dm["wall_median"], meg["cpu_median"] / dm["cpu_median"]
        out.append(f"- default merge >= {TARGET_MERGE_SPEEDUP:g}x faster than the json.load merge: "
                   f"**{'MET' if rw >= TARGET_MERGE_SPEEDUP else 'NOT MET'}** by wall time ({rw:.1f}x; by CPU time "
                   f"{rc:.1f}x)")
    pss = dm.get("peak_sum_pss") if dm else None
    single = dm["rss_median"] / MIB if dm else 0
    dm and out.append(f"- default merge peak RSS <= {TARGET_RSS_MB:g} MB: per process **{'MET' if single <= TARGET_RSS_MB else 'NOT MET'}**"
               f" ({single:.0f} MB); whole tree by PSS {'**MET**' if pss and pss / MIB <= TARGET_RSS_MB else '**NOT MET**'}"
               f" ({(pss or 0) / MIB:.0f} MB; plain RSS sum {dm['peak_sum_rss'] / MIB:.0f} MB)")
    v1 = [r for r in rows if r["label"].startswith("streamtrace validate") and "-j 1" not in r["label"]
          and "gzipped" not in r["label"]]
    for r in v1:
        mbps_w, mbps_c = r["size"] / MB / r["wall_median"], r["size"] / MB / r["cpu_median"]
        out.append(f"- {r['label']} >= {TARGET_VALIDATE_MBPS:g} MB/s: **{'MET' if mbps_w >= TARGET_VALIDATE_MBPS else 'NOT MET'}**"
                   f" by wall time ({mbps_w:.0f} MB/s; per CPU-second {mbps_c:.0f} MB/s); <= {TARGET_RSS_MB:g} MB: "
                   f"**{'MET' if r['rss_median'] / MIB <= TARGET_RSS_MB else 'NOT MET'}** ({r['rss_median'] / MIB:.0f} MB)")
    if len(v1) >= 2:
        peaks = [r["rss_median"] / MIB for r in v1]
        grow = peaks[1] - peaks[0]
        more = "".join(f"; {r['size'] / v1[0]['size']:.0f}x the size: {p:.1f} MB ({p - peaks[0]:+.1f})"
                       for p, r in zip(peaks[2:], v1[2:]))
        out.append(f"- the same peak at twice the size: {peaks[0]:.1f} MB at {v1[0]['size'] / MB:,.0f} MB, {peaks[1]:.1f} MB "
                   f"at {v1[1]['size'] / MB:,.0f} MB ({grow:+.1f} MB): **{'MET' if grow <= FLAT_MB else 'NOT MET'}** "
                   f"(within {FLAT_MB:g} MB){more}")
    for r in (r for r in rows if "gzipped" in r["label"]):
        out.append(f"- {r['label']} <= {TARGET_RSS_MB:g} MB: **{'MET' if r['rss_median'] / MIB <= TARGET_RSS_MB else 'NOT MET'}**"
                   f" ({r['rss_median'] / MIB:.0f} MB; {r['size'] / MB / r['wall_median']:.0f} MB of JSON/s by wall time)")
    j1 = by.get("streamtrace merge -j 1")
    if j1:
        w = worker_mbps(j1["stdout"])
        rate = j1["size"] / MB / j1["cpu_median"]
        out.append(f"- stretch: >= {TARGET_WORKER_MBPS:g} MB/s per worker with -j 1: "
                   f"**{'MET' if w and w[0] >= TARGET_WORKER_MBPS else 'NOT MET'}** (the worker's own account "
                   f"{', '.join(f'{x:g}' for x in w)} MB/s; input MB per CPU-second of the whole command {rate:.0f})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=280.0, help="MB per rank of the merge input (2 ranks)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wait-idle", type=float, default=60.0, help="wait up to this many s for a quiet machine per run")
    ap.add_argument("--scratch", default=str(default_scratch()))
    ap.add_argument("--src", default=str(DEFAULT_SRC))
    ap.add_argument("--no-megatron", action="store_true")
    ap.add_argument("--no-reference", action="store_true", help="skip the previous per-event validate")
    ap.add_argument("--quick", action="store_true", help="2 x 30 MB, one run each, nothing recorded")
    ap.add_argument("--record", action="store_true", help="record even with --quick")
    ap.add_argument("--merged", nargs=2, metavar=("SMALL", "TWICE"),
                    help="with --validate-only: these two merged files (the second ~twice the first) instead of "
                         "generating the inputs and merging them")
    ap.add_argument("--larger", type=int, nargs="*", default=[], metavar="RANKS",
                    help="also validate merged files of these many ranks (e.g. 8 16: ~4x and ~8x the first): "
                         "more sorted runs than validate's external sort merges in one pass")
    ap.add_argument("--validate-only", action="store_true",
                    help="only streamtrace validate, with its default -j (all cores) and with -j 1")
    args = ap.parse_args(argv)
    if args.quick:
        args.size_mb, args.repeat, args.wait_idle = 30.0, 1, 0.0
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.0f}s] {msg}", flush=True)

    src = Path(args.src)
    larger = []                           # (merged file, label) of --larger
    if args.validate_only and args.merged:
        m1, m2 = (Path(m) for m in args.merged)
        d2 = size2 = None
    else:
        d2, files2, size2, _ = ensure_inputs(scratch, src, 2, args.size_mb, log)
        d4, _, size4, _ = ensure_inputs(scratch, src, 4, args.size_mb, log)
        m1 = merged_file(scratch, d2, f"merged_2x{args.size_mb:g}mb.json", log)
        m2 = merged_file(scratch, d4, f"merged_4x{args.size_mb:g}mb.json", log)
        for ranks in args.larger:
            d, _, _, _ = ensure_inputs(scratch, src, ranks, args.size_mb, log)
            larger.append((merged_file(scratch, d, f"merged_{ranks}x{args.size_mb:g}mb.json", log),
                           f"merged, {ranks // 2} times the size"))
    run = Runner(args, log)
    out = scratch / "out-validate.json"
    st = [sys.executable, "-m", "streamtrace"]
    mg = st + ["merge", "-v", str(d2), "-o", str(out)]        # -v: the per-worker MB/s line
    if not args.validate_only:
        run.run("streamtrace merge (default: validating, -j 2)", mg, size2, out)
        run.run("streamtrace merge --no-validate (-j 2)", mg + ["--no-validate"], size2, out)
        run.run("streamtrace merge -j 1", mg + ["-j", "1"], size2, out)
    sizes = [(m1, "merged"), (m2, "merged, twice the size")]
    for m, what in sizes + larger:
        size = m.stat().st_size
        run.run(f"streamtrace validate ({size / MB:,.0f} MB {what})", st + ["validate", str(m)], size)
        if args.validate_only:
            run.run(f"streamtrace validate -j 1 ({size / MB:,.0f} MB {what})", st + ["validate", "-j", "1", str(m)], size)
    if not args.merged:                   # real jobs write .json.gz: the decompression's memory counts too
        gz, rank = gzipped(files2[0], scratch, log), files2[0].stat().st_size
        run.run(f"streamtrace validate (one {rank / MB:,.0f} MB rank, gzipped)", st + ["validate", str(gz)], rank)
    if args.validate_only:
        args.no_megatron = args.no_reference = True
    base_wall = base_cpu = None
    if not args.no_megatron:
        meg = run.run("megatron json.load merge", [sys.executable, str(MEGATRON), "-i", str(d2), "-o", str(out)],
                      size2, out, repeat=1)
        base_wall, base_cpu = meg["wall_median"], meg["cpu_median"]
    if not args.no_reference:
        code = f"import sys; sys.path.insert(0, 'tests'); from validate_reference import validate_py; validate_py({str(m1)!r})"
        run.run("previous per-event validate (reference)", [sys.executable, "-c", code], m1.stat().st_size, repeat=1)
    rows = run.rows
    text = table(rows, base_wall, base_cpu)
    vs = verdicts(rows)
    print(text)
    print("\n".join(vs))
    if args.quick and not args.record:
        return
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mi = machine_info()
    section = [f"## {stamp}: validation (`{command_line(__file__, argv)}`)\n",
               f"- machine: {mi['nproc']} cores ({mi['cpu']}), {mi['ram_gib']:.1f} GiB RAM ({mi['avail_gib']:.1f} GiB "
               f"available at start), Python {mi['python']}; {mi.get('streamtrace', '?')}; orjson {mi.get('orjson', '?')}; "
               f"git {mi.get('git', '?')}; streamtrace source hash {code_id()}; {uptime()}",
               (f"- inputs: the merged files {m1} and {m2} (given with --merged)" if args.merged else
                f"- inputs: 2 and 4 ranks of {args.size_mb:g} MB inflated from `{src.name}`; merged files made with "
                f"`--no-validate`") + f"; total benchmark time {(time.time() - t_start) / 60:.0f} min\n",
               text, "", "Targets (issue 16):", *vs, "", "Notes:", *[f"- {n}" for n in run.notes]]
    append_results("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
