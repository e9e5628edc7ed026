"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

Each rank is streamed by :class:`~streamtrace.trace.reader.TraceReader` in a worker
process that rewrites its events and writes them to its own *segment* file
(a gzip member when the output is ``.gz``); the segments are then stitched by
byte copy between a header and a trailer, so peak memory depends on the batch
size only, never on the input size or the number of ranks.  With several workers,
a rank trace of at least ``MergeOptions.split_threshold`` bytes is rewritten in
byte ranges by several of them, one segment per range, with the same output
(:mod:`streamtrace.merge.ranges`).

Rewrites (all documented in the README):
  * processes: every (rank, original pid) becomes a distinct process with pid
    ``1 + rank * PID_STRIDE + slot`` (slot 0-99: CPU processes, 100 + d: GPU device d,
    900+: string pids such as ``"Spans"``), named ``Rank 3 · CPU (host h, pid 41523)`` /
    ``Rank 3 · GPU 3 (NVIDIA H100 80GB HBM3)`` and sorted rank by rank, CPU first;
    Kineto's own ``process_name``/``process_labels``/``process_sort_index`` events are
    replaced by these;
  * ids: flow ``id`` (ac2g, fwdbwd, ...), ``args.correlation`` and ``args["External id"]``
    become ``rank * 2**40 + id`` (see :func:`~streamtrace.merge.pids.unique_id`), originals kept as
    ``args["raw correlation"]`` / ``args["raw External id"]`` / ``args["raw id"]``;
    every event gets ``args.rank``;
  * time: ts is shifted by ``baseTimeNanoseconds(rank) - min(baseTimeNanoseconds)`` so all
    ranks share one clock (or, with ``align="first-step"``, so every rank's first
    ``ProfilerStep#`` starts together; with ``align="collectives"``, less each rank's clock
    offset estimated from its collectives, :mod:`streamtrace.merge.clocks`), and written as
    exact decimal microseconds.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, replace

from tqdm import tqdm

from ..runtime.errors import StreamtraceError, TraceError, UnknownRankError
from ..runtime import parallel
from ..runtime.files import check_output_file, remove_quietly, temp_name, writing
from ..runtime.parallel import run_tasks
from ..runtime.tuning import trim
from ..trace.discover import LONE_FILE, NSYS_EXPORT, TraceFile, discover, nothing_found
from ..trace.peer_merged import peer_merged
from ..trace.metadata import device_names, host_name
from ..trace.source import size_hint
from . import ranges as MS
from . import decide as DC
from ..validate.merged import LOG_SUFFIX, merged_validation, split_validation
from .nsys import merge_exports
from .options import MergeOptions
from .output import merged_metadata, output_for_iteration, write_merged
from .rank import RankPlan, deferred_files, merge_rank, warm_kernels
from .clocks import plan_clock_sync
from .flows import FlowExtents, SpilledFlows
from .survey import Survey, combine_surveys, metadata_task, plan_time, survey_rank
from .result import MergeResult


@dataclass
class RewriteTask:
    """One worker's rewrite: a whole rank (``byte_range`` None, read from ``plan.path``) or one
    byte range of a split rank (read from the plain copy ``src`` into ``segment``).  ``final``:
    the settled merged pids of a range that is rewritten again (see :mod:`streamtrace.merge.ranges`);
    ``size``: input bytes (largest first; MB/s); ``slot``: its place in the progress array."""
    plan: RankPlan
    file_index: int
    size: int
    src: str | None = None
    byte_range: tuple | None = None
    segment: str | None = None
    final: list | None = None
    slot: int = 0
    index: int = 0          # a byte range's place in its rank (file order)


@dataclass
class SurveyTask:
    """One survey (or metadata) read: a whole rank file, or one byte range of a split rank."""
    path: str
    file_index: int
    head: dict
    full: bool                  # the full pre-pass (steps, first ts, flows), else metadata only
    want_flows: bool
    salvage: bool
    byte_range: tuple | None = None
    want_collectives: bool = False
    spill: str | None = None        # write the flows found to this file (merge.flows.SpilledFlows)

