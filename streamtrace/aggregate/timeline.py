"""``timeline.parquet`` of ``streamtrace.aggregate.run``, written per part: each worker writes its
part's rows as an Arrow IPC record of a spill folder (``write_part``; ``runtime.spillfile``: one file a
worker process, not one a part), and the parent copies those records, in part order, into the table
(``join``) ``GROUP_ROWS`` rows a row group, so no process holds every rank's rows.

Columns: ``part``, ``rank``, ``iteration``, ``step``, ``device`` (int64), ``category`` (str:
``compute``, ``memory``, ``comm:<dim>``, ``comm:cpu``), ``start_ns``, ``end_ns`` (int64 ns, aligned):
per part in part order, per (iteration, step, device) of the part, per category (sorted), the
canonical union intervals of that category's kernels.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .folder import TIMELINE, TIMELINE_COLUMNS, table_path
from ..events.dataset import read_spilled, spill_table, to_arrow, write_table
from ..runtime.files import atomic_output
from ..runtime.tuning import trim

SCHEMA = pa.schema([(c, pa.string() if c == "category" else pa.int64()) for c in TIMELINE_COLUMNS])


def timeline_columns(tl) -> dict:
    """Rows ``[(part, rank, iteration, step, device, category, starts, ends)]`` (starts/ends: int64
    arrays of one category's union intervals) -> the table's columns."""
    n = [len(x[6]) for x in tl]
    rep = lambda j, dt: np.repeat(np.asarray([x[j] for x in tl], dt), n) if tl else np.zeros(0, dt)  # noqa: E731
    return {"part": rep(0, np.int64), "rank": rep(1, np.int64), "iteration": rep(2, np.int64),
            "step": rep(3, np.int64), "device": rep(4, np.int64), "category": rep(5, object),
            "start_ns": np.concatenate([x[6] for x in tl]) if tl else np.zeros(0, np.int64),
            "end_ns": np.concatenate([x[7] for x in tl]) if tl else np.zeros(0, np.int64)}


def write_part(folder, index: int, rank: int, rows: list) -> tuple | None:
    """Part ``index``'s rows ``[(iteration, step, device, category, starts, ends)]`` as an Arrow IPC
    record of ``folder`` (``dataset.spill_table``); returns its ``(path, offset, size)`` (None
    without rows)."""
    if not rows:
        return None
    return spill_table(folder, to_arrow(timeline_columns([(index, rank, *x) for x in rows])).cast(SCHEMA))


GROUP_ROWS = 16_384
"""Rows of ``timeline.parquet`` a row group at least (the last one fewer): the parts' files joined
until they reach it.  A row group a part made the writer hold 4,096 row groups' metadata at 4,096
synthetic ranks (~290 rows each; ~35 MB of the parent's heap at its peak); a row group of 65,536 rows
cost the parent ~25 MB while it was made and written (its peak at 1,024 synthetic ranks 200.4 MB,
180.8 with 16,384 rows; 73 row groups at 4,096 ranks)."""


def join(outdir, records: list) -> list:
    """Write ``outdir/timeline.parquet`` (atomically) from the parts' records ``records``
    (``write_part``'s, in part order; None entries skipped) in row groups of ``GROUP_ROWS`` rows or
    more (whole parts); returns the written path(s).  The records' folder is its owner's to remove."""
    records = [r for r in records if r is not None]
    if not records:
        return write_table(outdir, TIMELINE, timeline_columns([]))
    out = table_path(outdir, TIMELINE)
    with atomic_output(out, compress=False) as f, pq.ParquetWriter(f, SCHEMA, compression="zstd") as w:
        held, rows = [], 0
        for i, r in enumerate(records):
            held.append(read_spilled(r))
            rows += held[-1].num_rows
            if rows >= GROUP_ROWS or i == len(records) - 1:
                w.write_table(pa.concat_tables(held).combine_chunks(), row_group_size=max(rows, 1))
                held, rows = [], 0
                trim()           # (what reading ~200 parts' files left in glibc's heap: +32 MB over 4,096 parts)
    return [out]
