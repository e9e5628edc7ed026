"""The collectives of a large job in bounded memory: ``streamtrace.aggregate.collectives``' matching and
measures, with the rows spilled to disk and matched one bucket of match keys at a time.

Matching only ever combines rows with the same match-key prefix
(``match_prefixes``), and an instance is (prefix, k-th row of each
part), so the job splits by prefix:

1. **Spill** (one part at a time): each part's communication kernels, their prefix (an id, in
   first-seen order) and their sequence number within (part, prefix) go to one Arrow IPC file (LZ4:
   a temporary file, read back by this process; zstd Parquet cost 1.5 s of writing at 1,024 ranks), in
   record batches of whole parts' rows (``_BATCH_ROWS``: with a batch per part, passes 2 and 3 spent
   ~2 s of 1,024 ranks' ~10 s on each batch's and chunk's fixed costs); per prefix, the rows and the
   instances (the most rows of one part) are counted.
2. **Buckets**: the prefixes in sorted order (the order of the in-memory path's instance ids) are
   cut into contiguous ranges of about ``bucket_rows`` rows; every part's rows are copied to the
   bucket file of their range.  Instance ids are ``offset(prefix) + seq``: dense, and one
   contiguous, ascending range per bucket.
3. **Per bucket**, in order: the rows are loaded, sorted by (instance, start, rank), measured
   (``instance_tables``), and appended to ``collectives.parquet``
   and ``collectives_ranks.parquet``; the summary, the straggler table, the p2p transfers and the
   counts accumulate (``Summary``,
   ``Stragglers``, ``p2p_transfers``).

The tables equal the in-memory ``analyse_collectives``' row for
row.  Memory: a batch of parts' rows (pass 1), one bucket's rows and tables (pass 3, ~0.5 KB per row),
plus per instance 24 bytes for the summary's distributions and per p2p transfer 48 bytes.  With
``clock_sync="collectives"`` pass 3 runs twice: the first collects, per member of a usable
instance, its instance, part, rank and end (24 bytes) and per instance 4 flags/counts for
``estimate_clock_offsets``, then the aligned times of the spilled
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .folder import (COLLECTIVES, COLLECTIVES_COLUMNS as INSTANCE_COLUMNS, COLLECTIVES_MISMATCH,
                     COLLECTIVES_MISMATCH_COLUMNS as MISMATCH_COLUMNS, COLLECTIVES_RANKS,
                     COLLECTIVES_RANKS_COLUMNS as MEMBER_COLUMNS, table_path)
from ..runtime.errors import StreamtraceError
from ..events.dataset import arrow_file, shared_strings, to_arrow, write_table
from ..runtime.files import atomic_output
from ..runtime.tuning import trim
from ..events.clocks import estimate_clock_offsets
from ..events.collmatch import Mismatch, match_ordinals
from .collective_rows import mismatch_rows
from .critical_graph import Texts
from .collective_parts import part_rows
from .collectives import (CollectiveResult, Stragglers, Summary,
                          clock_instances, cumcount, instance_tables, is_group, match_stats, write_summary)
from .options import BUCKET_ROWS
from .p2p import TRANSFER_COLUMNS, p2p_transfers

STATS = ("kernels", "instances", "complete", "inconsistent", "single_rank", "matched_by_seq", "matched_by_order")
"""The counts of ``aggregate.json``'s ``collectives``."""
# (~230 B a row as Arrow: 131,072 of them made pass 2 the parent's peak at 4,096 synthetic ranks, +38 MB)
_HELD = 32_768                    # rows held before they go to their bucket files
_BATCH_ROWS = 2_048               # pass 1's record batches: parts' rows gathered to at least this many
_INTS = ("part", "rank", "iteration", "step", "start", "end", "dur", "bytes", "group_size", "microbatch", "correlation",
         "stream", "src", "dst", "pid", "seq", "nseq", "sig", "send", "recv", "cpu", "pg_ranks")
