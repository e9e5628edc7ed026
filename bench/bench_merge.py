#!/usr/bin/env python3
"""Side-by-side benchmark: ``streamtrace merge`` vs the json.load merge of Megatron-LM.

    python bench/bench_merge.py --sizes 250,1000      # 4 ranks x 250 MB, then 4 x 1000 MB
    python bench/bench_merge.py --quick               # small smoke run (not recorded)

For each size, rank files are generated (once, then reused) by
``tools/inflate_trace.py`` into a scratch folder (``--scratch``, default
``$STREAMTRACE_BENCH_DIR`` or ``/tmp/streamtrace-bench``), then measured on the same inputs:

  * ``python -m streamtrace merge DIR -o OUT.json --no-validate``  (default jobs: all cores)
  * the same with ``-j 1``
  * with ``--filters`` (``--only-filters``: only these): the validating merge with default jobs,
    alone, with ``--steps`` and with each ``--window`` (a filter should cost no more than the full
    merge), in alternating rounds (``--repeat`` of them; the row is the run of median CPU); one rank of
    at least 256 MiB on 2+ workers is cut into byte ranges (``--sizes 300 --ranks 1``).  An inflated
    rank repeats every ``ProfilerStep#N`` once per copy and a step's window spans all of them (the
    survey's rule: earliest start, latest end), so ``--steps 3-4`` keeps from the first copy's step 3
    to the last copy's step 4: most of the rank (92.5 % of the 300 MB one's events), not two steps' share
  * ``python bench/megatron_merge.py -i DIR -o OUT.json``  (skipped when its memory,
    extrapolated from an earlier run of this invocation, would exceed ``--megatron-max-gb``)

Each command runs under ``/usr/bin/time -v`` (when present) while a thread polls
``/proc`` every 50 ms for the whole process tree.  Reported: wall time, the largest
RSS of any single process (max of time's ``Maximum resident set size`` and the polled
VmHWM), the peak of the RSS summed over the tree (polled; forked workers share
copy-on-write pages with their parent, which this sum counts once per process), the
peak summed PSS (sampled every 0.5 s, only while every process is below 1 GB RSS;
PSS splits shared pages fairly), MB/s of uncompressed input (total, and per worker
process) and the speed ratio.  Outputs are deleted after each run; inputs are kept
for the next invocation (``--clean`` removes them).

A Markdown table is printed and appended, with the command line, date and machine,
to ``bench/RESULTS.md`` (not for ``--quick`` unless ``--record``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from harness import (BENCH, DEFAULT_SRC, ROOT, append_results, code_id, command_line, default_scratch, ensure_inputs,
                     fmt_s, log, machine_info, mb, md_head, md_row, measure, meminfo, wait_idle)

MEGATRON = BENCH / "megatron_merge.py"

TARGET_SPEEDUP = 5.0
TARGET_RSS_MB = 300.0
TARGET_MBPS_WORKER = 80.0

RESULTS_HEADER = """# Merge benchmark results

`streamtrace merge` against a faithful re-implementation of Megatron-LM's
`tools/merge_profiler_traces.py` (`bench/megatron_merge.py`: `json.load` of every
rank, one `json.dump(indent=2)`), on rank files inflated from a real trace by
`tools/inflate_trace.py`.  Each section below was appended by one run of
`bench/bench_merge.py`; to reproduce:

    python bench/bench_merge.py --sizes 250,1000   # 4 x 250 MB and 4 x 1000 MB per rank

