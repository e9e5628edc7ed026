"""``streamtrace aggregate ANALYSED_DIR... -o OUTDIR``: the whole job at once.

From the ``streamtrace analyze`` folders of all ranks (one or more iterations) it writes, into
``OUTDIR`` (every file atomically; times int64 ns on the aligned axis of
``streamtrace.aggregate.alignment``, durations int64 ns):

* ``rank_phase.parquet`` / ``.csv`` — one row per (iteration, step, rank, device, phase, micro-batch);
* ``ranks.parquet`` / ``.csv`` — one row per (iteration, step, rank, device): the whole step;
* ``pipeline.parquet`` / ``.csv`` — one row per (iteration, step, PP group, stage): pipeline bubble;
* ``replicas.parquet`` / ``.csv`` — one row per (iteration, step, model replica);
* ``iterations.parquet`` / ``.csv`` — one row per (iteration, step);
* ``timeline.parquet`` — per rank, the union intervals of each kernel category (compute, memory,
  comm:<dim>) for the charts;
* ``top_kernels.parquet`` — kernel names by total time over all ranks;
* ``collectives.parquet``, ``collectives_ranks.parquet``, ``collectives_summary.{parquet,csv}``,
  ``stragglers.{parquet,csv}`` (see ``streamtrace.aggregate.collectives``), ``p2p.{parquet,csv}``
  (point-to-point transfers per rank pair, ``streamtrace.aggregate.p2p``);
* ``aggregate.json`` — inputs, alignment, clock offsets, topology, warnings, file list.

Metrics of a set of GPU events: ``streamtrace.aggregate.rank_metrics``; ``overlap_pct`` = 100 x
overlap / comm (percent of communication time).

``iteration`` is the trace file's iteration (``iteration_4/``, analyze's ``iteration=4``
partition; -1 unknown) and ``step`` the ``ProfilerStep#N`` number (-1: outside any step); the
Megatron patch's ``iteration_4/`` holds ``ProfilerStep#3``: iteration 4, step 3.  Column names
carry their unit: ``_ns`` int64 nanoseconds, ``_pct`` percent (0-100), ``_bytes``, ``_gbps``
(GB/s, GB = 1e9 bytes); other numbers are counts or indices.

A rank_phase row takes the kernels whose launch analyze attributed to that phase and micro-batch (their overlap is with each other only), so its numbers equal ``summary.json``'s
``phases`` entry (there in us).

Ranks without GPU events (CPU-only runs, e.g. gloo) get rows from their CPU ops instead
(``source`` = ``cpu``): phase windows from the ``forward_step`` / ``backward_step`` / ``optimizer``
annotations (micro-batch = ordinal within the ProfilerStep), communication = ``c10d::`` /
``gloo:`` / ``nccl:`` ops, compute = the other CPU ops not inside a communication op, both clipped
to the window; ``wall_ns`` = the window's duration.

Pipeline bubble (per iteration, PP group, stage; ``pipeline.parquet``, and each replica's mean in
``replicas.parquet``): the group's span minus the stage's forward/backward/recompute windows, the
one definition of ``streamtrace.aggregate.pipeline``.
"""
from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from ..analyze.outputs import KERNELS, OPS
from ..runtime.errors import StreamtraceError
from ..events.dataset import json_default, num_rows, write_table
from ..runtime.compile import CRITICAL_JOB_UNITS, TASKS, load as load_kernels
from ..runtime.files import atomic_output, output_folder, write_json
from ..runtime.fork import ChildError, Standby
from ..runtime.parallel import run_tasks
from ..runtime.progress import progress_bar
from ..runtime.tuning import map_big_arrays, trim
from ..topology.sources import load_topology
from ..topology.trainconfig import config_topology, from_torchtitan_toml
from .alignment import Job, JobParts
from ..events.collmatch import mismatch_warning
from .collective_rows import RankDims, rank_dims
from .collective_spill import collectives_to
from .critical_graph import Texts
from .critical_local import part_paths, part_reads
from .critical_path import critical_paths
from .critical_pieces import PieceFile, spill_piece
from .whatif import LINK_KEYS, write_whatif
from .whatif_graphs import GraphSpill, spill_share
from .whatif_local import ReplayRows
from .whatif_spill import SpilledRows, spill_rows
from .groups import write_groups
from .opperf import write_op_perf
from .p2p import p2p_rows, write_p2p
from .pipeline import phase_windows, pipeline_rows, replica_rows, span_means
from .timeline import join as join_timeline, write_part as write_timeline_part
from .explain import packed, part_tables, spill as spill_explain, write_tables as write_explain
from .folder import TABLES, Aggregate, owned, read_aggregate_table  # noqa: F401 (re-exported)
from .folder import (ITERATIONS, ITERATIONS_COLUMNS, PIPELINE, PIPELINE_COLUMNS, RANK_PHASE,
                     RANK_PHASE_COLUMNS, RANKS, RANKS_COLUMNS, REPLICAS, REPLICAS_COLUMNS, STRAGGLERS,
                     STRAGGLERS_COLUMNS, TOP_KERNELS, TOP_KERNELS_COLUMNS)
