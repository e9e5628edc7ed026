"""The Parquet datasets of ``streamtrace analyze``: schema, partition paths, and a writer
that takes numpy columns in pieces and writes bounded row groups.

String columns are passed as int ids into a ``StringPool`` (the interned string
table, or a small list such as the kernel kinds) and handed to Parquet one row group at a
time as Arrow dictionary arrays: int32 indices plus the row group's distinct strings
(``streamtrace.kernels.treestream.gather_strings``), which is also how Parquet stores
them.  No column of Python strings is built, and a row group of 65,536 kernels costs
256 kB of indices instead of ~17 MB of (long, templated) kernel names.  The files are
written without Arrow's schema metadata, so every reader (pyarrow, pandas, DuckDB) sees
the Parquet types: ``string``, ``int32``, ``int64`` -- the schema in the README, as
before.  Arrays are made with ``pyarrow.Array.from_buffers``, which (unlike
``pyarrow.array``) does not start Arrow's compute-function registry (~45 MB resident).

This module is also the one Parquet *reader* of everything after ``analyze``: a file that is not
readable Parquet, lacks a column it should have, or (read with its dataset's schema: an analysis
folder's) has a column of another type or a row of unsound times (``tablecheck``) is a ``DataError``
naming the file (never an Arrow or numpy traceback further on).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ..runtime import spillfile
from ..runtime.errors import DataError
from ..runtime.files import atomic_output
from .tablecheck import check_times, check_types

UNKNOWN_ITERATION = -1   # the ``iteration=`` partition of a trace whose iteration is unknown
ROW_GROUP = 65536        # rows per Parquet row group of the kernels and ops tables
# Parquet dictionary encoding for the string columns and these few-valued integers only: on
# the other integer columns (times, ids) its hash tables cost ~70 MB resident for nothing
LOW_CARDINALITY = ("pid", "tid", "depth", "device", "stream", "microbatch", "step", "group_size")


def schemas():
    """``(kernels, ops)`` pyarrow schemas (the README's tables)."""
    s, i64, i32 = pa.string(), pa.int64(), pa.int32()
    kernels = pa.schema([
        ("device", i32), ("stream", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("end_ns", i64),
        ("name", s), ("cat", s), ("kind", s), ("correlation", i64), ("external_id", i64),
        ("launch_op", s), ("launching_op", s), ("annotation", s), ("top_annotation", s), ("gpu_annotation", s),
        ("phase", s), ("microbatch", i64), ("step", i64), ("attributed_by", s), ("collective", s), ("in_bytes", i64),
        ("out_bytes", i64), ("msg_bytes", i64), ("dtype", s), ("group_size", i64), ("pg_name", s),
        ("pg_desc", s), ("pg_ranks", s), ("parallel_dim", s), ("seq", i64), ("bytes_source", s), ("in_splits", s),
        ("out_splits", s)])
    ops = pa.schema([
        ("pid", i64), ("tid", i64), ("ts_ns", i64), ("dur_ns", i64), ("name", s), ("cat", s), ("depth", i32),
        ("parent", i64), ("correlation", i64), ("external_id", i64), ("kernel_count", i64),
        ("kernel_time_ns", i64), ("gpu_busy_ns", i64)])
    return kernels, ops


def partition_path(outdir, dataset, rank, iteration, part=0) -> Path:
    """``outdir/<dataset>/iteration=<N>/rank=<R>/part-<part>.parquet``: one rank of one trace file.

    A partition is ``part-0.parquet`` alone, except when one big trace is analysed on several
    cores (``--jobs N``): its ops then go to up to N files ``part-0`` .. ``part-<N-1>`` and its
    kernels to ``part-0`` and ``part-1``, rows in that order (``partition_files`` lists them).

    ``N`` is the file's iteration (``summary.json``'s ``"iteration"`` for the rank), or
    ``UNKNOWN_ITERATION`` (-1) when that is None.  Not hive's null directory
    ``iteration=__HIVE_DEFAULT_PARTITION__``: pyarrow cannot type a partition key that is null in
    every file (the usual case for one unnamed trace) and pandas.read_parquet fails on a null key
    beside non-null ones; -1, like the tables' other unknown integers, reads as an integer
    everywhere (DuckDB too)."""
    it = UNKNOWN_ITERATION if iteration is None else int(iteration)
    return Path(outdir) / dataset / f"iteration={it}" / f"rank={int(rank)}" / f"part-{int(part)}.parquet"


def partition_files(outdir, dataset, rank, iteration) -> list[Path]:
    """The existing ``part-K.parquet`` files of one partition (``partition_path``), in
    row order (K ascending); ``[]`` when there are none."""
    d = partition_path(outdir, dataset, rank, iteration).parent
    found = [(int(m.group(1)), p) for p in (d.iterdir() if d.is_dir() else ())
             if (m := re.fullmatch(r"part-(\d+)\.parquet", p.name))]
    return [p for _, p in sorted(found)]


def arrow_file(path, mode="rb"):
    """``path`` as pyarrow can take it: the path (``str``) when it is valid UTF-8, else the file opened
    here in ``mode`` (a Python file object, which pyarrow reads and writes through).  pyarrow
    encodes a path as UTF-8, and a file name holding bytes that are not (a run folder named
    ``job_caf\\xe9``: Python's surrogateescape characters) cannot be encoded (issue 49).  A file opened
    here is closed when the object pyarrow made of it is released; a writer's caller closes it."""
    p = os.fspath(path)
    try:
        p.encode("utf-8")
        return p
    except UnicodeEncodeError:          # unbuffered when writing: nothing left to flush at the end
        return open(p, mode, buffering=0) if "w" in mode else open(p, mode)


def arrow_map(path):
    """``path`` memory-mapped for reading (``pyarrow.memory_map``), a path that is not valid UTF-8
    too (given as its bytes, which pyarrow takes as they are: ``arrow_file``, issue 49)."""
    return pa.memory_map(os.fsencode(os.fspath(path)))


def spill_table(folder, table: pa.Table) -> tuple:
    """``table`` as an Arrow IPC file (uncompressed) appended as one record of the spill folder
    ``folder`` (``runtime.spillfile``: one file a process); returns its ``(path, offset, size)``.
    Made in memory first: the IPC footer's offsets count from the record's start.  Cheaper than a
    Parquet file for a worker's small table read once (a rank's timeline rows: ~1.6 ms a Parquet file)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return spillfile.append(folder, sink.getvalue())


def read_spilled(rec) -> pa.Table:
    """The table ``spill_table`` wrote as record ``rec``, memory-mapped (its pages read as its
    columns are)."""
    path, offset, size = rec
    with arrow_map(path) as src:
        return pa.ipc.open_file(pa.BufferReader(src.read_at(size, offset))).read_all()


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def parquet_file(path, columns=(), schema=None) -> pq.ParquetFile:
    """Open the Parquet file ``path`` and check it has ``columns`` and, with ``schema`` (the pyarrow schema
    its writer gives such a file), that its columns ``schema`` names are of their types
    (``tablecheck.check_types``: its footer only).  Raises ``DataError`` naming it when it is missing, not
    readable Parquet (garbage, empty, cut short), lacks a column or has one of another type."""
    try:
        f = pq.ParquetFile(arrow_file(path))
    except FileNotFoundError:
        raise DataError(path, "missing") from None
    except (OSError, pa.ArrowException, ValueError) as e:
        raise DataError(path, f"not a readable Parquet file ({_why(e)})") from None
    have = f.schema_arrow if columns or schema is not None else None     # (schema_arrow builds a schema per call)
    missing = [c for c in columns if have.get_field_index(c) < 0]
    if missing:
        raise DataError(path, f"has no column {', '.join(map(repr, missing))} (damaged, or not written by streamtrace)")
    if schema is not None:
        check_types(path, have, schema)
    return f


def read_arrow(path, columns=None, where=None, read_dictionary=None, schema=None) -> pa.Table:
    """The Parquet file ``path`` as a ``pyarrow.Table``: ``columns`` only (None: all); ``where``:
    ``{column: values}`` keeps the rows whose value is one of ``values`` (tested batch by batch, so
    that the rows left out are never all held); ``read_dictionary``: string columns read as
    dictionaries (Parquet's own).  Read through ``pyarrow.parquet.ParquetFile``, never
    ``pyarrow.parquet.read_table``: that one goes through ``pyarrow.dataset``, whose import alone is
    ~0.09 CPU-s in each process that reads a table (aggregate's job-level processes, report's).
    ``schema``: the types its columns must have (``parquet_file``).  Raises ``DataError`` naming ``path``
    when it is missing, not readable Parquet or lacks a column (or has one of another type)."""
    want = list(columns) if columns is not None else None
    f = parquet_file(path, list(columns or ()) + list(where or ()), schema)
    try:
        if read_dictionary:
            f = pq.ParquetFile(arrow_file(path), read_dictionary=list(read_dictionary), metadata=f.metadata)
        if not where:
            return f.read(columns=want)
        names = want if want is not None else f.schema_arrow.names
        keep = list(iter_arrow(path, names, (), 1 << 16, where, f))            # (the footer read once)
        return pa.Table.from_batches(keep) if keep else f.schema_arrow.empty_table().select(names)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise DataError(path, f"not a readable Parquet file ({_why(e)})") from None


_EXACT_STATS = ("INT32", "INT64", "FLOAT", "DOUBLE", "BOOLEAN")
"""Parquet's physical types whose row-group min / max ``read_arrow`` trusts to leave a row group out."""


def _row_groups(f: pq.ParquetFile, where) -> list:
    """The row groups of ``f`` that may hold rows ``where`` keeps: those whose statistics (min, max of a
    column of ``where``) leave out every one of its values are not read."""
    md = f.metadata
    names = [md.schema.column(j).path for j in range(md.num_columns)]
    out = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        ok = True
        for c, values in where.items():
            st = rg.column(names.index(c)).statistics if c in names else None
            try:                         # (numbers only: a writer may cut a text's min / max short)
                ok = st is None or not st.has_min_max or st.physical_type not in _EXACT_STATS or not values or \
                    any(v is None or st.min <= v <= st.max for v in values)
            except TypeError:            # (values of another type than the column's: read it, test the rows)
                ok = True
            if not ok:
                break
        if ok:
            out.append(i)
    return out


def _where_batch(batch, where) -> pa.RecordBatch:
    """The rows of ``batch`` whose value of each column of ``where`` is one of its values."""
    mask = None
    for c, values in where.items():
        col = batch.column(c)
        m = pc.is_in(col, value_set=pa.array(list(values), col.type if not pa.types.is_dictionary(col.type)
                                              else col.type.value_type))
        mask = m if mask is None else pc.and_(mask, m)
    return batch.filter(mask)


def iter_table(path, columns, batch_rows: int = 1 << 20):
    """The numeric ``columns`` of the Parquet file ``path`` as ``{name: numpy array}`` batches of
    at most ``batch_rows`` rows, in file order: a reader that holds one batch, not the table.
    Raises ``DataError`` naming the file (missing, damaged, a column
    absent)."""
    for b in iter_arrow(path, columns, batch_rows=batch_rows):
        yield {n: b.column(n).to_numpy(zero_copy_only=False) for n in columns}


def iter_arrow(path, columns, read_dictionary=(), batch_rows: int = 1 << 20, where=None, file=None):
    """The ``columns`` of the Parquet file ``path`` as ``pyarrow.RecordBatch`` es of at most
    ``batch_rows`` rows, in file order (``read_dictionary``: string columns read as dictionaries, as
    ``read_arrow``; ``where``: ``{column: values}``, only the rows whose value is one of ``values``, the
    row groups whose statistics rule them all out not read, as ``read_arrow``'s; its columns are read,
    not given back unless asked for).  ``file``: ``path`` already open (``parquet_file``'s, its columns
    checked), else None.  Raises ``DataError`` naming the file (missing, damaged, a column absent)."""
    want = list(columns)
    extra = [c for c in where or () if c not in want]
    f = parquet_file(path, want + extra) if file is None else file
    try:
        if read_dictionary:
            f = pq.ParquetFile(arrow_file(path), read_dictionary=list(read_dictionary), metadata=f.metadata)
        if not where:
            yield from f.iter_batches(batch_size=batch_rows, columns=want)
            return
        groups = _row_groups(f, where)
        for b in f.iter_batches(batch_size=batch_rows, columns=want + extra, row_groups=groups) if groups else ():
            b = _where_batch(b, where)
            yield b.select(want) if extra else b
    except (OSError, pa.ArrowException, ValueError) as e:
        raise DataError(path, f"not a readable Parquet file ({_why(e)})") from None


def read_partition(files, columns=None, schema=None):
    """The rows of a partition's part files (``partition_files``) as one pyarrow Table,
    in order.  ``schema``: the dataset's pyarrow schema (``schemas``; the analysis folder's
    ``streamtrace.analyze.outputs.schema_of``) or None.  With no files: an empty table of
    ``schema``, or ``FileNotFoundError`` when it is None.  ``columns`` None: all the files' columns.
    With ``schema``, each file's columns must be of its types and the rows read of sound times
    (``tablecheck``: no null time, negative duration or end before start).  Raises ``DataError``
    naming the part file that is damaged, of another schema or holds such a row."""
    if not files:
        if schema is None:
            raise FileNotFoundError("no part files")
        return schema.empty_table() if columns is None else schema.empty_table().select(list(columns))
    want = list(columns) if columns is not None else None
    tables = [read_arrow(f, want, schema=schema) for f in files]
    if schema is not None:
        for f, t in zip(files, tables):
            check_times(f, t)
    try:
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    except (pa.ArrowException, ValueError) as e:
        raise DataError(files[0], f"its part files do not share one schema ({_why(e)})") from None


def drop_extra_parts(outdir, dataset, rank, iteration, keep: int):
    """Delete the partition's ``part-K.parquet`` files with K >= ``keep`` (left by an earlier
    run with more parts), so the dataset holds only this run's rows."""
    for p in partition_files(outdir, dataset, rank, iteration):
        if int(p.stem.split("-")[1]) >= keep:
            p.unlink(missing_ok=True)


class StringPool:
    """Strings as one UTF-8 blob plus offsets; ``array`` builds ``strings[ids]``
    (id -1 -> "") as an Arrow string array."""

    def __init__(self, strings):
        enc = [s.encode("utf-8", "replace") if isinstance(s, str) else str(s).encode("utf-8", "replace")
               for s in strings]
        self.blob = np.frombuffer(b"".join(enc), np.uint8)
        self.offs = np.zeros(len(enc) + 1, np.int64)
        if enc:
            np.cumsum([len(b) for b in enc], out=self.offs[1:])

    def array(self, ids):
        from ..kernels.treestream import gather_strings     # numba: loaded by writers only, not by readers
        off, data = gather_strings(self.blob, self.offs, ids)
        return pa.Array.from_buffers(pa.string(), len(ids), [None, pa.py_buffer(off), pa.py_buffer(data)])

    def dictionary_array(self, ids):
        """``strings[ids]`` (int ids, -1 -> "") as an Arrow ``dictionary<int32, string>``
        array whose dictionary holds only the distinct strings used, in id order.  Raises
        ValueError when an id is not -1 or a string's."""
        ids = np.asarray(ids)
        k = len(self.offs) - 1
        if len(ids) and (int(ids.min()) < -1 or int(ids.max()) >= k):
            raise ValueError(f"dictionary_array: an id is not -1 or in [0, {k})")
        seen = np.zeros(k + 1, bool)              # slot j + 1: id j
        seen[ids + 1] = True
        code = np.cumsum(seen, dtype=np.int32)
        code -= 1
        inv = code[ids + 1]
        del code
        return pa.DictionaryArray.from_arrays(numeric_array(inv, pa.int32()), self.array(np.flatnonzero(seen) - 1),
                                              safe=False)


def numeric_array(values, typ):
    """A numpy column as an Arrow array of ``typ`` (int32/int64), without pyarrow.array."""
    v = np.ascontiguousarray(values, np.int32 if typ == pa.int32() else np.int64)
    return pa.Array.from_buffers(typ, len(v), [None, pa.py_buffer(v)])


class PartitionWriter:
    """Writes ``<dataset>/iteration=N/rank=R/part-<part>.parquet`` (``partition_path``, zstd)
    atomically, from numpy columns given in any number of ``write`` calls, in row
    groups of ``rows`` rows.  ``pools``: ``{string column: StringPool}``; those columns
    are passed as int ids.  Rows are copied into one row group's worth of staging
    columns (int32 for string ids and int32 columns, else int64), so the caller's arrays
    are not held, and no row group is concatenated from pieces.  Arrow buffers come from
    the system allocator, which hands freed memory back."""

    def __init__(self, outdir, rank, iteration, schema, dataset, pools, rows=ROW_GROUP, part=0):
        self.path = partition_path(outdir, dataset, rank, iteration, part)
        self.schema = schema
        self.pools = pools
        self.rows = max(1, int(rows))
        self.npending = 0
        self._buf = None               # {column: staging array}, None while nothing is pending
        missing = [f.name for f in schema if f.type == "string" and f.name not in pools]
        if missing:
            raise ValueError(f"PartitionWriter: no string pool for {missing}")

    def __enter__(self):
        self._cm = atomic_output(self.path, compress=False)
        self._f = self._cm.__enter__()
        self._wschema = pa.schema([(f.name, pa.dictionary(pa.int32(), f.type) if f.name in self.pools else f.type)
                                   for f in self.schema])
        dictionary = [f.name for f in self.schema if f.type == "string" or f.name in LOW_CARDINALITY]
        self._w = pq.ParquetWriter(self._f, self._wschema, compression="zstd", use_dictionary=dictionary,
                                   store_schema=False, memory_pool=pa.system_memory_pool())
        return self

    def write(self, columns: dict):
        """Append rows: ``{column: numpy array or scalar}``, every schema column, the arrays
        of equal length (a scalar: that value in every row); at least one array."""
        n = next(len(v) for v in columns.values() if np.ndim(v))
        at = 0
        while at < n:
            k = min(self.rows - self.npending, n - at)
            self._reserve(self.npending + k)
            for f in self.schema:
                v = columns[f.name]
                self._buf[f.name][self.npending:self.npending + k] = v[at:at + k] if np.ndim(v) else v
            self.npending += k
            at += k
            if self.npending == self.rows:
                self._emit()

    def _reserve(self, n):
        """Staging columns for at least ``n`` rows, pending rows kept: grown by doubling up to a
        row group (a million one-row tracks each written and shrunk, ``shrink``, allocated a
        whole row group's columns each time: issue 49)."""
        have = 0 if self._buf is None else len(self._buf[self.schema[0].name])
        if have >= n:
            return
        cap = min(max(self.rows, n), max(n, 2 * have, 1024))
        old, self._buf = self._buf, {}
        for f in self.schema:
            dt = np.int32 if f.name in self.pools or f.type == pa.int32() else np.int64
            self._buf[f.name] = np.empty(cap, dt)
            if old is not None:
                self._buf[f.name][:self.npending] = old[f.name][:self.npending]
                old[f.name] = None

    def shrink(self):
        """Keep only the pending rows (not a whole row group's staging columns) while no
        rows come for a while; the next ``write`` makes room again.  Amortised: the columns are
        cut to twice the pending rows only when they hold four times more (cut to the pending rows
        after every one of a million small tracks, the next write copied them all again: issue 49)."""
        if self._buf is None:
            return
        cap = len(self._buf[self.schema[0].name])
        if not self.npending:
            self._buf = None
        elif cap > 4 * max(self.npending, 1024):
            keep = 2 * max(self.npending, 1024)
            self._buf = {c: v[:keep].copy() for c, v in self._buf.items()}

    def _emit(self):
        """Write the pending rows as one row group."""
        n = self.npending
        arrays = []
        for f in self.schema:
            v = self._buf[f.name][:n]
            arrays.append(self.pools[f.name].dictionary_array(v) if f.name in self.pools
                          else numeric_array(v, f.type))
        self._w.write_table(pa.Table.from_arrays(arrays, schema=self._wschema), row_group_size=n)
        self.npending = 0

    def __exit__(self, et, ev, tb):
        try:
            if et is None and self.npending:
                self._emit()
        finally:
            self._buf = None
            self._w.close()
        return self._cm.__exit__(et, ev, tb)


# -- flat tables (aggregate and report outputs) ---------------------------------------

def to_arrow(columns: dict, order=None):
    """A ``pyarrow.Table`` from ``{name: array}`` in ``order`` (default: dict order).  Object arrays
    of str become string columns; None stays null; a pyarrow array (or chunked array) is taken as it is."""
    names = list(order or columns)
    arrays = []
    for n in names:
        v = columns[n]
        if isinstance(v, (pa.Array, pa.ChunkedArray)):
            arrays.append(v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v)
        elif isinstance(v, np.ndarray) and v.dtype == object:      # (read as it is: 5-6x faster than its list)
            arrays.append(pa.array(v))
        else:
            arrays.append(pa.array(np.asarray(v)))
    return pa.Table.from_arrays(arrays, names=names)


def text_columns(schema) -> list:
    """The names of ``schema``'s string (and dictionary) columns: the ones a Parquet writer is asked to
    dictionary-encode.  Dictionary-encoding every column, pyarrow's default, hashes each int64 too
    (times, ids: most of them distinct) before it falls back: the A100 job's ``critical_path.parquet``
    (50,608 rows) took 70 ms to write in a new process, 17 ms with only its texts as dictionaries,
    in 483 KB instead of 778 KB."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_dictionary(f.type)]


def csv_table(t):
    """``t`` with its float columns at 6 significant digits, for CSV (the Parquet file keeps them whole)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_floating(f.type):
            v = [None if x is None else float(f"{x:.6g}") for x in t.column(i).to_pylist()]
            t = t.set_column(i, f.name, pa.array(v, pa.float64()))
    return t


ROW_GROUP_ROWS = 4_096
"""Rows a table's writers take at a time, one Parquet row group (``write_table``, ``aggregate.explain.write_tables``):
16,384 held ~15 MB over aggregate's parent's level at 1,024 synthetic ranks; ``rank_phase``'s 40,960 rows at 4,096
ranks written whole held +5-6 MB over its columns, a row group at a time +2."""


def write_table(outdir, name: str, columns: dict, order=None, csv: bool = False, rows=None) -> list:
    """Write ``outdir/<name>.parquet`` (and ``<name>.csv`` with ``csv``, floats at 6 significant digits: ``csv_table``)
    atomically, ``ROW_GROUP_ROWS`` rows at a time; ``rows`` (int64 row indices, optional): the rows in the order to
    write them, a group taken at a time (no sorted copy of the table); returns the paths."""
    t = to_arrow(columns, order)
    starts = range(0, max(t.num_rows if rows is None else len(rows), 1), ROW_GROUP_ROWS)
    groups = lambda: (t.slice(i, ROW_GROUP_ROWS) if rows is None else  # noqa: E731
                      t.take(pa.array(rows[i:i + ROW_GROUP_ROWS], pa.int64())) for i in starts)
    out = [Path(outdir) / f"{name}.{ext}" for ext in ("parquet", "csv")[:1 + bool(csv)]]
    with atomic_output(out[0], compress=False) as f, \
            pq.ParquetWriter(f, t.schema, compression="zstd", use_dictionary=text_columns(t.schema)) as w:
        for g in groups():
            w.write_table(g)
    if csv:
        with atomic_output(out[1], compress=False) as f, pcsv.CSVWriter(f, csv_table(t.slice(0, 0)).schema) as w:
            for g in groups():
                w.write_table(csv_table(g))
    return out


class Columns(dict):
    """``{name: numpy array}`` of one table file; a column it lacks is a
    ``DataError`` naming the file (``.get`` still gives the default)."""

    def __init__(self, path, columns):
        super().__init__(columns)
        self.path = str(path)

    def __missing__(self, key):
        raise DataError(self.path, f"has no column {key!r} (damaged, or not written by streamtrace)")


def json_default(o):
    """``json.dumps(..., default=json_default)``: numpy integers and floats (the values the tables'
    columns hold) as Python ``int`` / ``float``; anything else raises TypeError, as json does."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(type(o))


def read_json(path):
    """The JSON document of a file an earlier command wrote (``summary.json``, ``aggregate.json``).
    Raises ``DataError`` naming ``path`` when it cannot be read or is
    not valid JSON."""
    try:
        return json.loads(Path(path).read_bytes())
    except OSError as e:
        raise DataError(path, f"cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise DataError(path, f"invalid JSON ({e})") from None


def read_table(path, columns=None, where=None) -> Columns:
    """A Parquet file as ``{name: numpy array}`` (strings as object arrays sharing one ``str`` per
    distinct value: ``shared_strings``): a ``Columns``.  ``columns``: only these (list of
    str; default all); ``where``: ``{column: values}`` keeps only the rows whose value is one of
    ``values`` (``read_arrow``: row groups whose statistics exclude them are not read).  Raises
    ``DataError`` when it is missing, not readable Parquet or lacks a column."""
    f = parquet_file(path, list(columns or ()) + list(where or ()))
    strs = _string_names(f, columns)
    try:
        if where:
            t = read_arrow(path, columns, where, strs)
        else:                      # (the footer parsed once: its metadata handed over)
            t = (pq.ParquetFile(arrow_file(path), read_dictionary=strs, metadata=f.metadata) if strs else f).read(
                columns=list(columns) if columns is not None else None)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise DataError(path, f"not a readable Parquet file ({_why(e)})") from None
    return Columns(path, {n: shared_strings(t[n]) if n in strs else t[n].to_numpy(zero_copy_only=False)
                          for n in t.column_names})


def _string_names(f: pq.ParquetFile, columns) -> list:
    """The string columns among ``columns`` (None: all) of the opened file ``f``: ``read_table`` reads
    them as dictionaries, straight from Parquet's dictionary pages.  Read as plain strings first, the
    160,000 rows of a 4,096-rank ``collectives.parquet`` (14 MB as Arrow) took 0.47 s and +112 MB of RSS
    that pyarrow's allocator kept; as dictionaries 0.02 s and +10 MB."""
    schema = f.schema_arrow                        # (``parquet_file`` checked that it has ``columns``)
    return [n for n in dict.fromkeys(schema.names if columns is None else columns)
            if pa.types.is_string(schema.field(n).type) or pa.types.is_large_string(schema.field(n).type)]


def shared_strings(col) -> np.ndarray:
    """A string column (``pyarrow`` ChunkedArray, plain or dictionary) -> an object array of ``str``
    (None for null) with one ``str`` object per distinct value: 8 bytes a row, not ~60."""
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    parts, seen = [], {}
    for ch in col.chunks:                    # (each chunk its own dictionary: a row group read as one)
        values = [seen.setdefault(v, v) for v in ch.dictionary.to_pylist()] + [None]
        parts.append(np.asarray(values, object)[ch.indices.fill_null(len(ch.dictionary)).to_numpy()])
    return np.concatenate(parts) if parts else np.zeros(0, object)


def column_min_max(path, column, schema=None) -> tuple[int | None, int | None]:
    """(min, max) of an int64 column from the row-group statistics (None, None when empty).
    Raises ``DataError`` for a damaged file or one without ``column`` (``schema``: as ``parquet_file``)."""
    return columns_min_max(path, (column,), schema)[column]


def columns_min_max(path, columns, schema=None) -> dict:
    """``{column: (min, max)}`` of int64 ``columns`` of one Parquet file, its footer read once
    (``column_min_max`` of each).  Raises ``DataError`` for a damaged file, one without them, one whose
    column is null in a row, or (``schema``) one whose columns are not of its types (``parquet_file``)."""
    if not Path(path).is_file():
        return {c: (None, None) for c in columns}
    f = parquet_file(path, tuple(columns), schema)
    md, schema = f.metadata, f.schema_arrow                # (schema_arrow builds a schema per call)
    return {c: _min_max(f, md, schema.get_field_index(c), c, path) for c in columns}


def _min_max(f, md, j: int, column: str, path) -> tuple[int | None, int | None]:
    """(min, max) of column ``j`` (``column``) of the opened Parquet file ``f`` (footer ``md``)."""
    lo = hi = None
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(j).statistics
        if md.row_group(i).num_rows == 0:
            continue
        if st is not None and st.has_null_count and st.null_count:
            raise DataError(path, f"column {column!r} has null values (damaged, or not written by streamtrace)")
        if st is None or not st.has_min_max:
            try:
                arr = f.read_row_group(i, columns=[column]).column(0)
            except (OSError, pa.ArrowException, ValueError) as e:
                raise DataError(path, f"not a readable Parquet file ({_why(e)})") from None
            if arr.null_count:
                raise DataError(path, f"column {column!r} has null values (damaged, or not written by streamtrace)")
            col = arr.to_numpy()
            if not len(col):
                continue
            a, b = int(col.min()), int(col.max())
        else:
            a, b = int(st.min), int(st.max)
        lo, hi = (a if lo is None else min(lo, a)), (b if hi is None else max(hi, b))
    return lo, hi


def num_rows(path) -> int:
    """Rows of a Parquet file, from its footer (``DataError`` when damaged)."""
    return parquet_file(path).metadata.num_rows