(inputs are generated into `/tmp/streamtrace-bench`, or `--scratch DIR`; see
`bench/README.md`).  MB = 10^6 bytes of uncompressed JSON input; RSS in MB of 2^20 bytes.
Targets: streamtrace >= 5x faster than the json.load merge, peak RSS <= 300 MB
whatever the input size, >= 80 MB/s of input per worker process.
"""


class SizeRun:
    """Every command measured on one input set (``ranks`` files of ``size_mb`` MB): the table
    rows in ``rows``, the remarks in ``notes``.  ``state`` carries the Megatron baseline's last
    successful run from one size to the next (its memory is extrapolated from it)."""

    def __init__(self, scratch, src, ranks, size_mb, args, state):
        self.indir, _, self.in_bytes, gen_s = ensure_inputs(scratch, src, ranks, size_mb, log)
        self.scratch, self.ranks, self.size_mb, self.args, self.state = scratch, ranks, size_mb, args, state
        self.outdir = scratch / "out"
        self.outdir.mkdir(parents=True, exist_ok=True)
        self.logdir = scratch / "logs"
        self.nproc = os.cpu_count() or 1
        self.rows, self.notes = [], []
        if gen_s is not None:
            self.notes.append(f"{ranks} x {size_mb:g} MB inputs generated in {gen_s:.0f} s")
        self.tag = f"{ranks}x{size_mb:g}MB"

    def result(self):
        return {"tag": self.tag, "ranks": self.ranks, "size_mb": self.size_mb, "in_bytes": self.in_bytes,
                "rows": self.rows, "notes": self.notes}

    def one(self, label, cmd, out, workers_fn, tool, keep=True, cwd=None):
        """Measure ``cmd`` once (after waiting for a quiet machine); None when the disk is too
        full for its output."""
        tag, notes = self.tag, self.notes
        free = shutil.disk_usage(self.scratch).free
        if free < self.in_bytes * 2.5:
            notes.append(f"{label}: skipped, only {free / 1e9:.1f} GB free disk for its output")
            log(notes[-1])
            return None
        log(f"[{tag}] {label}: {shlex.join(cmd)}")
        idle = wait_idle(self.args.wait_idle, log) if self.args.wait_idle > 0 else None
        code = code_id()
        r = measure(cmd, self.logdir, f"{tag}_{label}".replace(" ", "_").replace("/", "_"), self.args.timeout, cwd=cwd)
        r.update(label=label, code=code, other_before=idle, tool=tool, in_bytes=self.in_bytes)
        if tool != "megatron" and code_id() != code:
            notes.append(f"[{tag}] {label}: streamtrace's source files changed on disk while it ran")
        if r.get("other_cores", 0) > 0.15:
            notes.append(f"[{tag}] {label}: other processes used {r['other_cores']:.2f} cores on average during "
                         f"the run (of {self.nproc}); its times are inflated by that contention")
        out = Path(out)
        r["out_bytes"] = out.stat().st_size if out.exists() else 0
        if out.exists():
            out.unlink()
        r["workers"] = workers_fn(r)
        self._judge(r, label, tool)
        log(f"[{tag}] {label}: {'ok' if r['ok'] else 'FAILED'} {r['wall']:.1f} s, max single RSS "
            f"{mb(r['max_single_rss']):,.0f} MB, peak summed RSS {mb(r['peak_sum_rss']):,.0f} MB"
            + (f"; {r['summary']}" if r["summary"] else ""))
        if keep:
            self.rows.append(r)
        return r

    def _judge(self, r, label, tool):
        """``ok``, the failure and warning notes, and the merge's own summary line."""
        ok = r["rc"] == 0 and not r["timed_out"] and r["out_bytes"] > 0
        if tool == "megatron" and "Merge successful" not in r["stdout"]:
            ok = False
        r["ok"] = ok
        if not ok:
            why = "timed out" if r["timed_out"] else f"exit {r['rc']}"
            tail = (r["stderr"].strip() or r["stdout"].strip()).splitlines()[-3:]
            self.notes.append(f"{label} FAILED ({why}): " + " | ".join(tail))
        for line in r["stderr"].splitlines():
            if line.startswith("warning:"):
                self.notes.append(f"{label}: {line}")
        summary = [ln for ln in r["stdout"].splitlines() if ln.startswith("merged ")]
        r["summary"] = summary[0] if summary else ""
        m = re.search(r"per worker process ([\d., ]+) MB/s", r["stdout"])     # merge -v's second line
        r["worker_mbps"] = [float(x.replace(",", "")) for x in m.group(1).split(", ")] if m else []

    def median_of(self, label, cmd, out, workers_fn, tool, cwd=None):
        """``args.repeat`` runs of one command; the run with the median wall time is the
        table row, every run is listed in a note (this VM's speed varies by +-20 %
        from run to run)."""
        runs = [self.one(label, cmd, out, workers_fn, tool, keep=False, cwd=cwd) for _ in range(self.args.repeat)]
        return self.median_row(label, [r for r in runs if r is not None])

    def median_row(self, label, runs, key="wall"):
        """The run with the median ``key`` among ``runs`` of one command becomes the table row; every run
        is listed in a note."""
        if not runs:
            return None
        mid = sorted(runs, key=lambda r: r.get(key) or r["wall"])[(len(runs) - 1) // 2]
        self.rows.append(mid)
        if len(runs) > 1:
            mid["label"] = f"{label} (median of {len(runs)})"
            self.notes.append(f"[{self.tag}] {label}: {len(runs)} runs, wall "
                              + ", ".join(f"{r['wall']:.1f}" for r in runs) + " s; per worker process "
                              + "; ".join(", ".join(f"{x:g}" for x in r["worker_mbps"]) for r in runs) + " MB/s"
                              + ("; CPU " + ", ".join(f"{r['cpu_s']:.2f}" for r in runs) + " s" if key == "cpu_s" else ""))
        return mid

    def st_workers(self, jobs):
        def f(r):
            m = re.search(r"(\d+) jobs\)", r["stdout"])
            return int(m.group(1)) if m else min(jobs or self.nproc, self.ranks)
        return f

    def streamtrace(self):
        st_out = self.outdir / f"streamtrace_{self.tag}.json"
        base = [sys.executable, "-m", "streamtrace", "merge", str(self.indir), "-o", str(st_out), "--no-validate", "-v"]
        self.median_of(f"streamtrace (-j default = {min(self.nproc, self.ranks)})", base, st_out,
                       self.st_workers(0), "streamtrace")
        self.median_of("streamtrace -j 1", base + ["-j", "1"], st_out, self.st_workers(1), "streamtrace-j1")

    def megatron(self):
        """The Megatron baseline, unless its memory, extrapolated, would not fit."""
        args, state, in_bytes, tag = self.args, self.state, self.in_bytes, self.tag
        if args.no_megatron:
            self.notes.append("Megatron baseline not run (--no-megatron)")
            return
        prev = state.get("megatron")
        if prev:
            est = prev["peak_sum_rss"] * in_bytes / prev["in_bytes"]
            how = (f"extrapolated from its {mb(prev['peak_sum_rss']) / 1024:.1f} GiB peak on "
                   f"{prev['in_bytes'] / 1e9:.2f} GB of input")
        else:
            est = in_bytes * args.megatron_ratio
            how = f"assumed {args.megatron_ratio:g} x the input size (no earlier run to extrapolate from)"
        limit, avail = args.megatron_max_gb * 2**30, meminfo().get("MemAvailable", 0)
        if est > limit or est > avail * 0.95:
            cap = "the --megatron-max-gb limit" if est > limit else "the available RAM"
            self.notes.append(f"Megatron baseline SKIPPED at {tag}: it would need ~{est / 2**30:.1f} GiB of RAM "
                              f"({how}), over {cap} ({min(limit, avail * 0.95) / 2**30:.1f} GiB)")
            log(self.notes[-1])
            if prev:
                # linear time extrapolation, reported as an estimate only
                state.setdefault("est", {})[tag] = prev["wall"] * in_bytes / prev["in_bytes"]
            return
        mg_out = self.outdir / f"megatron_{tag}.json"
        r = self.one("megatron json.load merge", [sys.executable, str(MEGATRON), "-i", str(self.indir), "-o",
                                                  str(mg_out)], mg_out, lambda r: 1, "megatron")
        if r and r["ok"]:
            state["megatron"] = r
            self.notes.append(f"Megatron baseline peak memory {mb(r['peak_sum_rss']) / 1024:.1f} GiB = "
                              f"{r['peak_sum_rss'] / in_bytes:.1f} x its input")


def filters(run: SizeRun):
    """``--filters``: the full (validating, default jobs) merge and the same merge with ``--steps``
    and with ``--window``, same inputs, same run: a filter keeps fewer events, so it should cost no
    more than the full merge (issue 29)."""
    out = run.outdir / f"filter_{run.tag}.json"
    base = [sys.executable, "-m", "streamtrace", "merge", str(run.indir), "-o", str(out), "-v"]
    checkouts = [(None, "")] + ([(run.args.baseline, f" [baseline {_short(run.args.baseline)}]")]
                                if run.args.baseline else [])
    windows = [w for w in run.args.filter_window.split(",") if w]
    variants = [(label, extra, cwd, which)
                for label, extra in [("full merge", []), (f"--steps {run.args.filter_steps}", ["--steps", run.args.filter_steps])]
                + [(f"--window {w}", ["--window", w]) for w in windows]
                for cwd, which in checkouts]
    runs = [[] for _ in variants]
    for _ in range(run.args.repeat):    # alternating rounds: a slow spell of the VM hits every variant alike
        for k, (label, extra, cwd, which) in enumerate(variants):
            r = run.one(f"filter: {label}{which}", base + extra, out, run.st_workers(0), "filter", keep=False, cwd=cwd)
            if r is not None:
                runs[k].append(r)
    for (label, _, _, which), done in zip(variants, runs):
        r = run.median_row(f"filter: {label}{which}", done, key="cpu_s")
        if r is not None:
            r["filter"], r["checkout"] = label, which


def _short(path):
    """``path``'s git short hash (the baseline checkout measured beside this one)."""
    import subprocess
    res = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() or str(path)


def filter_table(results):
    """CPU-s, wall and peak RSS of each filtered merge against the full merge of the same run."""
    lines = md_head(["input", "merge (validating, -j default)", "CPU s", "wall s", "max single-process RSS MB",
                     "peak summed RSS MB", "output MB", "CPU vs full", "wall vs full", "RSS vs full"])
    for res in results:
        rows = [r for r in res["rows"] if r["tool"] == "filter" and r["ok"]]
        for r in rows:
            full = next((f for f in rows if f["filter"] == "full merge" and f["checkout"] == r["checkout"]), None)
            def ratio(key):
                return f"{r[key] / full[key]:.2f}" if full and full.get(key) and r.get(key) else "n/a"
            lines.append(md_row([res["tag"], r["filter"] + r["checkout"], fmt_s(r.get("cpu_s")) if r.get("cpu_s") else "n/a",
                                 fmt_s(r["wall"]), f"{mb(r['max_single_rss']):,.0f}", f"{mb(r['peak_sum_rss']):,.0f}",
                                 f"{r['out_bytes'] / 1e6:,.0f}", ratio("cpu_s"), ratio("wall"),
                                 ratio("max_single_rss")]))
    return "\n".join(lines)


def run_size(scratch, src, ranks, size_mb, args, state):
    run = SizeRun(scratch, src, ranks, size_mb, args, state)
    if not args.only_filters:
        run.streamtrace()
        run.megatron()
    if args.filters or args.only_filters:
        filters(run)
    return run.result()


def table(results):
    lines = md_head(["input", "tool", "wall s", "CPU s", "speed vs json.load merge", "MB/s total", "workers",
                     "MB/s per worker (wall)", "MB/s per worker (own busy time)", "MB per CPU-s",
                     "max single-process RSS MB", "peak summed RSS MB", "peak summed PSS MB", "output MB",
                     "other load, cores"])
    for res in results:
        mg = next((r for r in res["rows"] if r["tool"] == "megatron" and r["ok"]), None)
        for r in res["rows"]:
            if r["tool"] == "filter":
                continue                    # their own table (filter_table)
            mbps = res["in_bytes"] / 1e6 / r["wall"]
            if r["tool"] == "megatron":
                ratio = "1.0x (baseline)"
            elif mg:
                ratio = f"{mg['wall'] / r['wall']:.1f}x"
            else:
                ratio = "n/a (baseline skipped)"
            # PSS is sampled only while every process is < 1 GB: a run that grew past
            # that has no peak PSS (its early samples would understate it)
            pss = f"{mb(r['peak_sum_pss']):,.0f}" if r["pss_samples"] and not r["pss_skipped"] else "n/a (>1 GB)"
            status = "" if r["ok"] else " **FAILED**"
            cpu = r.get("cpu_s")
            cells = [f"{res['ranks']} x {res['in_bytes'] / res['ranks'] / 1e6:,.0f} MB ({res['in_bytes'] / 1e9:.2f} GB)",
                     f"{r['label']}{status}", fmt_s(r["wall"]), fmt_s(cpu) if cpu else "n/a", ratio,
                     f"{mbps:,.1f}", str(r["workers"]), f"{mbps / r['workers']:,.1f}",
                     ", ".join(f"{x:,.0f}" for x in r.get("worker_mbps", [])) or "n/a",
                     f"{res['in_bytes'] / 1e6 / cpu:,.1f}" if cpu else "n/a",
                     f"{mb(r['max_single_rss']):,.0f}", f"{mb(r['peak_sum_rss']):,.0f}", pss,
                     f"{r['out_bytes'] / 1e6:,.0f}",
                     f"{r['other_cores']:.2f}" if "other_cores" in r else "n/a"]
            lines.append(md_row(cells))
        if not any(r["tool"] == "megatron" for r in res["rows"]):
            lines.append(f"| {res['ranks']} x {res['size_mb']:g} MB ({res['in_bytes'] / 1e9:.2f} GB) "
                         f"| megatron json.load merge | skipped (see notes) |" + " |" * 12)
    return "\n".join(lines)


def verdicts(results, state):
    out = []
    sp = []
    for res in results:
        mg = next((r for r in res["rows"] if r["tool"] == "megatron" and r["ok"]), None)
        st = next((r for r in res["rows"] if r["tool"] == "streamtrace" and r["ok"]), None)
        if mg and st:
            sp.append(f"{res['tag']}: {mg['wall'] / st['wall']:.1f}x")
        elif st and res["tag"] in state.get("est", {}):
            sp.append(f"{res['tag']}: ~{state['est'][res['tag']] / st['wall']:.1f}x (estimate: baseline skipped, "
                      f"its time extrapolated linearly)")
    measured = [float(s.split(": ")[1].rstrip("x")) for s in sp if "estimate" not in s]
    if measured:
        ok = all(x >= TARGET_SPEEDUP for x in measured)
        out.append(f"- >= {TARGET_SPEEDUP:g}x faster than the json.load merge (default jobs): "
                   f"**{'MET' if ok else 'NOT MET'}** ({'; '.join(sp)})")
    else:
        out.append(f"- >= {TARGET_SPEEDUP:g}x faster: not measured ({'; '.join(sp) or 'no baseline run'})")
    st_rows = [(res, r) for res in results for r in res["rows"] if r["tool"].startswith("streamtrace") and r["ok"]]
    if st_rows:
        single = max(r["max_single_rss"] for _, r in st_rows)
        summed = max(r["peak_sum_rss"] for _, r in st_rows)
        pss = [r["peak_sum_pss"] for _, r in st_rows if r["pss_samples"] and not r["pss_skipped"]]
        detail = "; ".join(f"{res['tag']} {r['label']}: single {mb(r['max_single_rss']):.0f} / summed "
                           f"{mb(r['peak_sum_rss']):.0f}" + (f" / PSS {mb(r['peak_sum_pss']):.0f}" if r["pss_samples"] and not r["pss_skipped"] else "")
                           + " MB" for res, r in st_rows)
        tree_ok = mb(max(pss)) <= TARGET_RSS_MB if pss else mb(summed) <= TARGET_RSS_MB
        out.append(f"- peak RSS <= {TARGET_RSS_MB:g} MB: per process **{'MET' if mb(single) <= TARGET_RSS_MB else 'NOT MET'}** "
                   f"(max {mb(single):.0f} MB); whole process tree, by PSS (pages the forked workers share with "
                   f"the parent counted once) **{'MET' if tree_ok else 'NOT MET'}** ("
                   + (f"PSS max {mb(max(pss)):.0f} MB; " if pss else "") + f"plain RSS sum max {mb(summed):.0f} MB) [{detail}]")
        per = [(res, r, res["in_bytes"] / 1e6 / r["wall"] / r["workers"]) for res, r in st_rows]
        own = [x for _, r in st_rows for x in r.get("worker_mbps", [])]
        worst = min(own) if own else min(x for _, _, x in per)
        out.append(f"- >= {TARGET_MBPS_WORKER:g} MB/s per worker process (input bytes a worker rewrote / the "
                   f"seconds it was busy, as the merge reports it): **{'MET' if worst >= TARGET_MBPS_WORKER else 'NOT MET'}** ("
                   + "; ".join(f"{res['tag']} {r['label']}: " + (", ".join(f"{x:.1f}" for x in r["worker_mbps"]) or "n/a")
                               for res, r in st_rows)
                   + "; of the whole command's wall time, start-up, discovery and stitching included: "
                   + "; ".join(f"{res['tag']} {r['label']}: {x:.1f}" for res, r, x in per) + " MB/s"
                   + ("; per CPU-second, which other load on the machine disturbs less: "
                      + "; ".join(f"{res['tag']} {r['label']}: {res['in_bytes'] / 1e6 / r['cpu_s']:.1f}"
                                  for res, r, _ in per if r.get("cpu_s")) if any(r.get("cpu_s") for _, r, _ in per) else "")
                   + ")")
    return "\n".join(out)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250,1000", help="MB per rank, comma-separated (default 250,1000)")
    ap.add_argument("--ranks", type=int, default=4, help="rank files per input set (default 4)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 ranks x 20 MB, not recorded")
    ap.add_argument("--record", action="store_true", help="append to bench/RESULTS.md even with --quick")
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--src", default=str(DEFAULT_SRC), help="trace to inflate (default: the V100 DDP rank-1 trace)")
    ap.add_argument("--scratch", default=str(default_scratch()),
                    help="scratch folder for inputs/outputs/logs (default $STREAMTRACE_BENCH_DIR or /tmp/streamtrace-bench)")
    ap.add_argument("--no-megatron", action="store_true", help="do not run the Megatron baseline")
    ap.add_argument("--megatron-max-gb", type=float, default=20.0,
                    help="skip the Megatron baseline when its extrapolated peak RAM exceeds this (GiB, default 20)")
    ap.add_argument("--megatron-ratio", type=float, default=6.0,
                    help="RAM/input ratio assumed for the Megatron baseline when no earlier run calibrates it (default 6)")
    ap.add_argument("--timeout", type=float, help="kill a measured run after this many seconds")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each streamtrace command; the median (by wall time) is reported (default 3)")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="before each run wait up to this many seconds for other processes to use < 0.25 cores "
                         "(default 300; 0: do not wait)")
    ap.add_argument("--clean", action="store_true", help="delete the generated inputs at the end")
    ap.add_argument("--filters", action="store_true",
                    help="also measure the validating full merge against --steps and --window merges (issue 29)")
    ap.add_argument("--only-filters", action="store_true", help="measure only those (no Megatron, no -j 1)")
    ap.add_argument("--baseline", help="with --filters: measure this other checkout's merges too (its root folder), "
                                       "each right after this checkout's")
    ap.add_argument("--filter-steps", default="3-4", help="--steps of the filtered merge (default 3-4)")
    ap.add_argument("--filter-window", default="0:500,0:100000",
                    help="--window of the filtered merges, comma-separated (default 0:500,0:100000: narrow, all kept)")
    return ap.parse_args(argv)


