"""The what-if replay's per-rank rows on their way from aggregate's workers to the job level
(``streamtrace.aggregate.whatif``), in flat memory.

Each worker writes its part's ``whatif_anchors`` and ``whatif_edges`` rows
(``streamtrace.aggregate.whatif_local.ReplayRows.result``) as two Arrow IPC records of a spill
folder (``spill_rows``; ``runtime.spillfile``: one file a worker process), as the critical path's
segments are spilled, and returns only their records ``(path, offset, size)``, row counts and its
few ``whatif_ranks`` rows.  The parent (``SpilledRows``) then

* loads the int64 columns the job's graph solves on (``load``), copied out of the memory-mapped
  records into one array each, and reads the others (``lazy``) only for the few edges on a path;
* streams the records into the ``whatif_anchors`` / ``whatif_edges`` Parquet tables (``write``),
  ``SLICE_ROWS`` rows a row group: the same tables as written from the joined columns at once.

At 1,024 synthetic ranks the edges are ~0.94 M rows of 12 columns (~125 MB held as numpy with
object str columns); the job graph holds 4 of them.  ``streamtrace whatif`` reads the aggregate
folder's ``whatif_edges.parquet`` the same way: those 4 loaded, the others read for the path's edges
only (``ParquetLazy``; at 4,096 synthetic ranks, 3.8 M edges, the command's peak 1,222 -> 990 MB).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..events.dataset import arrow_file, read_spilled, spill_table, write_table
from ..runtime.files import atomic_output
from .folder import WHATIF_ANCHORS, WHATIF_ANCHORS_COLUMNS, WHATIF_EDGES, WHATIF_EDGES_COLUMNS, table_path

TEXT = ("top_category", "top_name", "top_lane")
"""The str columns (of ``whatif_edges``); every other column is int64."""
NAMES = {"anchors": (WHATIF_ANCHORS, WHATIF_ANCHORS_COLUMNS), "edges": (WHATIF_EDGES, WHATIF_EDGES_COLUMNS)}
SLICE_ROWS = 1 << 16
"""Rows a Parquet row group when writing the ``whatif_*`` tables."""


def schema(columns) -> pa.Schema:
    """The Arrow schema of a ``whatif_*`` table's ``columns``: ``string`` for ``TEXT``, else ``int64``
    (what ``streamtrace.events.dataset.to_arrow`` makes of the joined numpy columns)."""
    return pa.schema([(c, pa.string() if c in TEXT else pa.int64()) for c in columns])


def spill_rows(result: dict, folder, index: int, graphs=None) -> dict:
    """Write part ``index``'s rows ``result`` (``ReplayRows.result``) into ``folder``, a table an Arrow
    IPC record (``dataset.spill_table``; none for a table without rows): returns ``{"anchors": (record,
    rows), "edges": (record, rows), "ranks": result["ranks"], "graphs": (index, graphs)}`` (``record``:
    ``(path, offset, size)``, ``NO_RECORD`` without rows; ``graphs``: the path of its spilled step
    graphs, ``whatif_graphs.GraphSpill``, or None)."""
    out = {"ranks": result["ranks"], "graphs": (index, graphs)}
    for name, (_, cols) in NAMES.items():
        data = result[name]
        n = len(data[cols[0]])
        if not n:
            out[name] = (NO_RECORD, 0)
            continue
        table = pa.table({c: pa.array(data[c], pa.string() if c in TEXT else pa.int64()) for c in cols},
                         schema=schema(cols))
        out[name] = (spill_table(folder, table), n)
    return out


NO_RECORD = ("", 0, 0)
"""The record of a table without rows (nothing written)."""


class SpillFiles:
    """One table's spilled records, ``(record, rows)`` a part in part order (a sequence: ``len``,
    ``[k]``, iteration), held as int arrays (each record's file as an index into the few files'
    paths, one a worker process, its offset and size) and made when asked for.  A list of ``(path,
    rows)`` held ~0.5 KB a part in aggregate's parent and again in the replay's process (16,384 ranks:
    2 tables, ~16 MB each)."""

    def __init__(self, files: list):
        """``files``: ``[(record, rows)]``, as ``spill_rows`` returns them."""
        paths: dict = {}
        self.file = np.asarray([paths.setdefault(r[0], len(paths)) for r, _ in files], np.int32)
        self.offset = np.asarray([r[1] for r, _ in files], np.int64)
        self.size = np.asarray([r[2] for r, _ in files], np.int64)
        self.rows = np.asarray([n for _, n in files], np.int64)
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k: int) -> tuple:
        return (self.paths[self.file[k]], int(self.offset[k]), int(self.size[k])), int(self.rows[k])

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def nonempty(self) -> "SpillFiles":
        """The records with rows."""
        keep = np.flatnonzero(self.rows > 0)
        out = SpillFiles.__new__(SpillFiles)
        out.file, out.offset, out.size, out.rows = self.file[keep], self.offset[keep], self.size[keep], self.rows[keep]
        out.paths = self.paths
        return out


JOIN_PARTS = 1024
"""Parts whose ``"ranks"`` arrays ``SpilledRows`` joins at once while it reads them."""


class SpilledRows:
    """The parts' spilled rows (``spill_rows`` results, in part order; their ``"ranks"`` taken out
    and joined) in ``folder``, which ``close`` removes."""

    def __init__(self, folder, parts):
        """``parts``: any iterable of the parts' ``spill_rows`` results (or None, a part without), read
        once, a part at a time: the parts' few ``"ranks"`` rows joined ``JOIN_PARTS`` parts at a time, each
        part's small arrays let go (4,096 parts' ~100 k objects, ~40 MB, neither held by aggregate's parent
        nor pickled to the replay's process); aggregate passes a generator over its spilled results
        (``rank_results.Kept.replay_rows``)."""
        from .whatif_local import RANK_COLUMNS
        self.folder = Path(folder)
        self._chunks: dict = {}               # table name -> its files read (``Chunks``), shared by its columns
        ranks: dict = {c: [] for c in RANK_COLUMNS}
        self._graphs, files, k = {}, {name: [] for name in NAMES}, 0
        for p in parts:
            if not p:
                continue
            got = p.pop("ranks")
            for c in RANK_COLUMNS:
                ranks[c].append(got[c])
                if len(ranks[c]) > JOIN_PARTS:
                    ranks[c] = [np.concatenate(ranks[c])]
            i, path = p.get("graphs", (k, None))
            if path:
                self._graphs[i] = path
            for name in NAMES:
                files[name].append(p[name])
            k += 1
        self._ranks = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in ranks.items()}
        del ranks
        self.files = {name: SpillFiles(files.pop(name)) for name in NAMES}

    def close(self):
        """Remove the spill folder."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def ranks(self) -> dict:
        """The ``whatif_ranks`` columns of every part (but ``replay_end_ns``), joined (a new dict of
        the same arrays at each call)."""
        return dict(self._ranks)

    def graphs(self) -> dict:
        """``{part index: path}`` of the parts' spilled step graphs (``whatif_graphs.GraphSpill``)."""
        return dict(self._graphs)

    def rows(self, name: str) -> int:
        """How many rows table ``name`` (``anchors``, ``edges``) has."""
        return int(self.files[name].rows.sum())

    def load(self, name: str, columns, small=()) -> dict:
        """``{column: int64 array}`` of the int ``columns`` of table ``name`` over every part (int32 for
        those in ``small``: values known to fit), copied out of the memory-mapped files (only those
        columns' pages read)."""
        out = {c: np.empty(self.rows(name), np.int32 if c in small else np.int64) for c in columns}
        at = 0
        for rec, n in self.files[name]:
            if not n:
                continue
            table = read_spilled(rec)
            for c in columns:
                out[c][at:at + n] = table.column(c).to_numpy()
            del table
            at += n
        return out

    def batches(self, name: str, columns, small=(), rows: int = 1 << 18):
        """``load``'s columns a batch of parts' files at a time (at least ``rows`` rows a batch, but the
        last), in part order: for a reader that needs each row once (the what-if replay's graph build, which
        writes them to disk; 4,096 synthetic ranks' edges loaded whole: 74 MB)."""
        held, n = [], 0
        for rec, k in self.files[name]:
            if not k:
                continue
            table = read_spilled(rec)
            held.append({c: table.column(c).to_numpy().astype(np.int32 if c in small else np.int64)
                         for c in columns})
            del table
            n += k
            if n >= rows:
                yield {c: np.concatenate([h[c] for h in held]) for c in columns}
                held, n = [], 0
        if held:
            yield {c: np.concatenate([h[c] for h in held]) for c in columns}

    def lazy(self, name: str, column: str) -> "Lazy":
        """Column ``column`` of table ``name`` over every part, read from the spilled files a value
        at a time (``Lazy``): for a column only a few rows of which are ever read."""
        return Lazy(self.files[name].nonempty(), column, chunks=self._chunks.setdefault(name, Chunks()))

    def write(self, outdir, name: str) -> list:
        """Table ``name`` (``anchors``, ``edges``) as ``whatif_<name>.parquet`` in ``outdir``, streamed
        from the spilled files ``SLICE_ROWS`` rows a row group.  Returns the paths."""
        import pyarrow.parquet as pq
        table_name, cols = NAMES[name]
        if not self.rows(name):                       # no rows: typed as the joined empty columns were
            return write_table(outdir, table_name, {c: np.zeros(0, object if c in TEXT else np.int64) for c in cols})
        p = table_path(outdir, table_name)
        with atomic_output(p, compress=False) as f, pq.ParquetWriter(f, schema(cols), compression="zstd") as w:
            held, nheld = [], 0
            for rec, n in self.files[name]:
                if not n:
                    continue
                held.append(read_spilled(rec))
                nheld += n
                while nheld >= SLICE_ROWS:
                    t = pa.concat_tables(held)
                    w.write_table(t.slice(0, SLICE_ROWS).combine_chunks())
                    held, nheld = [t.slice(SLICE_ROWS)], nheld - SLICE_ROWS
            if nheld:
                w.write_table(pa.concat_tables(held).combine_chunks())
        return [p]


