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
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from ..analyze import classify
from ..analyze.outputs import KERNELS, OPS
from ..analyze.patterns import Patterns
from ..runtime.errors import StreamtraceError
from ..events.dataset import json_default, num_rows, write_table
from ..kernels import intervals
from ..runtime.compile import TASKS, load as load_kernels
from ..runtime.files import atomic_output, output_folder
from ..runtime.parallel import run_tasks
from ..runtime.progress import progress_bar
from ..topology.sources import load_topology
from ..topology.trainconfig import config_topology, from_torchtitan_toml
from .alignment import Job, kernel_columns
from ..events.collmatch import mismatch_warning
from .collective_rows import RankDims, fill_dims
from .collective_spill import collectives_to
from .collectives import P2P
from .critical_local import part_paths, part_reads
from .critical_path import critical_paths
from .whatif import write_whatif
from .whatif_local import ReplayRows
from .whatif_spill import SpilledRows, spill_rows
from .groups import write_groups
from .opperf import write_op_perf
from .p2p import p2p_rows, write_p2p
from .pipeline import pipeline_rows, replica_rows
from .timeline import join as join_timeline, write_part as write_timeline_part
from .explain import packed, part_tables, write_tables as write_explain
from .folder import TABLES, Aggregate, owned, read_aggregate_table  # noqa: F401 (re-exported)
from .folder import (ITERATIONS, ITERATIONS_COLUMNS, PIPELINE, PIPELINE_COLUMNS, RANK_PHASE,
                     RANK_PHASE_COLUMNS, RANKS, RANKS_COLUMNS, REPLICAS, REPLICAS_COLUMNS, STRAGGLERS,
                     STRAGGLERS_COLUMNS, TOP_KERNELS, TOP_KERNELS_COLUMNS)
from .options import AggregateOptions
from .rank_metrics import KIND_CODE, clipped_length, interval_metrics  # noqa: F401 (re-exported)

FB = ("forward", "backward", "recompute")
_CPU_COMM = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms)")
_P2P_OP = re.compile(r"send|recv", re.I)          # a communication op that is a pipeline send / receive


# -- one rank ----------------------------------------------------------------------------

STEP_COLUMNS = ["name", "ts_ns", "dur_ns"]


def _steps(part, ops=None) -> dict:
    """``{step number: (ts_ns, dur_ns)}`` of the part's step ops (rank-local): ``ProfilerStep#N``, or
    the step names analyze used for it (``steps``); the last
    op of a number wins.  ``ops``: the part's ops table already read (with ``STEP_COLUMNS``), or None."""
    t = part.read(OPS, STEP_COLUMNS) if ops is None else ops.select(STEP_COLUMNS)
    if t is None:
        return {}
    steps = part.steps
    if steps.default:                        # a cheap filter first: most ops are no step
        t = t.filter(pc.starts_with(t["name"], "ProfilerStep#"))
    out = {}
    for n, s, d in zip(t["name"].to_pylist(), t["ts_ns"].to_pylist(), t["dur_ns"].to_pylist()):
        num = steps.number(n)
        if num >= 0:
            out[num] = (s, d)
    return out


GPU_PART_COLUMNS = ("device", "ts_ns", "end_ns", "kind", "phase", "microbatch", "iteration", "step", "name",
                    "parallel_dim", "pg_ranks", "collective")


