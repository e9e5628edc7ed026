"""The collectives of a large job in bounded memory: :mod:`streamtrace.job.collectives`' matching and
measures, with the rows spilled to disk and matched one bucket of match keys at a time.

Matching only ever combines rows with the same match-key prefix
(:func:`~streamtrace.job.collectives.match_prefixes`), and an instance is (prefix, k-th row of each
part), so the job splits by prefix:

1. **Spill** (one part at a time): each part's communication kernels, their prefix (an id, in
   first-seen order) and their sequence number within (part, prefix) go to one Parquet file, a row
   group per part; per prefix, the rows and the instances (the most rows of one part) are counted.
2. **Buckets**: the prefixes in sorted order (the order of the in-memory path's instance ids) are
   cut into contiguous ranges of about ``bucket_rows`` rows; every part's rows are copied to the
   bucket file of their range.  Instance ids are ``offset(prefix) + seq``: dense, and one
   contiguous, ascending range per bucket.
3. **Per bucket**, in order: the rows are loaded, sorted by (instance, start, rank), measured
   (:func:`~streamtrace.job.collectives.instance_tables`), and appended to ``collectives.parquet``
   and ``collectives_ranks.parquet``; the summary, the straggler table, the p2p transfers and the
   counts accumulate (:class:`~streamtrace.job.collectives.Summary`,
   :class:`~streamtrace.job.collectives.Stragglers`, :func:`~streamtrace.job.p2p.p2p_transfers`).

The tables equal the in-memory :func:`~streamtrace.job.collectives.analyse_collectives`' row for
row.  Memory: one part's rows (pass 1), one bucket's rows and tables (pass 3, ~0.5 KB per row),
plus per instance 24 bytes for the summary's distributions and per p2p transfer 48 bytes.  With
``clock_sync="collectives"`` pass 3 runs twice: the first collects, per member of a usable
instance, its instance, part, rank and end (24 bytes) and per instance 4 flags/counts for
:func:`~streamtrace.events.clocks.estimate_clock_offsets`, then the aligned times of the spilled
rows are corrected by the estimated offsets (a constant per part: nothing is read again).

The spill folder (a temporary folder inside ``outdir``) is removed on success and on error.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..runtime.errors import StreamtraceError
from ..events.dataset import shared_strings, to_arrow, write_table
from ..runtime.files import atomic_output
from ..events.clocks import estimate_clock_offsets
from .collectives import (COMM_COLUMNS, INSTANCE_COLUMNS, MEMBER_COLUMNS, CollectiveResult, Stragglers, Summary,
                          cumcount, instance_tables, is_group, match_prefixes)
from .options import BUCKET_ROWS
from .p2p import TRANSFER_COLUMNS, p2p_transfers

STATS = ("kernels", "instances", "complete", "inconsistent", "single_rank")
"""The counts of ``aggregate.json``'s ``collectives``."""
_HELD = 131_072                   # rows held before they go to their bucket files
_INTS = ("part", "rank", "iteration", "step", "start", "end", "dur", "bytes", "group_size", "microbatch", "correlation",
         "stream", "src", "dst", "pid", "seq")
_STRS = ("collective", "pg_name", "pg_ranks", "dim", "phase")
_SPILL = pa.schema([(n, pa.int64()) for n in _INTS] + [(n, pa.string()) for n in _STRS])
_KERNEL = {"bytes": "msg_bytes", "dim": "parallel_dim", "collective": "collective", "group_size": "group_size",
           "pg_name": "pg_name", "pg_ranks": "pg_ranks", "phase": "phase", "microbatch": "microbatch",
           "correlation": "correlation", "stream": "stream", "iteration": "iteration", "step": "step"}
_FLOATS = ("algbw_gbps", "busbw_gbps")
_BOOLS = ("complete", "consistent")
_TEXT = ("collective", "parallel_dim", "pg_name", "pg_ranks", "ranks", "phase")
INSTANCE_SCHEMA = pa.schema([(n, pa.float64() if n in _FLOATS else pa.bool_() if n in _BOOLS
                              else pa.string() if n in _TEXT else pa.int64()) for n in INSTANCE_COLUMNS])
MEMBER_SCHEMA = pa.schema([(n, pa.string() if n == "collective" else pa.int64()) for n in MEMBER_COLUMNS])


