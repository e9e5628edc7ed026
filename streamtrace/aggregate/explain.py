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
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ..analyze.outputs import KERNELS, OPS, schema_of
from ..events.dataset import ROW_GROUP_ROWS, csv_table, text_columns, write_table
from ..runtime import spillfile
from ..runtime.files import atomic_output
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


def spill(folder, tables: dict) -> tuple:
    """``part_tables``' result ``tables`` of a part pickled as one record of the spill folder
    ``folder`` (``runtime.spillfile``: one file a worker process): each table's rows of one step a
    chunk (their order kept), then the part's index (``_index``: where each chunk is in the file, the
    kinds of its columns).  Returns ``(path, offset, length)`` of that index, what
    ``write_tables`` reads the part by: aggregate's parent then holds a few bytes a rank until the
    tables are written, not the rank's pickled tables (4,096 synthetic ranks: ~80 MB), and writes each
    table a step's chunks at a time."""
    rec = spillfile.Record(folder)
    with rec as f:
        chunks = {}
        for name, step, kinds, sub in _split(tables):
            b = pickle.dumps(sub, protocol=pickle.HIGHEST_PROTOCOL)
            chunks.setdefault(name, []).append((step, f.tell(), len(b), kinds))
            f.write(b)
        at = f.tell()
        b = pickle.dumps(_index(tables, chunks), protocol=pickle.HIGHEST_PROTOCOL)
        f.write(b)
    return str(rec.path), at, len(b)


def _split(tables: dict):
    """``(table, step, kinds, the step's rows)`` for each step of each table with rows (steps
    in increasing order, each step's rows in their order; ``kinds``: ``column_kinds``)."""
    for name, cols in tables.items():
        if not cols or not len(cols["rank"]):
            continue
        step = np.asarray(cols["step"], np.int64)
        if step.min() == step.max():                   # (one step: the table is its chunk)
            sub = {c: np.asarray(v) for c, v in cols.items()}
            yield name, int(step[0]), column_kinds(sub), sub
            continue
        for s in np.unique(step).tolist():
            at = np.flatnonzero(step == s)
            sub = {c: np.asarray(v)[at] for c, v in cols.items()}
            yield name, s, column_kinds(sub), sub


def _index(tables: dict, chunks: dict) -> dict:
    """A part's index: its ``iteration`` and ``rank`` (the same in every row of its tables) and its
    ``chunks`` ``{table: [(step, offset, length, kinds)]}`` (offset and length in its spill file; the
    rows themselves for a part held in memory)."""
    first = next((c for c in tables.values() if c and len(c["rank"])), None)
    it, rank = (int(first["iteration"][0]), int(first["rank"][0])) if first is not None else (0, 0)
    return {"iteration": it, "rank": rank, "chunks": chunks}


# -- the kinds of a column, and its Arrow type once joined -------------------------------------

STR, INT, FLOAT, BOOL, OTHER, NAN = 1, 2, 4, 8, 16, 32
"""``column_kinds``' bits: the kinds of value a column holds (None is none of them; ``FLOAT`` a float
but NaN, ``NAN`` a NaN)."""
_BIG = 1 << 63


def column_kinds(cols: dict) -> dict:
    """``{column: (numpy dtype str, kinds)}``: ``kinds`` the OR of ``STR`` / ``INT`` / ``FLOAT`` / ``NAN`` /
    ``BOOL`` / ``OTHER`` over the column's values (None: no bit; an int outside int64: ``OTHER``), what
    ``joined_types`` needs to know of a chunk of a table to type the whole column without it."""
    # (float NaN counts apart: a float column's NaN become nulls, ``_nulls``, an object column's stay values)
    out = {}
    for c, v in cols.items():
        v = np.asarray(v)
        k = v.dtype.kind
        if k == "O":
            bits = 0
            for x in set(map(type, v.tolist())):
                bits |= (BOOL if issubclass(x, (bool, np.bool_)) else INT if issubclass(x, (int, np.integer))
                         else FLOAT if issubclass(x, (float, np.floating)) else STR if issubclass(x, str)
                         else 0 if x is type(None) else OTHER)
            if bits & INT and any(type(x) is int and not -_BIG <= x < _BIG for x in v.tolist()):
                bits |= OTHER
            if bits & FLOAT and not any(isinstance(x, (float, np.floating)) and x == x for x in v.tolist()):
                bits = bits & ~FLOAT | NAN                 # (floats, all NaN)
        elif k == "f":
            nan = np.isnan(v)
            bits = (NAN if nan.any() else 0) | (FLOAT if not nan.all() else 0)
        else:
            bits = {"i": INT, "u": INT, "b": BOOL}.get(k, OTHER) if len(v) else 0
        out[c] = (v.dtype.str, bits)
    return out