#: merge's warning when ``--step-pattern`` is given for Kineto traces
STEP_PATTERN_KINETO = "--step-pattern not applied: it names the NVTX step range of Nsight Systems exports; a Kineto " \
                      "trace's steps are ProfilerStep#N"
#: merge's warning when ``gpu_only`` found no GPU process (callers that say it otherwise leave it out)
CPU_ONLY_WARNING = "no rank has a GPU process (a CPU-only run): --gpu-only merged the CPU processes instead"


def merge(inputs, output, opt: MergeOptions | None = None, rank_map=None) -> list[MergeResult]:
    """Merge the rank traces found in ``inputs`` (files, folders, globs) into
    ``output``.  Files from several iterations are merged per iteration
    (``<output>_iter<N>.json[.gz]``) unless ``opt.iterations`` picks one.
    A lone input with no rank is merged as rank 0.

    Parameters
    ----------
    inputs : list of str or Path
        Rank trace files, folders (searched recursively) and glob patterns.
    output : str or Path
        The merged trace (``.json`` or ``.json.gz``); per iteration ``<output>_iter<N>.json[.gz]``.
    opt : MergeOptions, optional
        The options (default ``MergeOptions()``).
    rank_map : str or Path, optional
        A JSON file ``{file name: rank}`` for traces whose rank is in neither the trace nor its name.

    Returns
    -------
    list of MergeResult
        One per trace written (:class:`~streamtrace.merge.result.MergeResult`; its ``summary`` is the
        dict :func:`merge_files` describes, also read through it: ``res["events_out"]``).  The first
        one's ``warnings`` start with what was skipped while looking for the traces (unreadable
        folders, files without a ``traceEvents`` array); a lone input adds a ``notices`` entry.

    Raises
    ------
    StreamtraceError
        On bad input (no traces, ``ranks``/``iterations`` selecting none).
    TraceError
        A rank trace that is not readable JSON (its path and byte offset).
    OutputError
        An output that cannot be written (checked before any work where possible: a folder, a
        read-only folder, one of the inputs); nothing is written then.
    """
    opt = opt or MergeOptions()
    if rank_map is not None and opt.rank_map is None:
        opt = replace(opt, rank_map=str(rank_map))       # an export's processes by pid (merge_exports)
    output = check_output_file(output)
    skipped = []
    try:
        files = discover(inputs, rank_map, warn=lambda p, msg: skipped.append(f"{p}: {msg}"))
    except UnknownRankError as e:      # a merged trace beside rank files carries no rank: say what it is
        _refuse_merged([TraceFile(e.path, -1, None, "", _metadata(e.path))])
        raise
    if not files:
        raise nothing_found(inputs, skipped)
    _refuse_merged(files)
    if opt.ranks:
        files = [f for f in files if f.rank in opt.ranks or f.rank_source == NSYS_EXPORT]   # an export: per process
        if not files:
            raise StreamtraceError("--ranks selects none of the ranks found")
    groups = {}
    for f in files:
        groups.setdefault(f.iteration, []).append(f)
    if opt.iterations is not None:
        missing = sorted(set(opt.iterations) - set(groups))
        if missing:
            have = ", ".join(str(k) for k in sorted(k for k in groups if k is not None)) or "none"
            raise StreamtraceError(f"no traces for iteration(s) {', '.join(map(str, missing))} (found: {have})")
        groups = {it: groups[it] for it in opt.iterations}
    order = sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    todo = [(g, output) for g in groups.values()] if len(groups) == 1 else \
        [(g, output_for_iteration(output, it)) for it, g in order]
    for g, out in todo:
        check_output_file(out, inputs=[tf.path for tf in files])
    results = [merge_files(g, out, opt) for g, out in todo]   # MergeResult, one per output
    results[0]["warnings"][:0] = skipped
    lone = [f.path for f in files if f.rank_source == LONE_FILE]
    if lone:
        results[0]["notices"] = [f"{lone[0]}: no rank in the trace or its name (a single-process run?): merged as "
                                 f"rank 0"]
    return results


