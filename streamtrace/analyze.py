"""``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank.

Input: one trace, a folder of rank traces, or a merged multi-rank trace
(streamtrace's own, TraceLens TraceFusion's with ``args.rank``, or Megatron's
``pid = rank + 1``), which is split back into ranks.  Every join key is per rank:
(rank, correlation) for launch -> GPU links and (rank, pid, tid) for call trees.

Output (``OUTDIR``): ``summary.json``; ``kernels/iteration=N/rank=R/part-0.parquet`` (one
row per GPU event) and ``ops/iteration=N/rank=R/part-0.parquet`` (one row per CPU event), zstd
(after ``--jobs N`` on one big trace, ``part-0`` .. ``part-K``, rows in that order: see
:mod:`streamtrace.trackfork`),
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

from .columns import StringTable, columns_from_batch
from .errors import StreamtraceError
from .outputs import (UNKNOWN_ITERATION, PartitionWriter, StringPool, drop_extra_parts, partition_path,  # noqa: F401
                      schemas)
from .patterns import Patterns
from .rankanalysis import KINDS, analyze_rank  # noqa: F401  (KINDS re-exported)
from .reader import TraceReader
from .store import CHUNK_EVENTS, STORE_DTYPE, MemoryStore, SpillStore, trim  # noqa: F401  (stores re-exported)


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
    chunk_events: int = CHUNK_EVENTS   # events held at once: stored blocks, sort runs, analysis steps
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


def _schema():
    """``(kernels, ops)`` pyarrow schemas (kept here for :mod:`streamtrace.alignment`)."""
    return schemas()


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
        split = None
        if opt.split_jobs > 1:
            from .split import ingest_parallel, warm_analysis
            warm_analysis(outdir, opt, ingest_only=True)  # before forking: the workers inherit the kernels
            split = ingest_parallel(path, outdir, opt.split_jobs, opt.patterns, opt.salvage,
                                    spill.name if spill else None, opt.chunk_events,
                                    while_parsing=lambda: warm_analysis(outdir, opt))
        if split is not None:
            store, table, comm_rows, meta, warnings, _ = split
        else:                                            # one process (also: a file that cannot be split)
            store = SpillStore(spill.name, opt.chunk_events) if spill else MemoryStore(opt.chunk_events)
            table, comm_rows, reader = ingest(path, store, pats, opt.salvage, progress)
            meta, warnings = reader.metadata, reader.warnings
            del reader                                   # and its last input block
        trim()
        ranks, device_mode, pmap = rank_plan(store, meta, file_rank)
        kschema, oschema = schemas()
        pool = StringPool(table.strings)
        ops_pools = {"name": pool, "cat": pool}
        out = []
        for rank, keys in sorted(ranks.items()):
            def kernels_out(pools, part=0, rank=rank):
                return PartitionWriter(outdir, rank, iteration, kschema, "kernels", pools, part=part)
            for name in ("kernels", "ops"):                   # an earlier run's part-1.. files
                drop_extra_parts(outdir, name, rank, iteration, 1)

            def open_ops(part, rank=rank):
                return PartitionWriter(outdir, rank, iteration, oschema, "ops", ops_pools, part=part)
            summ = analyze_rank(store, keys, comm_rows, table, rank, device_mode, pmap, pats, topo,
                                _pg_config(meta, rank), open_ops, kernels_out, pool, opt.chunk_events,
                                spill.name if spill else None, jobs=opt.split_jobs)
            out.append({"rank": rank, "source": str(path), "iteration": iteration, **summ,
                        "warnings": warnings})
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
