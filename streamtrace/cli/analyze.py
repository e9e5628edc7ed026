"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank, as Parquet + JSON."""
from __future__ import annotations

import statistics
import sys

from ..runtime.console import printable
from .common import Console, Exit, need, option, parse_jobs, prepare_kernels

EXAMPLES = """
  streamtrace analyze runs/job42/profile_traces/iteration_10 -o job42_iter10
  streamtrace analyze merged.json.gz -o job42_merged -q
  streamtrace analyze rank3_trace.json.gz -o r3 --chunked --topology runs/job42/streamtrace_topology.json
"""

#: up to this many ranks analyze prints one line per rank (more with -v), else one summary line
RANK_LINES = 8


@option("inputs", nargs="*", help="trace files, folders of rank traces, globs, or a merged multi-rank trace")
@option("--outdir", "-o", help="output folder, relative to the current folder (summary.json, kernels/, ops/; "
        "default: streamtrace-analysis)")
@option("--chunked", action="store_true",
        help="bounded memory: convert in chunks spilled to disk, then analyse from disk")
@option("--chunk-events", type=int, help="events held in memory at once: read, sorted and analysed per chunk "
        "(default: 32768)")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("--patterns", help="TOML file overriding the classification patterns")
@option("--topology", help="topology file: streamtrace JSON or Megatron-TraceViz unique_parallel_groups_*.txt")
@option("--rank-map", help="JSON {file: rank} or '<file> <rank>' lines, for files that carry no rank")
@option("--salvage", action="store_true", help="on a truncated file keep every complete event before the cut")
@option("--scheduler", help="dask.distributed scheduler address, e.g. tcp://host:8786 (or $STREAMTRACE_SCHEDULER)")
@option("--op-perf", action="store_true",
        help="also op_perf/: per-op FLOPs, bytes and roofline from the recorded shapes "
        "(record_shapes=True; one more pass over each file)")
@option("-q", "--quiet", action="store_true", help="print only warnings and errors")
@option("-v", "--verbose", action="store_true",
        help="one line per rank whatever their number (and tracebacks of errors)")
@option("--step-pattern", help="regular expression of the annotation or NVTX range that marks a training step, "
        "its first group the step number (default: ^ProfilerStep#(\\d+)$)")
@option("--gpu-only", action="store_true",
        help="only GPU activity (kernels, memcpy, memset, GPU annotations): per-device metrics and "
        "kernels rows, no CPU ops, call trees, launch links, steps or phases (an Nsight Systems export's CPU "
        "tables are not read)")
def analyze(*inputs, outdir="streamtrace-analysis", chunked=False, chunk_events=32_768, jobs=0,
            patterns=None, topology=None, rank_map=None, salvage=False, scheduler=None, op_perf=False, quiet=False,
            verbose=False, step_pattern=None, gpu_only=False):
    """Classify kernels, build call trees and overlap metrics per rank, as Parquet + JSON."""
    from ..analyze import AnalyzeOptions, analyze as do_analyze      # (the CLI's convention: see streamtrace.cli)
    con = Console(quiet, verbose)
    need(inputs, "at least one INPUT (a trace file, a folder of rank traces, a glob or a merged trace)")
    opt = AnalyzeOptions(jobs=parse_jobs(jobs), chunked=chunked, chunk_events=chunk_events, patterns=patterns,
                         topology=topology, rank_map=rank_map, salvage=salvage, scheduler=scheduler,
                         progress=con.progress, op_perf=op_perf, step_pattern=step_pattern, gpu_only=gpu_only)
    prepare_kernels("analyze", con, opt.jobs)
    s = do_analyze(inputs, outdir, opt)
    for n in s.get("notices", []):
        con.notice(n)
    for w in s.get("warnings", []):
        con.warn(w)
    for f in s["failed"]:
        msg = f["error"] if f["error"].startswith(f["source"]) else f"{f['source']}: {f['error']}"
        tries = f" (after {f['attempts']} attempts)" if f["attempts"] > 1 else ""
        print(f"error: {printable(msg)}{tries}", file=sys.stderr)
    ranks, devs = [], []                 # (one pass: the entries are read from summary.json as they are asked for)
    for r in s["ranks"]:
        for w in r.get("warnings", []):
            con.warn(w)
        ranks.append((r["iteration"], r["rank"], r["devices"]))
        devs += r["devices"].values()
    several = len({it for it, _, _ in ranks}) > 1
    lines = [_rank_line(*r, several) for r in ranks]
    if len(lines) <= RANK_LINES:
        for line in lines:
            con.info(line)
    else:
        for line in lines:
            con.detail(line)
        con.info(_ranks_summary(len(ranks), devs) + " (-v: one line per rank)")
    con.info(f"analysed {len(s['ranks'])} ranks in {s['seconds']:.2f} s -> {outdir}/summary.json, "
             f"{outdir}/kernels/, {outdir}/ops/ (iteration=N/rank=R/ partitions)")
    if s["failed"]:
        raise Exit(1)


def _rank_line(iteration, rank, devices, several) -> str:
    from ..report.units import fmt_time          # the report's units: 269 us, not "0.3 ms"
    devs = ", ".join(f"GPU {d}: busy {fmt_time(m['busy_us'] * 1e3)}, comm {fmt_time(m['comm_us'] * 1e3)}, "
                     f"overlap {_pct(m['overlap_pct'])} of comm"
                     for d, m in devices.items()) or "no GPU events (CPU only)"
    it = f"iteration {iteration}, " if several else ""
    return f"{it}rank {rank}: {devs}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f} %"


def _ranks_summary(n, devs) -> str:
    """One line for ``n`` ranks: busy and overlap as median (min-max) over their GPUs ``devs`` (each GPU's
    entry of ``summary.json``'s ``devices``)."""
    if not devs:
        return f"{n} ranks, no GPU events (CPU only)"
    busy = [m["busy_us"] / 1e3 for m in devs]
    ov = [m["overlap_pct"] for m in devs if m["overlap_pct"] is not None]
    line = (f"{n} ranks, {len(devs)} GPUs: busy median {statistics.median(busy):,.1f} ms "
            f"(min {min(busy):,.1f}, max {max(busy):,.1f})")
    if ov:
        line += f", overlap median {statistics.median(ov):.1f} % of comm (min {min(ov):.1f}, max {max(ov):.1f})"
    return line


analyze.EXAMPLES = EXAMPLES
