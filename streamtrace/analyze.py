"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank.

Input: one trace, a folder of rank traces, or a merged multi-rank trace
(streamtrace's own, TraceLens TraceFusion's with ``args.rank``, or Megatron's
``pid = rank + 1``), which is split back into ranks.  Every join key is per rank:
(rank, correlation) for launch -> GPU links and (rank, pid, tid) for call trees.

Output (``OUTDIR``): ``summary.json``; ``kernels/iteration=N/rank=R/part-0.parquet`` (one
row per GPU event) and ``ops/iteration=N/rank=R/part-0.parquet`` (one row per CPU event), zstd,
schema in the README (:func:`_schema`).  Each table is one hive-partitioned dataset: ``N`` is the
trace file's iteration (``summary.json``'s ``"iteration"`` of the rank, from the path:
``iteration_10/``, ``_iter_10``) and ``-1`` when it is unknown (``summary.json`` says null), see
:func:`partition_path`.  The partition keys are not columns inside the files, so readers of the
whole dataset (pyarrow, pandas, DuckDB) get ``iteration`` and ``rank`` from the paths with
no type clash; the kernels' own ``ProfilerStep#N`` number is the ``step`` column.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import classify as C
from .columns import StringTable, columns_from_batch
from .errors import StreamtraceError
from .metrics import COMM, COMPUTE, MEMORY, device_metrics
from .patterns import Patterns
from .reader import TraceReader

KINDS = ("compute", "communication", "memory")
UNKNOWN_ITERATION = -1   # the ``iteration=`` partition of a trace whose iteration is unknown
OPS_ROWS = 131072        # rows per Parquet row group of the ops table

# What the analysis keeps per complete event (60 bytes; pid/tid/rank live in the store key).
STORE_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("cat", "i4"), ("name", "i4"), ("correlation", "i8"),
                        ("external_id", "i8"), ("stream", "i8"), ("device", "i8"), ("comm", "i4")])


def _slim(part):
    out = np.empty(len(part), STORE_DTYPE)
    for f in STORE_DTYPE.names:
        out[f] = part[f]
    return out


@dataclass
class AnalyzeOptions:
    """Options of :func:`analyze`."""
    jobs: int = 0                 # 0 = all cores
    chunked: bool = False
    chunk_events: int = 250_000
    patterns: str | None = None
    topology: str | None = None
    salvage: bool = False
    progress: bool | None = None
    rank_map: str | None = None
    scheduler: str | None = None  # dask scheduler address (or $STREAMTRACE_SCHEDULER)
    split_jobs: int = 1           # >1: parse one big file in byte ranges with this many processes
    split_threshold: int = 256 << 20   # files at least this big are split when jobs > 1 and one file is given
    executor: object = None       # any concurrent.futures.Executor


# -- loading: events grouped per track, in memory or spilled to disk -------------------

class MemoryStore:
    """Event rows grouped by key, kept in memory (the default mode)."""

    def __init__(self):
        self.parts: dict = {}

    def add(self, key, rows):
        self.parts.setdefault(key, []).append(rows)

    def flush(self):
        pass

    def keys(self):
        return sorted(self.parts, key=repr)

    def get(self, key):
        p = self.parts.get(key, [])
        return p[0] if len(p) == 1 else (np.concatenate(p) if p else np.zeros(0, STORE_DTYPE))

    def take(self, key):
        """:meth:`get`, then forget the key (the analysis reads each key once)."""
        out = self.get(key)
        self.parts.pop(key, None)
        return out