def _gpu_part(job, part, kernels=None):
    """``kernels``: the part's kernels table already read (with ``GPU_PART_COLUMNS``), or None."""
    k = job.read_kernels(part, columns=GPU_PART_COLUMNS) if kernels is None else \
        kernel_columns(kernels, GPU_PART_COLUMNS, job, part)
    s, e = part.align(k["ts_ns"]), part.align(k["end_ns"])
    code = np.asarray([KIND_CODE.get(x, 0) for x in k["kind"]], np.int8)
    dim = np.asarray(k["parallel_dim"], object).copy()
    comm = code == 1                    # the collectives' dimension: a topology names what analyze did not
    dim[comm] = fill_dims(dim[comm], np.asarray(k["pg_ranks"], object)[comm], getattr(job, "rank_dims", None))
    phase_rows, rank_rows, fb, timeline = [], [], {}, []
    it_dev = sorted(set(zip(k["iteration"].tolist(), k["step"].tolist(), k["device"].tolist())))
    for it, st, dev in it_dev:
        m = (k["step"] == st) & (k["device"] == dev)         # one part: one iteration
        rank_rows.append({"iteration": it, "step": st, "rank": part.rank, "device": dev, "source": "gpu",
                          **interval_metrics(s[m], e[m], code[m])})
        keys = sorted(set(zip(k["phase"][m].tolist(), k["microbatch"][m].tolist())),
                      key=lambda x: (x[1], x[0]))
        for ph, mb in keys:
            r = m & (k["phase"] == ph) & (k["microbatch"] == mb)
            row = {"iteration": it, "step": st, "rank": part.rank, "device": dev, "phase": ph, "microbatch": mb,
                   "source": "gpu",
                   **interval_metrics(s[r], e[r], code[r])}
            c = r & (code == 0)
            row["compute_start_ns"] = int(s[c].min()) if c.any() else None
            row["compute_end_ns"] = int(e[c].max()) if c.any() else None
            phase_rows.append(row)
        c = m & (code == 0) & np.isin(k["phase"], FB)
        if c.any():
            us, ue = intervals.union(s[c], e[c])
            pp = m & comm & (np.isin(dim, ("PP", "pp")) | np.isin(k["collective"], P2P))
            fb[(it, st, dev)] = (int(s[c].min()), int(e[c].max()), intervals.union_length(us, ue),
                                 int(len(set(k["microbatch"][c & (k["phase"] == "forward")].tolist()))),
                                 _pipeline_wait(phase_rows, st, dev, s, e, m & (code == 0), pp))
        cat = np.where(code == 0, "compute", np.where(code == 2, "memory", "comm:" + dim.astype(str)))
        for cname in sorted(set(cat[m].tolist())):
            cm = m & (cat == cname)
            us, ue = intervals.union(s[cm], e[cm])
            timeline.append((it, st, dev, cname, us, ue))
    top: dict = {}
    if len(k["name"]):
        code_of: dict = {}       # np.unique of the names as str, without a <U(longest name) copy (44 MB a rank)
        inv = np.fromiter((code_of.setdefault(str(x), len(code_of)) for x in k["name"]), np.int64, len(k["name"]))
        names = sorted(code_of)
        rank = np.empty(len(names), np.int64)
        rank[[code_of[n] for n in names]] = np.arange(len(names))
        inv = rank[inv]
        tot = np.bincount(inv, weights=(e - s).astype(np.float64), minlength=len(names))
        cnt = np.bincount(inv, minlength=len(names))
        first = np.zeros(len(names), np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]
        for j, n in enumerate(names):
            top[n] = (k["kind"][first[j]], int(cnt[j]), int(tot[j]))
    return phase_rows, rank_rows, fb, timeline, top


def _pipeline_wait(phase_rows, step, dev, s, e, compute, p2p) -> int:
    """ns a GPU spends inside its forward / backward / recompute windows (``phase_rows`` of ``step``
    on ``dev``) in pipeline sends and receives (mask ``p2p``) while it computes nothing (mask
    ``compute``): its wait for the neighbour stage inside a micro-batch
    (``streamtrace.aggregate.pipeline``)."""
    w = [(r["start_ns"], r["end_ns"]) for r in phase_rows
         if r["step"] == step and r["device"] == dev and r["phase"] in FB and r["start_ns"] is not None]
    if not w or not p2p.any():
        return 0
    ws, we = intervals.union(np.asarray([a for a, _ in w], np.int64), np.asarray([b for _, b in w], np.int64))
    inside = intervals.intersect(*intervals.union(s[p2p], e[p2p]), ws, we)
    return intervals.subtract_length(*inside, *intervals.union(s[compute], e[compute]))


def _outermost(s, e, sel) -> list:
    """The outermost of the windows ``sel`` (int64 indices into the start / end arrays ``s``, ``e``, ns),
    by start: a window inside one kept before it is left out (optimizer > Optimizer.step#...)."""
    sel = sel[np.lexsort((-e[sel], s[sel]))]
    outer, reach = [], None
    for j in sel.tolist():
        if reach is None or s[j] >= reach:
            outer.append(j)
            reach = e[j]
    return outer


