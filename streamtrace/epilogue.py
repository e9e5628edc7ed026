"""``streamtrace epilogue RUN_DIR``: everything after a training job, in one call that
never takes the job down.

Finds every iteration folder and the topology under ``RUN_DIR`` (any layout
:mod:`streamtrace.trace.discover` knows; never a merged trace or anything in the output folder),
then into ``RUN_DIR/streamtrace/`` (or ``EpilogueOptions.outdir``, e.g. for a read-only run folder):

* ``iteration_<N>/analysis/``: :func:`streamtrace.analyze.analyze` (``--chunked`` by default;
  Parquet in ``kernels/iteration=<N>/rank=<R>/`` and ``ops/iteration=<N>/rank=<R>/``);
* ``iteration_<N>/merged_gpu.json.gz`` (GPU processes only, so Perfetto's UI can load it) or
  ``merged.json.gz`` with ``full=True``: :func:`streamtrace.merge.merge_files`;
* ``aggregate/``: :func:`streamtrace.job.aggregate.aggregate` over all iterations;
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
from dataclasses import dataclass, replace
from pathlib import Path

from .runtime.errors import OutputError, StreamtraceError, UnknownRankError, UsageError
from .runtime.files import atomic_output, check_output_folder, clean_stale
from .runtime.fork import call_in_child
from .runtime.tuning import trim

# The stages' modules (analyze, merge, job, report, trace) are imported inside the functions that
# run in the stages' child processes: importing them here would put ~130 MB (numba, pyarrow) in
# the epilogue's own process, under every stage.

# peak RSS of one worker analysing in --chunked mode, for the --max-memory cap (GB)
WORKER_GB = 0.6


class _Log:
    """The epilogue's log: lines on ``out`` (stderr), failures and notes kept for ``epilogue.json``.
    In a stage's child process (:func:`~streamtrace.runtime.fork.call_in_child`) every entry is
    relayed to the parent's log (:meth:`relay_to`, :meth:`replay`) instead."""

    def __init__(self, out=None, quiet=False, verbose=False):
        self.out = out or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.failures: list = []
        self.notes: list = []
        self.send = None

    def relay_to(self, send):
        """In a stage's child process: pass every entry to ``send`` (to the parent's :meth:`replay`)."""
        self.send = send

    def replay(self, entry):
        """An entry a stage's child process relayed: ``(method name, argument)``."""
        method, arg = entry
        {"final": self.final, "note": self.note, "failure": self.failure}[method](arg)

    def info(self, msg):
        if not self.quiet:
            self.final(msg)

    def final(self, msg):
        if self.send is not None:
            self.send(("final", msg))
            return
        print(f"[streamtrace epilogue] {msg}", file=self.out, flush=True)

    def note(self, msg):
        """Something missing that is not a failure (e.g. no GPU in a CPU-only run): logged, and kept in
        ``epilogue.json`` → ``notes``."""
        if self.send is not None:
            self.send(("note", msg))
            return
        self.notes.append(msg)
        self.info(f"note: {msg}")

    def fail(self, stage, what, err):
        line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        self.failure({"stage": stage, "file": str(what), "error": line})

    def failure(self, entry: dict):
        """Keep and log one failure ``{"stage", "file", "error"}``."""
        if self.send is not None:
            self.send(("failure", entry))
            return
        self.failures.append(entry)
        self.final(f"FAILED {entry['stage']} ({entry['file']}): {entry['error']}")


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


def find_topology(run_dir):
    """streamtrace's topology JSON, else the newest TraceViz ``unique_parallel_groups_*.txt``,
    else a ``parallel_topology.json``, searched in ``run_dir`` and one level below."""
    run_dir = Path(run_dir)
    for pattern in ("streamtrace_topology.json", "unique_parallel_groups_*.txt", "parallel_topology.json"):
        hits = sorted(run_dir.glob(pattern)) + sorted(run_dir.glob(f"*/{pattern}"))
        hits = [h for h in hits if "streamtrace" not in h.parent.name or h.parent == run_dir]
        if hits:
            return str(max(hits, key=lambda p: p.stat().st_mtime))
    return None


def is_merged(head: dict) -> bool:
    """True for the top-level keys of a trace streamtrace merged (``streamtrace.kind`` "merged")."""
    st = head.get("streamtrace")
    return isinstance(st, dict) and st.get("kind") == "merged"


