"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank.

Input: one trace, a folder of rank traces, or a merged multi-rank trace
(streamtrace's own, TraceLens TraceFusion's with ``args.rank``, or Megatron's
``pid = rank + 1``), which is split back into ranks.  Every join key is per rank:
(rank, correlation) for launch -> GPU links and (rank, pid, tid) for call trees.

Output (``OUTDIR``): ``summary.json``; ``kernels/iteration=N/rank=R/part-0.parquet`` (one
row per GPU event) and ``ops/iteration=N/rank=R/part-0.parquet`` (one row per CPU event), zstd
(after ``--jobs N`` on one big trace, ``part-0`` .. ``part-K``, rows in that order: see
``streamtrace.analyze.trackfork``),
schema in the README (``streamtrace.events.dataset.schemas``).  Each table is one hive-partitioned dataset: ``N`` is the
trace file's iteration (``summary.json``'s ``"iteration"`` of the rank, from the path:
``iteration_10/``, ``_iter_10``) and ``-1`` when it is unknown (``summary.json`` says null), see
``partition_path``.  The partition keys are not columns inside the files, so readers of the
whole dataset (pyarrow, pandas, DuckDB) get ``iteration`` and ``rank`` from the paths with
no type clash; the kernels' own ``ProfilerStep#N`` number is the ``step`` column.  A rank without GPU
events (a CPU-only, gloo job) also gets ``cpu_collectives/iteration=N/rank=R/part-0.parquet``, one row
per collective (``streamtrace.analyze.cpu_collectives``); a collective's facts:
``streamtrace.analyze.collective_facts`` (docs/collectives.md).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path

from tqdm import tqdm

from ..runtime.errors import RankConflictError, StreamtraceError, UnknownRankError
from ..events.dataset import UNKNOWN_ITERATION
from .outputs import PG_ENTRIES_KEY, Analysis
from ..runtime import parallel
from ..runtime.files import JsonItems, atomic_output, output_folder, write_json
from ..runtime.compile import TASKS, load as load_kernels
from ..runtime.parallel import TaskFailure, run_tasks, scheduler_address
from ..trace.discover import expand_inputs, identify, load_rank_map, nothing_found
from ..trace.nsys import count_gpu_processes
from .file import analyze_file, run_topology
from .options import AnalyzeOptions
from .rank_entries import RankEntries, RankSpill

#: what ``analyze --gpu-only`` says (``summary.json``'s ``"notices"``; ``"gpu_only": true`` beside it)
GPU_ONLY_NOTICE = ("--gpu-only: CPU activity left out (no ops rows, call trees, launch links, steps or phases; "
                   "an Nsight Systems export's CPU tables not read): per-device metrics and kernels rows only")


@dataclass
class AnalyzeTask:
    """One file of an ``analyze`` run: ``path``, the folder it writes into, the rank it is when
    the file itself does not say (a merged trace holds several), its ``iteration`` (from the
    path; None when unknown), the options, and ``slot``: its place in the progress array."""
    path: str
    outdir: str
    rank: int
    iteration: int | None
    opt: AnalyzeOptions
    slot: int = 0


