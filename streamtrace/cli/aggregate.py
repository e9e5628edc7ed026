"""``streamtrace aggregate``: the whole job's tables from analysed folders."""
from __future__ import annotations

import sys

import argh


@argh.arg("dirs", help="analysed folders (the -o of streamtrace analyze), e.g. one per iteration")
@argh.arg("-o", "--outdir", help="output folder")
@argh.arg("--iterations", nargs="+", type=int, help="only these iterations (folder iteration_N or ProfilerStep#N)")
@argh.arg("-j", "--jobs", type=int, help="ranks processed in parallel")
@argh.arg("--time-alignment", choices=["global", "individual"],
          help="one time base for all ranks (baseTimeNanoseconds) or each rank from its own start")
@argh.arg("--clock-sync", choices=["none", "collectives"], help="estimate clock offsets from collective ends")
@argh.arg("--topology", help="topology file or trace folder (default: the traces' distributedInfo.pg_config)")
def aggregate(*dirs, outdir="streamtrace-aggregate", iterations=None, jobs=1, time_alignment="global",
              clock_sync="none", topology=None):
    """Whole-job tables: per rank x phase x micro-batch, pipeline bubbles, replicas, iterations, collectives."""
    from ..job import AggregateOptions, aggregate as do_aggregate      # (the CLI's convention: see streamtrace.cli)
    if not dirs:
        raise argh.CommandError("give at least one analysed folder")
    m = do_aggregate(dirs, outdir, AggregateOptions(iterations=iterations, jobs=jobs, time_alignment=time_alignment,
                                                    clock_sync=clock_sync, topology=topology))
    for w in m["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    c = m["collectives"]
    print(f"aggregated {len(m['ranks'])} ranks, iteration(s) {', '.join(map(str, m['iterations']))}: "
          f"{c['instances']:,} collective instances ({c['complete']:,} complete) in {m['seconds']:.2f} s -> {outdir}/")
    if m["clock_offsets_ns"]:
        print("estimated clock offsets (us): " + ", ".join(f"rank {r}: {v / 1e3:+,.1f}"
                                                          for r, v in m["clock_offsets_ns"].items()))
