"""The stages of one epilogue run: each iteration's analyze and merge, then the job's aggregate, its
critical path marked in the merged traces, and the report (``iteration_stages``, ``job_stages``).
Each runs through ``run_stage``: reused when its inputs' ``fingerprint`` and its outputs are
unchanged since its last success, else run in a child process of its own (``in_stage_process``),
its failures logged.  ``StageRun`` is what they share."""
from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from ..analyze.outputs import Analysis
from ..aggregate.folder import CHARTS, CRITICAL_PATH, Aggregate, table_path
from ..report.outputs import EpilogueRun, Report       # its output folder's kind (``diff`` reads such folders too)
from ..runtime.files import atomic_output, write_json
from ..runtime.fork import Standby, call_in_child
from ..runtime.stagelog import StageLog
from ..runtime.tuning import freeze_for_fork, trim
from .discovery import find_iterations
from .merged_check import merge_record
from .options import EpilogueOptions

# The stages' modules (analyze, merge, aggregate, report, trace) are imported inside the functions that
# run in the stages' child processes, not when this module is imported: they bring numba and pyarrow
# (~190 MB).  The epilogue loads them here once, before the first stage that runs (``share_imports``),
# so that every stage's process inherits them instead of loading them again; all but the report's, which
# calls no kernel and runs in a process forked before numba was set up (``StageRun.report_process``).
SHARED_MODULES = ("pyarrow.parquet", "pyarrow.compute", "..analyze", "..merge", "..trace.discover",
                  "..aggregate.critical_marks", "..aggregate.run")
"""What ``share_imports`` imports after numba's set-up (relative names: of ``streamtrace``)."""

MARKS = "critical path marks"
"""The critical path marks' stage: its key in the state and the summary, its name in the log."""


def fingerprint(paths, **options) -> str:
    h = hashlib.sha256()
    for p in sorted(map(str, paths)):
        try:
            st = os.stat(p)
            h.update(os.fsencode(f"{p}|{st.st_size}|{int(st.st_mtime_ns)}\n"))   # (a path's bytes, not UTF-8)
        except OSError:
            h.update(os.fsencode(f"{p}|missing\n"))
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()


def discover_paths(opt, run_dir, log, outdir, topology=None) -> tuple[dict, list]:
    """``find_iterations`` as ``({iteration: [path]}`` (rank order), ``[skipped file: reason]``),
    run in a child process with ``opt.isolate`` (reading 1,024 trace heads loads the byte scanner
    and ~40 MB of metadata that the epilogue's process does not need)."""
    def paths():
        skipped = []
        groups = find_iterations(run_dir, log, outdir, topology, skipped)
        return {it: [tf.path for tf in files] for it, files in groups.items()}, skipped
    try:
        return in_stage_process(opt, log, paths)
    except Exception as e:   # noqa: BLE001 - its process died: logged, nothing to do
        log.fail("discover", run_dir, e)
        return {}, []


def run_stage(ctx, key, fp, outputs, fn, name, what, process: Standby | None = None):
    """Run ``fn()`` unless ``ctx.state[key]`` says it already succeeded with the same
    fingerprint ``fp`` (``fingerprint``) and ``outputs`` still exist; in a child process with
    ``ctx.opt.isolate`` (``call_in_child``: the stage's memory is the
    system's again when it ends), or in ``process`` when given (a ``Standby``: ``fn`` then pickles,
    and this process's shared imports are not needed).  Returns ``(result or None, status)``."""
    state, log = ctx.state, ctx.log
    prev = state.get(key)
    if prev and prev.get("fingerprint") == fp and prev.get("ok") and all(Path(o).exists() for o in outputs):
        log.info(f"{name}: reused ({what})")
        for f in prev.get("failures", []):      # what that run could not process is still missing
            log.failure(f)
        return prev.get("result"), "reused"
    t0 = time.time()
    before = len(log.failures)
    if process is None:
        share_imports(ctx)
    try:
        result = in_stage_process(ctx.opt, log, fn) if process is None else process.call(fn)
    except KeyboardInterrupt:           # the record says which stage was cut (issue 47, item 9)
        ctx.summary.setdefault("stages", {})[key] = "interrupted"
        raise
    except Exception as e:   # noqa: BLE001 - logged, the epilogue carries on
        log.fail(name, what, e)
        state[key] = {"fingerprint": fp, "ok": False, "error": str(e).splitlines()[0] if str(e) else ""}
        if os.environ.get("STREAMTRACE_DEBUG") or log.verbose:
            print(getattr(e, "details", "") or traceback.format_exc(), file=sys.stderr, end="")
        return None, "failed"
    state[key] = {"fingerprint": fp, "ok": True, "result": result, "seconds": round(time.time() - t0, 2),
                  "failures": list(log.failures[before:])}
    log.info(f"{name}: done in {time.time() - t0:.1f} s ({what})")
    return result, "done"