def merge_files(files: list[TraceFile], output, opt: MergeOptions | None = None) -> MergeResult:
    """Merge the given rank traces (one iteration) into ``output`` (``.json`` or
    ``.json.gz``).  Returns a :class:`~streamtrace.merge.result.MergeResult`, whose ``summary``
    (also readable through it as a mapping) holds: ``output``, ``ranks``, ``iteration``, ``events_in``,
    ``events_out``, ``bytes_in``, ``bytes_out``, ``seconds``, ``jobs``, ``warnings``, ``split``
    (ranks rewritten in byte ranges: their range count), ``ranges_redone``,
    ``worker_mb_per_s``, ``cpu_only`` (no rank has a GPU process; with ``gpu_only`` the CPU
    processes are merged instead, with a warning), ``validation``
    (:func:`streamtrace.validate.merged.merged_validation`; None when ``opt.validate`` is off).
    Raises :class:`StreamtraceError` / :class:`TraceError` on bad input;
    the output is then not created (an unexpected failure on one rank is a
    :class:`TraceError` naming its file); :class:`~streamtrace.runtime.errors.OutputError` when the
    output cannot be written.

    With more than one worker, a trace of at least ``opt.split_threshold`` bytes is
    rewritten in byte ranges by several workers (:mod:`streamtrace.merge.ranges`) when that
    balances the work (:func:`split_pays`); the output is the same."""
    return MergeResult.of(_merge_iteration(files, output, opt))


def _merge_iteration(files: list[TraceFile], output, opt: MergeOptions | None = None) -> dict:
    """:func:`merge_files`, its summary as a dict."""
    opt = opt or MergeOptions()
    t_start = time.time()
    output = check_output_file(output, inputs=[tf.path for tf in files])
    nsys = [tf for tf in files if tf.rank_source == NSYS_EXPORT]
    if nsys and len(nsys) < len(files):
        raise StreamtraceError(f"{nsys[0].path}: Nsight Systems exports and Kineto traces cannot be merged together")
    if nsys:
        with writing(output):
            return merge_exports(nsys, output, opt)
    if opt.step_pattern:
        res = _merge_iteration(files, output, replace(opt, step_pattern=None))
        res["warnings"].insert(0, STEP_PATTERN_KINETO)
        return res
    want = opt.jobs or os.cpu_count() or 1
    splits = {}
    fallback = False
    with writing(output):
        try:
            return _merge_split(files, output, opt, splits, t_start, want)
        except TraceError as e:
            # a range that fails to parse: the unsplit merge reports the error exactly
            if not any(e.path in (sf.path, files[i].path) for i, sf in splits.items()):
                raise
            fallback = True
        finally:
            for sf in splits.values():
                remove_quietly(sf.tmp)
        if fallback:
            return _merge_iteration(files, output, replace(opt, split_threshold=None))


def _merge_split(files, output, opt, splits, t_start, want):
    """:func:`merge_files` after cutting the big ranks into byte ranges when that balances the
    work (``splits`` is filled in place, for the caller to remove their temporary copies)."""
    sizes = [size_hint(tf.path, tf.size) for tf in files]
    big = [i for i, n in enumerate(sizes) if want > 1 and opt.split_threshold is not None
           and n >= opt.split_threshold] if opt.split_always or split_pays(sizes, want) else []
    if big:
        output.parent.mkdir(parents=True, exist_ok=True)
        prepared = run_tasks(MS.prepare, [(files[i].path, str(output.parent), want, opt.split_threshold)
                                          for i in big], min(want, len(big)), scheduler=opt.scheduler)
        splits.update({i: sf for i, sf in zip(big, prepared) if sf is not None})
    return _merge_files(files, output, opt, splits, t_start)


def split_pays(sizes: list, jobs: int, slack: float = 1.1) -> bool:
    """True when cutting big ranks into byte ranges can shorten the merge: the ranks as whole
    tasks, the largest first on the least loaded of ``jobs`` workers, would keep one worker
    busy more than ``slack`` times an even share (sum / jobs).  Cutting costs a pass over each
    cut rank to find event boundaries and its ranges' sorted validation runs merged: equal ranks, at
    least as many as the workers, are merged whole."""
    loads = [0] * max(1, jobs)
    for n in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += n
    return max(loads) > slack * sum(sizes) / len(loads)


