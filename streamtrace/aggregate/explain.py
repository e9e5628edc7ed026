"""``aggregate``'s explaining tables, one rank at a time from its Parquet rows (no trace is read):
``kernel_stats``, ``op_stats``, ``launch_stats`` (``streamtrace.aggregate.stats``) and
``idle_breakdown`` (``streamtrace.aggregate.idle``), each ``.parquet`` + ``.csv``, every row keyed by
(``iteration``, ``step``, ``rank``).  ``part_tables`` runs in aggregate's per-rank worker,
``write_tables`` in the parent.  Rows are kept under aggregate's ``--steps`` like every other
table (a gap before a step's first kernel is still measured from the kernel before it).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..analyze.outputs import KERNELS, OPS, schema_of
from ..events.dataset import write_table
from ..runtime.tuning import trim
from . import idle
from . import stats
from .folder import (COLUMNS, EXPLAIN_TABLES as TABLES, IDLE_BREAKDOWN, KERNEL_STATS, LAUNCH_STATS,
                     OP_STATS)

KERNEL_COLUMNS = ["device", "stream", "ts_ns", "dur_ns", "end_ns", "name", "kind", "collective", "correlation",
                  "launch_op", "step"]


def part_tables(job, part, threshold_ns=idle.DEFAULT_THRESHOLD_NS, tables=None) -> dict:
    """``{table: {column: numpy array}}`` of one part (a rank of one analysed iteration) of
    ``job`` (``Job``); ``threshold_ns``: the kernel-wait threshold
    of the idle breakdown (int ns); ``tables``: the part's ``{"kernels", "ops"}`` pyarrow tables
    already read with at least these columns (None: read here)."""
    it, rank = job.iteration_of(part), part.rank
    k, ops = (part.read(KERNELS, KERNEL_COLUMNS), part.read(OPS, stats.OPS_COLUMNS)) if tables is None else \
        (_cols(tables[KERNELS], KERNEL_COLUMNS), _cols(tables[OPS], stats.OPS_COLUMNS))
    if ops is None:
        ops = schema_of(OPS).empty_table().select(stats.OPS_COLUMNS)
    out = {}
    if k is not None and k.num_rows:
        keep = job.keep_rows(k["step"].to_numpy())
        linked, lts, ldur = stats.launch_rows(k["correlation"].to_numpy(), ops)
        b = idle.breakdown(k["device"].to_numpy(), k["stream"].to_numpy(), k["ts_ns"].to_numpy(),
                            k["end_ns"].to_numpy(), k["step"].to_numpy(), linked, lts, threshold_ns)
        sel = job.keep_rows(b["step"])
        out[IDLE_BREAKDOWN] = _keyed(it, rank, {c: v[sel] for c, v in b.items()})
        kk = k.filter(pa.array(keep))
        out[KERNEL_STATS] = _keyed(it, rank, stats.kernel_stats(kk))
        out[LAUNCH_STATS] = _keyed(it, rank, _rows(stats.launch_stats(kk, linked[keep], lts[keep], ldur[keep])))
    if ops.num_rows:
        out[OP_STATS] = _keyed(it, rank, stats.op_stats(ops, keep=job.keep_rows, steps=part.steps))
    return out


def _cols(t, columns):
    return None if t is None else t.select(columns)


def _rows(rows) -> dict:
    if not rows:
        return {}
    return {c: np.asarray([r[c] for r in rows], object if any(r[c] is None or isinstance(r[c], str) for r in rows)
                          else None) for c in rows[0]}


def _keyed(iteration, rank, cols: dict) -> dict:
    """``cols`` with ``iteration`` and ``rank`` columns first (``step`` after them)."""
    n = len(next(iter(cols.values()))) if cols else 0
    head = {"iteration": np.full(n, iteration, np.int64), "step": np.asarray(cols.get("step", []), np.int64),
            "rank": np.full(n, rank, np.int64)}
    return head | {c: v for c, v in cols.items() if c != "step"}


def packed(tables: dict) -> dict:
    """``part_tables``' result with each table pickled (``{table: bytes}``), as aggregate's parent
    holds every rank's until ``write_tables``: its columns of names are Python strings, 3-4x their
    pickled size (1,024 synthetic ranks: 73 MB of tables, 21 MB pickled)."""
    return {name: pickle.dumps(cols, protocol=pickle.HIGHEST_PROTOCOL) for name, cols in tables.items()}


def spill(folder, index: int, tables: dict) -> tuple:
    """``part_tables``' result ``tables`` of part ``index`` pickled into ``folder/explain-<index>.pickle``,
    one table after another.  Returns ``(path, {table: (offset, length)})``, what ``write_tables``
    reads each table back by: aggregate's parent then holds a few bytes a rank until the tables are
    written, not the rank's pickled tables (4,096 synthetic ranks: ~80 MB)."""
    path = Path(folder) / f"explain-{index:06d}.pickle"
    where, at = {}, 0
    with open(path, "wb") as f:
        for name, b in packed(tables).items():
            f.write(b)
            where[name], at = (at, len(b)), at + len(b)
    return str(path), where