def in_stage_process(opt, log, fn):
    """``fn()`` in a child process of its own with ``opt.isolate`` (its log entries relayed to
    ``log``; ``call_in_child``), else here, followed by
    ``release``."""
    if opt.isolate:
        return call_in_child(fn, log.relay_to, log.replay)
    try:
        return fn()
    finally:
        release()


def release():
    """Between stages: collect the stage's garbage and hand the freed heap back to the OS
    (``trim``), so that the next stage (aggregate after analyze of
    1,024 ranks) does not start on top of the last one's peak."""
    gc.collect()
    trim()


@dataclass
class StageRun:
    """What the stages of one epilogue run share (``imports_ready``: ``share_imports`` ran;
    ``report_process``: a ``Standby`` forked before numba was set up in this process, in which the
    report runs, or None: in a child of its own as the other stages)."""
    opt: EpilogueOptions
    jobs: int
    topo: str | None
    out: Path
    state: dict
    log: StageLog
    summary: dict
    imports_ready: bool = False
    report_process: Standby | None = None


def share_imports(ctx: StageRun):
    """With the stages in processes of their own (``opt.isolate``), set numba up and import pyarrow
    and the stages' modules (``SHARED_MODULES``) in this process once, before the first stage that
    runs (``runtime.compile.set_up``): every stage's process (analyze, merge, aggregate, the report)
    calls kernels and reads or writes Parquet, and forked from here it inherits them copy-on-write
    instead of loading them again (measured: numba ~0.5-0.9 CPU-s and ~145 MB, pyarrow ~0.1 CPU-s
    and ~40 MB, the stages' modules ~0.15 CPU-s and ~11 MB).  This process then holds them too; a
    stage's largest process is not larger by numba and pyarrow (they were resident in it before),
    by ~10 MB of the other stages' modules; a run whose stages are all reused loads none of them.
    matplotlib (the report's, ~30 MB) is left to the report's process."""
    if ctx.imports_ready or not ctx.opt.isolate:
        return
    ctx.imports_ready = True
    from ..runtime.compile import set_up
    set_up()
    import importlib
    for m in SHARED_MODULES:
        importlib.import_module(m, __package__)
    freeze_for_fork()                   # (the stages' garbage collections skip what they inherit)


def iteration_stages(ctx: StageRun, it, paths) -> str | None:
    """Analyse and merge one iteration's rank traces (``paths``); returns its analysis folder when
    the analysis succeeded (or was reused)."""
    tag = EpilogueRun.iteration(it)
    adir = analyze_stage(ctx, it, paths)
    merged = ctx.out / tag / EpilogueRun.merged(full=not ctx.opt.gpu_only)
    fp_merge = fingerprint(paths, full=not ctx.opt.gpu_only, stage="merge",     # (the key of earlier runs' state;
                           record="validation",   # an earlier record, without the validation, is redone once)
                           **({"step_pattern": ctx.opt.step_pattern} if ctx.opt.step_pattern else {}))
    _, st = run_stage(ctx, f"{tag}/merge", fp_merge, [merged], lambda: merge_stage(ctx, tag, paths, merged), "merge",
                      tag)
    ctx.summary["stages"][f"{tag}/merge"] = st
    return adir


def analyze_stage(ctx: StageRun, it, paths) -> str | None:
    """The analyze stage of one iteration (reused when its traces and options are unchanged); returns
    its analysis folder, None when the analysis failed."""
    opt, log, topo, jobs = ctx.opt, ctx.log, ctx.topo, ctx.jobs
    tag = EpilogueRun.iteration(it)
    ctx.summary["iterations"].append(it)
    ctx.summary["ranks"] = max(ctx.summary["ranks"], len(paths))
    adir = ctx.out / tag / EpilogueRun.ANALYSIS

    def do_analyze():
        from ..analyze import AnalyzeOptions, analyze
        s = analyze(paths, adir, AnalyzeOptions(jobs=jobs, chunked=opt.chunked, topology=topo, progress=False,
                                                op_perf=True, step_pattern=opt.step_pattern))
        for f in s["failed"]:
            log.fail("analyze", f["source"], f["error"])
        return {"ranks": [r["rank"] for r in s["ranks"]], "failed": len(s["failed"])}
    fp = fingerprint(paths + ([topo] if topo else []), chunked=opt.chunked, stage="analyze",
                     layout="iteration=N/rank=R", op_perf=1,   # redo folders of older layouts / without op_perf
                     **({"step_pattern": opt.step_pattern} if opt.step_pattern else {}))
    res, st = run_stage(ctx, f"{tag}/analyze", fp, [adir / Analysis.marker], do_analyze, "analyze", tag)
    ctx.summary["stages"][f"{tag}/analyze"] = st
    if res is not None:              # an Nsight Systems export holds several ranks
        ctx.summary["ranks"] = max(ctx.summary["ranks"], len(res.get("ranks", ())))
    return str(adir) if res is not None else None


