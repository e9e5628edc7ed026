"""One rank of ``streamtrace analyze`` (``analyze_rank``), in bounded memory: its GPU events
as compact columns (``gpu``), its CPU tracks one at a time
(``tracks``, or in forked children: ``trackfork``),
then step/phase/micro-batch (``phases``) and collective columns
(``comm``) of every GPU event, the kernels rows, and the metrics of the
README per device, iteration and phase x micro-batch (``metrics``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..events.columns import StringTable
from ..events.dataset import StringPool
from ..events.store import CHUNK_EVENTS, EventStore
from ..runtime.fork import run_forked
from ..runtime.tuning import trim
from . import classify
from . import tracks
from .cpu_collectives import cpu_collective_rows
from .comm import COLL_INT, COLL_STR, collective_columns
from .gpu import KINDS, GpuEvents, Names
from .metrics import device_metrics
from .patterns import Patterns
from .phases import ATTRIBUTED_BY, attribute_phases, gpu_annotations, infer_forward
from .trackbatch import walk_tracks
from .trackfork import analyze_tracks


@dataclass
class RankSource:
    """Where one rank's events are: ``keys`` of ``store`` (``("gpu" | "cpu", rank, pid, tid)``),
    the collective-args rows and the string table the rows' ids refer to, the rank, and how a
    GPU event's device is found (``device_mode``: ``"pid"`` its key's pid, ``"pmap"`` through the
    merged trace's process map ``pmap``, ``"args"`` its ``args.device``;
    ``streamtrace.analyze.file.rank_plan``)."""
    store: EventStore
    keys: list
    comm_rows: list
    table: StringTable
    rank: int
    device_mode: str = "pid"
    pmap: dict = field(default_factory=dict)


@dataclass
class RankSettings:
    """How to analyse a rank: classification patterns, the topology (for the parallel dimension
    of collectives) and the process groups of its trace (``pg_config``, by name) and the job's
    ``world_size`` (-1 unknown; the default group of a trace without process groups), the external
    sorts' block size and spill folder (None: compressed in memory), and ``jobs`` > 1 to analyse
    the CPU tracks in up to that many forked processes (same results)."""
    patterns: Patterns
    topology: object = None
    pg_config: dict = field(default_factory=dict)
    world_size: int = -1
    block_rows: int = CHUNK_EVENTS
    spill_dir: str | None = None
    jobs: int = 1


@dataclass
class RankOutputs:
    """Where the rows go: ``open_ops(part)`` opens the ops writer of ``part-<part>.parquet``
    (string columns as ids into the rank's table; ``part`` is 0 unless ``jobs`` > 1),
    ``open_kernels(pools, part)`` the kernels writer (``pools`` from ``kernel_pools``),
    ``pool`` the table's ``StringPool``, and
    ``write_cpu_collectives(table)`` writes a rank's ``cpu_collectives`` rows (a rank without GPU
    events: ``cpu_collectives``).  None: not written."""
    open_ops: Callable | None = None
    open_kernels: Callable | None = None
    pool: StringPool | None = None
    write_cpu_collectives: Callable | None = None


def analyze_rank(src: RankSource, settings: RankSettings, out: RankOutputs | None = None) -> dict:
    """Analyse one rank whose events sit in ``src.store`` under ``src.keys``; each key's rows are
    dropped from the store once analysed.  Returns the rank's summary dict (``devices``,
    ``iterations``, ``phases``, ``call_tree``, ``links``; README, "Outputs")."""
    out = out or RankOutputs()
    store, block_rows, jobs = src.store, settings.block_rows, settings.jobs
    nm = Names(src.table, settings.patterns)
    gpu = GpuEvents(store, [k for k in src.keys if k[0] == "gpu"], nm, src.device_mode, src.pmap,
                    link=any(k[0] == "cpu" for k in src.keys))
    trim()                                                         # the columns' temporaries
    ctx = tracks.TrackContext(store, gpu, nm, block_rows=block_rows, spill_dir=settings.spill_dir)
    _cpu_tracks(ctx, [k for k in src.keys if k[0] == "cpu"], jobs,
                out.open_ops or (lambda part: contextlib.nullcontext(None)))
    gpu.done_linking()
    if out.write_cpu_collectives is not None and gpu.M == 0:
        out.write_cpu_collectives(cpu_collective_rows(
            src.comm_rows, sorted({k[2] for k in src.keys if k[0] == "cpu"}), settings.patterns, settings.pg_config,
            settings.world_size, ctx.windows.step, settings.topology))
    iteration, ph, micro = attribute_phases(gpu, ctx.windows)
    inferred = infer_forward(gpu, ctx.windows, ph)          # no forward annotation: before the first backward op
    gpu.ctx["gpu_annot"] = gpu_annotations(store, gpu, [k for k in src.keys if k[0] == "gpuanno"],
                                           gpu.ctx["annot"].dtype)
    tot = ctx.totals
    ctx = None
    del gpu.ctx["t_launch"]
    trim()
    gpu.load_devices(store)
    coll = collective_columns(gpu, src.comm_rows, nm, settings.patterns, settings.topology, settings.pg_config,
                              settings.world_size)
    M = gpu.M
    summary = {"devices": {}, "iterations": {}, "phases": [],
               "call_tree": {"cpu_events": int(tot.n_cpu), "clamped": int(tot.clamped), "overruns": int(tot.overrun)},
               "links": {"gpu_events": int(M), "linked": gpu.linked, "duplicate_launch_ids": int(tot.dup)}}
    if inferred:
        summary["phases_inferred"] = inferred
    forked = out.open_kernels is not None and jobs > 1 and M >= 2 * block_rows
    if out.open_kernels is not None:
        pools = kernel_pools(out.pool or StringPool(src.table.strings), coll["pool"])

        def write(part, span=None):
            with out.open_kernels(pools, part) as w:
                write_kernels(store, gpu, iteration, ph, micro, coll, w, span)
        if forked:                                  # two halves at once, the metrics meanwhile
            h = M // 2
            run_forked([lambda: write(0, (0, h)), lambda: write(1, (h, M))],
                       then=lambda: _metrics(summary, gpu.device, gpu.start, gpu.end, gpu.kind, iteration, ph,
                                             micro))
        else:
            write(0)
    for k in gpu.keys:
        store.drop(k)
    if not forked:
        device, g_start, g_end, kind = gpu.device, gpu.start, gpu.end, gpu.kind
        gpu = coll = None                                          # (not del: closures above name them)
        trim()
        _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro)
    return summary


def _cpu_tracks(ctx, cpu_keys, jobs, open_ops):
    """Every CPU track of the rank (``analyze_track``; small ones
    in batches, ``walk_tracks``), in forked children when
    ``jobs`` > 1; each track's rows dropped from the store afterwards."""
    if jobs > 1 and cpu_keys:
        analyze_tracks(tracks.analyze_track, ctx, cpu_keys, jobs, open_ops)
        for key in cpu_keys:
            ctx.store.drop(key)
        trim()
        return
    with open_ops(0) as ops_writer:
        walk_tracks(ctx, cpu_keys, ops_writer)


