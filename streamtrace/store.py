"""Where ``streamtrace analyze`` keeps event rows between reading and analysing them,
in bounded memory: compressed blocks, in memory or in spill files, and an external sort.

* :data:`STORE_DTYPE` -- what the analysis keeps per complete event (60 bytes; pid, tid
  and rank live in the store key).
* :func:`pack` / :func:`unpack` -- a structured array as one compressed block: its
  columns one after the other (struct of arrays), ~sorted columns delta-coded, then
  zstd level 1 (pyarrow's codec).  Event rows shrink 10-20x: the default in-memory
  mode holds the 3.2 M events (184 MB of rows) of the 1.1 GB benchmark trace in 9 MB.
* :class:`MemoryStore` (default) and :class:`SpillStore` (``--chunked``: one file per
  key) -- rows grouped by key, appended as blocks of at most ``chunk_events`` rows
  (pending rows are compressed whenever ``chunk_events`` of them have accumulated).
  :meth:`~MemoryStore.blocks` gives a key's rows back block by block, in the order
  they were added.
* :class:`ExternalSorter` -- records sorted by a key with O(block) memory: runs of
  ``block_rows`` records are sorted and stored as compressed sub-blocks (in memory or
  in a temporary file), then merged.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

# What the analysis keeps per complete event (60 bytes; pid/tid/rank live in the store key).
STORE_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("cat", "i4"), ("name", "i4"), ("correlation", "i8"),
                        ("external_id", "i8"), ("stream", "i8"), ("device", "i8"), ("comm", "i4")])
STORE_DELTA = ("ts", "correlation", "external_id")   # delta-coded columns of stored blocks (~increasing)
CHUNK_EVENTS = 32768       # default rows per stored block, per sorted run, per analysis step

_CODEC = None
_LIBC = None


def trim():
    """Give the memory freed by the last phase back to the OS (glibc's ``malloc_trim``;
    a no-op elsewhere).  glibc keeps freed blocks of its heap for reuse: between phases
    that allocate differently sized arrays this holds tens of MB for nothing."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def _codec():
    global _CODEC
    if _CODEC is None:
        import pyarrow as pa
        _CODEC = pa.Codec("zstd", 1)
    return _CODEC


def _coded(delta):
    """``{field: base}`` from a ``delta`` spec: ``"f"`` codes f as differences from its
    previous value (base None), ``"f-g"`` as f minus field g of the same record (g must come
    before f in the dtype)."""
    return dict((d.split("-", 1)[0], d.split("-", 1)[1]) if "-" in d else (d, None) for d in delta)


def pack(arr, delta=()) -> bytes:
    """``arr`` (1-d structured array) as compressed bytes: each field's column in turn,
    the fields in ``delta`` as differences (wrapping int64): ``"f"`` from the previous
    value of f, ``"f-g"`` from field g of the same record (e.g. an end from its start)."""
    cols = []
    coded = _coded(delta)
    for f in arr.dtype.names:
        c = np.ascontiguousarray(arr[f])
        if f in coded and len(c):
            c = c - arr[coded[f]] if coded[f] else np.diff(c, prepend=c.dtype.type(0))
        cols.append(c.view(np.uint8))
    raw = np.concatenate(cols) if cols else np.zeros(0, np.uint8)
    return _codec().compress(raw, asbytes=True)


def unpack(data, dtype, n, delta=()) -> np.ndarray:
    """Inverse of :func:`pack`: ``n`` records of ``dtype``."""
    import pyarrow as pa
    dtype = np.dtype(dtype)
    out = np.empty(n, dtype)
    if n == 0:
        return out
    raw = np.frombuffer(_codec().decompress(data, decompressed_size=n * dtype.itemsize,
                                            memory_pool=pa.system_memory_pool()), np.uint8)
    pos = 0
    coded = _coded(delta)
    for f in dtype.names:
        t = dtype.fields[f][0]
        c = raw[pos:pos + n * t.itemsize].view(t)
        pos += n * t.itemsize
        if f not in coded:
            out[f] = c
        elif coded[f]:
            np.add(c, out[coded[f]], out=out[f])
        else:
            np.cumsum(c, dtype=t, out=out[f])
    return out