def find_iterations(run_dir, log, outdir=None, topology=None, odd_files=None):
    """``{iteration: [TraceFile]}`` for every readable rank trace under ``run_dir`` that belongs
    to the job (:func:`streamtrace.topology.members.split_job`: the world size of ``topology``, a
    topology file, else the one most files state); never a merged trace (streamtrace's own
    header), nor anything under ``outdir`` or a ``streamtrace`` folder (earlier outputs);
    unreadable files and folders, rank files without a ``traceEvents`` array and another job's
    files are logged as failures (the last also appended to ``odd_files`` as "path: reason")."""
    from .trace.discover import expand_inputs, identify
    groups: dict = {}

    def skipped(path, msg):
        log.fail("discover", path, msg)
    try:
        paths = expand_inputs([run_dir], skipped)
    except Exception as e:   # noqa: BLE001
        log.fail("discover", run_dir, e)
        return groups
    skip = Path(outdir).resolve() if outdir is not None else None
    for p in paths:
        if skip is not None and Path(p).resolve().is_relative_to(skip):
            continue
        try:
            tf = identify(p, warn=skipped)
        except UnknownRankError as e:
            if not _merged_file(p):
                log.fail("discover", p, e)
            continue
        except Exception as e:   # noqa: BLE001
            log.fail("discover", p, e)
            continue
        if tf is not None and not is_merged(tf.head):
            groups.setdefault(tf.iteration, []).append(tf)
    groups = _the_job(groups, topology, log, odd_files)
    for it, files in groups.items():
        seen = {}
        keep = []
        for tf in sorted(files, key=lambda t: (t.rank, t.path)):
            if tf.rank in seen:
                log.fail("discover", tf.path, f"rank {tf.rank} already given by {seen[tf.rank]}; skipped")
                continue
            seen[tf.rank] = tf.path
            keep.append(tf)
        groups[it] = keep
    return groups


def _the_job(groups, topology, log, skipped) -> dict:
    """``groups`` without the files of another job (:func:`~streamtrace.topology.members.split_job`),
    each logged as a failure of discovery and appended to ``skipped``."""
    from .topology.members import base_times, split_job
    from .topology.sources import load_topology
    world = None
    if topology:
        try:
            world = load_topology(topology).world_size or None
        except Exception:   # noqa: BLE001 - analyze reports the topology file's problem
            world = None
    files = [tf for files in groups.values() for tf in files]
    keep, odd = split_job(files, world, base_times(files))
    for tf, why in odd:
        log.fail("discover", tf.path, why)
        if skipped is not None:
            skipped.append(f"{tf.path}: {why}")
    kept = {id(tf) for tf in keep}
    return {it: k for it, files in groups.items() if (k := [tf for tf in files if id(tf) in kept])}


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


def _merged_file(path) -> bool:
    from .trace.reader import TraceReader
    try:
        return is_merged(TraceReader(path, salvage=True).read_metadata())
    except Exception:   # noqa: BLE001 - unreadable: not a merged trace of ours
        return False


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
        full: merge every event (``merged.json.gz``), not only the GPU processes (``merged_gpu.json.gz``);
            bool, default False.
        chunked: analyse with ``--chunked`` (spill files on disk), else in memory; bool, default True.
        jobs: worker processes (int); 0 = all cores (default).
        max_memory_gb: a cap in GB (float) that limits the workers (:data:`WORKER_GB` each); None: no cap.
        strict: the CLI exits 1 when anything failed (:func:`run` itself never raises); default False.
        name: the run's name in the report and its Markdown file name (str); None: the job's, the folder
            that holds its traces (``/runs/job42`` for ``/runs/job42/tb/iteration_11/...``).
        outdir: the output folder (str or Path); None: ``RUN_DIR/streamtrace``.  Set it for a read-only
            run folder.
        topology: a topology file (str; :func:`streamtrace.topology.sources.load_topology`); None: found
            under ``RUN_DIR`` (:func:`find_topology`), else the traces' ``distributedInfo.pg_config``.
        tokens_per_step: tokens per training step (int), for tokens/s in the report; or give
            ``global_batch`` (sequences) and ``seq_len`` (tokens per sequence).  None: no throughput.
        global_batch: global batch size in sequences (int), with ``seq_len``; None.
        seq_len: sequence length in tokens (int), with ``global_batch``; None.
        charts: render the charts (bool, default True).
        chart_formats: their file formats, ``png`` and/or ``svg`` (tuple, default ``("png",)``).
        chart_ranks: ranks that get per-rank charts (list of int); None: all up to 8, else a selection.
        quiet: log only failures and the final line (bool, default False).
        verbose: log tracebacks of failures too (bool, default False; also ``$STREAMTRACE_DEBUG``).
        isolate: run each stage (analyze, merge, aggregate, report) in its own child process
            (bool, default True), so that its memory is returned when it ends and no stage starts on
            top of the last one's (1,024 ranks: the analysis summaries alone are ~70 MB of Python
            objects), and a stage killed by the system is one failure, not the end of the
            epilogue.  False: all in this process (e.g. under a debugger).
    """
    full: bool = False
    chunked: bool = True
    jobs: int = 0
    max_memory_gb: float | None = None
    strict: bool = False
    name: str | None = None
    outdir: str | None = None
    topology: str | None = None
    tokens_per_step: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    charts: bool = True
    chart_formats: tuple = ("png",)
    chart_ranks: list | None = None
    quiet: bool = False
    verbose: bool = False
    isolate: bool = True

    def check(self):
        """:class:`~streamtrace.runtime.errors.UsageError` for options that cannot work together (the CLI
        checks before :func:`run`, which never raises)."""
        if (self.global_batch is None) != (self.seq_len is None):
            raise UsageError("give both --global-batch and --seq-len (or --tokens-per-step)")
        if self.jobs < 0:
            raise UsageError(f"bad --jobs {self.jobs}: give a number of processes, or 0 for all cores")


def outdir_of(run_dir, opt: EpilogueOptions) -> Path:
    """The epilogue's output folder: ``opt.outdir``, else ``RUN_DIR/streamtrace``."""
    return Path(opt.outdir) if opt.outdir else Path(run_dir) / "streamtrace"