def _cpu_part(job, part):
    """Rows from the CPU ops of a rank without GPU events (see the module docstring)."""
    t = part.read(OPS, ["name", "cat", "ts_ns", "dur_ns", "parent"])
    if t is None:
        return [], [], {}, [], {}
    name = t["name"].to_numpy(zero_copy_only=False).astype(str)
    cat = t["cat"].to_numpy(zero_copy_only=False).astype(str)
    ts, dur, parent = (t[c].to_numpy() for c in ("ts_ns", "dur_ns", "parent"))
    if not len(ts):
        return [], [], {}, [], {}
    pats = Patterns.load()
    pats.step = part.steps.regex              # the step names analyze used (streamtrace.aggregate.steps)
    uniq, inv = np.unique(name, return_inverse=True)
    inv = inv.reshape(-1)
    ph_code, _, _, step_no, _ = classify.name_flags(uniq.tolist(), pats)
    ph, step = ph_code[inv], step_no[inv]
    is_comm = np.asarray([bool(_CPU_COMM.search(x)) for x in uniq.tolist()])[inv]
    in_comm = is_comm.copy()
    for _ in range(64):            # inside a communication op: propagate down the tree
        nxt = in_comm | ((parent >= 0) & in_comm[np.maximum(parent, 0)])
        if (nxt == in_comm).all():
            break
        in_comm = nxt
    s, e = part.align(ts), part.align(ts + dur)
    comp = (cat == "cpu_op") & ~in_comm
    cu = intervals.union(s[comp], e[comp])
    co = intervals.union(s[is_comm], e[is_comm])
    p2p_op = is_comm & np.asarray([bool(_P2P_OP.search(x)) for x in uniq.tolist()])[inv]
    p2p = intervals.union(s[p2p_op], e[p2p_op])
    both = intervals.intersect(co[0], co[1], cu[0], cu[1])
    allu = intervals.union(np.concatenate([cu[0], co[0]]), np.concatenate([cu[1], co[1]]))
    ws, we = s[step >= 0], e[step >= 0]
    wnum = step[step >= 0]
    o = np.argsort(ws)
    ws, we, wnum = ws[o], we[o], wnum[o]
    phase_rows, rank_rows, fb = [], [], {}

    def window_row(lo, hi):
        compute, comm = clipped_length(*cu, lo, hi), clipped_length(*co, lo, hi)
        overlap, busy = clipped_length(*both, lo, hi), clipped_length(*allu, lo, hi)
        return {"kernels": 0, "start_ns": int(lo), "end_ns": int(hi), "wall_ns": int(hi - lo), "busy_ns": busy,
                "idle_ns": int(hi - lo) - busy, "compute_ns": compute, "comm_ns": comm, "memory_ns": 0,
                "overlap_ns": overlap, "exposed_comm_ns": comm - overlap, "compute_only_ns": compute - overlap,
                "kernel_time_ns": 0}
    it = job.iteration_of(part)
    for lo, hi, num in zip(ws.tolist(), we.tolist(), wnum.tolist()):
        st = int(num)
        if job.steps is not None and st not in job.steps:
            continue
        rank_rows.append({"iteration": it, "step": st, "rank": part.rank, "device": -1, "source": "cpu",
                          **window_row(lo, hi)})
        first = last = None
        busy_fb = []
        for code in range(1, len(classify.PHASES)):
            sel = _outermost(s, e, np.flatnonzero((ph == code) & (s >= lo) & (e <= hi)))
            for mb, j in enumerate(sel):
                row = {"iteration": it, "step": st, "rank": part.rank, "device": -1, "phase": classify.PHASES[code],
                       "microbatch": mb if classify.PHASES[code] in ("forward", "backward") else -1, "source": "cpu",
                       **window_row(s[j], e[j])}
                row["compute_start_ns"], row["compute_end_ns"] = int(s[j]), int(e[j])
                phase_rows.append(row)
                if classify.PHASES[code] in FB:
                    first = s[j] if first is None else min(first, s[j])
                    last = e[j] if last is None else max(last, e[j])
                    busy_fb.append((s[j], e[j]))
        if busy_fb:
            bs, be = intervals.union(np.asarray([b[0] for b in busy_fb]), np.asarray([b[1] for b in busy_fb]))
            comp_fb = intervals.intersect(bs, be, cu[0], cu[1])
            p2p_fb = intervals.subtract(*intervals.intersect(bs, be, *p2p), *cu)
            fb[(it, st, -1)] = (int(first), int(last), intervals.union_length(*comp_fb),
                                sum(1 for r in phase_rows if r["step"] == st and r["phase"] == "forward"),
                                intervals.union_length(*p2p_fb))
    timeline = [(it, st, -1, name_, us[(us < hi) & (ue > lo)], ue[(us < hi) & (ue > lo)])
                for st, lo, hi in [(r["step"], r["start_ns"], r["end_ns"]) for r in rank_rows]
                for name_, (us, ue) in (("compute", cu), ("comm:cpu", co))]
    return phase_rows, rank_rows, fb, timeline, {}