def analyze(inputs, outdir, opt: AnalyzeOptions | None = None) -> Analysis:
    """Analyse every trace in ``inputs`` (files, folders, globs) into ``outdir``.

    Files run as tasks of the batch layer (``streamtrace.runtime.parallel``): a local
    process pool, a dask scheduler (``opt.scheduler``) or ``opt.executor``.  A file
    that fails for a reason other than its content is retried once; a file that cannot be
    read is listed under ``"failed"`` with its error while the others finish.

    ``outdir`` is one unit (``output_folder``): everything is
    written into a staging folder beside it, workers included, which replaces ``outdir`` at
    the end; an interrupted or failed run leaves ``outdir`` as it was.

    Parameters
    ----------
    inputs : list of str or Path
        Trace files (Kineto JSON, Nsight Systems ``.sqlite``), folders (searched recursively), globs.
    outdir : str or Path
        The analysis folder (``kernels/`` and ``ops/`` Parquet, ``iteration=N/rank=R``; docs/analyze.md).
    opt : AnalyzeOptions, optional
        The options (default ``AnalyzeOptions()``).

    Returns
    -------
    streamtrace.analyze.outputs.Analysis
        The folder as ``streamtrace.load(outdir)`` returns it (tables ``kernels``, ``ops``, ...).  Its
        ``summary`` is the dict written to ``outdir/summary.json`` (``ranks``, ``failed``: the files
        that could not be read, with their error; ``warnings``: folders and files skipped while
        looking for the traces), also read through the object: ``res["ranks"]``, ``res.get(...)``.
        ``res["ranks"]`` is a ``RankEntries``: a sequence of the ranks' entries read from ``summary.json``
        as they are asked for (the run never holds them all); ``res.summary["ranks"]`` a list of them,
        read when first asked for.

    Raises
    ------
    StreamtraceError
        On bad input when the only input fails.
    RankConflictError
        When two inputs are one rank of one iteration.
    OutputError
        When ``outdir`` cannot be written (checked before any work where possible).
    """
    opt = opt or AnalyzeOptions()
    t0 = time.time()
    run_topology.cache_clear()              # (the topology read again: it may have changed since the last run)
    skipped = []
    tasks, notices = _tasks(inputs, opt, skipped)
    with output_folder(outdir, owned=Analysis.owns, inputs=[t.path for t in tasks]) as stage:
        tasks = [replace(t, outdir=str(stage)) for t in tasks]
        with RankSpill(stage, _rank_order) as spill:     # each rank's entry spilled as it comes back: written below
            summary = _analyze_tasks(tasks, opt, spill)
            if opt.gpu_only:
                notices = notices + [GPU_ONLY_NOTICE] + (
                    ["--op-perf: not written with --gpu-only (it measures CPU ops)"] if opt.op_perf else [])
            summary.update(notices=notices, seconds=round(time.time() - t0, 3), outdir=str(outdir),
                           warnings=skipped, gpu_only=opt.gpu_only)
            with atomic_output(stage / Analysis.marker, compress=False) as f:
                write_json(f, summary)
    summary["ranks"] = RankEntries(Path(outdir) / Analysis.marker, summary["ranks"].spans)
    return Analysis.of(outdir, summary)


def _analyze_tasks(tasks, opt, spill: RankSpill) -> dict:
    """Run the tasks (their ``outdir``: the staging folder); ``{"ranks", "pg_entries", "failed"}``:
    ``ranks`` the ranks' entries as ``JsonItems``, read back from ``spill`` (where each task's were put as
    they came back) in ``summary.json``'s order when written; ``pg_entries`` the ranks' process groups
    (``spill``'s ``ProcessGroups``)."""
    jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(tasks)))
    want = opt.jobs or os.cpu_count() or 1
    if len(tasks) == 1 and want > 1 and opt.split_jobs <= 1 and not scheduler_address(opt.scheduler) \
            and os.path.getsize(tasks[0].path) >= opt.split_threshold:
        opt = replace(opt, split_jobs=want)          # one big file: use every core on it
        tasks = [replace(t, opt=opt) for t in tasks]
    if opt.executor is None and not scheduler_address(opt.scheduler) and (
            jobs > 1 or any(not t.path.endswith(".sqlite") for t in tasks)):
        # before the fork: the workers share them (not one load each); in this process alone: LLVM's
        # set-up pages let go after (~56 MB of RSS: runtime.tuning.release_library_pages)
        load_kernels(*TASKS["analyze"])
    bars = _Bars([t.path for t in tasks], sys.stderr.isatty() if opt.progress is None else opt.progress)
    try:
        results = run_tasks(_run_task, [(t,) for t in tasks], jobs, bars.arr, bars.tick,
                            executor=opt.executor, scheduler=opt.scheduler, retries=1, keep_going=True,
                            on_result=spill.on_result)
    finally:
        bars.close()
    failed = [{"source": r.args[0].path, "error": r.error, "attempts": r.attempts}
              for r in results if isinstance(r, TaskFailure)]
    if failed and len(failed) == len(results) and len(results) == 1:
        raise StreamtraceError(failed[0]["error"])
    ranks = sorted((r for res in results if not isinstance(res, TaskFailure) for r in res), key=attrgetter("key"))
    del results
    seen = {}
    for r in ranks:             # a merged trace's ranks are known only now
        key = (r.iteration, r.rank)
        if key in seen:
            raise _conflict(r.rank, r.iteration, seen[key], r.source)
        seen[key] = r.source
    return {"ranks": JsonItems(spill.entries(ranks)), PG_ENTRIES_KEY: spill.groups.entries(), "failed": failed}


