#!/usr/bin/env python3
"""Real reruns for the what-if replay (``streamtrace whatif``): a small data-parallel training job
(an MLP under ``DistributedDataParallel``, gloo on the CPU, ``--world-size`` ranks on this machine,
one thread each) profiled with ``streamtrace.capture`` (12 profiled steps by default), run once
clean and once per injected fault:

* ``sleep``: rank 0 sleeps ``--sleep-ms`` inside its ``data_loading`` region every step (a slow data
  loader); the what-if that removes it: ``ops:name=^data_loading$,rank=0`` (rank 0's data loading
  removed: the clean run's own, under a millisecond, with it);
* ``matmul``: rank 1 runs an extra matmul of ``--matmul`` x ``--matmul`` every step (work one rank
  does more); the what-if: ``ops:name=^aten::matmul$,rank=1`` (the model's layers run ``addmm`` and
  ``mm``, never ``matmul``: that op is the extra one).

Each run is analysed and aggregated; the faulty run's what-if predicts each step's median rank's
step, and the median over the steps is compared with the clean run's median step time, read from its
raw traces with ``json`` (every rank's ``ProfilerStep#N`` durations).  ``--rounds`` repeats the
clean and faulty runs alternately (the spread of the clean medians is the machine's noise).
``--interleave`` instead runs each fault once per round with the fault on the odd iterations only:
the what-if on those steps against the even steps of the same run, which the machine's load touches
alike (on a 2-core machine shared with other work, separate runs differ by tens of percent).

    python tools/whatif_rerun.py OUT [--rounds 3] [--faults sleep,matmul] [--steps 8] [--pin-cores] [--record]
    python tools/whatif_rerun.py OUT --rescore [--rounds 3]      # score OUT's runs again (a model change)

``--record`` appends the table to ``bench/RESULTS.md``.  Needs torch.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHANGES = {"sleep": "ops:name=^data_loading$,rank=0", "matmul": "ops:name=^aten::matmul$,rank=1"}
TOLERANCE_PCT = 10.0


def worker(a):
    """One rank of the job (run in its own process)."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    from streamtrace import capture
    if a.pin_cores:          # each rank on its own core: no rank takes the other's core while it sleeps
        os.sched_setaffinity(0, {a.rank % os.cpu_count()})
    torch.set_num_threads(1)
    torch.manual_seed(a.rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world_size)
    model = DDP(nn.Sequential(*[m for _ in range(a.layers) for m in (nn.Linear(a.hidden, a.hidden), nn.ReLU())]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    big = torch.randn(a.matmul, a.matmul)
    capture.dump_topology(a.out, groups={"dp": dist.group.WORLD})
    sched = capture.profiler_schedule(wait=2, warmup=2, active=a.steps)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=capture.trace_handler(a.out, iteration=lambda k: 0)) as prof:
        for it in range(4 + a.steps):
            on = it % 2 == 1 if a.interleave else True          # --interleave: the odd iterations only
            with record_function("data_loading"):
                x = torch.randn(a.batch, a.hidden)
                if a.fault == "sleep" and a.rank == 0 and on:
                    time.sleep(a.sleep_ms / 1000)
            with record_function("forward"):
                loss = model(x).square().mean()
            if a.fault == "matmul" and a.rank == 1 and on:
                big @ big
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def run_job(out: Path, fault: str, a) -> Path:
    """Run the job with ``fault`` ('' none) into ``out``; returns the traces' folder."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PROFILE_ALLRANKS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    procs = [subprocess.Popen([sys.executable, __file__, str(out), "--worker", "--rank", str(r), "--port", str(port),
                               "--fault", fault, *_job_args(a)], env=env) for r in range(a.world_size)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a rank of the job failed ({codes})")
    return out


def _job_args(a) -> list:
    return ["--world-size", str(a.world_size), "--steps", str(a.steps), "--hidden", str(a.hidden), "--layers",
            str(a.layers), "--batch", str(a.batch), "--sleep-ms", str(a.sleep_ms), "--matmul", str(a.matmul)] + \
        (["--interleave"] if a.interleave else []) + (["--pin-cores"] if a.pin_cores else [])


def step_times(traces: Path, parity=None) -> list:
    """Every rank's ``ProfilerStep#N`` durations (ns), from the raw traces with ``json``; ``parity``:
    only the steps whose N is odd (1) or even (0)."""
    out = []
    for f in sorted(traces.glob("iteration_*/*.pt.trace.json*")):
        with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
            ev = json.load(fh)["traceEvents"]
        out += [int(round(float(e["dur"]) * 1000)) for e in ev
                if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                and (parity is None or int(e["name"].split("#")[1]) % 2 == parity)]
    return out


def replay(traces: Path, work: Path, change: str, parity=None) -> tuple:
    """(predicted median step ns, measured median step ns) of the faulty run's what-if (``parity``:
    only its steps of odd (1) numbers)."""
    import streamtrace
    from streamtrace.aggregate import AggregateOptions
    from streamtrace.analyze import AnalyzeOptions
    streamtrace.analyze([traces], work / "an", AnalyzeOptions(jobs=1))
    streamtrace.aggregate([work / "an"], work / "agg", AggregateOptions(jobs=1))
    rows = [r for r in streamtrace.load(work / "agg").whatif(change).to_pylist()
            if parity is None or r["step"] % 2 == parity]
    return (statistics.median(r["predicted_step_ns"] for r in rows),
            statistics.median(r["measured_step_ns"] for r in rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--faults", default="sleep,matmul")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--sleep-ms", type=float, default=30.0)
    ap.add_argument("--matmul", type=int, default=1200)
    ap.add_argument("--interleave", action="store_true", help="one run per fault, the fault on odd iterations "
                    "only: the even ones are the clean steps (the same load on the machine for both)")
    ap.add_argument("--pin-cores", action="store_true", help="rank r runs on core r mod the cores (Linux "
                    "sched_setaffinity): the ranks do not share a core, so one rank's sleep frees none for another")
    ap.add_argument("--rescore", action="store_true", help="run no job: score the runs already in OUT again "
                    "(their traces analysed and aggregated anew), e.g. after a change to the model")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--fault", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    if a.interleave:
        return interleaved(a)
    rows = []
    for k in range(a.rounds):
        for fault in [""] + a.faults.split(","):          # alternating: clean, then each fault
            d = a.out / f"round{k}" / (fault or "clean")
            t = time.perf_counter()
            if not a.rescore:
                run_job(d / "traces", fault, a)
            elif not (d / "traces").is_dir():
                raise SystemExit(f"--rescore: no run in {d} (run without --rescore first)")
            steps = step_times(d / "traces")
            row = {"round": k, "fault": fault or "clean", "median_ns": statistics.median(steps),
                   "min_ns": min(steps), "max_ns": max(steps), "steps": len(steps), "seconds": time.perf_counter() - t}
            if fault:
                for stale in ("an", "agg"):                # (a rescore replaces the last analysis)
                    shutil.rmtree(d / stale, ignore_errors=True)
                row["predicted_ns"], row["replay_measured_ns"] = replay(d / "traces", d, CHANGES[fault])
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = _table(rows, a)
    print("\n".join(lines))
    if a.record:
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write("\n" + "\n".join(lines) + "\n")
    return 0


def interleaved(a) -> int:
    """``--interleave``: per round and fault one run, the fault on odd iterations; the what-if on
    those predicts the median of the even (clean) ones of the same run."""
    lines = ["## What-if replay against real reruns, interleaved (tools/whatif_rerun.py --interleave)", "",
             f"`python tools/whatif_rerun.py OUT --interleave --rounds {a.rounds} --faults {a.faults} --steps "
             f"{a.steps}{' --pin-cores' if a.pin_cores else ''}` (gloo, {a.world_size} ranks x 1 thread, DDP MLP {a.layers} x {a.hidden}, batch {a.batch}; "
             f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}): the fault on the odd steps, "
             "the even steps of the same run are the clean ones", "",
             "| round | fault | change replayed | faulty steps' median ms (min-max) | predicted ms | clean steps' "
             "median ms (min-max) | error |", "|---|---|---|---|---|---|---|"]
    ms = lambda ns: f"{ns / 1e6:.1f}"  # noqa: E731
    for k in range(a.rounds):
        for fault in a.faults.split(","):
            d = a.out / f"interleaved{k}" / fault
            if not a.rescore:
                run_job(d / "traces", fault, a)
            for stale in ("an", "agg"):
                shutil.rmtree(d / stale, ignore_errors=True)
            bad, good = step_times(d / "traces", 1), step_times(d / "traces", 0)
            pred, _ = replay(d / "traces", d, CHANGES[fault], 1)
            c = statistics.median(good)
            lines.append(f"| {k} | {fault} | `{CHANGES[fault]}` | {ms(statistics.median(bad))} ({ms(min(bad))}-"
                         f"{ms(max(bad))}) | {ms(pred)} | {ms(c)} ({ms(min(good))}-{ms(max(good))}) | "
                         f"{100.0 * (pred - c) / c:+.1f} % |")
            print(lines[-1], flush=True)
    print("\n".join(lines))
    if a.record:
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write("\n" + "\n".join(lines) + "\n")
    return 0


def _table(rows, a) -> list:
    ms = lambda ns: f"{ns / 1e6:.1f}"  # noqa: E731
    clean = [r for r in rows if r["fault"] == "clean"]
    out = [f"## What-if replay against real reruns (tools/whatif_rerun.py)", "",
           f"`python tools/whatif_rerun.py OUT --rounds {a.rounds} --faults {a.faults} --steps {a.steps}"
           f"{' --pin-cores' if a.pin_cores else ''}{' --rescore' if a.rescore else ''}` "
           f"(gloo, {a.world_size} ranks x 1 thread, DDP MLP {a.layers} x {a.hidden}, batch {a.batch}; "
           f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f})", "",
           "| round | fault | change replayed | faulty median step ms (min-max) | predicted ms | clean median ms "
           "(min-max, same round) | error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["fault"] == "clean":
            continue
        c = next(x for x in clean if x["round"] == r["round"])
        err = 100.0 * (r["predicted_ns"] - c["median_ns"]) / c["median_ns"]
        out.append(f"| {r['round']} | {r['fault']} | `{CHANGES[r['fault']]}` | {ms(r['median_ns'])} "
                   f"({ms(r['min_ns'])}-{ms(r['max_ns'])}) | {ms(r['predicted_ns'])} | {ms(c['median_ns'])} "
                   f"({ms(c['min_ns'])}-{ms(c['max_ns'])}) | {err:+.1f} % |")
    cm = [c["median_ns"] for c in clean]
    out += ["", f"Clean medians over the rounds: {', '.join(ms(x) for x in cm)} ms (spread "
            f"{100.0 * (max(cm) - min(cm)) / statistics.median(cm):.1f} % of their median)."]
    return out


if __name__ == "__main__":
    sys.exit(main())