# -- rows grouped per key ---------------------------------------------------------------

class MemoryStore:
    """Event rows grouped by key, kept in memory as compressed blocks (the default mode).

    A block reference is ``(rows, data, first_ts, last_end)``: ``data`` the :func:`pack`
    bytes, then the block's smallest ``ts`` and largest ``ts + dur`` (int64 ns), so that
    :meth:`block_spans` answers without decompressing."""

    def __init__(self, chunk_events=CHUNK_EVENTS):
        self.chunk_events = max(1, int(chunk_events))
        self.pending: dict = {}
        self.npending = 0
        self.refs: dict = {}           # key -> [block reference]

    def add(self, key, rows):
        if len(rows):
            self.pending.setdefault(key, []).append(rows)
            self.npending += len(rows)
            if self.npending >= self.chunk_events:
                self.flush()

    def flush(self):
        for key, parts in self.pending.items():
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
            refs = self.refs.setdefault(key, [])
            for i in range(0, len(rows), self.chunk_events):
                refs.append(self._put(key, rows[i:i + self.chunk_events]))
        self.pending = {}
        self.npending = 0

    def _put(self, key, rows):
        return (len(rows), pack(rows, STORE_DELTA), *_span(rows))

    def _load(self, ref):
        return unpack(ref[1], STORE_DTYPE, ref[0], STORE_DELTA)

    def keys(self):
        return sorted(set(self.refs) | set(self.pending), key=repr)

    def rows(self, key) -> int:
        return sum(r[0] for r in self.refs.get(key, ())) + sum(len(p) for p in self.pending.get(key, ()))

    def blocks(self, key):
        """The key's rows, block by block, in the order they were added."""
        for ref in self.refs.get(key, ()):
            yield self._load(ref)
        yield from self.pending.get(key, ())

    def block_spans(self, key):
        """``(rows, first_ts, last_end)`` int64 arrays, one entry per block of ``key`` in
        :meth:`blocks` order: its row count, smallest ``ts`` and largest ``ts + dur`` (ns)."""
        spans = [(r[0], r[-2], r[-1]) for r in self.refs.get(key, ())]
        spans += [(len(p), *_span(p)) for p in self.pending.get(key, ())]
        return _span_arrays(spans)

    def block(self, key, j):
        """Block ``j`` of ``key`` (as :meth:`blocks` gives it)."""
        refs = self.refs.get(key, [])
        return self._load(refs[j]) if j < len(refs) else self.pending[key][j - len(refs)]

    def get(self, key):
        parts = list(self.blocks(key))
        return parts[0] if len(parts) == 1 else (np.concatenate(parts) if parts else np.zeros(0, STORE_DTYPE))

    def drop(self, key):
        """Forget a key's rows (the analysis is done with them)."""
        self.refs.pop(key, None)
        self.pending.pop(key, None)

    def take(self, key):
        """:meth:`get`, then :meth:`drop`."""
        out = self.get(key)
        self.drop(key)
        return out

    def export(self) -> dict:
        """``{key: [block reference]}`` (picklable), after :meth:`flush`: what a worker of
        :func:`streamtrace.split.ingest_parallel` sends back; :func:`load_block` reads one."""
        self.flush()
        return {k: [("mem",) + r for r in v] for k, v in self.refs.items()}


