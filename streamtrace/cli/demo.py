"""``streamtrace demo``: the built-in end-to-end example.

Writes a small realistic 8-rank (TP2 x DP2 x PP2) Megatron-style trace set with
the synthetic generator (``streamtrace.synth.job``), merges it (validated while
written), runs the whole epilogue on it (analysis Parquet, aggregate, report, charts)
and prints where the report and the merged trace are.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..runtime.errors import StreamtraceError, UsageError
from .common import option


def run_demo(folder="streamtrace-demo", world_size=8, tp=2, pp=2, jobs=0, log=print, epilogue=True, started=None,
             compiled_s=0.0) -> dict:
    """Generate ``folder/traces`` (one trace per rank), merge it into ``folder/merged.json.gz``,
    validated while merging, then (``epilogue``) run ``streamtrace.epilogue.run`` on ``folder``:
    ``folder/streamtrace/`` gets the analysis, the aggregate, the report and its charts.

    ``started`` (``time.time()`` when the command began, default now) and ``compiled_s`` (the seconds
    of it spent compiling the kernels first): the closing "done in" line is the command's whole time,
    the first run's compiling said within it.

    Returns a dict: ``traces``, ``merged`` (paths), ``merge`` (the merge summary), ``validate``
    (the output's validation report), ``truth`` (the generator's), ``report`` (the report's path,
    None without ``epilogue``) and ``epilogue`` (its summary dict).  Raises
    ``UsageError`` when ``world_size`` is not a multiple of tp x pp,
    ``StreamtraceError`` when the merged trace does not validate or a
    stage of the epilogue failed."""
    from ..epilogue import EpilogueOptions, EpilogueRun, run  # (the CLI's convention: see streamtrace.cli)
    from ..merge import MergeOptions, merge
    from ..report.options import ReportOptions
    from ..synth.job import SynthSpec, generate_job
    if world_size < tp * pp or world_size % (tp * pp):
        raise UsageError(f"bad --world-size {world_size}: a multiple of TP x PP = {tp * pp}")
    folder = Path(folder)
    t0 = time.time() if started is None else started
    spec = SynthSpec(world_size=world_size, tp=tp, pp=pp)
    truth = generate_job(folder / "traces", spec)
    log(f"wrote {world_size} rank traces (TP{tp} x DP{spec.dp} x PP{pp}) to {folder / 'traces'}")
    out = folder / "merged.json.gz"
    res = merge([folder / "traces"], out, MergeOptions(jobs=jobs))[0]
    log(f"merged {len(res['ranks'])} ranks: {res['events_in']:,} events in, {res['events_out']:,} out "
        f"-> {out} ({res['bytes_out'] / 1e6:.2f} MB)")
    rep = dict(res["validation"]["output"], path=str(out))
    status = "valid" if rep["ok"] else "PROBLEMS: " + ", ".join(f"{k}={v}" for k, v in rep["problems"].items() if v)
    log(f"validate: {status} ({rep['events']:,} events, {rep['tracks']} tracks, {rep['flows']:,} flows)")
    if not rep["ok"]:
        raise StreamtraceError(f"the demo's merged trace did not validate: {status}")
    summary = None
    if epilogue:
        summary = run(folder, EpilogueOptions(jobs=jobs, progress=False, report=ReportOptions(name="demo")))
        if summary["failures"]:
            f = summary["failures"][0]
            raise StreamtraceError(f"the demo's epilogue failed: {f['stage']} ({f['file']}): {f['error']} "
                                   f"(see {Path(summary['outdir']) / EpilogueRun.marker})")
        log(f"epilogue: analysis, aggregate, report and charts in {summary['outdir']}")
        log(f"report: {Path(summary['report']).resolve()}")
    log(f"merged trace: {out.resolve()} (open it at https://ui.perfetto.dev, Open trace file)")
    log(f"done in {time.time() - t0:.1f} s" + (f" ({compiled_s:.1f} s of it compiling the kernels, first run only)"
                                               if compiled_s >= 0.05 else ""))
    return {"traces": str(folder / "traces"), "merged": str(out), "merge": res.summary, "validate": rep,
            "truth": truth, "report": summary and summary["report"], "epilogue": summary}


@option("folder", nargs="?", help="where to write the demo trace set (default: streamtrace-demo)")
@option("--world-size", type=int, help="number of ranks, a multiple of 4 (default: 8)")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("-q", "--quiet", action="store_true", help="print only warnings and errors")
@option("-v", "--verbose", action="store_true", help="tracebacks of errors")
def demo(folder="streamtrace-demo", *, world_size=8, jobs=0, quiet=False, verbose=False):
    """Write a small realistic 8-rank job's traces and run the whole epilogue on them."""
    from .common import Console, parse_jobs, prepare_kernels
    t0 = time.time()
    con = Console(quiet, verbose)
    compiled = prepare_kernels("demo", con, parse_jobs(jobs))
    run_demo(folder, world_size=world_size, jobs=parse_jobs(jobs), log=con.info, started=t0, compiled_s=compiled)


demo.EXAMPLES = """
  streamtrace demo
  streamtrace demo /tmp/demo64 --world-size 64
  streamtrace report streamtrace-demo/streamtrace/aggregate --tokens-per-step 65536 -o demo-report
"""
