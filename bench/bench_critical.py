#!/usr/bin/env python3
"""The critical path's cost in ``streamtrace aggregate``: time and peak memory with and without it
(``--no-critical-path``) on the same analysed synthetic job (TP4 x PP4, ``SynthSpec(world_size=N,
tp=4, pp=4)``, as ``bench_report.py --scale``'s small config), at ``--ranks`` (default 256,1024).
Target: <= +25 % time, peak memory within the scale target (<= 600 MB at 1,024 ranks).
``--whatif``: the what-if replay's cost instead (``--no-whatif`` against the default, the critical
path on in both; target <= +25 % time, memory flat).

Runs alternate (without, with, without, with, ...) ``--repeat`` times each; the medians are
compared.  Inputs are generated and analysed once into ``$STREAMTRACE_BENCH_DIR``/critical (not
timed); deleted at the end unless ``--keep``.

    python bench/bench_critical.py [--ranks 256,1024] [--repeat 3] [-j 2] [--no-record]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from harness import command_line, default_scratch, finish, fmt_s, git_describe, log, mb, md_head, md_row, \
    measure, uptime
from bench_report import generate, st

TARGET_PCT = 25.0


def _median(runs, key):
    return statistics.median(r.get(key) or 0 for r in runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="256,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-j", "--jobs", default="2", help="aggregate's -j")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--whatif", action="store_true", help="the what-if replay's cost (--no-whatif) instead")
    args = ap.parse_args(argv)
    scratch = default_scratch() / "critical"
    what, flag = ("the what-if replay", "--no-whatif") if args.whatif else ("the critical path", "--no-critical-path")
    lines = [f"## {what[4:].capitalize()}: aggregate with and without it ({git_describe()})", "",
             f"`{command_line(__file__, argv)}`", "", f"load before: {uptime()}", "",
             *md_head(["ranks", "GPU events/rank", "aggregate", "wall s (median)", "CPU s (median)",
                       "peak RSS MB (tree)", "largest process MB", "other cores busy", "runs"])]
    notes = []
    for n in [int(x) for x in args.ranks.split(",")]:
        d = scratch / f"small_{n}"
        traces = generate(d, n, "small", 0)
        if not (d / "an" / "summary.json").is_file():
            log(f"{n} ranks: analyze")
            subprocess.run(st("analyze", traces, "-o", d / "an", "-q", "-j", "0"), check=True)
        summ = json.loads((d / "an" / "summary.json").read_text())
        ev = max(sum(v["gpu_events"] for v in r["devices"].values()) for r in summ["ranks"])
        runs = {"without": [], "with": []}
        for i in range(args.repeat):
            for name, extra in (("without", [flag]), ("with", [])):
                log(f"{n} ranks: aggregate {name} ({i + 1}/{args.repeat})")
                r = measure(st("aggregate", d / "an", "-o", d / f"agg_{name}", "-q", "-j", args.jobs, *extra),
                            d / "logs", f"{n}_{name}_{i}")
                if r["rc"]:
                    raise SystemExit(f"aggregate failed: {r['stderr'][-2000:]}")
                runs[name].append(r)
        med = {k: {c: _median(v, c) for c in ("wall", "cpu_s", "peak_rss", "max_single_rss", "other_cores")}
               for k, v in runs.items()}
        for name in ("without", "with"):
            m = med[name]
            lines.append(md_row([f"{n:,}", f"{ev:,}", f"{name} {what}", fmt_s(m["wall"], 2),
                                 fmt_s(m["cpu_s"], 2), f"{mb(m['peak_rss']):,.0f}", f"{mb(m['max_single_rss']):,.0f}",
                                 f"{m['other_cores']:.1f}", str(args.repeat)]))
        dc = 100 * (med["with"]["cpu_s"] / med["without"]["cpu_s"] - 1)
        dw = 100 * (med["with"]["wall"] / med["without"]["wall"] - 1)
        notes.append(f"- {n:,} ranks: CPU {dc:+.1f} %, wall {dw:+.1f} % with {what} (target <= "
                     f"+{TARGET_PCT:.0f} %: {'met' if dc <= TARGET_PCT else 'NOT met'} on CPU); largest process "
                     f"{mb(med['with']['max_single_rss']):,.0f} MB with, {mb(med['without']['max_single_rss']):,.0f} "
                     "MB without")
    lines += ["", *notes, "", f"load after: {uptime()}", ""]
    finish("\n".join(lines), args, scratch)


if __name__ == "__main__":
    sys.exit(main())
