"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank.

Input: one trace, a folder of rank traces, or a merged multi-rank trace
(streamtrace's own, TraceLens TraceFusion's with ``args.rank``, or Megatron's
``pid = rank + 1``), which is split back into ranks.  Every join key is per rank:
(rank, correlation) for launch -> GPU links and (rank, pid, tid) for call trees.

Output (``OUTDIR``): ``summary.json``; ``kernels/rank=R/part-0.parquet`` (one row per
GPU event) and ``ops/rank=R/part-0.parquet`` (one row per CPU event), zstd, schema
in the README (:data:`KERNEL_SCHEMA`, :data:`OP_SCHEMA`).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import classify as C
from .columns import EVENT_DTYPE, StringTable, columns_from_batch
from .errors import StreamtraceError
from .metrics import COMM, COMPUTE, MEMORY, device_metrics
from .patterns import Patterns
from .reader import TraceReader

KINDS = ("compute", "communication", "memory")


@dataclass
class AnalyzeOptions:
    """Options of :func:`analyze`."""
    jobs: int = 0                 # 0 = all cores
    chunked: bool = False
    chunk_events: int = 1_000_000
    patterns: str | None = None
    topology: str | None = None
    salvage: bool = False
    progress: bool | None = None
    rank_map: str | None = None


# -- loading ---------------------------------------------------------------------

def load_events(path, salvage=False, spill_dir=None, chunk_events=1_000_000):
    """Read one trace into complete-event (``ph == "X"``) columns.

    Returns ``(cols, comm_rows, table, metadata)``: ``cols`` an EVENT_DTYPE array
    (in memory, or memory-mapped from ``spill_dir`` when given: chunks of
    ``chunk_events`` rows are converted and appended to disk as they are read, so
    the decoded document is never held), ``comm_rows`` the collective-args rows
    referenced by ``cols["comm"]``."""
    table = StringTable()
    comm_rows: list = []
    reader = TraceReader(path, salvage=salvage)
    parts = []
    spill = None
    n_spilled = 0
    if spill_dir is not None:
        spill_path = Path(spill_dir) / "events.bin"
        spill = open(spill_path, "wb")
    for b in reader.raw_batches(decode=False):
        cols, rows = columns_from_batch(b, table, path)
        keep = cols["ph"] == ord("X")
        cols = cols[keep]
        if rows:
            has = cols["comm"] >= 0
            cols["comm"][has] += len(comm_rows)
            comm_rows.extend(rows)
        if spill is not None:
            spill.write(cols.tobytes())
            n_spilled += len(cols)
        else:
            parts.append(cols)
    if spill is not None:
        spill.close()
        arr = np.memmap(spill_path, EVENT_DTYPE, mode="r", shape=(n_spilled,)) if n_spilled \
            else np.zeros(0, EVENT_DTYPE)
    else:
        arr = np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)
    return arr, comm_rows, table, reader


def split_ranks(cols, table, metadata, file_rank, pats):
    """Yield ``(rank, row_indices, device_of_pid)`` for each rank in a trace.

    * streamtrace merged traces: rank from ``args.rank``, GPU device and original pid
      from the recorded process map;
    * TraceFusion-style traces: rank from ``args.rank``;
    * Megatron-style merges (GPU and CPU events sharing pids 1..K): rank = pid - 1;
    * otherwise the whole file is ``file_rank``."""
    st = metadata.get("streamtrace") if isinstance(metadata.get("streamtrace"), dict) else None
    pmap = {}
    if st and st.get("kind") == "merged":
        pmap = {int(k): v for k, v in st.get("process_map", {}).items()}
    ranks = cols["rank"]
    if (ranks >= 0).any():
        for r in np.unique(ranks[ranks >= 0]).tolist():
            idx = np.flatnonzero(ranks == r)
            yield int(r), idx, _device_fn(pmap)
        return
    gpu_cat_ids = {table.ids[c] for c in pats.kernel_cats | pats.memory_cats | {"gpu_user_annotation"}
                   if c in table.ids}
    is_gpu = np.isin(cols["cat"], list(gpu_cat_ids))
    gpu_pids = set(np.unique(cols["pid"][is_gpu]).tolist())
    cpu_pids = set(np.unique(cols["pid"][~is_gpu & (cols["pid"] >= 0)]).tolist())
    # Megatron's merge gives every event of rank r pid r + 1, so GPU events share
    # their pid with CPU events; in one rank's own trace GPU pids are device indices
    # that never carry CPU events.
    if len(cpu_pids) > 1 and gpu_pids and gpu_pids <= cpu_pids and min(cpu_pids) >= 1:
        for p in sorted(cpu_pids | gpu_pids):
            yield int(p) - 1, np.flatnonzero(cols["pid"] == p), None
        return
    yield file_rank, np.arange(len(cols)), _device_fn(pmap)


