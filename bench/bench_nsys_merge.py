#!/usr/bin/env python3
"""``streamtrace merge`` of an Nsight Systems export: this checkout against another one (``--baseline``),
in alternating rounds, on the same input, with their merged traces compared byte for byte.

    python bench/bench_nsys_merge.py --baseline /tmp/base                # 300 MB, 3 rounds; appends to RESULTS
    python bench/bench_nsys_merge.py --size-mb 80 --repeat 2 --no-record

No other tool writes a Chrome trace of an export (``nsys export`` writes SQLite, JSON lines or Arrow,
not Chrome's format), so the comparison is with streamtrace before a change.  The input is
``bench_nsys.py``'s (``../shared/traces/nsys/nsysai_mfu_2gpu_before.sqlite`` inflated by
``tools/inflate_nsys.py`` into the scratch folder, made at run time, never committed).  Each command
runs under the harness's ``measure``: wall, CPU (user + sys of the process tree) and peak RSS; the
row is the round of median CPU.  Exit 1 when the outputs differ."""
from __future__ import annotations

import argparse
import datetime as _dt
import filecmp
import statistics
import sys
from pathlib import Path

from bench_nsys import SOURCE, inflate
from harness import (ROOT, append_results, command_line, default_scratch, fmt_s, log, machine_info, mb, md_head,
                     md_row, measure, read_through)

HEADING = "## merge of a Nsight Systems export, this checkout against a baseline"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another checkout's root folder (its merge runs beside this one's)")
    ap.add_argument("--no-record", action="store_true")
    a = ap.parse_args(argv)
    scratch = default_scratch()
    scratch.mkdir(parents=True, exist_ok=True)
    src = inflate(scratch, a.size_mb)
    size = src.stat().st_size
    checkouts = [("this checkout", ROOT)] + ([("baseline", Path(a.baseline).resolve())] if a.baseline else [])
    runs = {name: [] for name, _ in checkouts}
    outs = {name: scratch / f"nsys-merge-{k}.json" for k, (name, _) in enumerate(checkouts)}
    for k in range(a.repeat):
        for name, root in checkouts[k % 2:] + checkouts[:k % 2]:
            read_through(src)
            r = measure([sys.executable, "-m", "streamtrace", "merge", str(src), "-o", str(outs[name]), "-q"],
                        scratch / "nsys-logs", f"merge {name} {k}", cwd=root)
            if r["rc"] != 0:
                raise SystemExit(f"bench: {name}'s merge failed (rc {r['rc']}): {r['stderr'][-500:]}")
            runs[name].append(r)
            log(f"round {k + 1}/{a.repeat} {name}: {r['wall']:.1f} s wall, {r.get('cpu_s', 0):.1f} CPU-s")
    same = len(checkouts) < 2 or filecmp.cmp(outs["this checkout"], outs["baseline"], shallow=False)
    rows = {name: sorted(rs, key=lambda r: r.get("cpu_s", r["wall"]))[(len(rs) - 1) // 2] for name, rs in runs.items()}
    base = rows.get("baseline")
    table = md_head(["checkout", "wall (s)", "CPU (s)", "MB/s", "peak RSS (MB)", "CPU vs baseline",
                     "CPU of the rounds"])
    for name, r in rows.items():
        table.append(md_row([name, fmt_s(r["wall"]), fmt_s(r["cpu_s"]), f"{size / 1e6 / r['wall']:,.1f}",
                             f"{mb(r['peak_rss']):,.0f}", f"{r['cpu_s'] / base['cpu_s']:.2f}" if base else "",
                             ", ".join(f"{x.get('cpu_s', 0):.1f}" for x in runs[name])]))
    info = machine_info()
    out_mb = outs["this checkout"].stat().st_size / 1e6
    text = "\n".join([HEADING, "", f"`{command_line(__file__, argv)}` at {_dt.datetime.now():%Y-%m-%d %H:%M}, git "
                      f"{info.get('git')}" + (f", baseline {a.baseline}" if a.baseline else "")
                      + f", {info.get('nproc')} cores; input {size / 1e6:,.0f} MB ({SOURCE.name} inflated by "
                      f"tools/inflate_nsys.py), output {out_mb:,.0f} MB; row: the round of median CPU; outputs "
                      f"byte-identical: {'yes' if same else 'NO'}.", ""] + table + [""])
    for p in outs.values():
        p.unlink(missing_ok=True)
    print(text)
    if not a.no_record:
        append_results(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