class SpillStore(MemoryStore):
    """Event rows grouped by key, appended to one file per key in ``folder`` every
    ``chunk_events`` rows (``--chunked``): memory holds at most one chunk while
    reading, and one track at a time while analysing."""

    def __init__(self, folder, chunk_events):
        super().__init__()
        self.folder = Path(folder)
        self.chunk_events = max(1, int(chunk_events))
        self.pending = 0
        self.files: dict = {}

    def add(self, key, rows):
        super().add(key, rows)
        self.pending += len(rows)
        if self.pending >= self.chunk_events:
            self.flush()

    def flush(self):
        for key, parts in self.parts.items():
            path = self.files.setdefault(key, self.folder / f"{len(self.files)}.bin")
            with open(path, "ab") as f:
                for p in parts:
                    f.write(p.tobytes())
        self.parts = {}
        self.pending = 0

    def keys(self):
        return sorted(self.files, key=repr)

    def get(self, key):
        path = self.files.get(key)
        return np.fromfile(path, STORE_DTYPE) if path is not None else np.zeros(0, STORE_DTYPE)

    def take(self, key):
        return self.get(key)


def group_rows(keycols) -> dict:
    """Rows grouped by the tuple of key columns, each group in row order:
    ``{key tuple: slice or index array}``.  Consecutive rows mostly share a key
    (one thread's events come in runs), so this works on runs: O(N) plus a
    dictionary step per run, instead of a sort."""
    n = len(keycols[0])
    if n == 0:
        return {}
    change = np.zeros(n, bool)
    change[0] = True
    for a in keycols:
        change[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    firsts = [a[starts].tolist() for a in keycols]
    runs: dict = {}
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        runs.setdefault(tuple(int(c[i]) for c in firsts), []).append((a, b))
    out = {}
    for key, rr in runs.items():
        out[key] = slice(*rr[0]) if len(rr) == 1 else np.concatenate([np.arange(a, b) for a, b in rr])
    return out


def ingest(path, store, pats, salvage=False, progress=None, byte_range=None):
    """Read one trace into ``store``: complete events (``ph == "X"``, ``dur >= 0``) as
    :data:`STORE_DTYPE` rows keyed ``("gpu", rank, pid, tid)`` for GPU events (Kineto
    categories in the patterns) and ``("cpu", rank, pid, tid)`` for CPU events
    (``rank`` = ``args.rank`` or -1).
    ``byte_range``: read only that slice of a plain file's events (see :mod:`streamtrace.split`).

    Returns ``(table, comm_rows, reader)``."""
    table = StringTable()
    comm_rows: list = []
    reader = TraceReader(path, salvage=salvage, progress=progress, byte_range=byte_range)
    kind_of = np.zeros(0, np.int8)       # per string id: 1 GPU cat, 2 skipped cat, 3 gpu annotation
    for b in reader.raw_batches(decode=False):
        cols, rows = columns_from_batch(b, table, path)
        if len(kind_of) < len(table):
            kind_of = np.concatenate([kind_of, np.asarray(
                [1 if t in pats.kernel_cats or t in pats.memory_cats else 3 if t == "gpu_user_annotation"
                 else 2 if t == "Trace" else 0 for t in table.strings[len(kind_of):]], np.int8)])
        cols = cols[(cols["ph"] == ord("X")) & (cols["dur"] >= 0) & (cols["ts"] >= 0)]
        if rows:
            has = cols["comm"] >= 0
            cols["comm"][has] += len(comm_rows)
            comm_rows.extend(rows)
        k = np.where(cols["cat"] >= 0, kind_of[np.maximum(cols["cat"], 0)], 0)
        for sel, fields, tag in ((k == 1, ("rank", "pid", "tid"), "gpu"),
                                 ((k == 0) & (cols["pid"] >= 0), ("rank", "pid", "tid"), "cpu")):
            part = cols[sel]
            if not len(part):
                continue
            keycols = [part[f] for f in fields]
            slim = _slim(part)
            for key, rows in group_rows(keycols).items():
                store.add((tag, *key), slim[rows])
    store.flush()
    return table, comm_rows, reader


def rank_plan(store, metadata, file_rank):
    """Which rank each stored key belongs to, and how to find a GPU event's device.

    * streamtrace merged traces: rank from ``args.rank``; device and original pid from
      the recorded process map;
    * TraceFusion-style traces: rank from ``args.rank``;
    * Megatron-style merges (GPU and CPU events sharing pids 1..K): rank = pid - 1,
      device from the kernels' ``args.device``;
    * otherwise the whole file is ``file_rank``; device = the GPU event's pid.
    Returns ``({rank: [keys]}, device_mode, pmap)``."""
    st = metadata.get("streamtrace") if isinstance(metadata.get("streamtrace"), dict) else None
    pmap = {int(k): v for k, v in (st or {}).get("process_map", {}).items()} if st and st.get("kind") == "merged" \
        else {}
    keys = store.keys()
    ranks: dict = {}
    if any(k[1] >= 0 for k in keys):
        for k in keys:
            ranks.setdefault(k[1] if k[1] >= 0 else file_rank, []).append(k)
        return ranks, "pmap" if pmap else "pid", pmap
    gpu_pids = {k[2] for k in keys if k[0] == "gpu"}
    cpu_pids = {k[2] for k in keys if k[0] == "cpu"}
    # Megatron's merge gives every event of rank r pid r + 1, so GPU events share
    # their pid with CPU events; in one rank's own trace GPU pids are device indices
    # that carry no CPU events (GPU annotations are not stored as CPU events).
    if len(cpu_pids) > 1 and gpu_pids and gpu_pids <= cpu_pids and min(cpu_pids) >= 1:
        for k in keys:
            ranks.setdefault(k[2] - 1, []).append(k)
        return ranks, "args", {}
    return {file_rank: keys}, "pmap" if pmap else "pid", pmap


# -- one rank ---------------------------------------------------------------------

class _Names:
    """Per-string-id lookups derived from the patterns (computed once per table)."""

    def __init__(self, table, pats):
        strings = table.strings
        self.names = np.asarray(strings + [""], dtype=object)        # id -1 -> ""
        n = len(strings) + 1
        self.memory_cat = np.zeros(n, bool)
        self.comm = np.zeros(n, bool)
        for i, t in enumerate(strings):
            self.memory_cat[i] = t in pats.memory_cats
            self.comm[i] = bool(pats.comm.search(t))
        ph, fb, rc, st, sd = C.name_flags(strings, pats)
        self.phase = np.append(ph, 0)
        self.fallback = np.append(fb, 0)
        self.recompute = np.append(rc, False)
        self.step = np.append(st, -1)
        self.stack_dim = np.append(sd, "")
        self.has_stack_dim = np.asarray([bool(x) for x in self.stack_dim], bool)
        self.user_annotation = table.ids.get("user_annotation", -2)


def analyze_rank(store, keys, comm_rows, table, rank, device_mode, pmap, pats, topo=None, pg_config=None,
                 ops_sink=None):
    """Analyse one rank whose events sit in ``store`` under ``keys``.

    CPU tracks are processed one at a time (call tree, launch links, GPU roll-up),
    so memory holds one track plus the rank's GPU events.  ``ops_sink(columns)`` is
    called once per track with that track's op rows.  Returns ``(kernels, summary)``:
    the kernel columns (:data:`KERNEL_SCHEMA`) and the rank's summary dict
    (``devices``, ``iterations``, ``phases``, ``call_tree``, ``links``)."""
    from .kernels import tree as T
    from .kernels.ancestry import nearest_marked, outermost_marked
    nm = _Names(table, pats)
    names = nm.names
    gkeys = [k for k in keys if k[0] == "gpu"]
    gparts = [store.take(k) for k in gkeys]
    g = np.concatenate(gparts) if gparts else np.zeros(0, STORE_DTYPE)
    g_pid = np.repeat(np.asarray([k[2] for k in gkeys], np.int64), [len(p) for p in gparts])
    g_tid = np.repeat(np.asarray([k[3] for k in gkeys], np.int64), [len(p) for p in gparts])
    del gparts
    g_start, g_end = g["ts"], g["ts"] + g["dur"]
    kind = np.where(nm.memory_cat[g["cat"]], MEMORY, np.where(nm.comm[g["name"]], COMM, COMPUTE)).astype(np.int8)
    if device_mode == "args":
        device = g["device"].copy()
    elif device_mode == "pmap":
        device = np.asarray([pmap.get(int(p), {}).get("device", p) for p in g_pid.tolist()], np.int64)
    else:
        device = g_pid
    M = len(g)
    launcher = np.full(M, -1, np.int64)             # row of the launch in this rank's ops table
    t_launch = g_start.copy()
    f_launch_op, f_launching, f_annot, f_top, f_dim_at = (np.full(M, -1, np.int64) for _ in range(5))
    comm_row = np.where(g["comm"] >= 0, g["comm"], -1).astype(np.int64)
    win = {"step": [], "recompute": [], **{c: [] for c in range(1, len(C.PHASES))},
           **{("fb", c): [] for c in range(1, len(C.PHASES))}}
    n_cpu = n_clamped = n_overrun = n_dup = 0
    gcorr = np.where(g["correlation"] >= 0, g["correlation"], -1)
    for key in (k for k in keys if k[0] == "cpu"):
        c = store.take(key)
        n = len(c)
        start, end = c["ts"], c["ts"] + c["dur"]
        parent, depth, order, ncl, nov = T.build_call_tree(np.zeros(n, np.int64), start, end)
        n_clamped += ncl
        n_overrun += nov
        cname = c["name"]
        count = np.zeros(n, np.int64)
        total = np.zeros(n, np.int64)
        busy = np.zeros(n, np.int64)
        if (c["correlation"] >= 0).any() and M:
            free = np.where(launcher < 0, gcorr, -1)
            local, dup = T.link_by_correlation(np.zeros(n, np.int64), c["correlation"], np.zeros(M, np.int64), free)
            n_dup += dup
            mine = np.flatnonzero(local >= 0)
            if len(mine):
                lm = local[mine]
                count, total, busy = T.propagate(parent, order, lm, g_start[mine], g_end[mine])
                launcher[mine] = n_cpu + lm
                t_launch[mine] = start[lm]
                is_step = nm.step[cname] >= 0
                mark = (c["cat"] == nm.user_annotation) & ~is_step
                f_launch_op[mine] = cname[lm]
                pl = parent[lm]
                f_launching[mine] = np.where(pl >= 0, cname[np.maximum(pl, 0)], -1)
                for out, idx in ((f_annot, nearest_marked(parent, order, mark)),
                                 (f_top, outermost_marked(parent, order, mark)),
                                 (f_dim_at, nearest_marked(parent, order, nm.has_stack_dim[cname]))):
                    a = idx[lm]
                    out[mine] = np.where(a >= 0, cname[np.maximum(a, 0)], -1)
                nc = nearest_marked(parent, order, c["comm"] >= 0)[lm]
                need = comm_row[mine] < 0
                comm_row[mine[need]] = np.where(nc[need] >= 0, c["comm"][np.maximum(nc[need], 0)], -1)
        # windows for phases / micro-batches / iterations (from any thread)
        for sel, bucket, extra in ((nm.step[cname] >= 0, "step", nm.step[cname]),
                                   (nm.recompute[cname], "recompute", None)):
            if sel.any():
                win[bucket].append((start[sel], end[sel], None if extra is None else extra[sel]))
        for code in range(1, len(C.PHASES)):
            for sel, bucket in ((nm.phase[cname] == code, code), (nm.fallback[cname] == code, ("fb", code))):
                if sel.any():
                    win[bucket].append((start[sel], end[sel], None))
        if ops_sink is not None:
            ops_sink({"pid": np.full(n, key[2], np.int64), "tid": np.full(n, key[3], np.int64), "ts_ns": start, "dur_ns": c["dur"], "name": names[cname],
                      "cat": names[c["cat"]], "depth": depth, "parent": np.where(parent >= 0, parent + n_cpu, -1),
                      "correlation": c["correlation"], "external_id": c["external_id"], "kernel_count": count,
                      "kernel_time_ns": total, "gpu_busy_ns": busy})
        n_cpu += n
    # phases, micro-batches, iterations: innermost window containing the launch time
    ws, we, wval = _cat_windows(win["step"])
    step_pos = C.containing(ws, we, t_launch)
    iteration = np.where(step_pos >= 0, wval[np.maximum(step_pos, 0)] if len(wval) else -1, -1)
    ph = np.zeros(M, np.int8)
    micro = np.full(M, -1, np.int64)
    ph_start = np.full(M, np.iinfo(np.int64).min)
    for code in range(1, len(C.PHASES)):
        ps, pe, _ = _cat_windows(win[code])
        if not len(ps):
            continue
        mb = C.ordinal_within(C.containing(ws, we, ps), ps)
        pos = C.containing(ps, pe, t_launch)
        better = (pos >= 0) & (ps[np.maximum(pos, 0)] >= ph_start)
        ph[better] = code
        micro[better] = mb[pos[better]] if C.PHASES[code] in ("forward", "backward") else -1
        ph_start[better] = ps[pos[better]]
    for code in range(1, len(C.PHASES)):
        ps, pe, _ = _cat_windows(win[("fb", code)])
        hit = (ph == 0) & (C.containing(ps, pe, t_launch) >= 0)
        ph[hit] = code
    rs, re_, _ = _cat_windows(win["recompute"])
    ph[(C.containing(rs, re_, t_launch) >= 0) & (ph == C.PHASES.index("backward"))] = C.PHASES.index("recompute")
    # collectives
    pg_config = pg_config or {}
    coll = {k: (np.full(M, -1, np.int64) if k.endswith("bytes") or k == "group_size" else np.full(M, "", object))
            for k in ("collective", "in_bytes", "out_bytes", "msg_bytes", "dtype", "group_size",
                      "pg_name", "pg_desc", "pg_ranks", "parallel_dim")}
    for j in np.flatnonzero(kind == COMM).tolist():
        row = comm_rows[comm_row[j]] if comm_row[j] >= 0 else None
        info = C.collective_info(row, names[g["name"][j]], pats, pg_config)
        dim = topo.dim_of(info["pg_ranks"]) if topo is not None else None
        dim = dim or pats.first(pats.pg_desc, info["pg_desc"])
        if not dim and f_dim_at[j] >= 0:
            dim = nm.stack_dim[f_dim_at[j]]
        info["parallel_dim"] = dim or "unknown"
        info["pg_ranks"] = ",".join(map(str, info["pg_ranks"]))
        for k in coll:
            coll[k][j] = info[k]
    kernels = {
        "device": device.astype(np.int32), "stream": g["stream"], "tid": g_tid, "ts_ns": g_start,
        "dur_ns": g["dur"], "end_ns": g_end, "name": names[g["name"]], "cat": names[g["cat"]],
        "kind": np.asarray(KINDS, object)[kind], "correlation": g["correlation"], "external_id": g["external_id"],
        "launch_op": names[f_launch_op], "launching_op": names[f_launching], "annotation": names[f_annot],
        "top_annotation": names[f_top], "phase": np.asarray(C.PHASES, object)[ph], "microbatch": micro,
        "step": iteration, **coll}
    summary = {"devices": {}, "iterations": {}, "phases": [],
               "call_tree": {"cpu_events": int(n_cpu), "clamped": int(n_clamped), "overruns": int(n_overrun)},
               "links": {"gpu_events": int(M), "linked": int((launcher >= 0).sum()), "duplicate_launch_ids": int(n_dup)}}
    _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro)
    return kernels, summary


