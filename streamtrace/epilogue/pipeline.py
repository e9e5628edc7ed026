"""The epilogue's run (``run``): check the paths, discover the job, run the stages
(``streamtrace.epilogue.stages``), write ``epilogue.json`` and the final line; never raising into the
caller.  Returns the output folder as an ``EpilogueRun``."""
from __future__ import annotations

import json
import signal
import time
from contextlib import nullcontext
from pathlib import Path

from ..report.outputs import EpilogueRun
from ..runtime.errors import StreamtraceError
from ..runtime.files import atomic_output, clean_stale, write_json
from ..runtime.fork import Standby
from ..runtime.stagelog import StageLog
from ..runtime.tuning import thaw
from .discovery import check_paths, find_topology, outdir_of
from .merged_check import status_text
from .options import EpilogueOptions, with_options, worker_count
from .stages import StageRun, discover_paths, iteration_stages, job_stages, report_imports


def run(run_dir, opt: EpilogueOptions | None = None, log_file=None, report_process: Standby | None = None,
        **options) -> EpilogueRun:
    """Run the whole post-job pipeline on ``run_dir`` (see the module docstring).

    Parameters
    ----------
    run_dir : str or Path
        The training job's folder (its iteration folders and topology, any layout discovery knows).
    opt : EpilogueOptions, optional
        The options (default ``EpilogueOptions()``).
    log_file : file, optional
        Where log lines go (default stderr).
    report_process : streamtrace.runtime.fork.Standby, optional
        An entered ``Standby`` the report runs in (with ``isolate``): the CLI's, forked before it
        imported numba.  Default: one forked here, before any stage runs; the report calls no kernel, and
        a process forked after numba's set-up (``stages.share_imports``) would carry its ~70 MB.
    **options
        Fields of ``opt``, or of its report's, changed: ``run(d, gpu_only=False, charts=False)``
        (``with_options``).

    Returns
    -------
    EpilogueRun
        The output folder (``EpilogueRun``, as ``streamtrace.load`` opens
        it: its tables, ``analyses``, ``aggregate``), whose ``summary`` is the run's account (also in
        ``OUTDIR/epilogue.json``): ``{"run_dir", "outdir", "iterations", "ranks", "report", "failures": [...],
        "notes", "stages": {...}, "seconds"}``; the object is also a read-only mapping over it
        (``res["failures"]``), as the dict it returned before.

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
    before = new_folders(out)
    state = None
    clean = (nullcontext(report_process) if report_process is not None
             else Standby(enabled=opt.isolate, setup=report_imports))
    try:
        try:
            check_paths(run_dir, opt)
        except StreamtraceError as e:
            log.fail("epilogue", getattr(e, "path", run_dir), getattr(e, "message", e))
            return EpilogueRun.of(out, summary)
        out.mkdir(parents=True, exist_ok=True)
        clean_stale(out)                         # what a killed earlier run left in it
        state_path = out / EpilogueRun.marker
        state, jobs = read_state(state_path), worker_count(opt)
        topo = opt.topology or find_topology(run_dir)
        log.info(f"run {run_dir}: topology {topo or 'not found (the traces pg_config, if any)'}; {jobs} jobs")
        with clean as report_process:
            groups, skipped = discover_paths(opt, run_dir, log, out, topo)
            if not groups:
                log.fail("discover", run_dir, "no rank traces found")
            summary["skipped"] = skipped
            ctx = StageRun(opt, jobs, topo, out, state, log, summary, report_process=report_process)
            analysed = [a for it in sorted(groups, key=lambda k: (k is None, k or 0))
                        if (a := iteration_stages(ctx, it, groups[it]))]
            summary["report"] = job_stages(ctx, analysed, run_dir) if analysed else None
        summary["seconds"] = round(time.time() - t0, 2)
        try:
            with atomic_output(state_path, compress=False) as f:
                write_json(f, {"summary": summary, "state": state}, str)
            written = True
        except Exception as e:   # noqa: BLE001 - a full disk: said in the final line
            log.fail("epilogue", state_path, e)
            written = False
        status = status_text(state) if not log.failures else problems(log.failures, state_path, written)
        log.final(f"{len(summary['iterations'])} iteration(s), {summary['ranks']} ranks, {status}; "
                 f"report: {summary['report'] or 'none'}; outputs in {out} ({summary['seconds']:.1f} s)")
    except Exception as e:   # noqa: BLE001 - the promise: never raise into the caller
        log.fail("epilogue", run_dir, e)
    except KeyboardInterrupt as e:      # Ctrl-C, SIGTERM: the stages removed their staging folders
        remove_empty(out, before)
        if state is not None:          # the record says what this run replaced (issue 47, item 9)
            interrupted_record(out / EpilogueRun.marker, summary, state, e)
        raise
    finally:
        thaw()                         # (stages.share_imports froze the process for the stages' forks)
    return EpilogueRun.of(out, summary)


def interrupted_record(state_path, summary, state, e) -> None:
    """After Ctrl-C or SIGTERM: write ``epilogue.json`` as the outputs now are, so that it never
    describes an earlier run's job beside this run's aggregate and report (issue 47, item 9).  Every
    stage that ended kept its result and fingerprint in ``state`` (its outputs are this run's); a
    stage that was cut left the earlier run's outputs and state entry (``summary["stages"]`` says
    ``"interrupted"`` for it, and lists only the stages this run reached).  ``summary["report"]`` is
    this run's report (None when its report stage did not end: an earlier report may still be in the
    folder), ``summary["interrupted"]`` says by what.  Written atomically; a failure to write it is
    ignored (the interruption is what is reported).  Not written when no stage of this run ended: the
    outputs are then the earlier run's, and so is the record (left as it was)."""
    if not any(v == "done" for v in (summary.get("stages") or {}).values()):
        return
    rep = (state.get("report") or {}).get("result") or {} if summary.get("stages", {}).get("report") == "done" else {}
    summary = {**summary, "report": rep.get("report") if rep.get("report") and Path(rep["report"]).exists() else None,
               "interrupted": "SIGTERM" if getattr(e, "signum", None) == signal.SIGTERM else "SIGINT (Ctrl-C)"}
    try:
        with atomic_output(state_path, compress=False) as f:
            write_json(f, {"summary": summary, "state": state}, str)
    except Exception:   # noqa: BLE001 - see the docstring
        pass


def read_state(path) -> dict:
    """The stages' state kept in the JSON file ``path`` (``{"state": ...}``); ``{}`` when unreadable."""
    try:
        return json.loads(Path(path).read_text()).get("state", {})
    except (OSError, ValueError):
        return {}


def problems(failures, state_path, written) -> str:
    """The final line's account of ``failures``: how many, the first one's stage, file and error
    (a full disk names the stage and the path it could not write), and where the rest are:
    ``epilogue.json``, or that it could not be written either."""
    f = failures[0]
    first = f"{f['stage']} ({f['file']}): {f['error']}"
    where = f"see {state_path}" if written else f"{state_path} could not be written"
    return f"{len(failures)} problem(s), the first: {first}; {where}"


def new_folders(out: Path):
    """What ``remove_empty`` may remove after an interruption: ``out`` when it does not
    exist yet, and (by name) the folders it does not hold yet."""
    try:
        return None if not out.is_dir() else {p.name for p in out.iterdir()}
    except OSError:
        return set()


def remove_empty(out: Path, before):
    """After an interruption: remove the empty folders this run made in ``out`` (its iteration
    folders, whose stage was cut before it wrote anything), and ``out`` itself when this run made
    it and it is empty.  ``before``: ``new_folders``."""
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