_STRS = ("collective", "pg_name", "dim", "phase", "in_splits", "out_splits")
"""The spill files' columns: ``pg_ranks`` is spilled as a code of ``_Plan.pg_ranks`` (a ``Texts``), not as
text: a group's rank list repeats on each of its rows, and the group of a pure-DP job of 4,096 ranks is 19 KB
of text (its 65,536 rows' text was 1.3 GB in one bucket: the command's peak at 1.7 GB)."""
_SPILL = pa.schema([(n, pa.int64()) for n in _INTS] + [(n, pa.string()) for n in _STRS])
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")     # the spill files: written and read once, here
_FLOATS = ("algbw_gbps", "busbw_gbps")
_BOOLS = ("complete", "consistent")
_TEXT = ("collective", "parallel_dim", "pg_name", "pg_ranks", "ranks", "phase", "matched_by", "source")
INSTANCE_SCHEMA = pa.schema([(n, pa.float64() if n in _FLOATS else pa.bool_() if n in _BOOLS
                              else pa.string() if n in _TEXT else pa.int64()) for n in INSTANCE_COLUMNS])
MEMBER_SCHEMA = pa.schema([(n, pa.string() if n == "collective" else pa.int64()) for n in MEMBER_COLUMNS])


class _Plan:
    """What pass 1 and 2 leave: the bucket files in output order, the instance id base per prefix
    id (int64 array), each part's clock offset when its rows were spilled, the row count, and the
    match (``match_ordinals`` per prefix): ``by_seq`` (bool per
    prefix id), ``min_seq`` (int64 per prefix id), ``delta`` (``{(prefix id, part): ordinal - order}``
    for the prefixes re-aligned by signature), ``mismatches`` and ``matched_by`` (``{prefix id: str}``)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.buckets: list = []
        self.base = np.zeros(0, np.int64)
        self.spilled_offset: dict = {}
        self.rows = 0
        self.by_seq = np.zeros(0, bool)
        self.min_seq = np.zeros(0, np.int64)
        self.delta: dict = {}
        self.mismatches: list = []
        self.matched_by: dict = {}
        self.pg_ranks = Texts()                       # (the rows' group rank lists, a code each)


class _Counts:
    """Pass 1's per-prefix tallies: rows, rows per (prefix, part), whether every row has a sequence
    number, its least and greatest."""

    def __init__(self):
        self.rows = np.zeros(0, np.int64)
        self.all_seq = np.zeros(0, bool)
        self.lo = np.zeros(0, np.int64)
        self.hi = np.zeros(0, np.int64)
        self.per_part: dict = {}

    def add(self, pid, part: int, nseq, size: int):
        grow = size - len(self.rows)
        if grow > 0:
            self.rows = np.r_[self.rows, np.zeros(grow, np.int64)]
            self.all_seq = np.r_[self.all_seq, np.ones(grow, bool)]
            self.lo = np.r_[self.lo, np.full(grow, np.iinfo(np.int64).max, np.int64)]
            self.hi = np.r_[self.hi, np.full(grow, -1, np.int64)]
        self.rows += np.bincount(pid, minlength=size)
        np.logical_and.at(self.all_seq, pid, nseq >= 0)
        np.minimum.at(self.lo, pid, nseq)
        np.maximum.at(self.hi, pid, nseq)
        u, n = np.unique(pid, return_counts=True)
        for g, c in zip(u.tolist(), n.tolist()):
            self.per_part[(g, part)] = c


def _spill_parts(job, plan: _Plan, jobs: int = 1) -> tuple[dict, _Counts]:
    """Pass 1: every part's comm kernels (``comm_rows``; on ``jobs`` worker processes:
    ``collective_parts.part_rows``) to ``parts.arrow`` (a record batch per part), ``seq`` = the row's
    position in its prefix (start order).  Returns the prefix ids ``{prefix: id}`` and the tallies."""
    pids: dict = {}
    sigs: dict = {}
    counts = _Counts()
    pending, held = [], 0
    with _spill_writer(plan.folder / "parts.arrow") as w:
        for part, rows in part_rows(job, pids, sigs, jobs):
            if rows is None:
                continue
            pid = rows.pop("prefix")
            rows.update(pid=pid, seq=cumcount(pid),          # rows of a part are sorted by start
                        pg_ranks=plan.pg_ranks.codes(rows["pg_ranks"]))
            counts.add(pid, part.index, rows["nseq"], len(pids))
            pending.append(to_arrow(rows, _SPILL.names).cast(_SPILL))
            held += len(pid)
            plan.spilled_offset[part.index] = part.clock_offset_ns
            plan.rows += len(pid)
            if held >= _BATCH_ROWS:
                w.write_table(pa.concat_tables(pending).combine_chunks())
                pending, held = [], 0
        if pending:
            w.write_table(pa.concat_tables(pending).combine_chunks())
    return pids, counts


def _match(plan: _Plan, counts: _Counts) -> np.ndarray:
    """The matcher on the spilled rows: prefixes matched by sequence number, by order with equal
    counts (ordinal = position), and those re-aligned by signature
    (``match_ordinals`` on their rows only, read back from
    ``parts.arrow``).  Fills ``plan``'s match fields; returns the instances per prefix id."""
    n = len(counts.rows)
    plan.by_seq = counts.all_seq.copy()
    plan.min_seq = np.where(plan.by_seq, counts.lo, 0)
    inst = np.where(plan.by_seq, counts.hi - counts.lo + 1, 0)
    per: dict = {}
    for (g, p), c in counts.per_part.items():
        per.setdefault(g, {})[p] = c
    realign = []
    for g in range(n):
        most = max(per[g].values())
        if plan.by_seq[g]:
            plan.mismatches += [Mismatch(g, p, c, most, 0) for p, c in sorted(per[g].items()) if c != most]
        elif len(set(per[g].values())) == 1:
            inst[g] = most
        else:
            realign.append(g)
    plan.matched_by = {g: "seq" if plan.by_seq[g] else "order" for g in range(n)}
    if realign:
        t = _spilled_rows(plan.folder / "parts.arrow", ["pid", "part", "nseq", "sig", "seq"], realign)
        pid, part, seq = t["pid"].to_numpy(), t["part"].to_numpy(), t["seq"].to_numpy()
        m = match_ordinals(part, pid, t["nseq"].to_numpy(), t["sig"].to_numpy())
        first = np.r_[True, (pid[1:] != pid[:-1]) | (part[1:] != part[:-1])] if len(pid) else np.zeros(0, bool)
        for i in np.flatnonzero(first).tolist():
            plan.delta[(int(pid[i]), int(part[i]))] = int(m.ordinal[i] - seq[i])
        np.maximum.at(inst, pid, m.ordinal + 1)
        plan.mismatches += m.mismatches
    return inst


