"""``streamtrace aggregate``: the whole job's tables from analysed folders."""
from __future__ import annotations

from ..aggregate.folder import CRITICAL_PATH, CRITICAL_PATH_SUMMARY, WHATIF, table_file
from .common import Console, need, option, parse_jobs, parse_list, prepare_kernels

EXAMPLES = """
  streamtrace aggregate an15 an16 -o job42-agg -j 8
  streamtrace aggregate an15 -o agg --time-alignment individual --clock-sync collectives --iterations 15
  streamtrace aggregate an4 -o agg4 --steps 3 -q
"""


@option("dirs", nargs="*", help="analysed folders (the -o of streamtrace analyze), e.g. one per iteration")
@option("-o", "--outdir", help="output folder, relative to the current folder (default: streamtrace-aggregate)")
@option("--iterations", help="only these iterations (the trace folder's iteration_N, as analyze's iteration=N), "
        "e.g. 15 or 15-16,20")
@option("--steps", help="only these step numbers (the N of ProfilerStep#N, or of the custom step ranges "
        "analyze took: NVTX `iteration N`, --step-pattern), e.g. 14 or 14-15")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("--time-alignment", choices=["global", "individual"],
        help="global: one time base for all ranks via baseTimeNanoseconds (default); individual: each rank from "
             "its own start")
@option("--clock-sync", choices=["none", "collectives"],
        help="none (default), or estimate clock offsets from collective ends")
@option("--topology", help="topology file or trace folder (default: the traces' distributedInfo.pg_config)")
@option("--torchtitan-config", help="the job's TorchTitan TOML: its mesh is the topology (unless --topology), its "
        "batch, sequence length and model go into aggregate.json")
@option("--consecutive-kernel-delay-us", type=float,
        help="idle breakdown: a gap on a GPU stream shorter than this (us), not caused by a late launch, is kernel "
             "wait, a longer one other (HolisticTraceAnalysis' consecutive_kernel_delay; default 30)")
@option("--no-critical-path", action="store_true",
        help=f"do not write {table_file(CRITICAL_PATH)} / {table_file(CRITICAL_PATH_SUMMARY)}")
@option("--no-whatif", action="store_true", help=f"do not replay the step ({table_file(WHATIF)} and its tables: "
        "streamtrace whatif needs them)")
@option("--force", action="store_true",
        help="aggregate folders that look like different jobs (different world sizes, ...)")
@option("-q", "--quiet", action="store_true", help="print only warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of errors)")
def aggregate(*dirs, outdir="streamtrace-aggregate", iterations=None, steps=None, jobs=0, time_alignment="global",
              clock_sync="none", topology=None, torchtitan_config=None, consecutive_kernel_delay_us=30.0,
              no_critical_path=False, no_whatif=False, force=False, quiet=False, verbose=False):
    """Whole-job tables: per rank x phase x micro-batch, pipeline bubbles, replicas, iterations, collectives."""
    from ..aggregate import AggregateOptions, aggregate as do_aggregate      # (the CLI's convention: see streamtrace.cli)
    con = Console(quiet, verbose)
    need(dirs, "at least one analysed folder (the -o of streamtrace analyze)")
    prepare_kernels("aggregate", con, parse_jobs(jobs))
    m = do_aggregate(dirs, outdir, AggregateOptions(
        iterations=parse_list(iterations, "--iterations") if iterations else None,
        steps=parse_list(steps, "--steps") if steps else None, jobs=parse_jobs(jobs), time_alignment=time_alignment,
        clock_sync=clock_sync, topology=topology, torchtitan_config=torchtitan_config, force=force,
        progress=con.progress, consecutive_kernel_delay_ns=kernel_delay_ns(consecutive_kernel_delay_us),
        critical_path=not no_critical_path, whatif=not no_whatif))
    for w in m["warnings"]:
        con.warn(w)
    c = m["collectives"]
    alone = c.get("single_rank", 0) if len(m["ranks"]) >= 2 else 0
    matched = "matched across ranks" if len(m["ranks"]) >= 2 else "on one rank, not matched"
    lone = f", {alone:,} on one rank only" if alone else ""
    con.info(f"aggregated {len(m['ranks'])} ranks, {steps_text(m)}: {c['instances'] - alone:,} collective instances "
             f"{matched} ({c['complete']:,} complete{lone}) in {m['seconds']:.2f} s -> {outdir}/")
    if m["clock_offsets_ns"]:
        con.info("estimated clock offsets (us): " + ", ".join(f"rank {r}: {v / 1e3:+,.1f}"
                                                              for r, v in m["clock_offsets_ns"].items()))


def kernel_delay_ns(us) -> int:
    """``--consecutive-kernel-delay-us`` as int ns; a negative value is a usage error."""
    from ..runtime.errors import UsageError
    if us is None or us < 0:
        raise UsageError(f"bad --consecutive-kernel-delay-us {us}: a number of microseconds >= 0, e.g. 30")
    return int(round(us * 1000))


def steps_text(m) -> str:
    """``iteration 4 (ProfilerStep#3)``, ``iterations 15, 16 (ProfilerStep#14, #15)``: both numbers
    where they differ."""
    its = [i for i in m["iterations"] if i is not None and i >= 0]
    steps = sorted({s for _, s in m.get("steps", []) if s >= 0})
    text = (f"iteration{'s' if len(its) > 1 else ''} {', '.join(map(str, its))}" if its
            else "iteration unknown")
    if steps and steps != its:
        from ..report.config import step_patterns_used     # (the CLI's convention: see streamtrace.cli)
        word = "step " if step_patterns_used(m.get("inputs")) else "ProfilerStep#"
        text += f" ({word}{', #'.join(map(str, steps)) if word.endswith('#') else ', '.join(map(str, steps))})"
    return text


aggregate.EXAMPLES = EXAMPLES