from .options import AggregateOptions
from .rank_phase import PhaseTable, phase_order
from .rank_results import Kept, RowColumns, RowRules, column_array
from .rank_rows import GPU_PART_COLUMNS, STEP_COLUMNS, cpu_rows, gpu_rows, step_ops

# -- one rank ----------------------------------------------------------------------------

def part_view(job, index, dims: dict | None = None):
    """A copy of ``job`` that carries only part ``index`` (``parts`` a one-entry dict, no topology but
    its rank's groups, ``rank_dims``: its ``RankDims`` of ``dims``, ``rank_dims(job.topology)`` built once
    for every part's view; None: built here):
    what a worker needs, cheap to send (a task holding the whole job would cost O(ranks) to pickle,
    O(ranks^2) for all of them)."""
    view = copy.copy(job)
    view.parts = {index: job.parts[index]}
    rank = job.parts[index].rank
    if job.topology is None:
        view.rank_dims = None
    else:
        view.rank_dims = (dims if dims is not None else rank_dims(job.topology)).get(rank) or RankDims({})
    view.topology, view.warnings, view.dirs = None, [], []
    return view


def _part_job(job, index, kernel_delay_ns=30_000, spill=None, critical_spill=None, replay=None, graph_bytes=0,
              explain_spill=None):
    """One part's rows; with ``spill`` (a folder) its timeline rows go to a record there (``write_part``, returned
    in their place) so the parent never holds every part's timeline, with ``explain_spill`` (a folder) its
    explaining tables (``explain.spill``), with ``replay`` its what-if rows (``spill_rows``)
    and, ``graph_bytes`` > 0, its step graphs up to that size (``whatif_graphs.GraphSpill``).  The records
    of a folder go to one file a worker process (``runtime.spillfile``), not one a part and table."""
    part = job.parts[index]
    # read once for all: the rank's rows, steps, critical path and explaining tables
    tables = part_reads(part, GPU_PART_COLUMNS, STEP_COLUMNS) if critical_spill is not None else None
    kernels = tables[KERNELS] if tables is not None else None
    has_kernels = kernels.num_rows > 0 if kernels is not None else \
        tables is None and sum(num_rows(f) for f in part.files(KERNELS)) > 0
    rows = gpu_rows(job, part, kernels) if has_kernels else None
    if rows is None or not rows[1]:
        rows = cpu_rows(job, part)
    steps = step_ops(part, tables[OPS] if tables is not None else None)
    tl = rows[3] if spill is None else write_timeline_part(spill, index, part.rank, rows[3])
    rep = ReplayRows(job.iteration_of(part), part.index, part.rank) if critical_spill is not None and replay else None
    graphs = GraphSpill(replay, index, graph_bytes) if rep is not None and graph_bytes > 0 else None
    on_step = None if rep is None else rep.add if graphs is None else lambda *a: (rep.add(*a), graphs.add(*a))
    cp = spill_piece(part_paths(job, part, critical_spill, tables, on_step),
                     critical_spill) if critical_spill is not None else None
    ex = part_tables(job, part, kernel_delay_ns, tables)
    ex = packed(ex) if explain_spill is None else spill_explain(explain_spill, ex)
    return rows[:3] + (tl,) + rows[4:] + (steps, ex, cp,
                                          spill_rows(rep.result(), replay, index, graphs and graphs.close())
                                          if rep is not None else None, index)


def job_critical_path(job, pieces: list, outdir):
    """``critical_paths`` of the parts' pieces spilled by ``spill_piece`` (their records, in part order; None
    for a part without one): what aggregate's job-level process runs.  Each piece's graph is read when
    its step is built (``critical_pieces``), its names and lanes coded into one ``Texts`` across the parts."""
    return critical_paths(job, [PieceFile(p) if p else None for p in pieces], outdir, Texts())