def _cat_windows(parts):
    """Concatenate window lists and sort by start: (start, end, value)."""
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    v = np.concatenate([p[2] for p in parts]) if parts[0][2] is not None else np.zeros(len(s), np.int64)
    o = np.argsort(s, kind="stable")
    return s[o], e[o], v[o]


def _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro):
    """Fill per-device, per-iteration and per phase x micro-batch metrics (README definitions)."""
    for d in np.unique(device).tolist():
        m = device == d
        summary["devices"][str(d)] = device_metrics(g_start[m], g_end[m], kind[m])
        for it in np.unique(iteration[m]).tolist():
            if it >= 0:
                mi = m & (iteration == it)
                summary["iterations"].setdefault(str(it), {})[str(d)] = device_metrics(g_start[mi], g_end[mi],
                                                                                      kind[mi])
        keys = np.unique(np.stack([iteration[m], ph[m].astype(np.int64), micro[m]], axis=1), axis=0) \
            if m.any() else []
        for it, code, mb in (map(int, k) for k in keys):
            sel = m & (iteration == it) & (ph == code) & (micro == mb)
            row = {"device": str(d), "iteration": None if it < 0 else it, "phase": C.PHASES[code],
                   "microbatch": None if mb < 0 else mb}
            row.update(device_metrics(g_start[sel], g_end[sel], kind[sel]))
            summary["phases"].append(row)