def _bucket(job, folder: Path, bucket_rows: int, jobs: int = 1) -> _Plan | None:
    """Passes 1 (on ``jobs`` processes) and 2 (module docstring) into ``folder``; None when the job has no
    comm kernels."""
    plan = _Plan(folder)
    pids, counts = _spill_parts(job, plan, jobs)
    if not plan.rows:
        return None
    inst, rows = _match(plan, counts), counts.rows
    plan.prefixes = sorted(pids, key=pids.get)                      # by id
    srt = np.asarray([pids[x] for x in sorted(pids)], np.int64)     # sorted position -> prefix id
    plan.base = np.empty(len(pids), np.int64)
    plan.base[srt] = np.cumsum(inst[srt]) - inst[srt]
    bucket_of = np.empty(len(pids), np.int64)         # by the rows before the prefix, in bucket_rows units
    _, dense = np.unique((np.cumsum(rows[srt]) - rows[srt]) // max(1, int(bucket_rows)), return_inverse=True)
    bucket_of[srt] = dense.reshape(-1)
    nb = int(bucket_of.max()) + 1
    plan.buckets = [folder / f"bucket-{b:05d}.arrow" for b in range(nb)]
    src = pa.ipc.open_file(arrow_file(folder / "parts.arrow"))
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(_spill_writer(p)) for p in plan.buckets]
        pending: list = [[] for _ in range(nb)]
        held = 0                                       # rows in pending: at most _HELD + one batch's
        for g in range(src.num_record_batches):       # (a batch: parts' rows, ``_BATCH_ROWS``)
            t = pa.Table.from_batches([src.get_batch(g)])
            b = bucket_of[t["pid"].to_numpy()]
            for j in np.unique(b).tolist():
                pending[j].append(t.filter(pa.array(b == j)))
            held += t.num_rows
            if held >= _HELD or g == src.num_record_batches - 1:
                for j in range(nb):
                    if pending[j]:
                        writers[j].write_table(pa.concat_tables(pending[j]))
                pending, held = [[] for _ in range(nb)], 0
    del src
    (folder / "parts.arrow").unlink()
    trim()                                             # (the batches' Arrow buffers, freed: glibc's heap returned)
    return plan