# -- the job -----------------------------------------------------------------------------

def _columns(rows: list, order: list) -> dict:
    """Row dicts -> column arrays (object arrays where a value is a str or None)."""
    return {c: column_array([r.get(c) for r in rows]) for c in order}


def _pct(num, den):
    return None if not den else round(100.0 * num / den, 3)


def aggregate(dirs, outdir, opt: AggregateOptions | None = None, log=None) -> Aggregate:
    """Aggregate analysed folders ``dirs`` into ``outdir`` (see the module docstring).  ``outdir`` is
    one unit (written into a staging folder that replaces it at the end,
    ``output_folder``).

    Parameters
    ----------
    dirs : list of str or Path
        Analysis folders (``streamtrace analyze -o``), one or more iterations of one job.
    outdir : str or Path
        The aggregate folder (its tables: ``TABLES``, docs/aggregate.md).
    opt : AggregateOptions, optional
        The options (default ``AggregateOptions()``).
    log : callable, optional
        Unused; kept for existing callers.

    Returns
    -------
    streamtrace.aggregate.folder.Aggregate
        The folder as ``streamtrace.load(outdir)`` returns it (its tables as pyarrow, pandas,
        polars).  Its ``summary`` is the ``aggregate.json`` dict, also read through the object:
        ``res["ranks"]``, ``res.get("warnings")``.

    Raises
    ------
    StreamtraceError
        On bad input (``DataError`` naming a damaged file of an
        analysed folder).
    OutputError
        When ``outdir`` cannot be written.
    """
    with output_folder(outdir, owned=owned, inputs=dirs) as stage:
        meta = aggregate_into(dirs, stage, opt)
    return Aggregate.of(outdir, meta)


def aggregate_into(dirs, outdir, opt: AggregateOptions | None = None) -> dict:
    """``aggregate``, writing straight into the existing folder ``outdir`` (a staging
    folder: ``report`` aggregates and reports into one unit): the job (``_open_job``), one pass
    over its ranks (``_rank_pass``), the job's tables (``_write_job_tables``), then
    ``aggregate.json`` (``_meta``), written last."""
    opt = opt or AggregateOptions()
    t0 = time.time()
    outdir = Path(outdir)
    try:
        with _job_level_process(opt, dirs) as job_level:
            meta = _aggregate(dirs, outdir, opt, job_level)
    except ChildError as e:
        if e.kind is not None:                       # its own exception, one that could not travel: as it is
            raise
        raise StreamtraceError(f"aggregate's job-level process (the critical path, the what-if replay): {e}; "
                               "--no-whatif, or --no-critical-path, leaves it out") from None
    meta.update(seconds=round(time.time() - t0, 3))
    with atomic_output(outdir / Aggregate.marker, compress=False) as f:
        write_json(f, meta, json_default)
    return meta


@dataclass
class JobLevel:
    """The processes aggregate's job level runs in, each a ``Standby`` forked at the start, before the
    job is opened: ``critical`` the job's critical path (``critical_paths``), ``whatif`` the what-if
    replay after it (``write_whatif``)."""
    critical: Standby
    whatif: Standby


SMALL_JOB_BYTES = 16 << 20
"""Below this much analysed Parquet in aggregate's inputs, its job level runs in its own process: forking
the standby process costs ~0.05 CPU-s (the copy-on-write faults of both processes after it; the 8 x A100 job,
4.8 MB of Parquet: 1.66-1.76 -> 1.58-1.65 CPU-s), more than a small job's job-level graphs would add to its
peak (the forks spare ~130-190 MB at 1,024 synthetic ranks, 84 MB of Parquet)."""


def _input_bytes(dirs, limit: int) -> int:
    """The bytes of the Parquet files under ``dirs``, counted up to just past ``limit``."""
    total = 0
    for d in dirs:
        for root, _, files in os.walk(d):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".parquet"))
            if total > limit:
                return total
    return total