def part_view(job, index):
    """A copy of ``job`` that carries only part ``index`` (``parts`` a one-entry dict, no topology but
    its rank's groups, ``rank_dims``: ``RankDims``):
    what a worker needs, cheap to send (a task holding the whole job would cost O(ranks) to pickle,
    O(ranks^2) for all of them)."""
    view = copy.copy(job)
    view.parts = {index: job.parts[index]}
    view.rank_dims = RankDims(job.topology, job.parts[index].rank) if job.topology is not None else None
    view.topology, view.warnings, view.dirs = None, [], []
    return view


def _part_job(job, index, kernel_delay_ns=30_000, spill=None, critical_spill=None, replay=None):
    """One part's rows; with ``spill`` (a folder) its timeline rows go to a file there (``write_part``, returned
    in their place) so the parent never holds every part's timeline, with ``replay`` its what-if rows (``spill_rows``)."""
    part = job.parts[index]
    # read once for all: the rank's rows, steps, critical path and explaining tables
    tables = part_reads(part, GPU_PART_COLUMNS, STEP_COLUMNS) if critical_spill is not None else None
    kernels = tables[KERNELS] if tables is not None else None
    has_kernels = kernels.num_rows > 0 if kernels is not None else \
        tables is None and sum(num_rows(f) for f in part.files(KERNELS)) > 0
    rows = _gpu_part(job, part, kernels) if has_kernels else None
    if rows is None or not rows[1]:
        rows = _cpu_part(job, part)
    steps = _steps(part, tables[OPS] if tables is not None else None)
    tl = rows[3] if spill is None else write_timeline_part(spill, index, part.rank, rows[3])
    rep = ReplayRows(job.iteration_of(part), part.index, part.rank) if critical_spill is not None and replay else None
    cp = part_paths(job, part, critical_spill, tables, rep.add if rep is not None else None) \
        if critical_spill is not None else None
    return rows[:3] + (tl,) + rows[4:] + (steps, packed(part_tables(job, part, kernel_delay_ns, tables)), cp,
                                          spill_rows(rep.result(), replay, index) if rep is not None else None)


# -- the job -----------------------------------------------------------------------------

def _columns(rows: list, order: list) -> dict:
    """Row dicts -> column arrays (object arrays where a value is a str or None)."""
    out = {}
    for c in order:
        vals = [r.get(c) for r in rows]
        if any(v is None or isinstance(v, str) for v in vals):
            out[c] = np.asarray(vals, object)
        else:
            out[c] = np.asarray(vals)
    return out


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
    job, tcfg = _open_job(dirs, opt)
    if job.clock_sync != opt.clock_sync and job.clock_sync == "collectives":     # chosen for clocks days apart
        opt = replace(opt, clock_sync="collectives")
    coll, files, layout, res, cp, replay = _rank_pass(job, outdir, opt)
    topo = job.topology
    phase_rows, rank_rows, fb, top, steps = _gather(job, res)
    if not rank_rows:
        raise StreamtraceError(f"{', '.join(map(str, dirs))}: no GPU events and no ProfilerStep windows to aggregate"
                               + (f" in step(s) {sorted(job.steps)}" if job.steps else ""))
    files += _write_job_tables(outdir, topo, phase_rows, rank_rows, fb, top, steps)
    files += write_explain(outdir, [r[6] for r in res])
    res.clear()                                       # (the ranks' rows: written; before the replay's graph)
    if coll.stragglers:
        files += write_table(outdir, STRAGGLERS, _columns(coll.stragglers, STRAGGLERS_COLUMNS), csv=True)
    files += write_p2p(outdir, p2p_rows(coll.transfers, topo))
    files += write_op_perf(outdir, job.parts)
    meta = _meta(dirs, opt, job, tcfg, coll, layout, rank_rows)
    if cp is not None and opt.whatif:                # what a fix buys: the step replayed (whatif.py)
        files += write_whatif(job, outdir, replay, meta, max(1, opt.jobs or os.cpu_count() or 1))
    if cp is not None:
        meta["critical_path"] = cp.stats
        meta["warnings"] += cp.warnings
    meta.update(files=sorted(p.name for p in files) + [Aggregate.marker], seconds=round(time.time() - t0, 3))
    with atomic_output(outdir / Aggregate.marker, compress=False) as f:
        f.write(json.dumps(meta, indent=1, default=json_default).encode())
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