def _spill_writer(path):
    """A writer of ``_SPILL`` rows to the Arrow IPC file ``path`` (LZ4)."""
    return pa.ipc.new_file(arrow_file(path, "wb"), _SPILL, options=_IPC)


def _spilled_rows(path, columns, pids) -> pa.Table:
    """The rows of the spill file ``path`` whose ``pid`` is in ``pids`` (``columns`` of them), one record
    batch at a time: only the kept rows are held."""
    src, keep = pa.ipc.open_file(arrow_file(path)), pa.array(sorted(pids), pa.int64())
    got = [b.select(columns).filter(pc.is_in(b.column("pid"), value_set=keep))
           for b in (src.get_batch(g) for g in range(src.num_record_batches))]
    return pa.Table.from_batches(got, pa.schema([_SPILL.field(c) for c in columns]))


def _load(job, plan: _Plan, path) -> dict:
    """One bucket's rows as ``load_comm`` columns on the job's
    current clocks, sorted by (instance, start, rank)."""
    t = pa.ipc.open_file(arrow_file(path)).read_all()
    c = {n: t[n].to_numpy() for n in _INTS}
    c.update({n: shared_strings(t[n]) for n in _STRS})
    c["pg_ranks"] = plan.pg_ranks.values()[c["pg_ranks"]]
    del t
    shift = np.zeros(max(plan.spilled_offset) + 1, np.int64)
    for i, off in plan.spilled_offset.items():       # aligned time on the clocks now: + old - new offset
        shift[i] = off - job.parts[i].clock_offset_ns
    c["start"] = c["start"] + shift[c["part"]]
    c["end"] = c["end"] + shift[c["part"]]
    pid = c.pop("pid")
    seq = np.where(plan.by_seq[pid], c["nseq"] - plan.min_seq[pid], c["seq"])
    if plan.delta:
        seq = seq + np.fromiter((plan.delta.get(k, 0) for k in zip(pid.tolist(), c["part"].tolist())), np.int64,
                                len(pid))
    c["seq"] = seq
    c["by"] = np.where(plan.by_seq[pid], "seq", "order").astype(object)
    c["instance"] = plan.base[pid] + seq
    o = np.lexsort((c["rank"], c["start"], c["instance"]))
    for n in list(c):                    # (a column at a time, the unsorted one let go as its sorted copy is made)
        c[n] = c[n][o]
    return c


def _clock_inputs(job, plan: _Plan) -> tuple[dict, dict]:
    """The members and instance flags ``estimate_clock_offsets`` reads, bucket by bucket: members
    of usable instances only (instance int64, part/rank int32, end int64)."""
    mem = {k: [] for k in ("instance", "part", "rank", "end_ns")}
    inst = {k: [] for k in ("complete", "consistent", "n_ranks", "bridge")}
    for path in plan.buckets:
        i, m = instance_tables(_load(job, plan, path))
        f = clock_instances(i)
        ok = f["complete"] & f["consistent"] & (i["n_ranks"] >= 2)
        keep = ok[np.searchsorted(i["instance"], m["instance"])]
        for k, dt in (("instance", np.int64), ("part", np.int32), ("rank", np.int32), ("end_ns", np.int64)):
            mem[k].append(m[k][keep].astype(dt))
        for k, v in (("complete", f["complete"]), ("consistent", f["consistent"]),
                     ("n_ranks", i["n_ranks"].astype(np.int32)), ("bridge", ~is_group(i))):
            inst[k].append(v)
    return ({k: np.concatenate(v) for k, v in mem.items()}, {k: np.concatenate(v) for k, v in inst.items()})