@contextmanager
def _job_level_process(opt: AggregateOptions, dirs=()):
    """The ``JobLevel`` processes (a context manager): forked while this process is small, so that
    their graphs (at 1,024 synthetic ranks +130 and +190 MB) do not come on top of what the parent
    holds by then (~320 MB); with the kernels they call loaded first, so that they share numba's set-up
    (the what-if's process re-reduces ranks: every unit of the aggregate; the critical path's calls the
    job level's three, ``CRITICAL_JOB_UNITS``, and is forked before the others are loaded: they held ~8 MB
    of its process, 4,096 synthetic ranks' critical path 88 -> 80 MB at its start).
    The replay has a process of its own, not the critical path's: what the critical path's solve leaves
    in its process (glibc's and Arrow's freed memory that ``malloc_trim`` cannot return, the modules it
    imported) does not come under the replay's peak (4,096 synthetic ranks: the critical path's process
    at 509 MB, 282 MB after it returned).  Neither is forked without the critical path
    (the replay needs it), nor for a job under ``SMALL_JOB_BYTES`` of Parquet (``dirs``: the inputs).
    Both map their large arrays on their own (``runtime.tuning.map_big_arrays``): a freed one is
    handed back at once, not held in glibc's heap under the next phase's peak."""
    fork = bool(opt.critical_path) and _input_bytes(dirs, SMALL_JOB_BYTES) > SMALL_JOB_BYTES
    if fork:
        load_kernels(*CRITICAL_JOB_UNITS)
    with Standby(fork, map_big_arrays) as critical:
        if fork and opt.whatif:                          # (after the critical path's fork: not in its process)
            load_kernels(*TASKS["aggregate"])
        with Standby(fork and opt.whatif, map_big_arrays) as whatif:
            yield JobLevel(critical, whatif)


def _aggregate(dirs, outdir: Path, opt: AggregateOptions, job_level: JobLevel) -> dict:
    """``aggregate_into`` but for ``aggregate.json``'s ``seconds`` and its writing; returns its dict.
    The job's critical path runs in ``job_level.critical`` while this process writes the ranks' tables
    (at once with ``-j 1``), the what-if replay in ``job_level.whatif`` after them."""
    job, tcfg = _open_job(dirs, opt)
    if job.clock_sync != opt.clock_sync and job.clock_sync == "collectives":     # chosen for clocks days apart
        opt = replace(opt, clock_sync="collectives")
    explain = Path(tempfile.mkdtemp(prefix=".rank-spill.", dir=outdir))    # (the ranks' explaining tables and
    try:                                                                     # what the job's tables gather)
        coll, files, layout, res, pieces, replay, kept = _rank_pass(job, outdir, opt, explain)
    except BaseException:
        shutil.rmtree(explain, ignore_errors=True)
        raise
    parts = JobParts(job.steps, job.parts)             # (aligned: the clock offsets are set)
    cp = None
    try:
        if pieces is not None:
            job_level.critical.submit(job_critical_path, parts, pieces[1], outdir)
            if opt.jobs == 1:
                cp = job_level.critical.result()
            trim()                   # (the call's pickle, sent: not held in the heap under the job's tables)
        topo = job.topology
        phase_rows, rank_rows, fb, steps = _gather(job, res, kept, explain)
        if not rank_rows.n:
            raise StreamtraceError(f"{', '.join(map(str, dirs))}: no GPU events and no ProfilerStep windows to "
                                   "aggregate" + (f" in step(s) {sorted(job.steps)}" if job.steps else ""))
        explained = [r[6] for r in res]
        res.clear()                  # (the ranks' results, gathered)
        facts = _rank_facts(rank_rows)
        files += _write_job_tables(outdir, topo, phase_rows, rank_rows, fb, kept.top.result(), steps)
        del phase_rows, rank_rows, fb, kept, steps    # (written: not held under the explaining tables)
        trim()
        files += write_explain(outdir, explained)
        del explained
        files += write_p2p(outdir, p2p_rows(coll.transfers, topo))
        files += write_op_perf(outdir, job.parts)
        meta = _meta(dirs, opt, job, tcfg, coll, layout, facts)
        if pieces is not None and cp is None:
            cp = job_level.critical.result()
    finally:
        shutil.rmtree(explain, ignore_errors=True)
        if pieces is not None:
            shutil.rmtree(pieces[0], ignore_errors=True)
    if cp is not None:
        files += cp.files
        meta["critical_path"] = cp.stats
        meta["warnings"] += cp.warnings
    if cp is not None and opt.whatif:                # what a fix buys: the step replayed (whatif.py)
        try:
            links = {k: meta.get(k) for k in LINK_KEYS}    # (what it reads of meta: not 4,096 parts' facts, ~30 MB)
            trim()                   # (the tables' writers' buffers handed back before the call's pickle is made)
            job_level.whatif.submit(write_whatif, parts, outdir, replay, links, max(1, opt.jobs or os.cpu_count() or 1))
            trim()                   # (the call's pickle, sent: handed back while the replay runs, not held under
            files += job_level.whatif.result()       # what this process does after it: 4,096 synthetic ranks ~5 MB)
        finally:
            replay.close()
    meta.update(files=sorted(p.name for p in files) + [Aggregate.marker])
    return meta


