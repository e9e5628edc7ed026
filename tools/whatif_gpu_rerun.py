#!/usr/bin/env python3
"""Real reruns for the what-if replay on one GPU (issue 46's GPU check): a small GPT in fp32
(``gpu_step_check.gpt``; attention through SDPA's math backend, so that every matrix product is a
GEMM kernel) trains under ``torch.profiler`` through ``streamtrace.capture``, each step loading its
batch on the host (``data_loading``: a random batch, pinned, copied to the GPU), then forward,
backward, AdamW and the loss read back (``loss.item()``, as a training loop logs it).  Three runs a
round, alternating:

* ``clean``: TF32 GEMMs (``torch.backends.cuda.matmul.allow_tf32 = True``);
* ``sleep``: the same with ``--sleep-ms`` of sleep in ``data_loading`` every step (a slow data loader);
  the what-if ``ops:name=^data_loading$`` (the region removed: the clean run's own copy with it);
* ``fp32``: GEMMs in full fp32 (TF32 off: the slower variant); the what-if
  ``kernels:name=gemm,factor=F`` with ``F`` the GEMM kernels' GPU time per step in the clean run over
  this run's, read from the raw traces (the faster variant run for real, its speed-up told to the replay).

Each faulty run is analysed and aggregated, its what-if's median predicted step compared with the clean
run's median step, read from the raw traces with ``json``: ``ProfilerStep#N``'s start to the later of its
end and the last GPU end of the work it launched (by correlation id), the step ``whatif.parquet`` measures.

    python tools/whatif_gpu_rerun.py OUT [--rounds 2] [--steps 10] [--sleep-ms 30] [--small]

Writes OUT/round<K>/<run>/traces (and an, agg), OUT/rerun.json and OUT/rerun.md (the table for
``bench/RESULTS.md``).  Needs torch with a CUDA GPU (``--small`` runs on the CPU, for a smoke run: TF32
then changes nothing).  Results of a run on one H200 are in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from gpu_step_check import SMALL, gpt  # noqa: E402
from whatif_rerun import replay  # noqa: E402

from streamtrace import capture  # noqa: E402
from streamtrace.trace.kernel_names import GEMM_KERNEL  # noqa: E402

RUNS = ("clean", "sleep", "fp32")
TOLERANCE_PCT = 10.0
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def train(out: Path, run: str, a, dev: str) -> None:
    """One profiled run (``run`` of ``RUNS``) into ``out``: wait 1, warmup 2, ``a.steps`` recorded."""
    torch.backends.cuda.matmul.allow_tf32 = run != "fp32"
    dims = SMALL if a.small else dict(zip("LDHTBV", (a.layers, a.width, 16, a.seq, a.batch, 32000)))
    B, T, V = dims["B"], dims["T"], dims["V"]
    model, opt = gpt(dims, dev, torch.float32)
    capture.dump_topology(out, groups={}, world_size=1)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with sdpa_kernel(SDPBackend.MATH), profile(activities=acts, schedule=torch.profiler.schedule(
            wait=1, warmup=2, active=a.steps, repeat=1), on_trace_ready=capture.trace_handler(out)) as prof:
        for _ in range(3 + a.steps):
            with record_function("data_loading"):
                batch = torch.randint(0, V, (B, T + 1))
                if run == "sleep":
                    time.sleep(a.sleep_ms / 1000)
                batch = (batch.pin_memory() if dev == "cuda" else batch).to(dev, non_blocking=True)
            with record_function("forward"):
                loss = F.cross_entropy(model(batch[:, :-1]).view(-1, V), batch[:, 1:].reshape(-1))
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            loss.item()
            prof.step()
    del model, opt
    if dev == "cuda":
        torch.cuda.empty_cache()


def raw_steps(traces: Path) -> list[dict]:
    """Per ``ProfilerStep#N`` of the raw traces (read with ``json``): ``step_ns`` (its start to the later
    of its end and the last GPU end of the work launched inside it) and ``gemm_ns`` (the GPU time of
    the GEMM kernels it launched, ``GEMM_KERNEL`` on the name)."""
    out = []
    for f in sorted(traces.glob("iteration_*/*.pt.trace.json*")):
        with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
            ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
        us = lambda x: int(round(float(x) * 1000))  # noqa: E731
        steps = sorted((us(e["ts"]), us(e["ts"]) + us(e["dur"])) for e in ev      # (not its GPU-side copy)
                       if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
        launch = {e["args"]["correlation"]: us(e["ts"]) for e in ev
                  if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        gpu = [(launch.get(e.get("args", {}).get("correlation")), us(e["ts"]) + us(e["dur"]), us(e["dur"]),
                bool(GEMM_KERNEL.search(e["name"]))) for e in ev if e.get("cat") in GPU_CATS]
        for s, t in steps:
            mine = [g for g in gpu if g[0] is not None and s <= g[0] <= t]
            out.append({"step_ns": max([t] + [g[1] for g in mine]) - s,
                        "gemm_ns": sum(g[2] for g in mine if g[3])})
    return out


def predict(d: Path, change: str) -> tuple[float, float]:
    """(median predicted step ns, median measured step ns) of ``change`` on the run in ``d``
    (``whatif_rerun.replay``: analysed into d/an, aggregated into d/agg, anew)."""
    for stale in ("an", "agg"):                     # (a rescore replaces the last analysis)
        shutil.rmtree(d / stale, ignore_errors=True)
    return replay(d / "traces", d, change)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--sleep-ms", type=float, default=30.0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--small", action="store_true", help="a tiny model (CPU is enough; a smoke run)")
    ap.add_argument("--rescore", action="store_true", help="train nothing: score the runs already in OUT again")
    a = ap.parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() and not a.small else "cpu"
    rows = []
    for k in range(a.rounds):
        med = {}
        for run in RUNS:
            d = a.out / f"round{k}" / run
            if not a.rescore:
                train(d / "traces", run, a, dev)
            st = raw_steps(d / "traces")
            med[run] = {x: statistics.median(s[x] for s in st) for x in ("step_ns", "gemm_ns")} | {
                "min_ns": min(s["step_ns"] for s in st), "max_ns": max(s["step_ns"] for s in st), "steps": len(st)}
        factor = med["clean"]["gemm_ns"] / med["fp32"]["gemm_ns"] if med["fp32"]["gemm_ns"] else 1.0
        for run, change in (("sleep", "ops:name=^data_loading$"), ("fp32", f"kernels:name=gemm,factor={factor:.4f}")):
            pred, measured = predict(a.out / f"round{k}" / run, change)
            c = med["clean"]["step_ns"]
            rows.append({"round": k, "run": run, "change": change, "faulty": med[run], "clean": med["clean"],
                         "predicted_ns": pred, "replay_measured_ns": measured, "error_pct": 100.0 * (pred - c) / c})
            print(json.dumps(rows[-1]), flush=True)
    (a.out / "rerun.json").write_text(json.dumps(rows, indent=1))
    lines = table(rows, a, dev)
    (a.out / "rerun.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(abs(r["error_pct"]) <= TOLERANCE_PCT for r in rows) else 1


def table(rows, a, dev) -> list[str]:
    ms = lambda ns: f"{ns / 1e6:.1f}"  # noqa: E731
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    out = ["## What-if replay against real reruns on one GPU (tools/whatif_gpu_rerun.py)", "",
           f"`python tools/whatif_gpu_rerun.py OUT --rounds {a.rounds} --steps {a.steps} --sleep-ms {a.sleep_ms:g}"
           f"{' --small' if a.small else ''}{' --rescore' if a.rescore else ''}` ({name}, torch {torch.__version__}; GPT {a.layers} x {a.width}, "
           f"T {a.seq}, batch {a.batch}, fp32, SDPA math; {time.strftime('%Y-%m-%d %H:%M')} UTC)", "",
           "| round | run | change replayed | faulty median step ms (min-max) | predicted ms | clean median ms "
           "(min-max, same round) | error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        f, c = r["faulty"], r["clean"]
        out.append(f"| {r['round']} | {r['run']} | `{r['change']}` | {ms(f['step_ns'])} ({ms(f['min_ns'])}-"
                   f"{ms(f['max_ns'])}) | {ms(r['predicted_ns'])} | {ms(c['step_ns'])} ({ms(c['min_ns'])}-"
                   f"{ms(c['max_ns'])}) | {r['error_pct']:+.1f} % |")
    return out


if __name__ == "__main__":
    sys.exit(main())