def _table(part, name):
    """Table ``name``'s columns of one part's result (``part_tables``, ``packed`` or ``spill``), None
    when it has none."""
    if isinstance(part, tuple):
        path, where = part
        if name not in where:
            return None
        at, n = where[name]
        with open(path, "rb") as f:
            f.seek(at)
            return pickle.loads(f.read(n))
    if name not in part:
        return None
    return pickle.loads(part[name]) if isinstance(part[name], bytes) else part[name]


def write_tables(outdir, parts: list) -> list:
    """Write the tables of ``TABLES`` from the per-part results ``parts`` (list of
    ``part_tables`` dicts, or ``packed`` or ``spill`` ones, in part order) into ``outdir`` (Parquet + CSV), one
    table at a time; returns the paths.  Each part is unpickled in turn and its text columns made
    Arrow strings at once (``_compact``), so that the parts' Python strings are never all held
    (4,096 synthetic ranks: ``op_stats``' 240,640 rows took aggregate's parent +200 MB)."""
    files = []
    for name in TABLES:
        chunks = _chunks(parts, name)
        if chunks is None:
            continue
        cols = {c: _joined(chunks.pop(c)) for c in list(chunks)}     # (each column's chunks let go once joined)
        o = np.lexsort((np.arange(len(cols["rank"])), cols["rank"], cols["step"], cols["iteration"]))
        for c in COLUMNS[name]:                       # (sorted a column at a time: the table never held twice)
            cols[c] = _nulls(cols[c][o]) if isinstance(cols[c], np.ndarray) else cols[c].take(pa.array(o))
        files += write_table(outdir, name, {c: cols[c] for c in COLUMNS[name]}, csv=True)
        del cols
        trim()                                        # (the table's columns and writers' buffers, freed)
    return files


def _chunks(parts, name):
    """``{column: [one chunk a part]}`` of table ``name`` over ``parts`` (those with rows), text
    columns as Arrow arrays (``_compact``); None when no part has a row."""
    out = None
    for p in parts:
        t = _table(p, name)
        if t is None or not len(t["rank"]):
            continue
        if out is None:
            out = {c: [] for c in t}
        for c, v in t.items():
            out[c].append(_compact(v))
    return out


def _compact(v):
    """An object column of text (str and None) as an Arrow array (``string``, or ``null`` when all
    None), its Python strings let go; any other column as it is."""
    if isinstance(v, np.ndarray) and v.dtype == object:
        try:
            a = pa.array(v.tolist())
        except (pa.ArrowException, TypeError):
            return v
        if pa.types.is_string(a.type) or pa.types.is_null(a.type):
            return a
    return v


def _joined(chunks: list):
    """One column from its parts' chunks, as ``np.concatenate`` of the parts' arrays then
    ``events.dataset.to_arrow`` would make it: Arrow text (``string``, or ``null`` when no part has a
    value) when every chunk is, else numpy (text chunks back as object arrays of str)."""
    if all(isinstance(c, pa.Array) for c in chunks):
        typ = pa.string() if any(pa.types.is_string(c.type) for c in chunks) else pa.null()
        return pa.chunked_array([c.cast(typ) for c in chunks], typ)
    return np.concatenate([c.to_numpy(zero_copy_only=False) if isinstance(c, pa.Array) else c for c in chunks])


def _nulls(v):
    """A float column with NaN (no value: a mean of nothing, a share of 0) as an object array
    with None, so the tables hold nulls."""
    if v.dtype.kind == "f" and np.isnan(v).any():
        return np.where(np.isnan(v), None, v.astype(object))
    return v