def report(results, state, args, argv, machine, started, scratch, src):
    """The Markdown section: the run's provenance, the table, the verdicts and the notes."""
    notes = [n for res in results for n in res["notes"]]
    codes = {}
    for res in results:
        for r in res["rows"]:
            if r["tool"] != "megatron":
                codes.setdefault(r["code"], []).append(f"{res['tag']} {r['label']}")
    if len(codes) > 1:
        notes.append("streamtrace's source changed between runs (others were editing it): "
                     + "; ".join(f"code {c}: {', '.join(v)}" for c, v in codes.items()))
    md = [f"## {started:%Y-%m-%d %H:%M %Z}: `{command_line(__file__, argv)}`" + (" (quick smoke run)" if args.quick else ""), "",
          f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['ram_gib']:.1f} GiB RAM "
          f"({machine['avail_gib']:.1f} GiB available at start), Linux {machine['kernel']}, Python {machine['python']}",
          f"- {machine.get('streamtrace', '?')}; orjson {machine.get('orjson', '?')}; git {machine.get('git', '?')}; "
          f"streamtrace source hash (sha1 of streamtrace/**/*.py) {', '.join(sorted(codes))}",
          f"- inputs: {args.ranks} rank files per size inflated from `{os.path.relpath(src, ROOT.parent) if src.is_absolute() else src}` "
          f"(uncompressed `.json`, read from the page cache: generated just before or reused), outputs `.json` "
          f"to {scratch}/out (deleted after each run); total wall time of the benchmark "
          f"{(_dt.datetime.now().astimezone() - started).total_seconds() / 60:.0f} min", "",
          *([] if args.only_filters else [table(results), ""])]
    if any(r["tool"] == "filter" for res in results for r in res["rows"]):
        md += ["Filtered merges against the full merge of the same run (CPU s: user + sys of the whole "
               "process tree; ratios < 1: cheaper than the full merge):", "", filter_table(results), ""]
    if not args.only_filters:
        md += ["Targets (streamtrace):", verdicts(results, state), ""]
    if notes:
        md += ["Notes:"] + [f"- {n}" for n in notes] + [""]
    return "\n".join(md)


def main(argv=None):
    args = parse_args(argv)
    sizes = [20.0] if args.quick else [float(x) for x in args.sizes.split(",") if x.strip()]
    record = not args.no_record and (args.record or not args.quick)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    src = Path(args.src)
    machine = machine_info()
    started = _dt.datetime.now().astimezone()
    log(f"machine: {machine['nproc']} cores, {machine['ram_gib']:.1f} GiB RAM ({machine['avail_gib']:.1f} available), "
        f"{machine['cpu']}; scratch {scratch} ({shutil.disk_usage(scratch).free / 1e9:.0f} GB free)")
    state, results = {}, []
    for size in sizes:
        results.append(run_size(scratch, src, args.ranks, size, args, state))
    if args.clean:
        for size in sizes:
            shutil.rmtree(scratch / f"in_{args.ranks}x{size:g}mb", ignore_errors=True)
    text = report(results, state, args, argv, machine, started, scratch, src)
    print(text)
    if record:
        append_results(text, header=RESULTS_HEADER)
    return 0 if all(r["ok"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