def _merge_files(files, output, opt, splits, t_start):
    want = opt.jobs or os.cpu_count() or 1
    jobs = max(1, min(want, len(files) + sum(len(sf.ranges) - 1 for sf in splits.values())))
    output.parent.mkdir(parents=True, exist_ok=True)
    surveys = _surveys(files, splits, opt, jobs, output)
    try:
        return _merge_surveyed(files, output, opt, splits, t_start, jobs, surveys)
    finally:
        for s in surveys:
            if isinstance(s.flows, SpilledFlows):
                remove_quietly(s.flows.path)


def deferred_filter(opt, splits) -> bool:
    """True when ``--steps`` / ``--window`` are decided after each rank's one pass
    (:mod:`streamtrace.merge.deferred`; a rank cut into byte ranges: :mod:`streamtrace.merge.split_filter`)
    instead of by a survey before it: without an alignment that reads the ranks first.  ``--steps``
    alone is decided by each unsplit rank's worker; ``--window`` (its origin is the job's earliest
    event) and split ranks by tasks the parent starts once every rank is read."""
    return (opt.steps is not None or opt.window_ms is not None) and opt.align == "global"


def _merge_surveyed(files, output, opt, splits, t_start, jobs, surveys):
    defer = deferred_filter(opt, splits)
    out_base, shifts, keeps = plan_time(files, surveys, replace(opt, steps=None, window_ms=None) if defer else opt)
    clock, clock_warnings = None, []
    if opt.align == "collectives":
        shifts, clock, clock_warnings = plan_clock_sync(files, surveys, shifts)
    output.parent.mkdir(parents=True, exist_ok=True)
    plans = _plans(files, surveys, shifts, keeps, opt, output)
    if defer:
        plans = [replace(p, defer=opt.steps or (), park=opt.window_ms is not None) for p in plans]
    tasks = _rewrite_tasks(files, plans, splits)
    temps = [p.segment for p in plans] + [x for p in plans if p.defer is not None for x in p.temporaries()] + \
        [s for t in tasks if t.segment for s in [t.segment, t.segment + LOG_SUFFIX] + (deferred_files(t.segment) if defer else [])]
    progress = _Progress(tasks, opt.progress)
    try:
        if jobs > 1 and len(tasks) > 1 and not parallel.scheduler_address(opt.scheduler):
            # forked workers inherit the loaded kernels (one process: loaded on use), the deferred
            # filter's for whole ranks and for byte ranges as the job has them
            warm_kernels(plans[0], whole=len(splits) < len(files), ranges=bool(splits))
        trim()                            # and only the heap this process uses (see _run_task)
        results, done, redone = _rewrite_decide(tasks, files, surveys, plans, splits, jobs, opt, progress)
        if any(int(res["metadata"].get("baseTimeNanoseconds") or 0) != int(s.metadata.get("baseTimeNanoseconds") or 0)
               for s, res in zip(surveys, results)):
            # the quick trailer peek missed the base time: redo with the real metadata
            for tf, res in zip(files, results):
                tf.head = res["metadata"]
            return _merge_files(files, output, opt, splits, t_start)
        if opt.gpu_only and not any(v.get("kind") == "gpu" for r in results for v in r["process_map"].values()):
            progress.close()
            res = _merge_files(files, output, replace(opt, gpu_only=False), splits, t_start)
            res["warnings"].insert(0, CPU_ONLY_WARNING)
            res["cpu_only"] = True
            return res
        progress.close()
        meta = merged_metadata(files, results, shifts, out_base, opt, output, clock)
        write_merged(output, results, meta, output.name.endswith(".gz"), opt.compresslevel)
        validation = merged_validation(results, output) if opt.validate else None
    finally:
        for t in temps:
            remove_quietly(t)
    busy = {}                                   # worker pid -> [bytes, seconds]
    for r in done:
        w = busy.setdefault(r["task_stats"][0], [0, 0.0])
        w[0] += r["task_stats"][1]
        w[1] += r["task_stats"][2]
    return {"output": str(output), "ranks": [tf.rank for tf in files], "iteration": files[0].iteration,
            "events_in": sum(r["events_in"] for r in results),
            "events_out": sum(r["events_out"] for r in results),
            "bytes_in": sum(r["bytes_in"] for r in results), "bytes_out": output.stat().st_size,
            "seconds": time.time() - t_start, "jobs": jobs,
            "warnings": clock_warnings + [w for r in results for w in r["warnings"]],
            "clock_offsets_ns": {r: v["offset_ns"] for r, v in clock["ranks"].items() if v["applied"]} if clock else {},
            "split": {files[i].rank: len(sf.ranges) for i, sf in splits.items()}, "ranges_redone": redone,
            "worker_mb_per_s": [round(b / 1e6 / max(t, 1e-9), 1) for b, t in busy.values()],
            "cpu_only": not any(v.get("kind") == "gpu" for r in results for v in r["process_map"].values()),
            "validation": validation}