def _device_fn(pmap):
    def device(pids):
        if not pmap:
            return pids
        return np.asarray([pmap.get(int(p), {}).get("device", p) if p >= 0 else p for p in pids.tolist()],
                          np.int64)
    return device


def _orig_pid_fn(pmap):
    return lambda p: pmap.get(int(p), {}).get("pid", p) if pmap else p


# -- one rank ---------------------------------------------------------------------

def analyze_rank(ev, comm_rows, table, rank, device_fn, pats, topo=None, pg_config=None):
    """Analyse one rank's complete events ``ev`` (EVENT_DTYPE, any order).

    Returns ``(kernels, ops, summary)``: two dicts of equal-length numpy columns
    (see :data:`KERNEL_SCHEMA` / :data:`OP_SCHEMA`) and the rank's summary dict
    (``devices``, ``iterations``, ``phases``, ``call_tree``, ``links``)."""
    from .kernels import tree as T
    from .kernels.ancestry import nearest_marked, outermost_marked
    strings = table.strings
    ev = ev[ev["dur"] >= 0]                          # the reference ignores negative durations
    n_str = len(strings)
    is_kcat = np.zeros(n_str + 1, bool)
    is_mcat = np.zeros(n_str + 1, bool)
    skip_cat = np.zeros(n_str + 1, bool)
    for i, s in enumerate(strings):
        is_kcat[i] = s in pats.kernel_cats
        is_mcat[i] = s in pats.memory_cats
        skip_cat[i] = s in ("gpu_user_annotation", "Trace")
    cat = ev["cat"]
    gpu_mask = is_kcat[cat] | is_mcat[cat]
    cpu_mask = ~gpu_mask & ~skip_cat[cat] & (ev["pid"] >= 0)
    g = ev[gpu_mask]
    c = ev[cpu_mask]
    g_start, g_end = g["ts"], g["ts"] + g["dur"]
    c_start, c_end = c["ts"], c["ts"] + c["dur"]
    # GPU class
    comm_name = np.zeros(n_str + 1, bool)
    for i, s in enumerate(strings):
        comm_name[i] = bool(pats.comm.search(s))
    kind = np.where(is_mcat[g["cat"]], MEMORY, np.where(comm_name[g["name"]], COMM, COMPUTE)).astype(np.int8)
    device = g["device"].copy() if device_fn is None else device_fn(g["pid"])
    # call tree per (pid, tid), links, propagation
    _, track = np.unique(np.stack([c["pid"], c["tid"]], axis=1), axis=0, return_inverse=True) if len(c) \
        else (None, np.zeros(0, np.int64))
    track = track.reshape(-1).astype(np.int64)
    parent, depth, order, n_clamped, n_overrun = T.build_call_tree(track, c_start, c_end)
    launch_corr = np.where(c["correlation"] >= 0, c["correlation"], -1)
    launcher, n_dup = T.link_by_correlation(np.full(len(c), rank, np.int64), launch_corr,
                                            np.full(len(g), rank, np.int64), g["correlation"])
    count, total, busy = T.propagate(parent, order, launcher, g_start, g_end)
    # annotations, phases, iterations
    phase_of, fallback_of, recompute_of, step_of, stackdim_of = C.name_flags(strings, pats)
    cname = c["name"]
    is_annot = np.zeros(len(c), bool)
    if "user_annotation" in table.ids:
        is_annot = c["cat"] == table.ids["user_annotation"]
    is_step = step_of[cname] >= 0 if len(c) else np.zeros(0, bool)
    mark = is_annot & ~is_step
    nearest_annot = nearest_marked(parent, order, mark)
    top_annot = outermost_marked(parent, order, mark)
    stackdim_mark = np.asarray([bool(x) for x in stackdim_of[cname]], bool) if len(c) else np.zeros(0, bool)
    nearest_dim = nearest_marked(parent, order, stackdim_mark)
    has_comm = c["comm"] >= 0
    nearest_comm = nearest_marked(parent, order, has_comm)
    t_launch = np.where(launcher >= 0, c_start[np.maximum(launcher, 0)] if len(c) else g_start, g_start)
    ss, se, sidx = C.windows(c_start, c_end, is_step)
    step_pos = C.containing(ss, se, t_launch)
    iteration = np.where(step_pos >= 0, step_of[cname[sidx[np.maximum(step_pos, 0)]]] if len(sidx) else -1, -1)
    phase_code = phase_of[cname] if len(c) else np.zeros(0, np.int8)
    ph = np.zeros(len(g), np.int8)
    micro = np.full(len(g), -1, np.int64)
    ph_start = np.full(len(g), np.iinfo(np.int64).min)    # start of the window that set ph (innermost wins)
    for code in range(1, len(C.PHASES)):
        if C.PHASES[code] == "recompute":
            continue
        ws, we, widx = C.windows(c_start, c_end, phase_code == code)
        if not len(ws):
            continue
        wstep = C.containing(ss, se, ws)
        mb = C.ordinal_within(wstep, ws)
        pos = C.containing(ws, we, t_launch)
        better = (pos >= 0) & (ws[np.maximum(pos, 0)] >= ph_start)
        ph[better] = code
        micro[better] = mb[pos[better]] if C.PHASES[code] in ("forward", "backward") else -1
        ph_start[better] = ws[pos[better]]
    for code in np.unique(fallback_of).tolist():
        if code:
            ws, we, _ = C.windows(c_start, c_end, fallback_of[cname] == code)
            hit = (ph == 0) & (C.containing(ws, we, t_launch) >= 0)
            ph[hit] = code
    rs, re_, _ = C.windows(c_start, c_end, recompute_of[cname] if len(c) else np.zeros(0, bool))
    in_recompute = C.containing(rs, re_, t_launch) >= 0
    ph[in_recompute & (ph == C.PHASES.index("backward"))] = C.PHASES.index("recompute")
    # collectives
    pg_config = pg_config or {}
    coll = {k: (np.full(len(g), -1, np.int64) if k.endswith("bytes") or k == "group_size"
                else np.full(len(g), "", dtype=object))
            for k in ("collective", "in_bytes", "out_bytes", "msg_bytes", "dtype", "group_size",
                      "pg_name", "pg_desc", "pg_ranks", "parallel_dim")}
    for j in np.flatnonzero(kind == COMM).tolist():
        row = None
        if g["comm"][j] >= 0:
            row = comm_rows[g["comm"][j]]
        elif launcher[j] >= 0 and nearest_comm[launcher[j]] >= 0:
            row = comm_rows[c["comm"][nearest_comm[launcher[j]]]]
        info = C.collective_info(row, strings[g["name"][j]], pats, pg_config)
        dim = topo.dim_of(info["pg_ranks"]) if topo is not None else None
        dim = dim or pats.first(pats.pg_desc, info["pg_desc"])
        if not dim and launcher[j] >= 0 and nearest_dim[launcher[j]] >= 0:
            dim = stackdim_of[cname[nearest_dim[launcher[j]]]]
        info["parallel_dim"] = dim or "unknown"
        info["pg_ranks"] = ",".join(map(str, info["pg_ranks"]))
        for k in coll:
            coll[k][j] = info[k]
    lidx = np.maximum(launcher, 0)
    has_l = launcher >= 0

    def via_launcher(values, fill):
        out = np.full(len(g), fill, dtype=values.dtype)
        if len(values):
            out[has_l] = values[lidx[has_l]]
        return out

    names = np.asarray(strings + [""], dtype=object)
    launch_parent = np.where(has_l, parent[lidx] if len(c) else -1, -1)
    kernels = {
        "rank": np.full(len(g), rank, np.int32), "device": device.astype(np.int32),
        "stream": g["stream"], "tid": g["tid"], "ts_ns": g_start, "dur_ns": g["dur"], "end_ns": g_end,
        "name": names[g["name"]], "cat": names[g["cat"]], "kind": np.asarray(KINDS, object)[kind],
        "correlation": g["correlation"], "external_id": g["external_id"],
        "launch_op": np.where(has_l, names[via_launcher(cname, -1)], ""),
        "launching_op": np.where(launch_parent >= 0, names[cname[np.maximum(launch_parent, 0)]] if len(c) else "", ""),
        "annotation": _name_at(names, cname, via_launcher(nearest_annot, -1)),
        "top_annotation": _name_at(names, cname, via_launcher(top_annot, -1)),
        "phase": np.asarray(C.PHASES, object)[ph], "microbatch": micro, "iteration": iteration,
        **coll,
    }
    ops = {
        "rank": np.full(len(c), rank, np.int32), "pid": c["pid"], "tid": c["tid"], "ts_ns": c_start,
        "dur_ns": c["dur"], "name": names[cname], "cat": names[c["cat"]], "depth": depth, "parent": parent,
        "correlation": c["correlation"], "external_id": c["external_id"],
        "kernel_count": count, "kernel_time_ns": total, "gpu_busy_ns": busy,
    }
    summary = {"devices": {}, "iterations": {}, "phases": [],
               "call_tree": {"cpu_events": int(len(c)), "clamped": int(n_clamped), "overruns": int(n_overrun)},
               "links": {"gpu_events": int(len(g)), "linked": int(has_l.sum()),
                         "duplicate_launch_ids": int(n_dup)}}
    for d in np.unique(device).tolist():
        m = device == d
        summary["devices"][str(d)] = device_metrics(g_start[m], g_end[m], kind[m])
        for it in np.unique(iteration[m]).tolist():
            if it >= 0:
                mi = m & (iteration == it)
                summary["iterations"].setdefault(str(it), {})[str(d)] = device_metrics(g_start[mi], g_end[mi],
                                                                                      kind[mi])
        for code in np.unique(ph[m]).tolist():
            for mb in np.unique(micro[m & (ph == code)]).tolist():
                for it in np.unique(iteration[m & (ph == code) & (micro == mb)]).tolist():
                    sel = m & (ph == code) & (micro == mb) & (iteration == it)
                    row = {"device": str(d), "iteration": None if it < 0 else int(it), "phase": C.PHASES[code],
                           "microbatch": None if mb < 0 else int(mb)}
                    row.update(device_metrics(g_start[sel], g_end[sel], kind[sel]))
                    summary["phases"].append(row)
    return kernels, ops, summary


