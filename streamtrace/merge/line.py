"""One iteration's ``streamtrace merge`` as a line of steps: survey/plan
(``MergePlan``), rewrite (``RewriteStage``),
stitch (``write_merged``) and validate
(``merged_validation``), run by ``merge_iteration``; the files
were discovered before (``streamtrace.merge.run.merge``).

The line runs again, from the plan, in three cases, each an ``Attempt`` of its own in one
loop: a byte range of a cut rank that fails to parse (the ranks merged whole, so that the error
is reported exactly as without ``--jobs``), a base time that the quick trailer peek of the survey
missed (the rank files' heads replaced by the metadata the rewrite read), and ``--gpu-only`` on a
job without a GPU process (the CPU processes merged instead, with a warning).  ``--step-pattern``
(an NVTX step name) is no retry: it does not apply to Kineto traces, which the first attempt says.
Nsight Systems exports take their own path (``merge_exports``), chosen by
the files' ``TraceSource`` (``MERGERS``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..runtime.errors import TraceError
from ..runtime.files import check_output_file, remove_quietly, writing
from ..trace.formats import KINETO, NSYS, one_source
from ..trace.metadata import base_time_ns
from ..validate.merged import merged_validation
from .nsys import merge_exports
from .options import MergeOptions
from .output import merged_metadata, write_merged
from .plan import MergePlan, cut_ranks
from .rewrite import Progress, RewriteStage, Rewritten

#: merge's warning when ``--step-pattern`` is given for Kineto traces
STEP_PATTERN_KINETO = "--step-pattern not applied: it names the NVTX step range of Nsight Systems exports; a Kineto " \
                      "trace's steps are ProfilerStep#N"
#: merge's warning when ``gpu_only`` found no GPU process (callers that say it otherwise leave it out)
CPU_ONLY_WARNING = "no rank has a GPU process (a CPU-only run): --gpu-only merged the CPU processes instead"


@dataclass(frozen=True)
class Attempt:
    """What one run of the line merges: the rank ``files``, the options, whether its ranks may be cut
    into byte ranges (``cut``), the ``warnings`` said ahead of the ranks' and whether ``--gpu-only`` fell
    back to the CPU processes (``cpu_only``)."""
    files: tuple
    opt: MergeOptions
    cut: bool = True
    warnings: tuple = ()
    cpu_only: bool = False


def merge_iteration(files, output, opt: MergeOptions | None = None) -> dict:
    """Merge the rank ``files`` (``TraceFile`` s of one iteration) into
    ``output``; returns the summary dict ``streamtrace.merge.run.merge_files`` describes.  The
    attempts of the module docstring run one after the other until one writes the output."""
    opt = opt or MergeOptions()
    t_start = time.time()
    output = check_output_file(output, inputs=[tf.path for tf in files])
    merger = MERGERS[one_source(files)]
    with writing(output):
        return merger(files, output, opt, t_start)


def merge_kineto(files, output: Path, opt: MergeOptions, t_start: float) -> dict:
    """``merge_iteration`` of Kineto traces: the attempts of the module docstring, one after the other
    until one writes the output."""
    attempt = Attempt(tuple(files), replace(opt, step_pattern=None),
                      warnings=(STEP_PATTERN_KINETO,) if opt.step_pattern else ())
    splits = None                   # the ranks cut into byte ranges for the attempt (None: not cut yet)
    try:
        while True:
            if splits is None:
                splits = cut_ranks(list(attempt.files), output, attempt.opt) if attempt.cut else {}
            plan = MergePlan.of(attempt.files, output, attempt.opt, splits)
            try:
                done = _run_line(plan, attempt, t_start)
            except TraceError as e:
                if not plan.names_cut_rank(e.path):
                    raise
                _remove_copies(splits)
                splits, done = None, replace(attempt, cut=False)   # unsplit, the error is reported exactly
            if isinstance(done, dict):
                return done
            attempt = done
    finally:
        _remove_copies(splits)


def _remove_copies(splits: dict | None) -> None:
    """Remove the plain copies of the cut ranks (a ``.json.gz`` rank decompressed to be cut)."""
    for sf in (splits or {}).values():
        remove_quietly(sf.tmp)


def _run_line(plan: MergePlan, attempt: Attempt, t_start: float) -> dict | Attempt:
    """Survey, plan, rewrite, stitch and validate ``plan``; returns the summary, or the
    ``Attempt`` to run instead (a missed base time, ``--gpu-only`` without a GPU process), the
    rewrite's temporaries removed either way."""
    surveys = plan.surveys()
    try:
        time_plan = plan.time(surveys)
        ranks = plan.ranks(surveys, time_plan)
        tasks = plan.tasks(ranks)
        progress = Progress(tasks, plan.opt.progress)
        try:
            done = RewriteStage(plan, ranks, tasks, progress).run(surveys)
            retry = _retry(plan, attempt, surveys, done)
            progress.close()
            if retry is not None:
                return retry
            members = write_merged(plan.output, done.results, merged_metadata(plan, done.results, time_plan),
                                   plan.compress, plan.opt.compresslevel)
            validation = merged_validation([r.validation for r in done.results],
                                           [r.process_map for r in done.results], plan.output) \
                if plan.opt.validate else None
        finally:
            progress.close()
            for t in plan.temporaries(ranks, tasks):
                remove_quietly(t)
    finally:
        plan.remove_spills(surveys)
    return _summary(plan, attempt, time_plan, done, validation, t_start) | {"members": members}