def _surveys(files, splits, opt, jobs, output) -> list[Survey]:
    """Each rank's :class:`~streamtrace.merge.survey.Survey` (a split rank: its ranges' surveys
    combined, or its metadata without reading the events again).  An unsplit rank's flows stay in a
    temporary file beside ``output`` (:class:`~streamtrace.merge.flows.SpilledFlows`), for its
    rewrite worker: this process never holds every rank's flows."""
    full = opt.needs_survey() and not deferred_filter(opt, splits)
    want_flows = full and (opt.window_ms is not None or opt.steps is not None)
    coll = opt.align == "collectives"
    tasks = []
    for i, tf in enumerate(files):
        if i not in splits:
            spill = str(output.parent / temp_name(output.name, f"flows{i}")) if full and want_flows else None
            tasks.append(SurveyTask(tf.path, i, tf.head, full, want_flows, opt.salvage, want_collectives=coll,
                                    spill=spill))
        elif full:
            tasks += [SurveyTask(splits[i].path, i, {}, True, want_flows, False, r, coll) for r in splits[i].ranges]
    done = run_tasks(_run_survey, [(t,) for t in tasks], jobs, scheduler=opt.scheduler)
    surveys = []
    for i, tf in enumerate(files):
        mine = [s for s, t in zip(done, tasks) if t.file_index == i]
        if i not in splits:
            surveys.append(mine[0])
        elif full:
            surveys.append(combine_surveys(mine, splits[i].meta))
        else:
            surveys.append(Survey(MS.survey_meta(tf, splits[i]), None, {}, {}))
    return surveys


def _run_survey(task: SurveyTask) -> Survey:
    with naming_file(task.path):
        if task.byte_range is not None:
            return survey_rank(task.path, task.want_flows, False, task.byte_range, task.want_collectives)
        s = metadata_task(task.path, task.head, task.full, task.want_flows, task.salvage, task.want_collectives)
        if task.spill and isinstance(s.flows, FlowExtents):
            s.flows = s.flows.spill(task.spill)
        return s


@contextlib.contextmanager
def naming_file(path):
    """An unexpected error while reading rank file ``path`` becomes a :class:`TraceError` naming
    it (so that a caller can merge the other ranks); input and output errors pass as they are."""
    try:
        yield
    except (StreamtraceError, OSError, MemoryError):
        raise
    except Exception as e:      # noqa: BLE001 - name the rank file
        line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TraceError(path, f"cannot merge this file ({type(e).__name__}: {line})") from e


def _plans(files, surveys, shifts, keeps, opt, output) -> list[RankPlan]:
    """One :class:`~streamtrace.merge.rank.RankPlan` per rank: its shift, keep-window and the
    flows kept under it, its segment file beside the output."""
    compress = output.name.endswith(".gz")
    stem = str(output.parent / temp_name(output.name, "rank"))
    plans = []
    for tf, s in zip(files, surveys):
        keep = keeps[tf.rank]
        kept_flows = None
        if isinstance(s.flows, SpilledFlows) and keep is not None:
            kept_flows = s.flows          # read by the rank's rewrite worker
        elif keep is not None:
            flows = s.flows if isinstance(s.flows, FlowExtents) else FlowExtents.build([], [], s.flows)
            kept_flows = flows.kept(*keep)
        plans.append(RankPlan(tf.path, tf.rank, shifts[tf.rank], f"{stem}{tf.rank}.seg",
                              compress, opt.compresslevel, frozenset(opt.drop_cat), opt.gpu_only, keep,
                              kept_flows, opt.salvage, host_name(s.metadata), device_names(s.metadata),
                              validate=opt.validate))
    return plans