def _rank_order(r) -> tuple:
    """``summary.json``'s order of the ranks: by iteration (unknown first), then rank."""
    return UNKNOWN_ITERATION if r["iteration"] is None else r["iteration"], r["rank"]


def _tasks(inputs, opt, skipped: list) -> tuple[list[AnalyzeTask], list[str]]:
    """One task per trace file among ``inputs`` (``outdir`` still to be set), and the notices to
    show; a lone file with no rank is rank 0 (a notice says so); what is skipped is appended to
    ``skipped`` (one line each).  Raises ``RankConflictError`` (before anything is written)
    when two files are one partition."""
    rmap = load_rank_map(opt.rank_map) if opt.rank_map else None

    def warn(path, msg):
        skipped.append(f"{path}: {msg}")
    paths = expand_inputs(inputs, warn)
    tasks, notices = [], []
    nsys_base = 0                      # several exports: each one's processes after the previous one's
    for p in paths:
        try:
            tf = identify(p, rmap, warn=warn)
        except UnknownRankError:
            if len(paths) > 1:
                raise
            tasks.append(AnalyzeTask(str(p), "", 0, None, opt))
            notices.append(f"{p}: no rank in the trace or its name (a single-process run?): analysed as rank 0")
            continue
        if tf is not None and not tf.source.rank_per_file:     # an export: its ranks are its processes'
            tasks.append(AnalyzeTask(str(p), "", nsys_base, tf.iteration, opt))
            nsys_base += count_gpu_processes(p) if len(paths) > 1 else 0
        elif tf is not None:
            tasks.append(AnalyzeTask(str(p), "", tf.rank, tf.iteration, opt))
    if not tasks:
        raise nothing_found(inputs, skipped)
    claimed = {}
    for i, t in enumerate(tasks):      # one file's partition per (iteration, rank)
        if (t.iteration, t.rank) in claimed:
            raise _conflict(t.rank, t.iteration, claimed[(t.iteration, t.rank)], t.path)
        claimed[(t.iteration, t.rank)] = t.path
        t.slot = i
    return tasks, notices


def _run_task(task: AnalyzeTask) -> list[dict]:
    """Worker: one file; reports the bytes read into the shared progress array.  Each rank's process
    groups (``trace_metadata["pg_entries"]``, O(world size)) come back as their JSON text, which the
    parent reads into the job's table as the task's result comes back (``ProcessGroups``): 25 KB a rank at
    4,096 ranks instead of ~185 KB of Python objects, and not held for every rank until all are done."""
    shared = parallel.PROGRESS

    def report(n):
        shared[task.slot] = n
    out = analyze_file(task.path, task.outdir, task.rank, task.iteration, task.opt,
                       report if shared is not None else None)
    for r in out:
        tm = r.get("trace_metadata")
        if isinstance(tm, dict) and isinstance(tm.get(PG_ENTRIES_KEY), list):
            tm[PG_ENTRIES_KEY] = json.dumps(tm[PG_ENTRIES_KEY]).encode()
    return out


class _Bars:
    """tqdm progress (file bytes read): one bar per file for up to 16 files, else one
    bar for all; shown only on a terminal unless ``show`` says otherwise."""

    def __init__(self, paths, show):
        self.sizes = [os.path.getsize(p) for p in paths]
        self.arr = mp.Array("q", len(paths), lock=False)
        self.bars = []
        if show:
            if len(paths) <= 16:
                self.bars = [tqdm(total=sz, unit="B", unit_scale=True, position=i, leave=True,
                                  desc=os.path.basename(p)[-40:], file=sys.stderr)
                             for i, (p, sz) in enumerate(zip(paths, self.sizes))]
            else:
                self.bars = [tqdm(total=sum(self.sizes), unit="B", unit_scale=True, desc=f"{len(paths)} files",
                                  file=sys.stderr)]

    def tick(self, final=False):
        if len(self.bars) == 1 and len(self.sizes) > 1:
            self.bars[0].n = sum(self.sizes) if final else min(sum(self.arr), sum(self.sizes))
            self.bars[0].refresh()
            return
        for b, n, sz in zip(self.bars, self.arr, self.sizes):
            b.n = sz if final else min(n, sz)
            b.refresh()

    def close(self):
        self.tick(final=True)
        for b in self.bars:
            b.close()


def _conflict(rank, iteration, a, b):
    it = f" in iteration {iteration}" if iteration is not None else ""
    return RankConflictError(f"rank {rank}{it} appears in two inputs: {a} and {b}")
