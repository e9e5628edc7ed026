"""``streamtrace epilogue RUN_DIR``: everything after a training job, in one call that
never takes the job down.

Finds every iteration folder and the topology under ``RUN_DIR`` (any layout
:mod:`streamtrace.trace.discover` knows; never a merged trace or anything in the output folder),
then into ``RUN_DIR/streamtrace/`` (or ``EpilogueOptions.outdir``, e.g. for a read-only run folder):

* ``iteration_<N>/analysis/``: :func:`streamtrace.analyze.analyze` (``--chunked`` by default;
  Parquet in ``kernels/iteration=<N>/rank=<R>/`` and ``ops/iteration=<N>/rank=<R>/``);
* ``iteration_<N>/merged_gpu.json.gz`` (GPU processes only, so Perfetto's UI can load it) or
  ``merged.json.gz`` with ``gpu_only=False``: :func:`streamtrace.merge.merge_files`;
* ``aggregate/``: :func:`streamtrace.aggregate.run.aggregate` over all iterations; its critical path
  then marked in each merged trace (:mod:`streamtrace.merge.critical_marks`);
* ``<run name>.md`` + ``report.json`` and ``charts/``: :func:`streamtrace.report.write_report`;
* ``epilogue.json``: what ran, what was reused, what failed (and why).

Made for the end of a job or a Slurm epilogue: :func:`run` never raises (each
failure is logged with the file it concerns and the rest carries on), it is
idempotent (a stage whose inputs and options have not changed since its last
successful run is reused), ``jobs`` and ``max_memory_gb`` cap parallelism.

Discovery and each stage run in a child process of their own
(:func:`~streamtrace.runtime.fork.call_in_child`) that imports the stage's modules itself: the
epilogue's own process holds only the log and the list of files (~20 MB at 1,024 ranks), so
a stage never starts on top of another's memory and the system gets every stage's memory back.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import InitVar, dataclass, field, fields, replace
from pathlib import Path

from ..analyze.outputs import Analysis
from ..aggregate.folder import CHARTS, Aggregate
from ..report.options import ReportOptions
from ..report.outputs import EpilogueRun, Report       # its output folder's kind (``diff`` reads such folders too)
from ..runtime.errors import StreamtraceError, UsageError
from ..runtime.files import atomic_output, clean_stale
from ..runtime.fork import call_in_child
from ..runtime.stagelog import StageLog
from ..runtime.tuning import trim
from .discovery import check_paths, find_iterations, find_topology, outdir_of

# The stages' modules (analyze, merge, job, report, trace) are imported inside the functions that
# run in the stages' child processes: importing them here would put ~130 MB (numba, pyarrow) in
# the epilogue's own process, under every stage.

# peak RSS of one worker analysing in --chunked mode, for the --max-memory cap (GB)
WORKER_GB = 0.6


def _fingerprint(paths, **options) -> str:
    h = hashlib.sha256()
    for p in sorted(map(str, paths)):
        try:
            st = os.stat(p)
            h.update(f"{p}|{st.st_size}|{int(st.st_mtime_ns)}\n".encode())
        except OSError:
            h.update(f"{p}|missing\n".encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _discover(opt, run_dir, log, outdir, topology=None) -> tuple[dict, list]:
    """:func:`find_iterations` as ``({iteration: [path]}`` (rank order), ``[skipped file: reason]``),
    run in a child process with ``opt.isolate`` (reading 1,024 trace heads loads the byte scanner
    and ~40 MB of metadata that the epilogue's process does not need)."""
    def paths():
        skipped = []
        groups = find_iterations(run_dir, log, outdir, topology, skipped)
        return {it: [tf.path for tf in files] for it, files in groups.items()}, skipped
    try:
        return _in_stage_process(opt, log, paths)
    except Exception as e:   # noqa: BLE001 - its process died: logged, nothing to do
        log.fail("discover", run_dir, e)
        return {}, []


def _stage(ctx, key, fingerprint, outputs, fn, name, what):
    """Run ``fn()`` unless ``ctx.state[key]`` says it already succeeded with the same
    fingerprint and ``outputs`` still exist; in a child process with ``ctx.opt.isolate``
    (:func:`~streamtrace.runtime.fork.call_in_child`: the stage's memory is the system's again
    when it ends).  Returns ``(result or None, status)``."""
    state, log = ctx.state, ctx.log
    prev = state.get(key)
    if prev and prev.get("fingerprint") == fingerprint and prev.get("ok") and all(Path(o).exists() for o in outputs):
        log.info(f"{name}: reused ({what})")
        for f in prev.get("failures", []):      # what that run could not process is still missing
            log.failure(f)
        return prev.get("result"), "reused"
    t0 = time.time()
    before = len(log.failures)
    try:
        result = _in_stage_process(ctx.opt, log, fn)
    except Exception as e:   # noqa: BLE001 - logged, the epilogue carries on
        log.fail(name, what, e)
        state[key] = {"fingerprint": fingerprint, "ok": False, "error": str(e).splitlines()[0] if str(e) else ""}
        if os.environ.get("STREAMTRACE_DEBUG") or log.verbose:
            print(getattr(e, "details", "") or traceback.format_exc(), file=sys.stderr, end="")
        return None, "failed"
    state[key] = {"fingerprint": fingerprint, "ok": True, "result": result, "seconds": round(time.time() - t0, 2),
                  "failures": list(log.failures[before:])}
    log.info(f"{name}: done in {time.time() - t0:.1f} s ({what})")
    return result, "done"


def _in_stage_process(opt, log, fn):
    """``fn()`` in a child process of its own with ``opt.isolate`` (its log entries relayed to
    ``log``; :func:`~streamtrace.runtime.fork.call_in_child`), else here, followed by
    :func:`_release`."""
    if opt.isolate:
        return call_in_child(fn, log.relay_to, log.replay)
    try:
        return fn()
    finally:
        _release()


def _release():
    """Between stages: collect the stage's garbage and hand the freed heap back to the OS
    (:func:`~streamtrace.runtime.tuning.trim`), so that the next stage (aggregate after analyze of
    1,024 ranks) does not start on top of the last one's peak."""
    gc.collect()
    trim()


@dataclass
class EpilogueOptions:
    """Options of :func:`run` (the ``streamtrace epilogue`` flags).

    Attributes:
        gpu_only: merge only the GPU processes (``merged_gpu.json.gz``; bool, default True, as
            :class:`~streamtrace.merge.MergeOptions`' ``gpu_only``); False: every event (``merged.json.gz``,
            the CLI's ``--full``).
        chunked: analyse with ``--chunked`` (spill files on disk), else in memory; bool, default True.
        jobs: worker processes (int); 0 = all cores (default).
        max_memory_gb: a cap in GB (float) that limits the workers (:data:`WORKER_GB` each); None: no cap.
        strict: the CLI exits 1 when anything failed (:func:`run` itself never raises); default False.
        outdir: the output folder (str or Path); None: ``RUN_DIR/streamtrace``.  Set it for a read-only
            run folder.
        topology: a topology file (str; :func:`streamtrace.topology.sources.load_topology`); None: found
            under ``RUN_DIR`` (:func:`find_topology`), else the traces' ``distributedInfo.pg_config``.
        torchtitan_config: the job's TorchTitan TOML (str): tokens per step, model and mesh (the
            topology when none is found or given); None.
        progress: log each stage's progress lines (``done in``, ``reused``, notes); None (default) or True:
            logged, False: only failures, warnings and the final line (the CLI's ``-q/--quiet``).  The
            spelling of every stage's options (there: progress bars).
        verbose: log tracebacks of failures too (bool, default False; the CLI's ``-v``; also
            ``$STREAMTRACE_DEBUG``).
        report: the report's options (:class:`~streamtrace.report.options.ReportOptions`: name, tokens per
            step or global batch and sequence length, charts, their formats and ranks); its ``jobs`` and
            ``progress`` are the epilogue's.  Default: ``ReportOptions()``.
        step_pattern: a regular expression naming the annotation or NVTX range that marks a training step
            (str; as :class:`~streamtrace.analyze.AnalyzeOptions`' and merge's ``step_pattern``); None:
            ``ProfilerStep#N``, or an Nsight export's recognised NVTX step ranges, else the whole capture.
        isolate: run each stage (analyze, merge, aggregate, report) in its own child process
            (bool, default True), so that its memory is returned when it ends and no stage starts on
            top of the last one's (1,024 ranks: the analysis summaries alone are ~70 MB of Python
            objects), and a stage killed by the system is one failure, not the end of the
            epilogue.  False: all in this process (e.g. under a debugger).
        quiet, full: deprecated (removed in the next release; :data:`RENAMED`): ``quiet=True`` is
            ``progress=False``, ``full=True`` is ``gpu_only=False``, each with a ``DeprecationWarning``.
    """
    gpu_only: bool = True
    chunked: bool = True
    jobs: int = 0
    max_memory_gb: float | None = None
    strict: bool = False
    outdir: str | None = None
    topology: str | None = None
    torchtitan_config: str | None = None
    progress: bool | None = None
    verbose: bool = False
    report: ReportOptions = field(default_factory=ReportOptions)
    step_pattern: str | None = None
    isolate: bool = True
    quiet: InitVar[bool | None] = None
    full: InitVar[bool | None] = None

    def __post_init__(self, quiet, full):
        for name, value in _renamed({"quiet": quiet, "full": full}, stacklevel=3).items():
            setattr(self, name, value)

    def check(self):
        """:class:`~streamtrace.runtime.errors.UsageError` for options that cannot work together (the CLI
        checks before :func:`run`, which never raises)."""
        if (self.report.global_batch is None) != (self.report.seq_len is None):
            raise UsageError("give both --global-batch and --seq-len (or --tokens-per-step)")
        if self.jobs < 0:
            raise UsageError(f"bad --jobs {self.jobs}: give a number of processes, or 0 for all cores")


RENAMED = {"quiet": ("progress", lambda quiet: False if quiet else None),
           "full": ("gpu_only", lambda full: not full)}
"""The last release's keywords, accepted for one more with a ``DeprecationWarning``: ``{old: (field,
value of the field for the old value)}`` (None: the field as it is)."""


def _renamed(options: dict, stacklevel) -> dict:
    """``options`` with the keywords of :data:`RENAMED` given (not None) in today's spelling, each warned
    about at the caller ``stacklevel`` frames up."""
    for old in [k for k, v in options.items() if k in RENAMED and v is not None]:
        new, value = RENAMED[old]
        warnings.warn(f"the epilogue's {old}=... is deprecated (removed in the next release): give "
                      f"{new}={value(True)!r} for {old}=True", DeprecationWarning, stacklevel=stacklevel + 1)
        v = value(options.pop(old))
        if v is not None:
            options[new] = v
    return {k: v for k, v in options.items() if k not in RENAMED}


def with_options(opt: EpilogueOptions, **options) -> EpilogueOptions:
    """``opt`` with the fields given as keywords changed: the epilogue's own, or its report's
    (``with_options(opt, gpu_only=False, charts=False)`` sets ``opt.report.charts``).  Raises ``TypeError``
    for a name that is neither.  The keywords of :data:`RENAMED` (deprecated) are taken in today's spelling,
    with a ``DeprecationWarning`` naming the caller of :func:`run` / ``streamtrace.open``."""
    options = _renamed(options, stacklevel=3)
    own = {f.name for f in fields(EpilogueOptions)}
    rep = {k: options.pop(k) for k in list(options) if k not in own and k in {f.name for f in fields(ReportOptions)}}
    opt = replace(opt, **options)
    return replace(opt, report=replace(opt.report, **rep)) if rep else opt


def run(run_dir, opt: EpilogueOptions | None = None, log_file=None, **options) -> dict:
    """Run the whole post-job pipeline on ``run_dir`` (see the module docstring).

    Parameters
    ----------
    run_dir : str or Path
        The training job's folder (its iteration folders and topology, any layout discovery knows).
    opt : EpilogueOptions, optional
        The options (default ``EpilogueOptions()``).
    log_file : file, optional
        Where log lines go (default stderr).
    **options
        Fields of ``opt``, or of its report's, changed: ``run(d, gpu_only=False, charts=False)``
        (:func:`with_options`).

    Returns
    -------
    dict
        The summary (also in ``OUTDIR/epilogue.json``): ``{"run_dir", "outdir", "iterations", "ranks",
        "report", "failures": [...], "notes", "stages": {...}, "seconds"}``; the output folder itself:
        ``streamtrace.load(summary["outdir"])``.

    Raises
    ------
    Nothing
        Every failure is logged and kept in ``failures`` (``KeyboardInterrupt`` aside); with ``strict``
        the CLI exits 1 when anything failed.  ``TypeError`` for a keyword that is no option.
    """
    opt = with_options(opt or EpilogueOptions(), **options)
    log = StageLog(log_file, opt.progress, opt.verbose)
    t0 = time.time()
    run_dir = Path(run_dir)
    out = outdir_of(run_dir, opt)
    summary = {"run_dir": str(run_dir), "outdir": str(out), "iterations": [], "ranks": 0, "report": None,
               "failures": log.failures, "notes": log.notes, "stages": {}}
    new_folders = _new_folders(out)
    try:
        try:
            check_paths(run_dir, opt)
        except StreamtraceError as e:
            log.fail("epilogue", getattr(e, "path", run_dir), getattr(e, "message", e))
            return summary
        out.mkdir(parents=True, exist_ok=True)
        clean_stale(out)                         # what a killed earlier run left in it
        state_path = out / EpilogueRun.marker
        state, jobs = read_state(state_path), worker_count(opt)
        topo = opt.topology or find_topology(run_dir)
        log.info(f"run {run_dir}: topology {topo or 'not found (the traces pg_config, if any)'}; {jobs} jobs")
        groups, skipped = _discover(opt, run_dir, log, out, topo)
        if not groups:
            log.fail("discover", run_dir, "no rank traces found")
        summary["skipped"] = skipped
        ctx = StageRun(opt, jobs, topo, out, state, log, summary)
        analysed = [a for it in sorted(groups, key=lambda k: (k is None, k or 0))
                    if (a := _iteration(ctx, it, groups[it]))]
        summary["report"] = _job_stages(ctx, analysed, run_dir) if analysed else None
        summary["seconds"] = round(time.time() - t0, 2)
        try:
            with atomic_output(state_path, compress=False) as f:
                f.write(json.dumps({"summary": summary, "state": state}, indent=1, default=str).encode())
            written = True
        except Exception as e:   # noqa: BLE001 - a full disk: said in the final line
            log.fail("epilogue", state_path, e)
            written = False
        status = "OK" if not log.failures else _problems(log.failures, state_path, written)
        log.final(f"{len(summary['iterations'])} iteration(s), {summary['ranks']} ranks, {status}; "
                 f"report: {summary['report'] or 'none'}; outputs in {out} ({summary['seconds']:.1f} s)")
    except Exception as e:   # noqa: BLE001 - the promise: never raise into the caller
        log.fail("epilogue", run_dir, e)
    except KeyboardInterrupt:      # Ctrl-C, SIGTERM: the stages removed their staging folders
        _remove_empty(out, new_folders)
        raise
    return summary


def read_state(path) -> dict:
    """The stages' state kept in the JSON file ``path`` (``{"state": ...}``); ``{}`` when unreadable."""
    try:
        return json.loads(Path(path).read_text()).get("state", {})
    except (OSError, ValueError):
        return {}


def worker_count(opt: EpilogueOptions) -> int:
    """The worker processes: ``opt.jobs`` (0: every core), within ``opt.max_memory_gb``."""
    jobs = opt.jobs or os.cpu_count() or 1
    return max(1, min(jobs, int(opt.max_memory_gb / WORKER_GB))) if opt.max_memory_gb else jobs


def _problems(failures, state_path, written) -> str:
    """The final line's account of ``failures``: how many, the first one's stage, file and error
    (a full disk names the stage and the path it could not write), and where the rest are:
    ``epilogue.json``, or that it could not be written either."""
    f = failures[0]
    first = f"{f['stage']} ({f['file']}): {f['error']}"
    where = f"see {state_path}" if written else f"{state_path} could not be written"
    return f"{len(failures)} problem(s), the first: {first}; {where}"


def _new_folders(out: Path):
    """What :func:`_remove_empty` may remove after an interruption: ``out`` when it does not
    exist yet, and (by name) the folders it does not hold yet."""
    try:
        return None if not out.is_dir() else {p.name for p in out.iterdir()}
    except OSError:
        return set()


def _remove_empty(out: Path, before):
    """After an interruption: remove the empty folders this run made in ``out`` (its iteration
    folders, whose stage was cut before it wrote anything), and ``out`` itself when this run made
    it and it is empty.  ``before``: :func:`_new_folders`."""
    try:
        for p in out.iterdir():
            if (before is None or p.name not in before) and p.is_dir() and not p.is_symlink():
                try:
                    p.rmdir()
                except OSError:
                    pass
        if before is None:
            out.rmdir()
    except OSError:
        pass


@dataclass
class StageRun:
    """What the stages of one epilogue run share."""
    opt: EpilogueOptions
    jobs: int
    topo: str | None
    out: Path
    state: dict
    log: StageLog
    summary: dict


def _iteration(ctx: StageRun, it, paths) -> str | None:
    """Analyse and merge one iteration's rank traces (``paths``); returns its analysis folder when
    the analysis succeeded (or was reused)."""
    tag = EpilogueRun.iteration(it)
    adir = analyze_stage(ctx, it, paths)
    merged = ctx.out / tag / EpilogueRun.merged(full=not ctx.opt.gpu_only)
    fp_merge = _fingerprint(paths, full=not ctx.opt.gpu_only, stage="merge",     # (the key of earlier runs' state)
                            **({"step_pattern": ctx.opt.step_pattern} if ctx.opt.step_pattern else {}))
    _, st = _stage(ctx, f"{tag}/merge", fp_merge, [merged], lambda: _merge(ctx, tag, paths, merged), "merge", tag)
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
    fp = _fingerprint(paths + ([topo] if topo else []), chunked=opt.chunked, stage="analyze",
                      layout="iteration=N/rank=R", op_perf=1,   # redo folders of older layouts / without op_perf
                      **({"step_pattern": opt.step_pattern} if opt.step_pattern else {}))
    res, st = _stage(ctx, f"{tag}/analyze", fp, [adir / Analysis.marker], do_analyze, "analyze", tag)
    ctx.summary["stages"][f"{tag}/analyze"] = st
    if res is not None:              # an Nsight Systems export holds several ranks
        ctx.summary["ranks"] = max(ctx.summary["ranks"], len(res.get("ranks", ())))
    return str(adir) if res is not None else None


def _merge(ctx: StageRun, tag, paths, merged) -> dict:
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
            return {"output": str(merged), "ranks": r["ranks"], "events": r["events_out"],
                    "cpu_only": r["cpu_only"]}
        except Exception as e:   # noqa: BLE001 - drop the file it names, merge the rest
            bad = [tf for tf in todo if getattr(e, "path", None) == tf.path]
            if not bad:
                raise
            log.fail("merge", bad[0].path, e)
            todo.remove(bad[0])
    raise RuntimeError("no readable rank trace left to merge")


def _mark_stage(ctx: StageRun, agg):
    """The critical path of ``agg`` marked in every iteration's merged trace
    (:func:`streamtrace.merge.critical_marks.mark_critical_path`; marking again gives the same file)."""
    merged = sorted(p for full in (False, True) for p in ctx.out.glob(f"*/{EpilogueRun.merged(full)}")
                    if (agg / "critical_path.parquet").is_file())

    def do_mark():
        from ..merge.critical_marks import mark_critical_path
        pre = EpilogueRun.ITERATION
        it = lambda m: int(m.parent.name[len(pre):]) if m.parent.name.startswith(pre) else None  # noqa: E731
        return {"marked": sum(mark_critical_path(m, agg, iteration=it(m))["marked"] for m in merged)}
    if merged:
        fp = _fingerprint([agg / "critical_path.parquet"] + merged, stage="critical path marks")
        _, st = _stage(ctx, "critical path marks", fp, merged, do_mark, "critical path marks", agg)
        ctx.summary["stages"]["critical path marks"] = st


def _add_warnings(meta_path: Path, lines):
    """Add ``lines`` to the ``warnings`` of an ``aggregate.json`` (the report shows them), rewritten
    atomically."""
    meta = json.loads(meta_path.read_text())
    meta["warnings"] = list(meta.get("warnings") or []) + list(lines)
    with atomic_output(meta_path, compress=False) as f:
        f.write(json.dumps(meta, indent=1, default=str).encode())


def aggregate_stage(ctx: StageRun, analysed) -> tuple:
    """Aggregate every analysed iteration into ``ctx.out/aggregate`` (reused when unchanged); returns
    ``(the aggregate folder or None when it failed, the stage's fingerprint)``."""
    opt, topo = ctx.opt, ctx.topo
    agg = ctx.out / EpilogueRun.AGGREGATE

    skipped = ctx.summary.get("skipped") or []

    def do_aggregate():
        from ..aggregate.run import AggregateOptions, aggregate
        aggregate(analysed, agg, AggregateOptions(jobs=ctx.jobs, topology=topo,
                                                  torchtitan_config=opt.torchtitan_config))
        if skipped:
            _add_warnings(agg / Aggregate.marker, [f"not this job's, skipped by the {ctx.log.name}: {s}" for s in skipped])
        return {"outdir": str(agg)}
    fp = _fingerprint([Path(a) / Analysis.marker for a in analysed] + ([topo] if topo else [])
                      + ([opt.torchtitan_config] if opt.torchtitan_config else []), stage="aggregate", version=2,
                      skipped=skipped)
    res, st = _stage(ctx, "aggregate", fp, [agg], do_aggregate, "aggregate", ", ".join(analysed))
    ctx.summary["stages"]["aggregate"] = st
    return (agg if res is not None else None), fp


def _job_stages(ctx: StageRun, analysed, run_dir) -> str | None:
    """Aggregate every analysed iteration, then write the report and charts; returns the
    report's path (None when it was not written)."""
    ropt = ctx.opt.report
    agg, fp = aggregate_stage(ctx, analysed)
    if agg is None:
        return None
    _mark_stage(ctx, agg)

    def do_report():
        from ..report.run import report
        rep = report([agg], ctx.out, replace(ropt, progress=False, jobs=ctx.jobs))
        return {"report": rep["files"][0], "files": len(rep["files"])}
    eff = ropt.efficiency
    fp_report = _fingerprint([agg / Aggregate.marker], name=ropt.name, tokens=ropt.tokens_per_step,
                             batch=ropt.global_batch, seq=ropt.seq_len, charts=ropt.charts,
                             chart_ranks=ropt.chart_ranks, formats=list(ropt.chart_formats), base=fp,
                             efficiency=None if eff is None else [eff.peak_tflops, eff.flops_per_token, eff.nic_gbps,
                                                                  eff.gpus_per_node])
    outputs = [ctx.out / Report.marker] + ([ctx.out / CHARTS] if ropt.charts else [])
    res, st = _stage(ctx, "report", fp_report, outputs, do_report, "report + charts", agg)
    ctx.summary["stages"]["report"] = st
    return res["report"] if res is not None and Path(res["report"]).exists() else None