def _write_buckets(job, plan: _Plan, outdir: Path) -> tuple[list, dict]:
    """Pass 3: every bucket measured and appended to the two tables; returns the paths and the
    accumulated ``summary``, ``stragglers``, ``transfers``, ``stats``."""
    acc = {"summary": Summary(), "stragglers": Stragglers(), "transfers": [],
           "stats": dict.fromkeys(STATS, 0)}
    paths = [table_path(outdir, COLLECTIVES), table_path(outdir, COLLECTIVES_RANKS)]
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
            st["matched_by_seq"] += int((inst["matched_by"] == "seq").sum())
            st["matched_by_order"] += int((inst["matched_by"] == "order").sum())
            del inst, mem
            trim()                                     # (a bucket's columns and their sorts, freed before the next)
    return paths, acc


def collectives_to(job, outdir, clock_sync: str | None = None, bucket_rows: int = BUCKET_ROWS,
                   jobs: int = 1) -> tuple:
    """``analyse_collectives`` and
    ``write_collectives`` in bounded memory (module docstring):
    writes ``collectives.parquet``, ``collectives_ranks.parquet`` and ``collectives_summary.{parquet,
    csv}`` into ``outdir`` (atomically) and returns ``(result, paths)``; ``result.instances`` and
    ``.members`` are empty, ``result.transfers`` holds the p2p transfers
    (``p2p_transfers``).  ``bucket_rows`` (int >= 1): rows per bucket
    (about; a prefix is never split).  With ``clock_sync="collectives"`` the offsets are estimated
    and set on ``job`` first.  ``jobs``: worker processes that read the parts' kernels (pass 1,
    ``collective_parts.part_rows``; the tables are the same with any number)."""
    if clock_sync not in (None, "none", "collectives"):
        raise StreamtraceError(f"bad --clock-sync {clock_sync!r}: use none or collectives")
    folder = Path(tempfile.mkdtemp(prefix=".collectives-spill.", dir=outdir))
    try:
        plan = _bucket(job, folder, bucket_rows, jobs)
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
    bad = mismatch_rows(sorted(plan.mismatches, key=lambda m: (plan.prefixes[m.group], m.part)), plan.prefixes,
                        {p.index: p.rank for p in job.parts}, plan.matched_by)
    stats = {**acc["stats"], **{k: v for k, v in match_stats({}, bad).items() if k.startswith("mismatch")}}
    res = CollectiveResult({}, {}, summary, acc["stragglers"].rows(), offsets, comps, stats, tr, bad)
    if len(bad["rank"]):
        paths += write_table(outdir, COLLECTIVES_MISMATCH, bad, MISMATCH_COLUMNS, csv=True)
    return res, paths + write_summary(outdir, summary)


def _empty(outdir) -> tuple[CollectiveResult, list]:
    """No comm kernels: the in-memory path's empty tables."""
    inst, mem = instance_tables({"instance": np.zeros(0, np.int64)})
    bad = mismatch_rows([], [], {}, {})
    res = CollectiveResult({}, {}, [], [], {}, {}, {**dict.fromkeys(STATS, 0), "mismatched": 0, "mismatched_ranks": []},
                           {c: np.zeros(0, np.int64) for c in TRANSFER_COLUMNS}, bad)
    return res, write_table(outdir, COLLECTIVES, inst, INSTANCE_COLUMNS) + \
        write_table(outdir, COLLECTIVES_RANKS, mem, MEMBER_COLUMNS)