def merge_stage(ctx: StageRun, tag, paths, merged) -> dict:
    """The merge stage of one iteration: its rank traces into ``merged``; a rank merge cannot
    read is logged with its file and the others are merged.  Returns the stage's result."""
    from ..merge import MergeOptions, merge_files
    from ..merge.line import CPU_ONLY_WARNING
    from ..trace.discover import identify
    opt, log = ctx.opt, ctx.log
    todo = []
    for p in paths:                  # their heads, read again here (~1 ms a file) rather than kept
        try:
            tf = identify(p)
        except Exception as e:   # noqa: BLE001 - changed since discovery: this rank is left out
            log.fail("merge", p, e)
            continue
        if tf is not None:
            todo.append(tf)
    while todo:
        try:
            r = merge_files(todo, merged, MergeOptions(gpu_only=opt.gpu_only, jobs=ctx.jobs, progress=False,
                                                       step_pattern=opt.step_pattern))
            if r["cpu_only"] and opt.gpu_only:
                log.note(f"{tag}: no rank has a GPU process (a CPU-only run): {merged.name} holds the CPU "
                         f"processes")
            for w in r["warnings"]:
                if w != CPU_ONLY_WARNING:            # said once, as the note above
                    log.final(f"warning: {w}")
            rec = merge_record(r.get("validation"))
            if rec and rec["problems"]:
                log.info(f"{tag}: merged trace: {rec['text']}")
            st = merged.stat()
            return {"output": str(merged), "ranks": r["ranks"], "events": r["events_out"],
                    "cpu_only": r["cpu_only"], "validation": rec,
                    "members": r.get("members"), "stat": [st.st_size, st.st_mtime_ns]}
        except Exception as e:   # noqa: BLE001 - drop the file it names, merge the rest
            bad = [tf for tf in todo if getattr(e, "path", None) == tf.path]
            if not bad:
                raise
            log.fail("merge", bad[0].path, e)
            todo.remove(bad[0])
    raise RuntimeError("no readable rank trace left to merge")


def mark_stage(ctx: StageRun, agg):
    """The critical path of ``agg`` marked in every iteration's merged trace
    (``streamtrace.aggregate.critical_marks.mark_critical_path``; marking again gives the same file)."""
    merged = sorted(p for full in (False, True) for p in ctx.out.glob(f"*/{EpilogueRun.merged(full)}")
                    if (table_path(agg, CRITICAL_PATH)).is_file())

    def do_mark():
        from ..aggregate.critical_marks import mark_critical_path
        pre = EpilogueRun.ITERATION
        it = lambda m: int(m.parent.name[len(pre):]) if m.parent.name.startswith(pre) else None  # noqa: E731
        return {"marked": sum(mark_critical_path(m, agg, iteration=it(m), members=_as_merged(ctx, m))["marked"]
                              for m in merged)}
    if merged:
        fp = lambda: fingerprint([table_path(agg, CRITICAL_PATH)] + merged, stage=MARKS)  # noqa: E731
        _, st = run_stage(ctx, MARKS, fp(), merged, do_mark, MARKS, agg)
        if st == "done":        # the marked files' own stamps: an unchanged rerun finds them and reuses the stage
            ctx.state[MARKS]["fingerprint"] = fp()
        ctx.summary["stages"][MARKS] = st


def _as_merged(ctx: StageRun, merged: Path) -> list | None:
    """The gzip members merge recorded for ``merged`` (its stage's ``members``) while the file is
    as merge left it (size and modification time): none marked yet; else None."""
    for key, rec in ctx.state.items():
        res = rec.get("result") if key.endswith("/merge") and isinstance(rec, dict) else None
        if isinstance(res, dict) and res.get("output") == str(merged) and res.get("members"):
            try:
                st = merged.stat()
            except OSError:
                return None
            return res["members"] if res.get("stat") == [st.st_size, st.st_mtime_ns] else None
    return None


def add_warnings(meta_path: Path, lines):
    """Add ``lines`` to the ``warnings`` of an ``aggregate.json`` (the report shows them), rewritten
    atomically."""
    meta = json.loads(meta_path.read_text())
    meta["warnings"] = list(meta.get("warnings") or []) + list(lines)
    with atomic_output(meta_path, compress=False) as f:
        write_json(f, meta, str)