KEEP_CHUNKS = 64
"""How many spilled files ``Lazy`` keeps open (memory-mapped: pages read as rows are asked for)."""


class Chunks(dict):
    """Chunks read, by index (``Lazy``: a spilled file's table, shared by the ``Lazy`` columns of one
    table), the first read dropped past ``KEEP_CHUNKS``: a path's rows read their columns one after
    another from the same few files (the what-if replay lets them go after each path: ``Lazy.release``)."""

    def get_or_read(self, k, read):
        """Chunk ``k``, from ``read()`` the first time."""
        x = self.get(k)
        if x is None:
            if len(self) >= KEEP_CHUNKS:
                del self[next(iter(self))]
            x = self[k] = read()
        return x


class Lazy:
    """One column of the spilled records ``files`` (``[(record, rows)]``, in order; ``SpillFiles``), not
    loaded: ``c[i]`` reads row ``i``'s value (int or str) from its record, ``c.take(idx)`` the values of many rows,
    ``c[idx]`` for an index or mask array the ``Lazy`` of those rows.  The files read are kept open
    in ``chunks`` (``Chunks``; one for the columns of one table, a new one when None)."""

    def __init__(self, files, column, rows=None, chunks=None, starts=None):
        self.files, self.column, self.rows = files, column, rows
        if starts is None:                       # (a ``SpillFiles``' counts without making its paths)
            counts = files.rows if isinstance(files, SpillFiles) else [n for _, n in files]
            starts = np.cumsum(np.r_[0, np.asarray(counts, np.int64)])
        self.starts = starts
        self.chunks = Chunks() if chunks is None else chunks

    def _chunk(self, k):
        """The column's values in chunk ``k`` (a pyarrow array; here the ``k``-th record)."""
        return self.chunks.get_or_read(k, lambda: self._read(k)).column(self.column)

    def _read(self, k):
        return read_spilled(self.files[k][0])

    def _sub(self, rows) -> "Lazy":
        """The column's rows ``rows`` (int64 indices into all of it)."""
        return Lazy(self.files, self.column, rows, self.chunks, self.starts)

    def release(self):
        """Let the files read so far go (``chunks``, shared with the table's other columns): their mapped
        pages leave the process's RSS; a later read opens them again.  For a reader that holds arrays of
        its own between reads: the what-if replay's path rows, between its solves (the pages the path's
        rows touched stayed mapped under the next solve's peak: ~13 MB at 4,096 synthetic ranks)."""
        self.chunks.clear()

    def __len__(self):
        return int(self.starts[-1]) if self.rows is None else len(self.rows)

    def take(self, idx) -> list:
        """The values of rows ``idx`` (int array; int or str, None for null), each chunk read once."""
        g = np.asarray(idx, np.int64).reshape(-1)
        g = g if self.rows is None else self.rows[g]
        f = np.searchsorted(self.starts, g, "right") - 1
        out = [None] * len(g)
        for k in np.unique(f).tolist():
            at = np.flatnonzero(f == k)
            for i, v in zip(at.tolist(), self._chunk(k).take(pa.array(g[at] - self.starts[k])).to_pylist()):
                out[i] = v
        return out

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)):
            i = np.asarray(i)
            sel = np.flatnonzero(i) if i.dtype == bool else i.astype(np.int64)
            return self._sub(sel if self.rows is None else self.rows[sel])
        g = int(i if self.rows is None else self.rows[i])
        f = int(np.searchsorted(self.starts, g, "right")) - 1
        return self._chunk(f)[g - int(self.starts[f])].as_py()


class ParquetLazy(Lazy):
    """One column of a Parquet file (the aggregate folder's ``whatif_edges``), not loaded, as ``Lazy``
    reads the spilled files: a chunk is a row group, read only when a row asked for lies in it (the last
    one kept: decoded, a row group is ``SLICE_ROWS`` values).  For ``streamtrace whatif``, which reads
    the few edges on a path."""

    def __init__(self, path, column, rows=None, starts=None):
        import pyarrow.parquet as pq
        if starts is None:
            meta = pq.ParquetFile(arrow_file(path)).metadata
            starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        self.path, self.column, self.rows, self.starts = path, column, rows, starts
        self._open = (-1, None)

    def _chunk(self, k):
        import pyarrow.parquet as pq
        if self._open[0] != k:
            self._open = (k, pq.ParquetFile(arrow_file(self.path)).read_row_group(k, columns=[self.column]).column(0))
        return self._open[1]

    def _sub(self, rows) -> "ParquetLazy":
        return ParquetLazy(self.path, self.column, rows, self.starts)

    def release(self):
        """Let the row group read last go (``Lazy.release``)."""
        self._open = (-1, None)