class SpillStore(MemoryStore):
    """Event rows grouped by key, appended to one file per key in ``folder`` as compressed
    blocks every ``chunk_events`` rows (``--chunked``): memory holds at most one chunk
    while reading.  A block reference is ``(rows, offset, nbytes, path, first_ts,
    last_end)``: where the block sits in the key's file, then its time span (ns)."""

    def __init__(self, folder, chunk_events):
        super().__init__(chunk_events)
        self.folder = Path(folder)
        self.files: dict = {}
        self.sizes: dict = {}

    def _put(self, key, rows):
        path = self.files.setdefault(key, self.folder / f"{len(self.files)}.bin")
        data = pack(rows, STORE_DELTA)
        with open(path, "ab") as f:
            f.write(data)
        off = self.sizes.get(key, 0)
        self.sizes[key] = off + len(data)
        return (len(rows), off, len(data), str(path), *_span(rows))

    def _load(self, ref):
        return unpack(_read_at(ref[3], ref[1], ref[2]), STORE_DTYPE, ref[0], STORE_DELTA)

    def drop(self, key):
        super().drop(key)
        path = self.files.pop(key, None)
        if path is not None:
            Path(path).unlink(missing_ok=True)

    def export(self) -> dict:
        self.flush()
        return {k: [("file",) + r for r in v] for k, v in self.refs.items()}


def _span(rows) -> tuple[int, int]:
    """``(smallest ts, largest ts + dur)`` of a non-empty block of :data:`STORE_DTYPE` rows."""
    return int(rows["ts"].min()), int((rows["ts"] + rows["dur"]).max())


def _span_arrays(spans):
    a = np.asarray(spans, np.int64).reshape(-1, 3)
    return a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy()


def _read_at(path, offset, nbytes) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


def load_block(ref) -> np.ndarray:
    """Rows of an exported block reference (:meth:`MemoryStore.export`)."""
    if ref[0] == "mem":
        return unpack(ref[2], STORE_DTYPE, ref[1], STORE_DELTA)
    return unpack(_read_at(ref[4], ref[2], ref[3]), STORE_DTYPE, ref[1], STORE_DELTA)


# -- external sort -----------------------------------------------------------------------

def _le(keys, cut):
    """Mask of records whose key (``keys``: arrays, primary first) is <= ``cut`` (scalars)."""
    lt = np.zeros(len(keys[0]), bool)
    eq = np.ones(len(keys[0]), bool)
    for k, v in zip(keys, cut):
        lt |= eq & (k < v)
        eq &= k == v
    return lt | eq


