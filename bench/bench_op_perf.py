#!/usr/bin/env python3
"""``analyze --op-perf``: what the per-op FLOPs pass costs, and its TFLOP/s beside TraceLens's formulas.

    python bench/bench_op_perf.py                  # 200 MB inflated from the H100 trace, 2 runs each; records
    python bench/bench_op_perf.py --quick          # the real trace itself, one run, nothing recorded

1. Cost: ``python -m streamtrace analyze IN -o OUT -j 1 -q`` with and without ``--op-perf`` under the
   harness's ``measure`` (wall, CPU, peak RSS), on a trace inflated (``tools/inflate_trace.py``) from
   ``../shared/traces/real/h100_qwen_inference.json.gz`` (recorded with ``record_shapes``).
2. Per-op TFLOP/s of the real trace: streamtrace's ``op_perf`` (FLOPs as ``torch.utils.flop_counter``)
   next to the FLOPs of TraceLens's documented perf model (``TraceLens/PerfModel/perf_model.py``, AMD-AGI,
   MIT; written here from its formulas, not its code): GEMM ``2 M N K`` plus ``M N`` for the bias of
   ``addmm``; SDPA forward ``2 B H s_q s_k (d_qk + d_v)``, halved when ``is_causal`` (``Concrete Inputs``),
   over the same GPU time.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import statistics
import sys
from collections import defaultdict
from decimal import Decimal

import pyarrow.parquet as pq

from harness import (REAL, ROOT, append_results, command_line, default_scratch, ensure_inputs, fmt_s, log,
                     machine_info, mb, md_head, md_row, measure)

HEADING = "## analyze --op-perf: cost, and per-op TFLOP/s beside TraceLens's formulas"
SRC = REAL / "h100_qwen_inference.json.gz"


def cost(scratch, size_mb, repeat, quick) -> list:
    if quick:
        src = SRC
    else:
        _, files, _, _ = ensure_inputs(scratch, SRC, 1, size_mb, prefix="opperf")
        src = files[0]
    rows = []
    for flag in ([], ["--op-perf"]):
        runs = []
        for i in range(repeat):
            out = scratch / f"opperf_an{'_op' if flag else ''}"
            r = measure([sys.executable, "-m", "streamtrace", "analyze", src, "-o", out, "-j", "1", "-q", *flag],
                        scratch / "logs", f"analyze{'_op_perf' if flag else ''}_{i}")
            if r["rc"] != 0:
                raise SystemExit(f"analyze failed: {r['stderr'][-2000:]}")
            runs.append(r)
        rows.append({"mode": "analyze --op-perf" if flag else "analyze", "input_mb": src.stat().st_size / 1e6,
                     "wall": statistics.median(r["wall"] for r in runs),
                     "cpu": statistics.median(r.get("cpu_s", float("nan")) for r in runs),
                     "rss": max(r["peak_rss"] for r in runs),
                     "other": statistics.median(r.get("other_cores", 0.0) for r in runs)})
    return rows


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def tracelens_flops(name, args):
    """FLOPs by TraceLens's perf-model formulas (GEMM, SDPA forward), None where it defines none here."""
    d = args.get("Input Dims")
    if name == "aten::mm":
        (m, k), (_, n) = d[0], d[1]
        return 2 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = d[1], d[2]
        return 2 * m * n * k + m * n
    if name == "aten::_flash_attention_forward":          # (b, s, h, d) tensors; is_causal: Concrete Inputs[8]
        b, s_q, h, dq = d[0]
        s_k, dv = d[1][1], d[2][3]
        f = 2 * b * h * s_q * s_k * (dq + dv)
        return f / 2 if str(args.get("Concrete Inputs", [""] * 9)[8]) == "True" and s_q == s_k else f
    return None


def compare(scratch) -> list:
    out = scratch / "opperf_real"
    measure([sys.executable, "-m", "streamtrace", "analyze", SRC, "-o", out, "-j", "1", "-q", "--op-perf"],
            scratch / "logs", "analyze_real")
    (part,) = out.glob("op_perf/iteration=*/rank=*/part-0.parquet")
    ours = {(r["tid"], r["ts_ns"], r["name"]): r for r in pq.read_table(part).to_pylist()}
    ev = json.loads(gzip.open(SRC).read(), parse_float=Decimal)["traceEvents"]
    acc = defaultdict(lambda: [0, 0.0, 0.0, 0])
    for e in ev:
        key = (e.get("tid"), _ns(e["ts"]) if "ts" in e else None, e.get("name"))
        r = ours.get(key)
        if r is None or not r["gpu_busy_ns"]:
            continue
        tl = tracelens_flops(e["name"], e.get("args") or {})
        if tl is None:
            continue
        a = acc[e["name"]]
        a[0] += r["flops"]
        a[1] += tl
        a[2] += r["gpu_busy_ns"]
        a[3] += 1
    return [{"op": n, "calls": a[3], "ours": a[0] / a[2] / 1e3, "tracelens": a[1] / a[2] / 1e3,
             "ratio": a[0] / a[1]} for n, a in sorted(acc.items())]


def report(costs, cmp_rows, argv) -> str:
    m = machine_info()
    busy = ", ".join(f"{c['other']:.1f}" for c in costs)
    L = [HEADING, "", f"`{command_line(__file__, argv)}` at {m.get('git', '?')}, {_dt.date.today()}, "
         f"{m.get('cpu', '?')}, {m.get('nproc')} cores; the machine was shared with other sessions (other "
         f"cores busy meanwhile: {busy}).", ""]
    L += md_head(["mode", "input MB", "wall s (median)", "CPU s", "peak RSS MB"])
    L += [md_row([c["mode"], f"{c['input_mb']:,.0f}", fmt_s(c["wall"]), fmt_s(c["cpu"]), f"{mb(c['rss']):,.0f}"])
          for c in costs]
    L += ["", f"Per-op TFLOP/s on `{SRC.name}` (H100, bf16), same GPU time, FLOPs by each formula:", ""]
    L += md_head(["op", "calls", "streamtrace TFLOP/s", "TraceLens-formula TFLOP/s", "ratio"])
    L += [md_row([r["op"], str(r["calls"]), f"{r['ours']:.1f}", f"{r['tracelens']:.1f}", f"{r['ratio']:.4f}"])
          for r in cmp_rows]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args(argv)
    scratch = default_scratch()
    scratch.mkdir(parents=True, exist_ok=True)
    costs = cost(scratch, args.size_mb, 1 if args.quick else args.repeat, args.quick)
    text = report(costs, compare(scratch), sys.argv[1:] if argv is None else argv)
    print(text)
    if not (args.quick or args.no_record):
        append_results(text)
        log(f"appended to {ROOT / 'bench' / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