def _open_job(dirs, opt: AggregateOptions) -> tuple:
    """``(Job, TrainConfig or None)``: the analysed folders ``dirs`` as one job, with the topology of
    ``opt.topology``, else of ``opt.torchtitan_config``'s mesh (when given), else the traces'."""
    topo = load_topology(opt.topology) if opt.topology else None
    tcfg = from_torchtitan_toml(opt.torchtitan_config) if opt.torchtitan_config else None
    if tcfg is not None and topo is None:
        topo = partial(config_topology, tcfg)
    job = Job(dirs, opt.time_alignment, topo, opt.iterations, opt.jobs, opt.steps, opt.force, opt.progress,
              opt.clock_sync)
    if job.clocks_apart_days is not None:        # one job on hosts whose clocks differ by days (issue 49)
        auto = opt.clock_sync in (None, "none")
        job.warnings.append(f"the ranks' traces started {job.clocks_apart_days:,.1f} days apart (baseTimeNanoseconds) "
                            "but state one world size, one set of process groups and the same steps: one job on "
                            "hosts whose clocks differ; " + ("their offsets estimated from the collectives "
                                                            "(--clock-sync collectives, chosen for them)" if auto else
                                                            "their offsets estimated from the collectives"))
        if auto:
            job.clock_sync = "collectives"
    return job, tcfg