def _rewrite_tasks(files, plans, splits) -> list[RewriteTask]:
    """One task per unsplit rank, one per byte range of a split rank, in file order."""
    tasks = []
    for i, (tf, p) in enumerate(zip(files, plans)):
        if i not in splits:
            tasks.append(RewriteTask(p, i, tf.size))
            continue
        for k, r in enumerate(splits[i].ranges):
            tasks.append(RewriteTask(p, i, r[1] - r[0], splits[i].path, r, f"{p.segment}.{k}", index=k))
    for j, t in enumerate(tasks):
        t.slot = j
    return tasks


def _rewrite_decide(tasks, files, surveys, plans, splits, jobs, opt, progress):
    """:func:`_rewrite`, then the deferred filter's decisions: a one-pass ``--steps`` rank without
    the steps raises (the first in rank order); ranks parked for ``--window`` are decided by tasks
    on the same local pool (:mod:`streamtrace.merge.decide`)."""
    with contextlib.ExitStack() as stack:
        ex = None
        decided_later = any(p.park for p in plans) or any(plans[i].defer is not None for i in splits)
        if decided_later and jobs > 1 and len(tasks) > 1 and not parallel.scheduler_address(opt.scheduler):
            # one fork for both rounds; a decision runs in a worker even alone (not in this process)
            ex = stack.enter_context(parallel.pool(jobs, progress.shared))
        results, done, redone = _rewrite(tasks, files, plans, splits, jobs, opt, progress, ex)
        parked = any("parked" in r or "split_parked" in r for r in results)
        try:
            keeps = DC.parked_keeps(files, surveys, results, opt) if parked else {}
            missing = [r.get("missing_steps", keeps.get(tf.rank)) for tf, r in zip(files, results)]
            missing = [m for m in missing if isinstance(m, str)]
            if missing:
                raise StreamtraceError(missing[0])
        except StreamtraceError:
            progress.close()
            raise
        if parked:
            results = DC.finish_parked_ranks(plans, results, keeps, opt, jobs, ex)
        if splits and any(p.defer is not None and p.compress for p in plans):
            DC.gzip_split_runs(results, opt, jobs, ex)
    return results, done, redone


def _rewrite(tasks, files, plans, splits, jobs, opt, progress, executor=None):
    """Run the rewrite tasks; settle the pid slots of split ranks (rewriting again the ranges
    whose provisional slots were wrong).  Returns ``(one result per file, every task's result,
    ranges redone)``."""
    done = _run_largest_first(tasks, jobs, progress, opt.scheduler, executor)
    of = {}                     # file index -> its task indices, in file order
    for j, t in enumerate(tasks):
        of.setdefault(t.file_index, []).append(j)
    results = [None] * len(files)
    for i in range(len(files)):
        if i not in splits:
            results[i] = dict(done[of[i][0]])
    redo = []
    for i in splits:
        _, final, wrong = MS.settle_pids(plans[i].rank, [done[j] for j in of[i]])
        redo += [replace(tasks[of[i][k]], final=final[k]) for k in wrong]
    for t, res in zip(redo, _run_largest_first(redo, jobs, progress, opt.scheduler)):
        done[t.slot] = res
    for i, sf in splits.items():
        parts = [done[j] for j in of[i]]
        pids, _, wrong = MS.settle_pids(plans[i].rank, parts)
        if wrong:
            raise RuntimeError(f"rank {plans[i].rank}: pid slots did not settle")
        if plans[i].defer is not None:      # decided with the rank's every range read (split_filter)
            results[i] = {"split_parked": (sf, parts, pids)}
            continue
        results[i] = MS.finish_rank(plans[i], sf, parts, pids, plans[i].segment)
    if opt.validate and splits:      # a split rank's check: its ranges' sorted runs merged
        idx = [i for i in splits if "split_parked" not in results[i]]
        vals = run_tasks(split_validation, [([done[j]["validation"] for j in of[i]], os.path.dirname(plans[i].segment),
                                             results[i]["events_out"]) for i in idx], jobs, scheduler=opt.scheduler)
        for i, v in zip(idx, vals):
            results[i]["validation"] = v
    return results, done, len(redo)