class _Plan:
    """What pass 1 and 2 leave: the bucket files in output order, the instance id base per prefix
    id (int64 array), each part's clock offset when its rows were spilled, the row count."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.buckets: list = []
        self.base = np.zeros(0, np.int64)
        self.spilled_offset: dict = {}
        self.rows = 0


def _spill_parts(job, plan: _Plan) -> tuple[dict, np.ndarray, np.ndarray]:
    """Pass 1: every part's comm kernels to ``parts.parquet`` (a row group per part).  Returns the
    prefix ids ``{prefix: id}``, rows and instances per id (int64 arrays)."""
    pids: dict = {}
    rows, inst = np.zeros(0, np.int64), np.zeros(0, np.int64)
    with pq.ParquetWriter(plan.folder / "parts.parquet", _SPILL, compression="zstd") as w:
        for part in job.parts:
            k = job.read_kernels(part, COMM_COLUMNS, kind="communication")
            n = len(k["ts_ns"])
            if not n:
                continue
            pre, src, dst = match_prefixes(job, part, k)
            pid = np.fromiter((pids.setdefault(x, len(pids)) for x in pre), np.int64, n)
            seq = cumcount(pid)                        # rows of a part are sorted by start
            rows = np.concatenate([rows, np.zeros(len(pids) - len(rows), np.int64)])
            inst = np.concatenate([inst, np.zeros(len(pids) - len(inst), np.int64)])
            rows += np.bincount(pid, minlength=len(pids))
            np.maximum.at(inst, pid, seq + 1)
            cols = {"part": np.full(n, part.index, np.int64), "rank": np.full(n, part.rank, np.int64),
                    "start": part.align(k["ts_ns"]), "end": part.align(k["end_ns"]),
                    "dur": k["dur_ns"].astype(np.int64), "src": src, "dst": dst, "pid": pid, "seq": seq,
                    **{a: k[b] for a, b in _KERNEL.items()}}
            w.write_table(to_arrow(cols, _SPILL.names).cast(_SPILL))
            plan.spilled_offset[part.index] = part.clock_offset_ns
            plan.rows += n
    return pids, rows, inst


def _bucket(job, folder: Path, bucket_rows: int) -> _Plan | None:
    """Passes 1 and 2 (module docstring) into ``folder``; None when the job has no comm kernels."""
    plan = _Plan(folder)
    pids, rows, inst = _spill_parts(job, plan)
    if not plan.rows:
        return None
    srt = np.asarray([pids[x] for x in sorted(pids)], np.int64)     # sorted position -> prefix id
    plan.base = np.empty(len(pids), np.int64)
    plan.base[srt] = np.cumsum(inst[srt]) - inst[srt]
    bucket_of = np.empty(len(pids), np.int64)         # by the rows before the prefix, in bucket_rows units
    _, dense = np.unique((np.cumsum(rows[srt]) - rows[srt]) // max(1, int(bucket_rows)), return_inverse=True)
    bucket_of[srt] = dense.reshape(-1)
    nb = int(bucket_of.max()) + 1
    plan.buckets = [folder / f"bucket-{b:05d}.parquet" for b in range(nb)]
    src = pq.ParquetFile(folder / "parts.parquet")
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(pq.ParquetWriter(p, _SPILL, compression="zstd")) for p in plan.buckets]
        pending: list = [[] for _ in range(nb)]
        held = 0                                       # rows in pending: at most _HELD + one part's
        for g in range(src.metadata.num_row_groups):
            t = src.read_row_group(g)
            b = bucket_of[t["pid"].to_numpy()]
            for j in np.unique(b).tolist():
                pending[j].append(t.filter(pa.array(b == j)))
            held += t.num_rows
            if held >= _HELD or g == src.metadata.num_row_groups - 1:
                for j in range(nb):
                    if pending[j]:
                        writers[j].write_table(pa.concat_tables(pending[j]))
                pending, held = [[] for _ in range(nb)], 0
    (folder / "parts.parquet").unlink()
    return plan


def _load(job, plan: _Plan, path) -> dict:
    """One bucket's rows as :func:`~streamtrace.job.collectives.load_comm` columns on the job's
    current clocks, sorted by (instance, start, rank)."""
    t = pq.read_table(path, read_dictionary=list(_STRS))
    c = {n: t[n].to_numpy() for n in _INTS}
    c.update({n: shared_strings(t[n]) for n in _STRS})
    del t
    shift = np.zeros(max(plan.spilled_offset) + 1, np.int64)
    for i, off in plan.spilled_offset.items():       # aligned time on the clocks now: + old - new offset
        shift[i] = off - job.parts[i].clock_offset_ns
    c["start"] = c["start"] + shift[c["part"]]
    c["end"] = c["end"] + shift[c["part"]]
    c["instance"] = plan.base[c.pop("pid")] + c["seq"]
    o = np.lexsort((c["rank"], c["start"], c["instance"]))
    return {n: v[o] for n, v in c.items()}


def _clock_inputs(job, plan: _Plan) -> tuple[dict, dict]:
    """The members and instance flags :func:`estimate_clock_offsets` reads, bucket by bucket: members
    of usable instances only (instance int64, part/rank int32, end int64)."""
    mem = {k: [] for k in ("instance", "part", "rank", "end_ns")}
    inst = {k: [] for k in ("complete", "consistent", "n_ranks", "bridge")}
    for path in plan.buckets:
        i, m = instance_tables(_load(job, plan, path))
        ok = i["complete"] & i["consistent"] & (i["n_ranks"] >= 2)
        keep = ok[np.searchsorted(i["instance"], m["instance"])]
        for k, dt in (("instance", np.int64), ("part", np.int32), ("rank", np.int32), ("end_ns", np.int64)):
            mem[k].append(m[k][keep].astype(dt))
        for k, v in (("complete", i["complete"]), ("consistent", i["consistent"]),
                     ("n_ranks", i["n_ranks"].astype(np.int32)), ("bridge", ~is_group(i))):
            inst[k].append(v)
    return ({k: np.concatenate(v) for k, v in mem.items()}, {k: np.concatenate(v) for k, v in inst.items()})


def _write_buckets(job, plan: _Plan, outdir: Path) -> tuple[list, dict]:
    """Pass 3: every bucket measured and appended to the two tables; returns the paths and the
    accumulated ``summary``, ``stragglers``, ``transfers``, ``stats``."""
    acc = {"summary": Summary(), "stragglers": Stragglers(), "transfers": [],
           "stats": dict.fromkeys(STATS, 0)}
    paths = [outdir / "collectives.parquet", outdir / "collectives_ranks.parquet"]
    with atomic_output(paths[0], compress=False) as fi, atomic_output(paths[1], compress=False) as fm, \
            pq.ParquetWriter(fi, INSTANCE_SCHEMA, compression="zstd") as wi, \
            pq.ParquetWriter(fm, MEMBER_SCHEMA, compression="zstd") as wm:
        for path in plan.buckets:
            inst, mem = instance_tables(_load(job, plan, path))
            wi.write_table(to_arrow(inst, INSTANCE_COLUMNS).cast(INSTANCE_SCHEMA))
            wm.write_table(to_arrow(mem, MEMBER_COLUMNS).cast(MEMBER_SCHEMA))
            acc["summary"].add(inst)
            acc["stragglers"].add(inst, mem)
            acc["transfers"].append(p2p_transfers(inst, mem))
            st = acc["stats"]
            st["kernels"] += len(mem["instance"])
            st["instances"] += len(inst["instance"])
            st["complete"] += int(inst["complete"].sum())
            st["inconsistent"] += int((~inst["consistent"]).sum())
            st["single_rank"] += int((inst["n_ranks"] == 1).sum())
    return paths, acc


def collectives_to(job, outdir, clock_sync: str | None = None, bucket_rows: int = BUCKET_ROWS) -> tuple:
    """:func:`~streamtrace.job.collectives.analyse_collectives` and
    :func:`~streamtrace.job.collectives.write_collectives` in bounded memory (module docstring):
    writes ``collectives.parquet``, ``collectives_ranks.parquet`` and ``collectives_summary.{parquet,
    csv}`` into ``outdir`` (atomically) and returns ``(result, paths)``; ``result.instances`` and
    ``.members`` are empty, ``result.transfers`` holds the p2p transfers
    (:func:`~streamtrace.job.p2p.p2p_transfers`).  ``bucket_rows`` (int >= 1): rows per bucket
    (about; a prefix is never split).  With ``clock_sync="collectives"`` the offsets are estimated
    and set on ``job`` first."""
    if clock_sync not in (None, "none", "collectives"):
        raise StreamtraceError(f"bad --clock-sync {clock_sync!r}: use none or collectives")
    folder = Path(tempfile.mkdtemp(prefix=".collectives-spill.", dir=outdir))
    try:
        plan = _bucket(job, folder, bucket_rows)
        if plan is None:
            return _empty(outdir)
        offsets, comps = {}, {}
        if clock_sync == "collectives":
            offsets, comps = estimate_clock_offsets(*_clock_inputs(job, plan))
            job.set_clock_offsets(offsets)
        paths, acc = _write_buckets(job, plan, Path(outdir))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = acc["summary"].rows()
    tr = {c: np.concatenate([t[c] for t in acc["transfers"]]) for c in TRANSFER_COLUMNS}
    res = CollectiveResult({}, {}, summary, acc["stragglers"].rows(), offsets, comps, acc["stats"], tr)
    return res, paths + _write_summary(outdir, summary)


def _write_summary(outdir, summary: list) -> list:
    summ = {k: np.asarray([r[k] for r in summary], object if isinstance(summary[0][k], str) else None)
            for k in summary[0]} if summary else {}
    return write_table(outdir, "collectives_summary", summ, list(summ), csv=True) if summ else []


def _empty(outdir) -> tuple[CollectiveResult, list]:
    """No comm kernels: the in-memory path's empty tables."""
    inst, mem = instance_tables({"instance": np.zeros(0, np.int64)})
    res = CollectiveResult({}, {}, [], [], {}, {}, dict.fromkeys(STATS, 0),
                           {c: np.zeros(0, np.int64) for c in TRANSFER_COLUMNS})
    return res, write_table(outdir, "collectives", inst, INSTANCE_COLUMNS) + \
        write_table(outdir, "collectives_ranks", mem, MEMBER_COLUMNS)