def check_paths(run_dir, opt: EpilogueOptions) -> None:
    """Before any work: ``run_dir`` is a readable folder, and the output folder
    (:func:`outdir_of`) holds nothing but an earlier epilogue's outputs of the same run folder
    (its ``epilogue.json``, ``iteration_*/``, ``aggregate/``, report and charts), does not hold
    ``run_dir``, and is not the current folder.  Raises :class:`StreamtraceError` (the run
    folder) or :class:`OutputError` (the output folder), one line naming the path."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise StreamtraceError(f"{run_dir}: no such run folder")
    if not run_dir.is_dir():
        raise StreamtraceError(f"{run_dir}: not a folder; give the training run's output folder")
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise StreamtraceError(f"{run_dir}: cannot read the run folder (permission denied)")
    out = outdir_of(run_dir, opt)
    prev = _earlier_run(out)
    if prev.get("run_dir") and Path(prev["run_dir"]).resolve() != run_dir.resolve():
        raise OutputError(out, f"holds the epilogue outputs of another run folder ({prev['run_dir']}), which this "
                               f"run would replace; give another folder")
    mine = {"epilogue.json", "aggregate", "report.json", "charts", "traces"}
    if prev.get("report"):
        mine.add(Path(prev["report"]).name)

    def owned(name):
        return name in mine or name.startswith("iteration_")
    check_output_folder(out, owned, inputs=[run_dir])


def _earlier_run(out: Path) -> dict:
    """The ``summary`` of the ``epilogue.json`` in ``out`` ({} when none or unreadable)."""
    try:
        s = json.loads((out / "epilogue.json").read_text()).get("summary")
    except (OSError, ValueError, AttributeError):
        return {}
    return s if isinstance(s, dict) else {}


def run(run_dir, opt: EpilogueOptions | None = None, log_file=None, **options) -> dict:
    """Run the whole post-job pipeline on ``run_dir`` (see the module docstring), with ``opt`` (or
    its fields given as keywords, e.g. ``run(d, full=True)``).

    Returns the summary dict (also in ``RUN_DIR/streamtrace/epilogue.json``):
    ``{"run_dir", "outdir", "iterations", "ranks", "report", "failures": [...], "stages": {...},
    "seconds"}``.  Never raises (``KeyboardInterrupt`` aside); with ``strict`` the CLI exits 1
    when anything failed."""
    opt = replace(opt or EpilogueOptions(), **options)
    log = _Log(log_file, opt.quiet, opt.verbose)
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
        state_path = out / "epilogue.json"
        try:
            state = json.loads(state_path.read_text()).get("state", {})
        except (OSError, ValueError):
            state = {}
        jobs = opt.jobs or os.cpu_count() or 1
        if opt.max_memory_gb:
            jobs = max(1, min(jobs, int(opt.max_memory_gb / WORKER_GB)))
        topo = opt.topology or find_topology(run_dir)
        log.info(f"run {run_dir}: topology {topo or 'not found (the traces pg_config, if any)'}; {jobs} jobs")
        groups, skipped = _discover(opt, run_dir, log, out, topo)
        if not groups:
            log.fail("discover", run_dir, "no rank traces found")
        summary["skipped"] = skipped
        ctx = _Run(opt, jobs, topo, out, state, log, summary)
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
class _Run:
    """What the stages of one epilogue run share."""
    opt: EpilogueOptions
    jobs: int
    topo: str | None
    out: Path
    state: dict
    log: _Log
    summary: dict


def _iteration(ctx: _Run, it, paths) -> str | None:
    """Analyse and merge one iteration's rank traces (``paths``); returns its analysis folder when
    the analysis succeeded (or was reused)."""
    opt, log, topo, jobs = ctx.opt, ctx.log, ctx.topo, ctx.jobs
    tag = f"iteration_{it}" if it is not None else "traces"
    ctx.summary["iterations"].append(it)
    ctx.summary["ranks"] = max(ctx.summary["ranks"], len(paths))
    adir = ctx.out / tag / "analysis"

    def do_analyze():
        from .analyze import AnalyzeOptions, analyze
        s = analyze(paths, adir, AnalyzeOptions(jobs=jobs, chunked=opt.chunked, topology=topo, progress=False))
        for f in s["failed"]:
            log.fail("analyze", f["source"], f["error"])
        return {"ranks": [r["rank"] for r in s["ranks"]], "failed": len(s["failed"])}
    fp = _fingerprint(paths + ([topo] if topo else []), chunked=opt.chunked, stage="analyze",
                      layout="iteration=N/rank=R")     # redo folders of the older rank=R/ layout
    res, st = _stage(ctx, f"{tag}/analyze", fp, [adir / "summary.json"], do_analyze, "analyze", tag)
    ctx.summary["stages"][f"{tag}/analyze"] = st
    merged = ctx.out / tag / ("merged.json.gz" if opt.full else "merged_gpu.json.gz")
    fp_merge = _fingerprint(paths, full=opt.full, stage="merge")
    _, st = _stage(ctx, f"{tag}/merge", fp_merge, [merged], lambda: _merge(ctx, tag, paths, merged), "merge", tag)
    ctx.summary["stages"][f"{tag}/merge"] = st
    return str(adir) if res is not None else None


def _merge(ctx: _Run, tag, paths, merged) -> dict:
    """The merge stage of one iteration: its rank traces into ``merged``; a rank merge cannot
    read is logged with its file and the others are merged.  Returns the stage's result."""
    from .merge import MergeOptions, merge_files
    from .trace.discover import identify
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
            r = merge_files(todo, merged, MergeOptions(gpu_only=not opt.full, jobs=ctx.jobs, progress=False))
            if r["cpu_only"] and not opt.full:
                log.note(f"{tag}: no rank has a GPU process (a CPU-only run): {merged.name} holds the CPU "
                         f"processes")
            for w in r["warnings"]:
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