def _retry(plan: MergePlan, attempt: Attempt, surveys: list, done: Rewritten) -> Attempt | None:
    """The attempt to run instead of writing ``done``: the ranks' real base times when the survey's
    quick trailer peek missed one, the CPU processes when ``--gpu-only`` found no GPU; else None."""
    if any((base_time_ns(r.metadata) or 0) != (base_time_ns(s.metadata) or 0) for s, r in zip(surveys, done.results)):
        files = tuple(replace(tf, head=r.metadata) for tf, r in zip(plan.files, done.results))
        return replace(attempt, files=files)
    if plan.opt.gpu_only and not done.gpu:
        return replace(attempt, opt=replace(attempt.opt, gpu_only=False), warnings=attempt.warnings +
                       (CPU_ONLY_WARNING,), cpu_only=True)
    return None


def _summary(plan: MergePlan, attempt: Attempt, time_plan, done: Rewritten, validation, t_start: float) -> dict:
    """The summary ``streamtrace.merge.run.merge_files`` describes."""
    results, clock = done.results, time_plan.clock
    return {"output": str(plan.output), "ranks": [tf.rank for tf in plan.files], "iteration": plan.files[0].iteration,
            "events_in": sum(r.events_in for r in results),
            "events_out": sum(r.events_out for r in results),
            "bytes_in": sum(r.reading.bytes_in for r in results), "bytes_out": plan.output.stat().st_size,
            "seconds": time.time() - t_start, "jobs": plan.jobs,
            "warnings": list(attempt.warnings) + list(time_plan.warnings) +
            [w for r in results for w in r.reading.warnings],
            "clock_offsets_ns": {r: v["offset_ns"] for r, v in clock["ranks"].items() if v["applied"]} if clock else {},
            "split": {plan.files[i].rank: len(sf.ranges) for i, sf in plan.splits.items()},
            "ranges_redone": done.redone, "worker_mb_per_s": done.worker_mb_per_s(),
            "cpu_only": attempt.cpu_only or not done.gpu,
            "validation": validation}


def _merge_exports(files, output: Path, opt: MergeOptions, t_start: float) -> dict:
    """``merge_exports`` as a merger (it times itself)."""
    return merge_exports(files, output, opt)


#: how each input format is merged (``streamtrace.trace.formats``): ``merger(files, output, opt, t_start)``
MERGERS = {KINETO: merge_kineto, NSYS: _merge_exports}
