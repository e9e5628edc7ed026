"""Report with charts of the 8-rank demo, and aggregate / report / epilogue at 128 to 1,024 ranks.

``--demo``: the demo's job (``SynthSpec()``: TP2 x DP2 x PP2, 8 ranks) analysed once, then
``streamtrace aggregate`` and ``streamtrace report`` (charts: PNG, ``-j 0``) measured ``--repeat``
times (medians), with ``report --no-charts`` and ``report --chart-format png,svg -j 1`` (the old
default: both formats, one process) for comparison.  Target: aggregate + report <= 3 s (wall).

``--scale``: the project's generator (``streamtrace.synth.job``), TP4 x PP4, at ``--ranks``
(default 128,512,1024), ``--config small`` (the generator's defaults: ~125 GPU events per rank)
and/or ``big`` (``--big-layers`` layers x 16 micro-batches: >= 20,000 GPU events per rank, written by
``synth_scale.generate_job_scaled`` as ``.json.gz``: ~3 MB per rank); generated at run time into the
scratch folder unless already there (not timed), analysed (``-j 0``, measured, not part of the
targets), then ``aggregate``, ``aggregate -j 1``, ``report`` and ``epilogue`` (``--epilogue-ranks``, default 256,1024)
measured: wall, CPU, peak RSS of the process tree.  Targets: peak RSS <= 600 MB at 1,024 ranks;
time for 4x the ranks <= 4.5x.

Inputs and outputs go to ``$STREAMTRACE_BENCH_DIR`` (``/tmp/streamtrace-bench``)/report; they are
deleted at the end unless ``--keep``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import (ROOT, command_line, default_scratch, finish, fmt_s, git_describe, log, mb, md_head,
                     md_row, measure, uptime, wait_idle)

PY = sys.executable
TARGET_DEMO_S = 3.0
TARGET_RSS_MB = 600.0
TARGET_RATIO = 4.5


def st(*args):
    return [PY, "-m", "streamtrace", *map(str, args)]


def generate(folder: Path, ranks: int, config: str, big_layers: int, jobs: int = 2):
    """Write the synthetic job (not measured; kept when its topology file is there); returns the traces
    folder. ``big``: ``generate_job_scaled`` (DP replicas share one program, ``.json.gz`` files, ``jobs``
    processes: 1,024 ranks x 20,000 GPU events in ~5 CPU-min); ``small``: ``generate_job``."""
    traces = folder / "traces"
    if (traces / "streamtrace_topology.json").is_file():
        return traces
    spec = f"SynthSpec(world_size={ranks}, tp=4, pp=4" + \
        (f", microbatches=16, layers={big_layers}, compress=True" if config == "big" else "") + ")"
    call = (f"generate_job_scaled({str(traces)!r}, {spec}, jobs={jobs})" if config == "big" else
            f"generate_job({str(traces)!r}, {spec})")
    t = time.perf_counter()
    subprocess.run([PY, "-c", "from streamtrace.synth.job import SynthSpec, generate_job; "
                              "from streamtrace.synth.scale import generate_job_scaled; " + call],
                   check=True, cwd=ROOT)
    log(f"generated {ranks} ranks in {time.perf_counter() - t:.0f} s")
    return traces


def median_run(cmd, logdir, label, repeat, wait=0):
    """``repeat`` measured runs; the one with the median wall time, plus the medians of each."""
    runs = []
    for i in range(repeat):
        if wait:
            wait_idle(wait)
        r = measure(cmd, logdir, f"{label}_{i}")
        if r["rc"] != 0:
            raise SystemExit(f"{label} failed: {r['stderr'][-2000:]}")
        runs.append(r)
    med = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    return {**med, "wall": statistics.median(r["wall"] for r in runs),
            "cpu_s": statistics.median(r.get("cpu_s", 0.0) for r in runs),
            "peak_rss": statistics.median(r["peak_rss"] for r in runs),
            "single": statistics.median(r["max_single_rss"] for r in runs),
            "pss": statistics.median(r.get("peak_sum_pss") or 0 for r in runs),
            "other": statistics.median(r.get("other_cores", 0.0) for r in runs), "n": len(runs)}


def row(what, r):
    return md_row([what, fmt_s(r["wall"], 2), fmt_s(r["cpu_s"], 2), *_mem(r), f"{r['other']:.1f}", str(r["n"])])


def _mem(r):
    """Peak memory cells: summed RSS of the tree (forked workers' shared pages counted in each),
    summed PSS (shared pages shared out; sampled every 0.5 s while under 1 GB), largest process."""
    return [f"{mb(r['peak_rss']):,.0f}", f"{mb(r['pss']):,.0f}" if r["pss"] else "-", f"{mb(r['single']):,.0f}"]


MEM_COLS = ["peak RSS MB (tree sum)", "peak PSS MB (tree)", "largest process MB"]


def demo(scratch: Path, args) -> list:
    d = scratch / "demo"
    if not (d / "an" / "summary.json").is_file():
        subprocess.run([PY, "-c", "from streamtrace.synth.job import generate_job; "
                                  f"generate_job({str(d / 'traces')!r})"], check=True, cwd=ROOT)
        subprocess.run(st("analyze", d / "traces", "-o", d / "an", "-q"), check=True, cwd=ROOT)
    subprocess.run(st("aggregate", d / "an", "-o", d / "agg", "-q"), check=True, cwd=ROOT)     # warm
    subprocess.run(st("report", d / "agg", "-o", d / "rep", "-q"), check=True, cwd=ROOT)
    logs = scratch / "logs"
    agg = median_run(st("aggregate", d / "an", "-o", d / "agg", "-q"), logs, "demo_aggregate", args.repeat, args.wait)
    rep = median_run(st("report", d / "agg", "-o", d / "rep", "-q"), logs, "demo_report", args.repeat, args.wait)
    nochart = median_run(st("report", d / "agg", "-o", d / "rep0", "-q", "--no-charts"), logs, "demo_nocharts",
                         args.repeat, args.wait)
    old = median_run(st("report", d / "agg", "-o", d / "rep1", "-q", "--chart-format", "png,svg", "-j", "1"), logs,
                     "demo_report_both_j1", args.repeat, args.wait)
    charts = len(list((d / "rep" / "charts").glob("*.png")))
    total = agg["wall"] + rep["wall"]
    lines = ["### Demo: aggregate + report with charts (8 ranks, warm)", "",
             *md_head(["command", "wall s", "CPU s", *MEM_COLS, "other cores busy", "runs"]),
             row("aggregate", agg), row(f"report ({charts} PNG charts, -j 0)", rep), row("report --no-charts", nochart),
             row("report --chart-format png,svg -j 1", old), "",
             f"aggregate + report: **{total:.2f} s** wall (median runs), {agg['cpu_s'] + rep['cpu_s']:.2f} s CPU; "
             f"target <= {TARGET_DEMO_S:.0f} s: **{'met' if total <= TARGET_DEMO_S else 'not met'}**.", ""]
    return lines


def scale(scratch: Path, args) -> list:
    logs = scratch / "logs"
    lines = ["### Scale: aggregate, report, epilogue (synthetic TP4 x PP4)", "",
             *md_head(["config", "ranks", "GPU events/rank", "stage", "wall s", "CPU s", *MEM_COLS,
                       "other cores busy", "runs"])]
    res = {}
    for config in args.config.split(","):
        for n in [int(x) for x in args.ranks.split(",")]:
            d = scratch / f"{config}_{n}"
            log(f"{config} {n} ranks: generating")
            traces = generate(d, n, config, args.big_layers)
            pre = []
            if not (d / "an" / "summary.json").is_file():   # not a target, but measured (it must finish)
                log(f"{config} {n} ranks: analyze")
                pre.append(("analyze -j 0 (no target)", median_run(st("analyze", traces, "-o", d / "an", "-q", "-j", "0"),
                                                                  logs, f"{config}_{n}_analyze", 1, args.wait)))
            summ = json.loads((d / "an" / "summary.json").read_text())
            ev = max(sum(v["gpu_events"] for v in r["devices"].values()) for r in summ["ranks"])
            for name, r in pre:
                lines.append(md_row([config, str(n), f"{ev:,}", name, fmt_s(r["wall"], 2), fmt_s(r["cpu_s"], 2),
                                     *_mem(r), f"{r['other']:.1f}", str(r["n"])]))
            stages = [("aggregate", st("aggregate", d / "an", "-o", d / "agg", "-q")),
                      ("aggregate -j 1", st("aggregate", d / "an", "-o", d / "agg1", "-q", "-j", "1")),
                      ("report", st("report", d / "agg", "-o", d / "rep", "-q"))]
            if n in [int(x) for x in args.epilogue_ranks.split(",") if x]:
                stages.append(("epilogue", st("epilogue", traces, "-o", d / "epi", "-q")))
            for name, cmd in stages:
                if name in args.skip.split(","):
                    continue
                if name == "epilogue":
                    shutil.rmtree(d / "epi", ignore_errors=True)
                log(f"{config} {n} ranks: {name}")
                r = median_run(cmd, logs, f"{config}_{n}_{name}", 1 if name == "epilogue" else args.scale_repeat,
                               args.wait)
                res[(config, n, name)] = r
                lines.append(md_row([config, str(n), f"{ev:,}", name, fmt_s(r["wall"], 2), fmt_s(r["cpu_s"], 2),
                                     *_mem(r), f"{r['other']:.1f}", str(r["n"])]))
    lines += ["", "Ratios (4x the ranks):", ""]
    for (config, n, name), r in sorted(res.items()):
        q = res.get((config, n // 4, name))
        if q:
            lines.append(f"- {config} {name} {n // 4} -> {n}: wall x{r['wall'] / q['wall']:.2f}, CPU "
                         f"x{r['cpu_s'] / max(q['cpu_s'], 1e-9):.2f} (target <= {TARGET_RATIO}: "
                         f"{'met' if r['cpu_s'] / max(q['cpu_s'], 1e-9) <= TARGET_RATIO else 'not met'} on CPU)")
    big = [(k, r) for k, r in res.items() if k[1] >= 1024]
    for (config, n, name), r in big:
        ok = lambda v: "met" if mb(v) <= TARGET_RSS_MB else "not met"  # noqa: E731
        lines.append(f"- {config} {name} at {n} ranks: tree RSS {mb(r['peak_rss']):,.0f} MB ({ok(r['peak_rss'])}), "
                     f"largest process {mb(r['single']):,.0f} MB ({ok(r['single'])}); target <= {TARGET_RSS_MB:.0f}")
    return lines + [""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", action="store_true", help="the demo's aggregate + report")
    ap.add_argument("--scale", action="store_true", help="aggregate / report / epilogue at --ranks")
    ap.add_argument("--ranks", default="128,512,1024")
    ap.add_argument("--epilogue-ranks", default="256,1024", help="ranks at which the epilogue is measured")
    ap.add_argument("--config", default="small", help="small, big or small,big")
    ap.add_argument("--big-layers", type=int, default=48, help="layers of the big config (16 micro-batches)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per demo command (median)")
    ap.add_argument("--skip", default="", help="scale stages not to run, e.g. 'aggregate -j 1'")
    ap.add_argument("--scale-repeat", type=int, default=1, help="runs per scale command (median)")
    ap.add_argument("--wait", type=float, default=30, help="wait up to this many s for a quiet machine per run")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args(argv)
    scratch = default_scratch() / "report"
    scratch.mkdir(parents=True, exist_ok=True)
    lines = [f"## Report charts and scale ({git_describe()})", "", f"`{command_line(__file__, argv)}`", "",
             f"load before: {uptime()}", ""]
    if args.demo or not args.scale:
        lines += demo(scratch, args)
    if args.scale:
        lines += scale(scratch, args)
    lines += [f"load after: {uptime()}", ""]
    finish("\n".join(lines), args, scratch)


if __name__ == "__main__":
    main()