def write_kernels(store, gpu, iteration, ph, micro, coll, writer, span=None):
    """The kernels rows (all, or the GPU rows ``span`` = ``(lo, hi)``) to ``writer``."""
    lo, hi = span or (0, gpu.M)
    ctx = gpu.ctx
    first = 0                                   # the key's first GPU row
    for key, size in zip(gpu.keys, gpu.sizes):
        pos = max(lo, first)
        rows = (pos - first, min(hi, first + size) - first)
        first += size
        if rows[0] >= rows[1]:
            continue
        for b in tracks.piece_blocks(store, key, rows):
            nb = len(b)
            sl = slice(pos, pos + nb)
            cols = {
                "device": gpu.device[sl], "stream": b["stream"], "tid": key[3], "ts_ns": gpu.start[sl],
                "dur_ns": b["dur"], "end_ns": gpu.end[sl], "name": b["name"], "cat": b["cat"], "kind": gpu.kind[sl],
                "correlation": b["correlation"], "external_id": b["external_id"], "launch_op": ctx["launch_op"][sl],
                "launching_op": ctx["launching"][sl], "annotation": ctx["annot"][sl],
                "top_annotation": ctx["top"][sl], "gpu_annotation": ctx["gpu_annot"][sl], "phase": ph[sl],
                "microbatch": micro[sl], "step": iteration[sl], "attributed_by": gpu.launched[sl]}
            a, z = np.searchsorted(coll["pos"], [pos, pos + nb])
            at = coll["pos"][a:z] - pos
            for c in COLL_INT + COLL_STR:
                if z > a:
                    cols[c] = np.full(nb, -1, coll[c].dtype)
                    cols[c][at] = coll[c][a:z]
                else:
                    cols[c] = -1
            writer.write(cols)
            pos += nb
            del b, cols                 # before the next block is unpacked (the writer copied the rows)


