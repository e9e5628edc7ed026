"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank, as Parquet + JSON."""
from __future__ import annotations

import sys

import argh

from .common import Exit


@argh.arg("inputs", help="trace files, folders of rank traces, globs, or a merged multi-rank trace")
@argh.arg("-o", "--outdir", help="output folder (summary.json, kernels/, ops/)")
@argh.arg("--chunked", help="bounded memory: convert in chunks spilled to disk, then analyse from disk")
@argh.arg("--chunk-events", type=int, help="events held in memory at once: read, sorted and analysed per chunk")
@argh.arg("-j", "--jobs", type=int, help="files analysed in parallel (default: all cores)")
@argh.arg("--patterns", help="TOML file overriding the classification patterns")
@argh.arg("--topology", help="topology file: streamtrace JSON or Megatron-TraceViz unique_parallel_groups_*.txt")
@argh.arg("--rank-map", help="JSON {file: rank} or '<file> <rank>' lines, for files that carry no rank")
@argh.arg("--salvage", help="on a truncated file keep every complete event before the cut")
@argh.arg("--scheduler", help="dask.distributed scheduler address, e.g. tcp://host:8786 (or $STREAMTRACE_SCHEDULER)")
def analyze(*inputs, outdir="streamtrace-analysis", chunked=False, chunk_events=32_768, jobs=0,
            patterns=None, topology=None, rank_map=None, salvage=False, scheduler=None):
    """Classify kernels, build call trees and overlap metrics per rank, as Parquet + JSON."""
    from ..analyze import AnalyzeOptions, analyze as do_analyze      # (the CLI's convention: see streamtrace.cli)
    if not inputs:
        raise argh.CommandError("give at least one INPUT")
    opt = AnalyzeOptions(jobs=jobs, chunked=chunked, chunk_events=chunk_events, patterns=patterns,
                         topology=topology, rank_map=rank_map, salvage=salvage, scheduler=scheduler)
    s = do_analyze(inputs, outdir, opt)
    for f in s["failed"]:
        print(f"error: {f['source']}: {f['error']} (after {f['attempts']} attempts)", file=sys.stderr)
    several = len({r["iteration"] for r in s["ranks"]}) > 1
    for r in s["ranks"]:
        for w in r.get("warnings", []):
            print(f"warning: {w}", file=sys.stderr)
        devs = ", ".join(f"GPU {d}: busy {m['busy_us'] / 1e3:,.1f} ms, comm {m['comm_us'] / 1e3:,.1f} ms, "
                         f"overlap {m['overlap_pct'] if m['overlap_pct'] is not None else '-'} %"
                         for d, m in r["devices"].items()) or "no GPU events"
        it = f"iteration {r['iteration']}, " if several else ""
        print(f"{it}rank {r['rank']}: {devs}")
    print(f"analysed {len(s['ranks'])} ranks in {s['seconds']:.2f} s -> {outdir}/summary.json, "
          f"{outdir}/kernels/, {outdir}/ops/ (iteration=N/rank=R/ partitions)")
    if s["failed"]:
        raise Exit(1)