def _add_warnings(meta_path: Path, lines):
    """Add ``lines`` to the ``warnings`` of an ``aggregate.json`` (the report shows them), rewritten
    atomically."""
    meta = json.loads(meta_path.read_text())
    meta["warnings"] = list(meta.get("warnings") or []) + list(lines)
    with atomic_output(meta_path, compress=False) as f:
        f.write(json.dumps(meta, indent=1, default=str).encode())


def _job_stages(ctx: _Run, analysed, run_dir) -> str | None:
    """Aggregate every analysed iteration, then write the report and charts; returns the
    report's path (None when it was not written)."""
    opt, log, topo = ctx.opt, ctx.log, ctx.topo
    agg = ctx.out / "aggregate"

    skipped = ctx.summary.get("skipped") or []

    def do_aggregate():
        from .job.aggregate import AggregateOptions, aggregate
        aggregate(analysed, agg, AggregateOptions(jobs=ctx.jobs, topology=topo))
        if skipped:
            _add_warnings(agg / "aggregate.json", [f"not this job's, skipped by the epilogue: {s}" for s in skipped])
        return {"outdir": str(agg)}
    fp = _fingerprint([Path(a) / "summary.json" for a in analysed] + ([topo] if topo else []), stage="aggregate",
                      version=2, skipped=skipped)
    res, st = _stage(ctx, "aggregate", fp, [agg], do_aggregate, "aggregate", ", ".join(analysed))
    ctx.summary["stages"]["aggregate"] = st
    if res is None:
        return None

    def do_report():
        from .report.run import ReportOptions, report
        rep = report([agg], ctx.out, ReportOptions(name=opt.name, tokens_per_step=opt.tokens_per_step,
                                                   global_batch=opt.global_batch, seq_len=opt.seq_len,
                                                   charts=opt.charts, chart_ranks=opt.chart_ranks, progress=False,
                                                   chart_formats=opt.chart_formats, jobs=ctx.jobs))
        return {"report": rep["files"][0], "files": len(rep["files"])}
    fp_report = _fingerprint([agg / "aggregate.json"], name=opt.name, tokens=opt.tokens_per_step,
                             batch=opt.global_batch, seq=opt.seq_len, charts=opt.charts, chart_ranks=opt.chart_ranks,
                             formats=list(opt.chart_formats), base=fp)
    outputs = [ctx.out / "report.json"] + ([ctx.out / "charts"] if opt.charts else [])
    res, st = _stage(ctx, "report", fp_report, outputs, do_report, "report + charts", agg)
    ctx.summary["stages"]["report"] = st
    return res["report"] if res is not None and Path(res["report"]).exists() else None