def kernel_pools(table_pool, coll_pool):
    """``{string column: StringPool}`` of the kernels table."""
    pools = {c: table_pool for c in ("name", "cat", "launch_op", "launching_op", "annotation", "top_annotation",
                                     "gpu_annotation")}
    pools.update({"kind": StringPool(KINDS), "phase": StringPool(classify.PHASES),
                  "attributed_by": StringPool(ATTRIBUTED_BY)})
    pools.update({c: coll_pool for c in COLL_STR})
    return pools


def _groups(key):
    """Rows grouped by equal ``key``: ``(keys, order, bounds)``, groups in ascending key
    order, group g = ``order[bounds[g]:bounds[g + 1]]``; ``order`` is None when every row has
    one key (one group of every row, in order: no sort, no index)."""
    if len(key) and int(key.min()) == int(key.max()):
        return [int(key[0])], None, np.array([0, len(key)])
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
    keys = k[starts].tolist()
    del k
    return keys, order, np.append(starts, len(order))


def _group_metrics(s, e, k, sel):
    """``device_metrics`` of the rows ``sel`` of ``s``, ``e``, ``k`` (None: every row); a group
    of every row is measured on the arrays themselves (no copy: ~17 bytes a row less at the peak),
    the metrics being independent of the rows' order."""
    if sel is None or len(sel) == len(s):
        return device_metrics(s, e, k)
    return device_metrics(s[sel], e[sel], k[sel])


def _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro):
    """Fill per-device, per-iteration and per phase x micro-batch metrics (README definitions)."""
    devices = np.unique(device)
    for d in devices.tolist():
        if len(devices) == 1:
            s, e, k, it, p, mb = g_start, g_end, kind, iteration, ph, micro
        else:
            rows = np.flatnonzero(device == d)
            s, e, k, it, p, mb = g_start[rows], g_end[rows], kind[rows], iteration[rows], ph[rows], micro[rows]
            del rows
        summary["devices"][str(d)] = device_metrics(s, e, k)
        u_it, u_mb = np.unique(it), np.unique(mb)
        key = np.searchsorted(u_it, it).astype(np.int64, copy=False)      # iteration code
        codes, order, bounds = _groups(key)
        for c, x, y in zip(codes, bounds[:-1], bounds[1:]):
            if u_it[c] >= 0:
                summary["iterations"].setdefault(str(int(u_it[c])), {})[str(d)] = \
                    _group_metrics(s, e, k, None if order is None else order[x:y])
        del order
        key *= len(classify.PHASES)
        key += p
        key *= len(u_mb)
        key += np.searchsorted(u_mb, mb)                          # (iteration, phase, micro-batch) code
        codes, order, bounds = _groups(key)
        del key
        for c, x, y in zip(codes, bounds[:-1], bounds[1:]):
            i, m = int(u_it[c // len(u_mb) // len(classify.PHASES)]), int(u_mb[c % len(u_mb)])
            row = {"device": str(d), "iteration": None if i < 0 else i,
                   "phase": classify.PHASES[c // len(u_mb) % len(classify.PHASES)], "microbatch": None if m < 0 else m}
            row.update(_group_metrics(s, e, k, None if order is None else order[x:y]))
            summary["phases"].append(row)