def _rank_pass(job, outdir: Path, opt: AggregateOptions) -> tuple:
    """The collectives matched across ranks, then one task per rank (``_part_job``, in worker
    processes), whose timelines and critical-path pieces are spilled into ``outdir`` and joined.
    Returns ``(collectives, files written, inferred layout of the process groups, the ranks' results,
    the critical path's ``CriticalResult`` or None, the
    ranks' what-if rows: ``SpilledRows`` or None)``."""
    spill = Path(tempfile.mkdtemp(prefix=".timeline-spill.", dir=outdir))
    cp_spill = Path(tempfile.mkdtemp(prefix=".critical-spill.", dir=outdir)) if opt.critical_path else None
    wi_spill = Path(tempfile.mkdtemp(prefix=".whatif-spill.", dir=outdir)) if cp_spill and opt.whatif else None
    try:
        coll, files = collectives_to(job, outdir, opt.clock_sync, opt.collective_bucket_rows)
        layout = write_groups(outdir, sorted({p.rank for p in job.parts}), files)
        jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(job.parts)))
        if jobs > 1:      # loaded before the fork, the workers share the kernels and numba's set-up
            load_kernels(*TASKS["aggregate"])
        with progress_bar(len(job.parts), "aggregate", "rank", opt.progress) as bar:
            res = run_tasks(_part_job, [(part_view(job, p.index), p.index, opt.consecutive_kernel_delay_ns, spill,
                                         cp_spill, wi_spill) for p in job.parts], jobs, on_done=bar.update)
        files += join_timeline(outdir, [r[3] for r in res])
        cp = critical_paths(job, [r[7] for r in res], outdir) if cp_spill is not None else None
        replay = SpilledRows(wi_spill, [r[8] for r in res]) if wi_spill else None   # (write_whatif removes it)
        res = [r[:7] + (None,) for r in res]  # (the critical path's pieces: no longer needed)
        files += cp.files if cp is not None else []
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        if cp_spill is not None:
            shutil.rmtree(cp_spill, ignore_errors=True)
    return coll, files, layout, res, cp, replay


def _write_job_tables(outdir, topo, phase_rows, rank_rows, fb, top, steps) -> list:
    """The per-rank rows (``_gather``) with their topology coordinates, overlap and step time, written
    as ``rank_phase``, ``ranks``, ``pipeline``, ``replicas``, ``iterations``, ``top_kernels``.  Returns the
    files written."""
    coords = _coords(topo)
    for r in phase_rows + rank_rows:
        r.update(coords.get(r["rank"], {}))
        r["overlap_pct"] = _pct(r["overlap_ns"], r["comm_ns"])
    for r in rank_rows:
        r["step_ns"] = steps.get((r["rank"], r["iteration"], r["step"]))
    pipe = pipeline_rows(topo, phase_rows, fb)
    reps = replica_rows(topo, rank_rows, pipe)
    iters = _iterations(rank_rows, steps)
    files = write_table(outdir, RANK_PHASE, _columns(_sorted(phase_rows), RANK_PHASE_COLUMNS), csv=True)
    files += write_table(outdir, RANKS, _columns(_sorted(rank_rows), RANKS_COLUMNS), csv=True)
    if pipe:
        files += write_table(outdir, PIPELINE, _columns(pipe, PIPELINE_COLUMNS), csv=True)
    if reps:
        files += write_table(outdir, REPLICAS, _columns(reps, REPLICAS_COLUMNS), csv=True)
    files += write_table(outdir, ITERATIONS, _columns(iters, ITERATIONS_COLUMNS), csv=True)
    topk = sorted(top.items(), key=lambda x: -x[1][2])
    files += write_table(outdir, TOP_KERNELS, {"name": np.asarray([n for n, _ in topk], object),
                                                 "kind": np.asarray([v[0] for _, v in topk], object),
                                                 "count": np.asarray([v[1] for _, v in topk], np.int64),
                                                 "total_ns": np.asarray([v[2] for _, v in topk], np.int64)},
                         TOP_KERNELS_COLUMNS)
    return files