def _run_task(task: RewriteTask) -> dict:
    """Worker: one rewrite task (a whole rank, or one byte range of a split rank)."""
    shared = parallel.PROGRESS

    def report(n):
        shared[task.slot] = n
    progress = report if shared is not None else None
    t0 = time.perf_counter()
    with naming_file(task.plan.path):
        if task.byte_range is None:
            res = merge_rank(task.plan, progress)
        else:
            res = MS.merge_range(task.plan, task.src, task.byte_range, task.segment, task.final, progress, task.index)
    # the worker's own account: bytes in, busy seconds (for "MB/s per worker")
    res["task_stats"] = (os.getpid(), task.size if task.byte_range else res["bytes_in"], time.perf_counter() - t0)
    trim()      # the rewrite's freed buffers back to the OS: a worker's next rank starts from its base again
    return res


def _run_largest_first(tasks, jobs, progress, scheduler, executor=None) -> list[dict]:
    """Run rewrite tasks, the largest first (better balance); results in task order."""
    order = sorted(range(len(tasks)), key=lambda j: -tasks[j].size)
    res = run_tasks(_run_task, [(tasks[j],) for j in order], jobs, progress.shared, progress.tick,
                    executor=executor, scheduler=scheduler, retries=1)
    out = [None] * len(tasks)
    for j, r in zip(order, res):
        out[j] = r
    return out


class _Progress:
    """A tqdm bar of the bytes the rewrite tasks have read (on a terminal unless ``show``
    says otherwise); workers report through the shared array ``shared``, one slot per task."""

    def __init__(self, tasks, show):
        self.total = sum(t.size for t in tasks)
        self.shared = mp.Array("q", len(tasks), lock=False)
        self.bar = None
        if sys.stderr.isatty() if show is None else show:
            self.bar = tqdm(total=self.total, unit="B", unit_scale=True, desc="merge", file=sys.stderr)

    def tick(self):
        if self.bar is not None:
            self.bar.n = min(self.total, sum(self.shared))
            self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.n = self.total
            self.bar.close()


def _metadata(path) -> dict:
    """Every top-level key of ``path`` but its events ({} when it cannot be read)."""
    from ..trace.reader import TraceReader
    try:
        return TraceReader(path, salvage=True).read_metadata()
    except StreamtraceError:
        return {}


def _refuse_merged(files):
    """Raise :class:`StreamtraceError` naming the first of ``files`` that streamtrace merged
    already (its ``streamtrace.kind`` header) or a peer tool merged (TraceLens TraceFusion,
    Megatron-LM's ``merge_profiler_traces.py``: :func:`~streamtrace.trace.peer_merged.peer_merged`):
    merged again, all its ranks would be folded into the one rank the file is given (issue 33)."""
    for tf in files:
        st = tf.head.get("streamtrace")
        if isinstance(st, dict) and st.get("kind") == "merged":
            n = len(st.get("ranks") or [])
            raise StreamtraceError(f"{tf.path}: already a merged trace ({n} ranks, written by streamtrace merge); "
                                   f"merged again its ranks would be folded into one: merge the rank files it "
                                   f"came from, or analyze it (analyze splits it into its ranks)")
        peer = peer_merged(tf.path, tf.head) if tf.rank_source != NSYS_EXPORT else None
        if peer is not None:
            raise StreamtraceError(f"{tf.path}: already a merged trace (written by {peer}); merged again its ranks "
                                   f"would be folded into one: merge the rank files it came from")