def _rank_pass(job, outdir: Path, opt: AggregateOptions, explain=None) -> tuple:
    """The collectives matched across ranks (their tables written, the stragglers' too: the result's
    ``stragglers`` empty), then one task per rank (``_part_job``, in worker
    processes), whose timelines and critical-path pieces are spilled into ``outdir`` and joined, and
    whose explaining tables, and what the job's tables gather of them (``rank_results.Kept``), are spilled
    into the folder ``explain`` (None: held in the results).
    Returns ``(collectives, files written, inferred layout of the process groups, the ranks' results,
    the critical path's pieces: ``(spill folder, [the record of each part's piece])``, which the caller
    removes, or None, the ranks' what-if rows: ``SpilledRows`` or None, the ``Kept`` that kept the results:
    their top kernels summed, ``gathered`` reads the rest back)``."""
    spill = Path(tempfile.mkdtemp(prefix=".timeline-spill.", dir=outdir))
    cp_spill = Path(tempfile.mkdtemp(prefix=".critical-spill.", dir=outdir)) if opt.critical_path else None
    wi_spill = Path(tempfile.mkdtemp(prefix=".whatif-spill.", dir=outdir)) if cp_spill and opt.whatif else None
    try:
        jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(job.parts)))
        coll, files = collectives_to(job, outdir, opt.clock_sync, opt.collective_bucket_rows, jobs)
        if coll.stragglers:      # (written now, not held through the ranks' pass: 24.6 k dicts, 4.2 MB at 4,096 ranks)
            files += write_table(outdir, STRAGGLERS, _columns(coll.stragglers, STRAGGLERS_COLUMNS), csv=True)
            coll = replace(coll, stragglers=[])
        trim()          # (the collectives' buckets, freed: ~50 MB of the parent's heap at 4,096 ranks, not
        layout = write_groups(outdir, sorted({p.rank for p in job.parts}), files)      # under the groups')
        trim()
        # before the fork: the workers share the kernels and numba's set-up (with one job too: LLVM's
        # set-up pages let go after, runtime.tuning.release_library_pages)
        load_kernels(*TASKS["aggregate"])
        share = spill_share(len({p.rank for p in job.parts}), len(job.parts)) if wi_spill else 0
        kept = Kept(None if explain is None else Path(explain) / "gathered.pickle")  # (as they come back:
                                      # the top kernels summed, what the job's tables gather spilled)
        dims = rank_dims(job.topology) if job.topology is not None else None     # (every view's, shared)
        with progress_bar(len(job.parts), "aggregate", "rank", opt.progress) as bar:
            res = run_tasks(_part_job, [(part_view(job, p.index, dims), p.index, opt.consecutive_kernel_delay_ns, spill,
                                         cp_spill, wi_spill, share, explain) for p in job.parts], jobs,
                            on_done=bar.update, on_result=kept)
        del dims
        pieces = (cp_spill, [r[7] for r in res]) if cp_spill is not None else None
        replay = SpilledRows(wi_spill, kept.replay_rows(res)) if wi_spill else None   # (write_whatif removes it)
        res = [r[:7] + (None,) for r in res]  # (the pieces in ``pieces``, the what-if rows joined: before the
        files += join_timeline(outdir, [r[3] for r in res])                        # timeline's join, not under it)
        trim()
    except BaseException:
        if cp_spill is not None:
            shutil.rmtree(cp_spill, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return coll, files, layout, res, pieces, replay, kept


def _write_job_tables(outdir, topo, phase_rows, rank_rows, fb, top, steps) -> list:
    """The per-rank rows (``_gather``'s: the phase rows a ``PhaseTable``, the rank rows ``RowColumns``, both
    completed with their topology coordinates, overlap and step time by their ``RowRules``), written as
    ``rank_phase``, ``ranks``, ``pipeline``, ``replicas``, ``iterations``, ``top_kernels``.  Returns the files
    written."""
    pipe = pipeline_rows(topo, None, fb, phase_rows.windows)
    cols = {c: rank_rows.column(c) for c in ("iteration", "step", "rank", "start_ns", "end_ns", "compute_ns",
                                             "comm_ns", "exposed_comm_ns", "idle_ns")}
    reps = replica_rows(topo, cols, pipe)
    iters = _iterations(cols, steps)
    del cols
    files = write_table(outdir, PIPELINE, _columns(pipe, PIPELINE_COLUMNS), csv=True) if pipe else []
    if reps:                 # (the small tables first: their rows as dicts, 2.8 MB at 4,096 synthetic ranks,
        files += write_table(outdir, REPLICAS, _columns(reps, REPLICAS_COLUMNS), csv=True)  # not held under
    files += write_table(outdir, ITERATIONS, _columns(iters, ITERATIONS_COLUMNS), csv=True)  # the rank tables')
    del pipe, reps, iters
    files += phase_rows.write(outdir, RANK_PHASE)             # (its chunks read back a row group at a time)
    cols, rows = rank_rows.columns(RANKS_COLUMNS, phase_order)
    files += write_table(outdir, RANKS, cols, csv=True, rows=rows)
    del cols, rows
    topk = sorted(top.items(), key=lambda x: -x[1][2])
    files += write_table(outdir, TOP_KERNELS, {"name": np.asarray([n for n, _ in topk], object),
                                                 "kind": np.asarray([v[0] for _, v in topk], object),
                                                 "count": np.asarray([v[1] for _, v in topk], np.int64),
                                                 "total_ns": np.asarray([v[2] for _, v in topk], np.int64)},
                         TOP_KERNELS_COLUMNS)
    return files


def _rank_facts(rank_rows) -> dict:
    """What ``aggregate.json`` says of the rank rows (``RowColumns``): their iterations, (iteration, step)
    pairs and sources."""
    its, sts = rank_rows.column("iteration"), rank_rows.column("step")
    return {"iterations": sorted(set(its)), "steps": [list(k) for k in sorted(set(zip(its, sts)))],
            "sources": sorted(set(rank_rows.column("source")))}


def _meta(dirs, opt: AggregateOptions, job, tcfg, coll, layout, facts: dict) -> dict:
    """``aggregate.json`` but for ``files`` and ``seconds``: what was aggregated, how, and the job's facts
    (``facts``: ``_rank_facts``')."""
    topo = job.topology
    return {"kind": "streamtrace-aggregate", "version": 1, "inputs": [str(d) for d in dirs],
            "time_alignment": opt.time_alignment, "clock_sync": opt.clock_sync or "none",
            "consecutive_kernel_delay_ns": opt.consecutive_kernel_delay_ns,
            "iterations": facts["iterations"], "steps": facts["steps"],
            "ranks": sorted({p.rank for p in job.parts}), **_world(topo, job),
            "sources": facts["sources"], "job_name": job.name(),
            "devices": sorted({p.device_name for p in job.parts if p.device_name}),
            "topology": topo.to_json() if topo else None,
            "train_config": tcfg.resolve(_world(topo, job)["world_size"]).to_json() if tcfg else None,
            "clock_offsets_ns": {str(job.parts[i].rank): v for i, v in coll.clock_offsets.items()},
            "clock_components": {str(job.parts[i].rank): v for i, v in coll.clock_components.items()},
            "collectives": coll.stats, "collective_summary": coll.summary, "inferred_layout": layout,
            "parts": job.meta()["parts"], "warnings": job.warnings + _collective_warnings(opt, coll, job)}


def _gather(job, res, kept: Kept, spill=None) -> tuple:
    """The parts' results (``_part_job``, in part order, as ``kept`` keeps them) joined: phase rows (a
    ``PhaseTable``, with their topology coordinates and overlap share, their chunks spilled into the folder
    ``spill``, None: held, and their pipeline windows), rank rows (``RowColumns``, with the coordinates, the
    overlap share and the step time), the forward/backward compute per (rank, iteration, step, device) and
    step durations per (rank, iteration, step)."""
    fb, steps = {}, {}
    rules = RowRules(_coords(job.topology), {"overlap_pct": (_pct, ("overlap_ns", "comm_ns"))})
    phase_rows = PhaseTable(RANK_PHASE_COLUMNS, rules, phase_windows, spill)
    rank_rows = RowColumns(RANKS_COLUMNS, RowRules(rules.coords, {
        **rules.derived, "step_ns": (lambda rank, it, st: steps.get((rank, it, st)), ("rank", "iteration", "step"))}))
    for part, (pr, rr, f, st) in zip(job.parts, kept.gathered(res)):
        phase_rows.add(pr)
        rank_rows.add(rr)
        fb.update({(part.rank, it, stp, dev): v for (it, stp, dev), v in f.items()})
        for num, (_, d) in st.items():
            steps[(part.rank, job.iteration_of(part), num)] = d
    return phase_rows, rank_rows, fb, steps


def _collective_warnings(opt, coll, job) -> list:
    """The ranks that missed or added a collective (one line), and one line when ``--clock-sync
    collectives`` found nothing to estimate from (as merge's ``--align collectives`` says it)."""
    out = mismatch_warning([dict(zip(coll.mismatches, row)) for row in zip(*coll.mismatches.values())],
                           "collectives")
    if opt.clock_sync != "collectives" or coll.clock_offsets or len({p.rank for p in job.parts}) < 2:
        return out
    return out + ["--clock-sync collectives: no collective kernel (NCCL/RCCL) is matched across ranks (a CPU-only or "
            "gloo job: its collectives are matched, but their ends are not tied together): no clock offset is "
            "estimated"]


def _world(topo, job) -> dict:
    """``world_size`` and where it comes from: the topology, else the traces' ``distributedInfo``."""
    worlds = [p.world_size for p in job.parts if p.world_size]
    if topo is not None:
        return {"world_size": topo.world_size, "world_size_from": f"topology ({topo.source or 'file'})"}
    if worlds:
        return {"world_size": max(worlds), "world_size_from": "distributedInfo.world_size"}
    return {"world_size": None, "world_size_from": None}


def _coords(topo) -> dict:
    if topo is None:
        return {}
    out = {}
    for gi, g in enumerate(topo.groups["pp"]):
        for st, r in enumerate(g):
            out.setdefault(r, {})["pp_group"] = gi
            out[r]["stage"] = st
    for ri, g in enumerate(topo.replicas):
        for r in g:
            out.setdefault(r, {})["replica"] = ri
    return out


def _iterations(ranks, steps) -> list:
    """``iterations.parquet``'s rows, one per (iteration, step) of ``ranks`` (the ``ranks`` table's columns,
    ``{column: list}``): its ranks, span, step time (median, max of ``steps``' durations) and means."""
    rows = []
    of: dict = {}
    for i, key in enumerate(zip(ranks["iteration"], ranks["step"])):
        of.setdefault(key, []).append(i)
    for it, step in sorted(of):
        rr = of[(it, step)]
        st = [d for (rank, i2, s2), d in steps.items() if (i2, s2) == (it, step)]
        span = span_means(ranks, rr, ("compute_ns", "comm_ns", "exposed_comm_ns"))
        rows.append({"iteration": it, "step": step, "ranks": len({ranks["rank"][i] for i in rr})}
                    | {k: span.pop(k) for k in ("start_ns", "end_ns", "span_ns")}
                    | {"step_ns_median": int(np.median(st)) if st else None, "step_ns_max": max(st) if st else None}
                    | span)
    return rows