def fold_kinds(acc: dict, kinds: dict) -> dict:
    """``acc`` (``{column: (numpy dtype, kinds)}``, updated and returned) with one more chunk's
    ``column_kinds`` folded in: the dtype of the chunks concatenated (``np.result_type``), their kinds'
    OR."""
    for c, (d, b) in kinds.items():
        d = np.dtype(d)
        d0, b0 = acc.get(c, (d, 0))
        acc[c] = (d if d0 == d else np.result_type(d0, d), b0 | b)
    return acc


def joined_types(folded: dict) -> dict:
    """``{column: (numpy dtype, Arrow type)}`` of the columns of a table whose chunks' kinds are
    ``folded`` (``fold_kinds``), as ``write_whole`` would write them: the numpy dtype of the chunks
    concatenated, the Arrow type ``pyarrow.array`` gives that column (object:
    null when no value, string for text, int64 for integers, double once a float is among them, bool;
    float: double, null when every value is NaN, as ``_nulls`` leaves it);
    ``(dtype, None)`` for a column this cannot say (text among numbers, a float other than float64, an
    int past int64, fixed-width text): its table is then written whole."""
    out = {}
    for c, (d, b) in folded.items():
        if b & OTHER or d.kind in "USV":
            typ = None
        elif d.kind == "O":
            b = b & ~NAN | (FLOAT if b & NAN else 0)           # (an object column's NaN is a float)
            typ = (pa.null() if not b else pa.string() if b == STR else pa.bool_() if b == BOOL
                   else pa.float64() if b == b & (INT | FLOAT) and b & FLOAT else pa.int64() if b == INT else None)
        elif d.kind == "f":
            typ = None if d != np.float64 else pa.float64() if b & (FLOAT | INT | BOOL) else pa.null()
        else:
            typ = pa.from_numpy_dtype(d)
        out[c] = (d, typ)
    return out


def _arrow(v, dtype, typ) -> pa.Array:
    """Rows ``v`` of a joined column (of numpy ``dtype``) as Arrow type ``typ`` (``joined_types``), NaN as
    null in a float column (``_nulls``)."""
    if pa.types.is_null(typ):
        return pa.nulls(len(v))
    if dtype.kind == "f":
        nan = np.isnan(v)
        return pa.array(v, type=typ, mask=nan if nan.any() else None)
    return pa.array(v, type=typ)


# -- writing -----------------------------------------------------------------------------------


ARROW_ROWS = 2_048
"""Rows of read chunks made Arrow arrays at a time while a row group fills (``write_streamed``): the
chunks' Python strings held for a row group took 44 MB of aggregate's parent at 4,096 synthetic ranks;
an Arrow array a chunk, 16,384 tiny ones a row group, took more."""


class _Part:
    """One part's result as ``write_tables`` reads it: ``spill``'s ``(path, offset, length)``, or (held
    in memory: tests, callers without a spill folder) ``part_tables``' dict or ``packed``'s, whose
    chunks are then held in its index in place of their offsets (``path`` None)."""

    def __init__(self, part):
        if isinstance(part, tuple):
            self.path, at, n = part
            self.index = _read_at(self.path, at, n)
        else:
            self.path = None
            tables = {k: pickle.loads(v) if isinstance(v, bytes) else v for k, v in part.items()}
            chunks = {}
            for name, step, kinds, sub in _split(tables):
                chunks.setdefault(name, []).append((step, sub, None, kinds))
            self.index = _index(tables, chunks)


def _read_at(path, at: int, n: int):
    """The object pickled in ``n`` bytes at offset ``at`` of the file ``path`` (a spill record's)."""
    return pickle.loads(spillfile.read_at(path, at, n))