class ExternalSorter:
    """Sort records (a structured ``dtype``) by ``keyfn(records) -> [key arrays, primary
    first]``; records with equal keys come out next to each other in no particular order
    (add a row index as the last key for a deterministic order).

    :meth:`add` buffers records; every ``block_rows`` of them are sorted into a run,
    kept as compressed sub-blocks of ``sub_rows`` records (in memory, or in a temporary
    file in ``folder``).  :meth:`chunks` then yields the records in key order, in
    chunks, merging the runs with one decompressed sub-block per run in memory.
    ``delta``: fields coded as differences (those close to sorted)."""

    def __init__(self, dtype, keyfn, block_rows, folder=None, sub_rows=2048, delta=()):
        self.dtype = np.dtype(dtype)
        self.keyfn = keyfn
        self.block_rows = max(1, int(block_rows))
        self.sub_rows = max(1, min(int(sub_rows), self.block_rows))
        self.delta = tuple(delta)
        self.folder = folder
        self._file = None
        self._pos = 0
        self.buf = None               # the run being filled: one array, reused for every run
        self.nbuf = 0
        self.runs: list = []          # [[sub-block reference]]
        self.count = 0

    def add(self, recs):
        """Append records (copied: ``recs`` is not held)."""
        n = len(recs)
        self.count += n
        at = 0
        while at < n:
            k = min(self.block_rows - self.nbuf, n - at)
            self._room(self.nbuf + k)
            self.buf[self.nbuf:self.nbuf + k] = recs[at:at + k]
            self.nbuf += k
            at += k
            if self.nbuf == self.block_rows:
                self._spill_run()

    def _room(self, n):
        """A run buffer of at least ``n`` records (grown geometrically up to ``block_rows``)."""
        if self.buf is None or len(self.buf) < n:
            cap = min(self.block_rows, max(n, 1024, 2 * (0 if self.buf is None else len(self.buf))))
            buf = np.empty(cap, self.dtype)
            if self.nbuf:
                buf[:self.nbuf] = self.buf[:self.nbuf]
            self.buf = buf

    def _buffer_order(self):
        """The buffered records (a view) and the order that sorts them."""
        run = self.buf[:self.nbuf]
        return run, np.lexsort(self.keyfn(run)[::-1])

    def _spill_run(self):
        run, order = self._buffer_order()             # gathered sub-block by sub-block: no sorted copy
        subs = [(min(self.sub_rows, len(run) - i), pack(run[order[i:i + self.sub_rows]], self.delta))
                for i in range(0, len(run), self.sub_rows)]
        self.nbuf = 0
        self.runs.append(self._put_run(subs))

    def _put_run(self, subs):
        """Store one run's compressed sub-blocks ``[(records, bytes)]``; returns their
        references.  In memory they go into one anonymous memory map per run, outside
        the malloc heap: thousands of small long-lived pieces there would split the free
        space that each block's temporary arrays need, and the heap (and the resident
        memory) would creep up by tens of MB over a big track.  The map is released
        with the run's last reference."""
        if self.folder is None:
            import mmap
            slab = mmap.mmap(-1, max(1, sum(len(d) for _, d in subs)))
            view = memoryview(slab)
            refs, at = [], 0
            for n, d in subs:
                view[at:at + len(d)] = d
                refs.append((n, view[at:at + len(d)]))
                at += len(d)
            return refs
        if self._file is None:
            fd, name = tempfile.mkstemp(prefix=".sort-", suffix=".bin", dir=self.folder)
            self._file = os.fdopen(fd, "w+b")
            os.unlink(name)                      # lives as long as the open file
        self._file.seek(self._pos)
        refs = []
        for n, d in subs:
            self._file.write(d)
            refs.append((n, self._pos, len(d)))
            self._pos += len(d)
        return refs

    def _get(self, ref):
        if self.folder is None:
            data = ref[1]
        else:
            self._file.seek(ref[1])
            data = self._file.read(ref[2])
        return unpack(data, self.dtype, ref[0], self.delta)

    def chunks(self):
        """The records in key order, in chunks (each run's sub-blocks are released as
        they are consumed)."""
        try:
            if not self.runs:                     # everything fits in one block: plain sort
                if self.nbuf:
                    run, order = self._buffer_order()
                    run = run[order]
                    self.buf, self.nbuf = None, 0
                    for i in range(0, len(run), self.block_rows):
                        yield run[i:i + self.block_rows]
                return
            if self.nbuf:
                self._spill_run()
            self.buf = None
            yield from self._merge()
        finally:
            self.close()

    def _merge(self):
        runs = [list(reversed(r)) for r in self.runs]     # pop() gives the next sub-block
        self.runs = []
        bufs = [self._get(r.pop()) for r in runs]
        first = [self._key(b, 0) for b in bufs]
        while True:
            live = [i for i, b in enumerate(bufs) if b is not None]
            if not live:
                return
            pending = [i for i in live if runs[i]]
            # every record <= the smallest tail of a run with more to come is final
            cut = min(self._key(bufs[i], -1) for i in pending) if pending else None
            pieces = []
            for i in live:
                b = bufs[i]
                if cut is None or self._key(b, -1) <= cut:
                    take = len(b)
                elif first[i] > cut:
                    take = 0
                else:
                    take = int(np.count_nonzero(_le(self.keyfn(b), cut)))   # a prefix: b is sorted
                if not take:
                    continue
                pieces.append(b[:take])
                if take < len(b):
                    bufs[i] = b[take:]
                else:
                    bufs[i] = self._get(runs[i].pop()) if runs[i] else None
                if bufs[i] is not None:
                    first[i] = self._key(bufs[i], 0)
            out = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            if len(pieces) > 1:
                out = out[np.lexsort(self.keyfn(out)[::-1])]
            yield out

    def _key(self, b, i):
        return tuple(int(k[0]) for k in self.keyfn(b[i:i + 1] if i >= 0 else b[i:]))

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
        self.runs = []
        self.buf = None
        self.nbuf = 0
