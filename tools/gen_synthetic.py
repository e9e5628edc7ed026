#!/usr/bin/env python3
"""Write a deterministic synthetic Megatron-style multi-rank Kineto trace set.

    python tools/gen_synthetic.py OUT_DIR --world-size 8 --tp 2 --pp 2 --steps 1 \
        --microbatches 2 --layers 2 --seed 0 [--gz] [--scaled -j 2] \
        [--comm-format {kernel_args,kernel_args_seq,record_param_comms,annotation_dims}] [--alltoalls N]

Writes OUT_DIR/iteration_<N>/rank_<RRRR>_iter_<N>.pt.trace.json[.gz] and
OUT_DIR/streamtrace_topology.json (see streamtrace.synth.job). Times given on the command line
are integer nanoseconds. ``--scaled``: streamtrace.synth.scale (DP replicas share one program:
1,024 ranks x 20,000 GPU events in ~5 CPU-min; no straggler), ``-j`` processes. ``--comm-format``:
where the collectives' facts are written (PyTorch eras, streamtrace.synth.comm_formats);
``--alltoalls N``: N DP all-to-alls per step (uneven splits; even with ``--scaled``).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout without installing

from streamtrace.synth.comm_formats import FORMATS  # noqa: E402
from streamtrace.synth.faults import parse_fault  # noqa: E402
from streamtrace.synth.job import SynthSpec, generate_job  # noqa: E402
from streamtrace.synth.scale import generate_job_scaled  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    d = SynthSpec()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--world-size", type=int, default=d.world_size)
    ap.add_argument("--tp", type=int, default=d.tp)
    ap.add_argument("--pp", type=int, default=d.pp)
    ap.add_argument("--iteration", type=int, default=d.iteration)
    ap.add_argument("--steps", type=int, default=d.steps, help="ProfilerStep windows per file")
    ap.add_argument("--microbatches", type=int, default=d.microbatches)
    ap.add_argument("--layers", type=int, default=d.layers, help="transformer layers per pipeline stage")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--gz", action="store_true", help="write .json.gz files")
    ap.add_argument("--clock-skew-ns", type=int, default=0, help="rank r's clock runs r*N ns ahead")
    ap.add_argument("--straggler-rank", type=int, default=None)
    ap.add_argument("--straggler-delay-ns", type=int, default=0)
    ap.add_argument("--comm-format", choices=FORMATS, default=d.comm_format,
                    help="where collectives' facts are written: kernel args (default), + Seq, record_param_comms "
                         "only, recorded shapes only")
    ap.add_argument("--alltoalls", type=int, default=0, help="DP all-to-alls per step (uneven splits)")
    ap.add_argument("--graph-replays", action="store_true",
                    help="compute kernels replayed from CUDA graphs (start 1-15 us before their predecessor ends)")
    ap.add_argument("--fault", action="append", default=[], type=parse_fault,
                    help="inject a fault with a known effect: slow_gemm:RANK:FACTOR, cpu_stall:RANK:NS, "
                         "slow_send:RANK:NS or slow_coll:RANK:FACTOR (repeatable; streamtrace.synth.faults)")
    ap.add_argument("--clean", metavar="DIR", help="also write the same job without its faults (same seed) into DIR: "
                    "what a what-if that removes them should predict")
    ap.add_argument("--scaled", action="store_true", help="DP replicas share one program (fast at 1,000+ ranks)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="processes (with --scaled)")
    a = ap.parse_args(argv)
    spec = SynthSpec(world_size=a.world_size, tp=a.tp, pp=a.pp, iteration=a.iteration, steps=a.steps,
                     microbatches=a.microbatches, layers=a.layers, seed=a.seed, compress=a.gz,
                     clock_skew_ns=a.clock_skew_ns, straggler_rank=a.straggler_rank,
                     straggler_delay_ns=a.straggler_delay_ns, comm_format=a.comm_format, alltoalls=a.alltoalls,
                     graph_replays=a.graph_replays,
                     faults=tuple(a.fault))
    t = time.perf_counter()
    try:
        truth = generate_job_scaled(a.out_dir, spec, a.jobs) if a.scaled else generate_job(a.out_dir, spec)
    except ValueError as e:
        ap.error(str(e))
    if a.clean:
        gen = generate_job_scaled if a.scaled else generate_job
        gen(a.clean, dataclasses.replace(spec, faults=()), *((a.jobs,) if a.scaled else ()))
    took = time.perf_counter() - t
    size = sum(r.path.stat().st_size for r in truth.ranks)
    print(f"wrote {len(truth.ranks)} rank files ({size / 1e6:.2f} MB, {sum(r.n_events for r in truth.ranks)} events, "
          f"{len(truth.collectives)} collectives) to {a.out_dir} in {took:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