def write_tables(outdir, parts: list, columns: dict | None = None) -> list:
    """Write the tables of ``TABLES`` (``columns``: ``{table: its columns}``, default ``COLUMNS``' for them)
    from the per-part results ``parts`` (list of ``spill``'s, or of ``part_tables`` dicts or ``packed``
    ones, in part order) into ``outdir`` (Parquet + CSV); returns the paths.  Each table's rows are
    sorted by (``iteration``, ``step``, ``rank``) and, within a part, kept in their order: its chunks (a
    part's rows of one step) are written in that order, ``ROW_GROUP_ROWS`` rows at a time, typed as the
    whole column would be (``joined_types``), so that the parent never holds a table (4,096 synthetic
    ranks: the four tables' rows took ~70 MB at the parent's peak).  A table whose column cannot be typed
    that way is written whole (``write_whole``)."""
    columns = columns or {name: COLUMNS[name] for name in TABLES}
    order = {name: [] for name in columns}
    kinds = {name: {} for name in columns}             # (folded as read: not a dict a chunk, 16 k of them)
    paths = []
    for pos, p in enumerate(parts):
        part = _Part(p)
        ix = part.index
        for name, chunks in ix["chunks"].items():
            if name not in order:
                continue
            for step, where, n, k in chunks:
                order[name].append((ix["iteration"], step, ix["rank"], pos, where, n))
                fold_kinds(kinds[name], k)
        paths.append(part.path)                  # (a spilled part's index let go: its path kept)
    files = []
    for name, cols in columns.items():
        if not order[name]:
            continue
        types = joined_types(kinds.pop(name))
        chunks = (w if paths[at] is None else _read_at(paths[at], w, n) for *_, at, w, n in sorted(order.pop(name)))
        if any(types.get(c, (None, None))[1] is None for c in cols):
            files += write_whole(outdir, name, cols, chunks)
        else:
            files += write_streamed(outdir, name, cols, types, chunks)
        trim()                                        # (the table's writers' buffers, freed)
    return files


def write_streamed(outdir, name, cols, types: dict, chunks) -> list:
    """Table ``name`` of columns ``cols`` from its ``chunks`` (column dicts, in the table's order) into
    ``outdir``: ``<name>.parquet`` and ``<name>.csv`` (floats at 6 significant digits, ``csv_table``)
    written ``ROW_GROUP_ROWS`` rows at a time (the chunks' columns cast to the whole column's dtype and made
    Arrow arrays ``ARROW_ROWS`` rows at a time as they are read, joined into one Arrow array a column a
    row group), atomically."""
    schema = pa.schema([(c, types[c][1]) for c in cols])
    pq_path, csv_path = Path(outdir) / f"{name}.parquet", Path(outdir) / f"{name}.csv"
    with atomic_output(pq_path, compress=False) as fp, atomic_output(csv_path, compress=False) as fc:
        with pq.ParquetWriter(fp, schema, compression="zstd", use_dictionary=text_columns(schema)) as wp, \
                pcsv.CSVWriter(fc, schema) as wc:
            raw, buf, rows, pending = [], {c: [] for c in cols}, 0, 0

            def made():                           # the chunks read so far as one Arrow array a column
                for c in cols if raw else ():
                    buf[c].append(_arrow(np.concatenate([_cast(b[c], types[c][0]) for b in raw]), *types[c]))
                raw.clear()

            def flush():
                made()
                t = pa.table([pa.concat_arrays(buf[c]) if len(buf[c]) > 1 else buf[c][0] for c in cols],
                             schema=schema)
                wp.write_table(t)
                wc.write_table(csv_table(t))
                for c in cols:
                    buf[c].clear()
                trim()                            # (the row group's chunks read back, freed: ~10-20 MB a flush)
            for chunk in chunks:
                raw.append(chunk)
                n = len(chunk["rank"])
                rows, pending = rows + n, pending + n
                if rows >= ROW_GROUP_ROWS:
                    flush()
                    rows = pending = 0
                elif pending >= ARROW_ROWS:
                    made()
                    pending = 0
            if raw or buf[cols[0]]:
                flush()
    return [pq_path, csv_path]


def _cast(v, dtype) -> np.ndarray:
    """One chunk's column as the joined column's ``dtype`` (as ``np.concatenate`` of the chunks makes it)."""
    v = np.asarray(v)
    return v if v.dtype == dtype else v.astype(dtype)


def write_whole(outdir, name, columns, chunks) -> list:
    """Table ``name`` of ``columns`` from its ``chunks`` (column dicts, any order of parts, each part's rows in their
    order) sorted by (``iteration``, ``step``, ``rank``) and written whole (``events.dataset.write_table``):
    the definition ``write_tables`` streams, and its way for a table it cannot type chunk by chunk.
    Each chunk's text columns are made Arrow strings at once (``_compact``), so that the parts' Python
    strings are never all held (4,096 synthetic ranks: ``op_stats``' 240,640 rows took aggregate's
    parent +200 MB)."""
    out = None
    for t in chunks:
        if out is None:
            out = {c: [] for c in t}
        for c, v in t.items():
            out[c].append(_compact(v))
    cols = {c: _joined(out.pop(c)) for c in list(out)}     # (each column's chunks let go once joined)
    o = np.lexsort((np.arange(len(cols["rank"])), cols["rank"], cols["step"], cols["iteration"]))
    for c in columns:                             # (sorted a column at a time: the table never held twice)
        cols[c] = _nulls(cols[c][o]) if isinstance(cols[c], np.ndarray) else cols[c].take(pa.array(o))
    return write_table(outdir, name, {c: cols[c] for c in columns}, csv=True)


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