def _name_at(names, cname, idx):
    out = np.full(len(idx), "", dtype=object)
    ok = idx >= 0
    if ok.any():
        out[ok] = names[cname[idx[ok]]]
    return out


# -- outputs ------------------------------------------------------------------------

def _schema():
    import pyarrow as pa
    s, i64, i32 = pa.string(), pa.int64(), pa.int32()
    kernels = pa.schema([
        ("device", i32), ("stream", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("end_ns", i64),
        ("name", s), ("cat", s), ("kind", s), ("correlation", i64), ("external_id", i64),
        ("launch_op", s), ("launching_op", s), ("annotation", s), ("top_annotation", s),
        ("phase", s), ("microbatch", i64), ("iteration", i64), ("collective", s), ("in_bytes", i64),
        ("out_bytes", i64), ("msg_bytes", i64), ("dtype", s), ("group_size", i64), ("pg_name", s),
        ("pg_desc", s), ("pg_ranks", s), ("parallel_dim", s)])
    ops = pa.schema([
        ("pid", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("name", s), ("cat", s), ("depth", i32),
        ("parent", i64), ("correlation", i64), ("external_id", i64), ("kernel_count", i64),
        ("kernel_time_ns", i64), ("gpu_busy_ns", i64)])
    return kernels, ops


def write_partition(outdir, dataset, rank, columns, schema):
    """Write ``outdir/<dataset>/rank=<rank>/part-0.parquet`` (zstd) atomically.
    The ``rank`` column lives in the hive path, as readers expect."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from .io import atomic_output
    table = pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)
    path = Path(outdir) / dataset / f"rank={rank}" / "part-0.parquet"
    with atomic_output(path, compress=False) as f:
        pq.write_table(table, f, compression="zstd")
    return path


def analyze_file(path, outdir, file_rank, iteration, opt: AnalyzeOptions) -> list[dict]:
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
        cols, comm_rows, table, reader = load_events(path, opt.salvage, spill.name if spill else None,
                                                     opt.chunk_events)
        meta = reader.metadata
        out = []
        kschema, oschema = _schema()
        for rank, idx, device_fn in split_ranks(cols, table, meta, file_rank, pats):
            ev = np.asarray(cols[idx])
            pg_config = _pg_config(meta, rank)
            kernels, ops, summ = analyze_rank(ev, comm_rows, table, rank, device_fn, pats, topo, pg_config)
            del ev
            write_partition(outdir, "kernels", rank, kernels, kschema)
            write_partition(outdir, "ops", rank, ops, oschema)
            out.append({"rank": rank, "source": str(path), "iteration": iteration, **summ,
                        "warnings": reader.warnings})
        del cols
        return out
    finally:
        if spill is not None:
            spill.cleanup()


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


def _job(path, outdir, rank, iteration, opt):
    return analyze_file(path, outdir, rank, iteration, opt)


def analyze(inputs, outdir, opt: AnalyzeOptions | None = None) -> dict:
    """Analyse every trace in ``inputs`` (files, folders, globs) into ``outdir``.
    Returns the summary written to ``outdir/summary.json``.  Raises
    :class:`StreamtraceError` on bad input (nothing is left half-written)."""
    from .discover import expand_inputs, identify, load_rank_map
    from .io import atomic_output
    from .merge import _map
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
    jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(tasks)))
    results = _map(_job, tasks, jobs)
    ranks = sorted((r for res in results for r in res), key=lambda r: r["rank"])
    seen = {}
    for r in ranks:
        if r["rank"] in seen:
            raise StreamtraceError(f"rank {r['rank']} appears in two inputs: {seen[r['rank']]} and {r['source']}")
        seen[r["rank"]] = r["source"]
    summary = {"ranks": ranks, "seconds": round(time.time() - t0, 3), "outdir": str(outdir)}
    with atomic_output(outdir / "summary.json", compress=False) as f:
        f.write(json.dumps(summary, indent=1).encode())
    return summary