def aggregate_stage(ctx: StageRun, analysed, then=None) -> tuple:
    """Aggregate every analysed iteration into ``ctx.out/aggregate`` (reused when unchanged); returns
    ``(the aggregate folder or None when it failed, the stage's fingerprint, what ``then(agg)`` returned:
    run in the stage's process after aggregating, None when the stage did not run)``."""
    opt, topo = ctx.opt, ctx.topo
    agg = ctx.out / EpilogueRun.AGGREGATE

    skipped = ctx.summary.get("skipped") or []

    def do_aggregate():
        from ..aggregate.run import AggregateOptions, aggregate
        aggregate(analysed, agg, AggregateOptions(jobs=ctx.jobs, topology=topo,
                                                  torchtitan_config=opt.torchtitan_config))
        if skipped:
            add_warnings(agg / Aggregate.marker,
                         [f"not this job's, skipped by the {ctx.log.name}: {s}" for s in skipped])
        return {"outdir": str(agg)} | ({"then": then(agg)} if then is not None else {})
    fp = fingerprint([Path(a) / Analysis.marker for a in analysed] + ([topo] if topo else [])
                      + ([opt.torchtitan_config] if opt.torchtitan_config else []), stage="aggregate", version=2,
                      skipped=skipped)
    res, st = run_stage(ctx, "aggregate", fp, [agg], do_aggregate, "aggregate", ", ".join(analysed))
    ctx.summary["stages"]["aggregate"] = st
    after = res.pop("then", None) if st == "done" else None        # (not kept in the stage's record)
    return (agg if res is not None else None), fp, after


def marks_in_stage(ctx: StageRun, agg) -> dict:
    """``mark_stage`` run in the calling process (aggregate's stage process, whose kernels and pyarrow
    are loaded: a process of its own spends ~1 s setting them up again); returns its records for the
    epilogue's process (``marks_taken``)."""
    inner = replace(ctx, opt=replace(ctx.opt, isolate=False))
    try:
        mark_stage(inner, agg)
    except Exception:   # noqa: BLE001 - aggregate's stage stands; the epilogue's process marks them then
        return {}
    return {"state": inner.state.get(MARKS), "status": inner.summary["stages"].get(MARKS)}


def marks_taken(ctx: StageRun, got) -> bool:
    """Whether aggregate's stage process marked the merged traces (``got``: what ``marks_in_stage``
    returned there, or None): its records copied into this process's state and summary."""
    if not got or not got.get("status"):
        return False
    if got.get("state") is not None:
        ctx.state[MARKS] = got["state"]
    ctx.summary["stages"][MARKS] = got["status"]
    return True


def job_stages(ctx: StageRun, analysed, run_dir) -> str | None:
    """Aggregate every analysed iteration, then write the report and charts; returns the
    report's path (None when it was not written)."""
    ropt = ctx.opt.report
    in_stage = (lambda a: marks_in_stage(ctx, a)) if ctx.opt.isolate else None
    agg, fp, marks = aggregate_stage(ctx, analysed, then=in_stage)
    if agg is None:
        return None
    if not marks_taken(ctx, marks):                # (aggregate reused, or not in a process of its own)
        mark_stage(ctx, agg)

    do_report = partial(report_stage, agg, ctx.out, replace(ropt, progress=False, jobs=ctx.jobs))
    eff = ropt.efficiency
    fp_report = fingerprint([agg / Aggregate.marker], name=ropt.name, tokens=ropt.tokens_per_step,
                             batch=ropt.global_batch, seq=ropt.seq_len, charts=ropt.charts,
                             chart_ranks=ropt.chart_ranks, formats=list(ropt.chart_formats), base=fp,
                             efficiency=None if eff is None else [eff.peak_tflops, eff.flops_per_token, eff.nic_gbps,
                                                                  eff.gpus_per_node])
    outputs = [ctx.out / Report.marker] + ([ctx.out / CHARTS] if ropt.charts else [])
    res, st = run_stage(ctx, "report", fp_report, outputs, do_report, "report + charts", agg,
                        ctx.report_process if ctx.opt.isolate else None)
    ctx.summary["stages"]["report"] = st
    return res["report"] if res is not None and Path(res["report"]).exists() else None


def report_stage(agg, out, ropt) -> dict:
    """The report stage's work: the report of the aggregate folder ``agg`` into ``out`` with the
    options ``ropt``; returns ``{"report": its Markdown file's path, "files": how many files}``.  A
    module-level function, so that it pickles to the ``Standby`` it runs in (``StageRun.report_process``)."""
    from ..report.run import report
    rep = report([agg], out, ropt)
    return {"report": rep["files"][0], "files": len(rep["files"])}


def report_imports():
    """What the report imports (pyarrow, its modules, matplotlib on the Agg backend), imported in its
    standby while the other stages run (``Standby``'s ``setup``): ~0.5 CPU-s there, not in the report's
    wall time; numba stays out (the report calls no kernel).  Never raises: what fails to import here
    fails in the report's own call, which says so."""
    try:
        from ..report.run import report  # noqa: F401
        from ..report.charts import pyplot
        pyplot()
    except Exception:   # noqa: BLE001 - see the docstring
        pass