# -- outputs ------------------------------------------------------------------------

def _schema():
    import pyarrow as pa
    s, i64, i32 = pa.string(), pa.int64(), pa.int32()
    kernels = pa.schema([
        ("device", i32), ("stream", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("end_ns", i64),
        ("name", s), ("cat", s), ("kind", s), ("correlation", i64), ("external_id", i64),
        ("launch_op", s), ("launching_op", s), ("annotation", s), ("top_annotation", s),
        ("phase", s), ("microbatch", i64), ("step", i64), ("collective", s), ("in_bytes", i64),
        ("out_bytes", i64), ("msg_bytes", i64), ("dtype", s), ("group_size", i64), ("pg_name", s),
        ("pg_desc", s), ("pg_ranks", s), ("parallel_dim", s)])
    ops = pa.schema([
        ("pid", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("name", s), ("cat", s), ("depth", i32),
        ("parent", i64), ("correlation", i64), ("external_id", i64), ("kernel_count", i64),
        ("kernel_time_ns", i64), ("gpu_busy_ns", i64)])
    return kernels, ops


def partition_path(outdir, dataset, rank, iteration) -> Path:
    """``outdir/<dataset>/iteration=<N>/rank=<R>/part-0.parquet``: one rank of one trace file.

    ``N`` is the file's iteration (``summary.json``'s ``"iteration"`` for the rank), or
    :data:`UNKNOWN_ITERATION` (-1) when that is None.  Not hive's null directory
    ``iteration=__HIVE_DEFAULT_PARTITION__``: pyarrow cannot type a partition key that is null in
    every file (the usual case for one unnamed trace) and pandas.read_parquet fails on a null key
    beside non-null ones; -1, like the tables' other unknown integers, reads as an integer
    everywhere (DuckDB too)."""
    it = UNKNOWN_ITERATION if iteration is None else int(iteration)
    return Path(outdir) / dataset / f"iteration={it}" / f"rank={int(rank)}" / "part-0.parquet"


def write_partition(outdir, dataset, rank, iteration, columns, schema):
    """Write :func:`partition_path` (zstd) atomically.  ``iteration`` and ``rank`` live in the
    hive path only, as readers expect (a file column of the same name would clash with them)."""
    with _OpsWriter(outdir, rank, iteration, schema, dataset) as w:
        w.write(columns)
    return w.path


def analyze_file(path, outdir, file_rank, iteration, opt: AnalyzeOptions, progress=None) -> list[dict]:
    """Analyse one trace file (any number of ranks inside); write its Parquet
    partitions and return one summary dict per rank."""
    import tempfile
    pats = Patterns.load(opt.patterns)
    topo = None
    if opt.topology:
        from .topology import load_topology
        topo = load_topology(opt.topology)
    spill = tempfile.TemporaryDirectory(prefix=".streamtrace-", dir=outdir) if opt.chunked else None
    try:
        if opt.split_jobs > 1:
            from .split import ingest_parallel
            store, table, comm_rows, meta, warnings = ingest_parallel(
                path, outdir, opt.split_jobs, opt.patterns, opt.salvage, spill.name if spill else None,
                opt.chunk_events)
        else:
            store = SpillStore(spill.name, opt.chunk_events) if spill else MemoryStore()
            table, comm_rows, reader = ingest(path, store, pats, opt.salvage, progress)
            meta, warnings = reader.metadata, reader.warnings
        ranks, device_mode, pmap = rank_plan(store, meta, file_rank)
        kschema, oschema = _schema()
        out = []
        for rank, keys in sorted(ranks.items()):
            with _OpsWriter(outdir, rank, iteration, oschema) as ops:
                kernels, summ = analyze_rank(store, keys, comm_rows, table, rank, device_mode, pmap, pats, topo,
                                             _pg_config(meta, rank), ops.write)
            write_partition(outdir, "kernels", rank, iteration, kernels, kschema)
            out.append({"rank": rank, "source": str(path), "iteration": iteration, **summ,
                        "warnings": warnings})
        return out
    finally:
        if spill is not None:
            spill.cleanup()


class _OpsWriter:
    """Writes ``<dataset>/iteration=N/rank=R/part-0.parquet`` (:func:`partition_path`) one
    chunk (row group) at a time, atomically.  Arrow buffers come from the system allocator, which
    hands freed memory back (Arrow's default pools keep it: +40 MB peak RSS on a 54 MB trace)."""

    def __init__(self, outdir, rank, iteration, schema, dataset="ops"):
        self.path = partition_path(outdir, dataset, rank, iteration)
        self.schema = schema

    def __enter__(self):
        import pyarrow.parquet as pq
        from .io import atomic_output
        self._cm = atomic_output(self.path, compress=False)
        self._f = self._cm.__enter__()
        import pyarrow as pa
        self._pool = pa.system_memory_pool()
        self._w = pq.ParquetWriter(self._f, self.schema, compression="zstd", memory_pool=self._pool)
        return self

    def write(self, columns):
        import pyarrow as pa
        self._w.write_table(pa.Table.from_arrays(
            [pa.array(columns[f.name], type=f.type, memory_pool=self._pool) for f in self.schema],
            schema=self.schema))

    def __exit__(self, et, ev, tb):
        self._w.close()
        return self._cm.__exit__(et, ev, tb)


def _pg_config(meta, rank) -> dict:
    """Process groups by name from ``distributedInfo.pg_config`` (for a merged trace,
    from the rank's recorded distributedInfo)."""
    di = meta.get("distributedInfo")
    st = meta.get("streamtrace")
    if isinstance(st, dict):
        for r in st.get("ranks") or []:
            if r.get("rank") == rank:
                di = r.get("distributedInfo")
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    if isinstance(cfg, dict):      # some versions write a dict keyed by name
        cfg = [dict(v, pg_name=k) for k, v in cfg.items() if isinstance(v, dict)]
    return {str(p.get("pg_name")): p for p in cfg or [] if isinstance(p, dict)}


def _job(path, outdir, rank, iteration, opt, idx):
    from . import parallel
    shared = parallel.PROGRESS
    if shared is None:
        return analyze_file(path, outdir, rank, iteration, opt)

    def report(n):
        shared[idx] = n
    return analyze_file(path, outdir, rank, iteration, opt, report)


class _Bars:
    """tqdm progress (file bytes read): one bar per file for up to 16 files, else one
    bar for all; shown only on a terminal unless ``show`` says otherwise."""

    def __init__(self, paths, show):
        import multiprocessing as mp
        self.sizes = [os.path.getsize(p) for p in paths]
        self.arr = mp.Array("q", len(paths), lock=False)
        self.bars = []
        if show:
            from tqdm import tqdm
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


def analyze(inputs, outdir, opt: AnalyzeOptions | None = None) -> dict:
    """Analyse every trace in ``inputs`` (files, folders, globs) into ``outdir``.

    Files run as tasks of the batch layer (:mod:`streamtrace.parallel`): a local
    process pool, a dask scheduler (``opt.scheduler``) or ``opt.executor``.  A file
    that fails is retried once, then listed under ``"failed"`` with its error while
    the others finish.  Returns the summary written to ``outdir/summary.json``.
    Raises :class:`StreamtraceError` on bad input when the only input fails
    (nothing is left half-written)."""
    from .discover import expand_inputs, identify, load_rank_map
    from .io import atomic_output
    from .parallel import TaskFailure, run_tasks, scheduler_address
    opt = opt or AnalyzeOptions()
    t0 = time.time()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rmap = load_rank_map(opt.rank_map) if opt.rank_map else None
    paths = expand_inputs(inputs)
    tasks = []
    for k, p in enumerate(paths):
        try:
            tf = identify(p, rmap)
        except StreamtraceError as e:
            if "cannot tell its rank" not in str(e):
                raise
            if len(paths) > 1:
                raise
            tf = None
            rank, it = 0, None
        else:
            if tf is None:
                continue
            rank, it = tf.rank, tf.iteration
        tasks.append((str(p), str(outdir), rank, it, opt))
    if not tasks:
        raise StreamtraceError(f"no trace files found in {', '.join(map(str, inputs))}")
    claimed = {}
    for t in tasks:             # checked before anything is written: one file's partition per (iteration, rank)
        if (t[3], t[2]) in claimed:
            raise _conflict(t[2], t[3], claimed[(t[3], t[2])], t[0])
        claimed[(t[3], t[2])] = t[0]
    jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(tasks)))
    want = opt.jobs or os.cpu_count() or 1
    if len(tasks) == 1 and want > 1 and opt.split_jobs <= 1 and not scheduler_address(opt.scheduler) \
            and os.path.getsize(tasks[0][0]) >= opt.split_threshold:
        from dataclasses import replace
        opt = replace(opt, split_jobs=want)          # one big file: use every core on it
        tasks = [t[:4] + (opt,) for t in tasks]
    bars = _Bars([t[0] for t in tasks], sys.stderr.isatty() if opt.progress is None else opt.progress)
    try:
        results = run_tasks(_job, [t + (i,) for i, t in enumerate(tasks)], jobs, bars.arr, bars.tick,
                            executor=opt.executor, scheduler=opt.scheduler, retries=1, keep_going=True)
    finally:
        bars.close()
    failed = [{"source": r.args[0], "error": r.error, "attempts": r.attempts}
              for r in results if isinstance(r, TaskFailure)]
    if failed and len(failed) == len(results) and len(results) == 1:
        raise StreamtraceError(failed[0]["error"])
    ranks = sorted((r for res in results if not isinstance(res, TaskFailure) for r in res),
                   key=lambda r: (UNKNOWN_ITERATION if r["iteration"] is None else r["iteration"], r["rank"]))
    seen = {}
    for r in ranks:             # a merged trace's ranks are known only now
        key = (r["iteration"], r["rank"])
        if key in seen:
            raise _conflict(r["rank"], r["iteration"], seen[key], r["source"])
        seen[key] = r["source"]
    _drop_old_layout(outdir)
    summary = {"ranks": ranks, "failed": failed, "seconds": round(time.time() - t0, 3), "outdir": str(outdir)}
    with atomic_output(outdir / "summary.json", compress=False) as f:
        f.write(json.dumps(summary, indent=1).encode())
    return summary


def _conflict(rank, iteration, a, b):
    from .errors import RankConflictError
    it = f" in iteration {iteration}" if iteration is not None else ""
    return RankConflictError(f"rank {rank}{it} appears in two inputs: {a} and {b}")


def _drop_old_layout(outdir):
    """Remove the ``kernels/rank=R/`` and ``ops/rank=R/`` partitions an older streamtrace wrote
    into ``outdir`` (before the ``iteration=N/`` level): beside the new ones, DuckDB refuses the
    dataset (hive partition mismatch) and pyarrow and pandas read those rows as extra data."""
    import re
    import shutil
    for dataset in ("kernels", "ops"):
        d = Path(outdir) / dataset
        for p in sorted(d.glob("rank=*")) if d.is_dir() else []:
            if p.is_dir() and re.fullmatch(r"rank=-?\d+", p.name):
                shutil.rmtree(p)