def _meta(dirs, opt: AggregateOptions, job, tcfg, coll, layout, rank_rows) -> dict:
    """``aggregate.json`` but for ``files`` and ``seconds``: what was aggregated, how, and the job's facts."""
    topo = job.topology
    return {"kind": "streamtrace-aggregate", "version": 1, "inputs": [str(d) for d in dirs],
            "time_alignment": opt.time_alignment, "clock_sync": opt.clock_sync or "none",
            "consecutive_kernel_delay_ns": opt.consecutive_kernel_delay_ns,
            "iterations": sorted({r["iteration"] for r in rank_rows}),
            "steps": [list(k) for k in sorted({(r["iteration"], r["step"]) for r in rank_rows})],
            "ranks": sorted({p.rank for p in job.parts}), **_world(topo, job),
            "sources": sorted({r["source"] for r in rank_rows}), "job_name": job.name(),
            "devices": sorted({p.device_name for p in job.parts if p.device_name}),
            "topology": topo.to_json() if topo else None,
            "train_config": tcfg.resolve(_world(topo, job)["world_size"]).to_json() if tcfg else None,
            "clock_offsets_ns": {str(job.parts[i].rank): v for i, v in coll.clock_offsets.items()},
            "clock_components": {str(job.parts[i].rank): v for i, v in coll.clock_components.items()},
            "collectives": coll.stats, "collective_summary": coll.summary, "inferred_layout": layout,
            "parts": job.meta()["parts"], "warnings": job.warnings + _collective_warnings(opt, coll, job)}


def _gather(job, res) -> tuple:
    """The parts' results (``_part_job``, in part order) joined: phase rows, rank rows, the
    forward/backward compute per (rank, iteration, step, device), top kernels ``{name: [kind,
    count, total_ns]}`` and step durations per (rank, iteration, step)."""
    phase_rows, rank_rows, fb, top, steps = [], [], {}, {}, {}
    for part, (pr, rr, f, _, tp_, st, *_) in zip(job.parts, res):
        phase_rows += pr
        rank_rows += rr
        fb.update({(part.rank, it, stp, dev): v for (it, stp, dev), v in f.items()})
        for n, (kind, cnt, tot) in tp_.items():
            a = top.setdefault(n, [kind, 0, 0])
            a[1] += cnt
            a[2] += tot
        for num, (_, d) in st.items():
            steps[(part.rank, job.iteration_of(part), num)] = d
    return phase_rows, rank_rows, fb, top, steps


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


def _sorted(rows):
    return sorted(rows, key=lambda r: (r["iteration"], r["step"], r["rank"], r["device"],
                                       r["start_ns"] if r["start_ns"] is not None else -1, r.get("phase", "")))


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


def _iterations(rank_rows, steps) -> list:
    rows = []
    for it, step in sorted({(r["iteration"], r["step"]) for r in rank_rows}):
        rr = [r for r in rank_rows if (r["iteration"], r["step"]) == (it, step)]
        st = [d for (rank, i2, s2), d in steps.items() if (i2, s2) == (it, step)]
        starts = [r["start_ns"] for r in rr if r["start_ns"] is not None]
        ends = [r["end_ns"] for r in rr if r["end_ns"] is not None]
        rows.append({"iteration": it, "step": step, "ranks": len({r["rank"] for r in rr}),
                     "start_ns": min(starts) if starts else None, "end_ns": max(ends) if ends else None,
                     "span_ns": (max(ends) - min(starts)) if starts else None,
                     "step_ns_median": int(np.median(st)) if st else None, "step_ns_max": max(st) if st else None,
                     "compute_ns_mean": float(np.mean([r["compute_ns"] for r in rr])),
                     "comm_ns_mean": float(np.mean([r["comm_ns"] for r in rr])),
                     "exposed_comm_ns_mean": float(np.mean([r["exposed_comm_ns"] for r in rr]))})
    return rows
