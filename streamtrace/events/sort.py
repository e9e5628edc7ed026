"""The external sort: records (a numpy structured dtype) sorted by a key in O(block) memory --
runs of ``block_rows`` records are sorted and stored as compressed sub-blocks (in memory or in a
temporary file), then merged (``ExternalSorter``)."""
from __future__ import annotations

import heapq
import mmap
import os
import tempfile

import numpy as np

from .codec import pack, pack_columns, unpack

GATHER_ROWS = 8192     # records a run's spill gathers into sorted order at a time (then packed by sub-block)


def _le(keys, cut):
    """Mask of records whose key (``keys``: arrays, primary first) is <= ``cut`` (scalars)."""
    lt = np.zeros(len(keys[0]), bool)
    eq = np.ones(len(keys[0]), bool)
    for k, v in zip(keys, cut):
        lt |= eq & (k < v)
        eq &= k == v
    return lt | eq


def _concat(parts):
    """``np.concatenate`` of contiguous 1-d structured arrays of one dtype, as bytes (numpy's own
    promotes the structured dtype in Python on every call: ~10 us)."""
    return np.concatenate([p.view(np.uint8) for p in parts]).view(parts[0].dtype)


class StoredRun:
    """One sorted run of ``ExternalSorter``: its compressed sub-blocks, int64 ``meta``
    rows ``[records, offset, bytes]`` (a few bytes each: a Python tuple per sub-block made
    validate's parent grow by ~0.6 MB per GB of trace), into ``slab`` (a memory map) or, when
    ``slab`` is None, the sorter's temporary file.  ``len()``: the sub-blocks not read yet."""
    __slots__ = ("meta", "slab", "at")

    def __init__(self, meta, slab=None):
        self.meta = meta
        self.slab = slab
        self.at = 0

    def __len__(self):
        return len(self.meta) - self.at


class ExternalSorter:
    """Sort records (a structured ``dtype``) by ``keyfn(records) -> [key arrays, primary
    first]``; records with equal keys come out next to each other in no particular order
    (add a row index as the last key for a deterministic order).

    ``add`` buffers records; every ``block_rows`` of them are sorted into a run,
    kept as compressed sub-blocks of ``sub_rows`` records (in memory, or in a temporary
    file in ``folder``).  ``chunks`` then yields the records in key order, in
    chunks, merging the runs.  ``delta``: fields coded as differences (those close to
    sorted); ``codec``: the sub-blocks' compression (``CODECS``).
    ``path``: with ``folder``, the temporary file's name (else a hidden, unlinked one), so that its
    runs can be handed over to a sorter in another process (``hand_over``, ``take_over``).

    The merge's memory: one decompressed sub-block per run, so by default it grows with
    the number of runs (the input).  With ``merge_rows`` it is bounded whatever the
    input: when there are more than ``merge_rows // sub_rows`` runs (at least 2) the
    oldest are first merged into longer runs, stored as the others (a multi-pass merge,
    as in Knuth, TAOCP vol. 3, 5.4), until that many are left.  The sub-blocks in memory
    then hold at most ``max(merge_rows, 2 * sub_rows)`` records, and each chunk
    ``chunks`` yields at most as many.  (One sub-block per run even when runs are few:
    a round's copies -- the pieces' concatenation, their sort when they overlap, the
    consumer's columns -- take ~3x what it yields, and larger windows make larger rounds.)"""

    def __init__(self, dtype, keyfn, block_rows, folder=None, sub_rows=2048, delta=(), codec="zstd",
                 merge_rows=None, path=None):
        self.dtype = np.dtype(dtype)
        self.keyfn = keyfn
        self.block_rows = max(1, int(block_rows))
        self.sub_rows = max(1, min(int(sub_rows), self.block_rows))
        self.merge_rows = None if merge_rows is None else max(1, int(merge_rows))
        self.passes = 0               # runs merged into a longer run before the final merge (for tests)
        self.delta = tuple(delta)
        self.codec = codec
        self.folder = folder
        self.path = path
        self._file = None
        self._pos = 0
        self.buf = None               # the run being filled: one array, reused for every run
        self.nbuf = 0
        self.runs: list = []          # [StoredRun]
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
        run, order = self._buffer_order()             # gathered a few thousand records at a time: no sorted
        names = self.dtype.names                      # copy, column by column (see codec.pack_columns)
        subs = []
        step = self.sub_rows * max(1, GATHER_ROWS // self.sub_rows)
        for g in range(0, len(run), step):
            o = order[g:g + step]
            cols = {f: run[f][o] for f in names}
            for i in range(0, len(o), self.sub_rows):
                sub = {f: c[i:i + self.sub_rows] for f, c in cols.items()}
                subs.append((len(sub[names[0]]), pack_columns(sub, self.delta, self.codec)))
        self.nbuf = 0
        self.runs.append(self._put_run(subs))

    def _put_run(self, subs):
        """Store one run's compressed sub-blocks ``[(records, bytes)]`` as a ``StoredRun``.
        In memory they go into one anonymous memory map per run, outside the malloc heap:
        thousands of small long-lived pieces there would split the free space that each
        block's temporary arrays need, and the heap (and the resident memory) would creep
        up by tens of MB over a big track.  The map is released when the run is read out."""
        if self.folder is None:
            slab = memoryview(mmap.mmap(-1, max(1, sum(len(d) for _, d in subs))))
            meta, at = np.empty((len(subs), 3), np.int64), 0
            for j, (n, d) in enumerate(subs):
                slab[at:at + len(d)] = d
                meta[j] = n, at, len(d)
                at += len(d)
            return StoredRun(meta, slab)
        return StoredRun(self._write(subs))

    def _write(self, subs):
        """Append sub-blocks ``[(records, bytes)]`` to the temporary file; their int64 ``[records,
        offset, bytes]`` rows."""
        if self._file is None and self.path is not None:
            self._file = open(self.path, "w+b")  # kept for hand_over (or unlinked by close)
        elif self._file is None:
            fd, name = tempfile.mkstemp(prefix=".sort-", suffix=".bin", dir=self.folder)
            self._file = os.fdopen(fd, "w+b")
            os.unlink(name)                      # lives as long as the open file
        self._file.seek(self._pos)
        meta = np.empty((len(subs), 3), np.int64)
        for j, (n, d) in enumerate(subs):
            self._file.write(d)
            meta[j] = n, self._pos, len(d)
            self._pos += len(d)
        return meta

    def export_runs(self):
        """The records as sorted runs, each ``[(records, compressed bytes)]`` (sub-blocks of
        ``pack`` with this sorter's ``delta`` and ``codec``), for another
        sorter's ``add_runs``; the sorter is emptied."""
        if self.nbuf:
            self._spill_run()
        runs = []
        for run in self.runs:
            subs = []
            while run:
                n, raw = self._next_raw(run)
                subs.append((n, bytes(raw)))
            runs.append(subs)
        self.close()
        return runs

    def add_runs(self, runs):
        """Take sorted runs from ``export_runs`` of a sorter with the same dtype, key, delta and codec."""
        for subs in runs:
            self.count += sum(n for n, _ in subs)
            self.runs.append(self._put_run(subs))

    def hand_over(self) -> dict:
        """Store what is buffered as a run and close the file, keeping it: the sorted runs as a small
        picklable dict for ``take_over`` (in this process or another), without copying them.
        Needs ``folder`` and ``path``; the sorter is emptied."""
        if self.folder is None or self.path is None:
            raise ValueError("hand_over needs a sorter with a folder and a path")
        if self.nbuf:
            self._spill_run()
        handed = {"path": self.path if self._file is not None else None, "pos": self._pos,
                  "runs": [run.meta for run in self.runs], "count": self.count}
        if self._file is not None:
            self._file.close()
            self._file = None
        self.runs, self.buf, self.count = [], None, 0
        return handed

    def take_over(self, handed: dict) -> None:
        """Take the runs of another sorter's ``hand_over`` (same dtype, key, delta and codec;
        this sorter has a ``folder`` and holds nothing yet); the file is unlinked at once and lives
        as long as this sorter holds it open."""
        if handed["path"] is not None:
            self._file = open(handed["path"], "r+b")
            os.unlink(handed["path"])
            self._pos = handed["pos"]
        self.runs = [StoredRun(meta) for meta in handed["runs"]]
        self.count = handed["count"]

    def _next_raw(self, run):
        """``(records, compressed bytes)`` of the next sub-block of ``run``; the run's memory
        map is released with its last one."""
        n, at, size = run.meta[run.at].tolist()
        run.at += 1
        if run.slab is None:
            self._file.seek(at)
            return n, self._file.read(size)
        raw = run.slab[at:at + size]
        if not run:
            run.slab = None
        return n, raw

    def _window(self, run):
        """The next sub-block of ``run`` decompressed, or None at its end."""
        if not run:
            return None
        n, raw = self._next_raw(run)
        return unpack(raw, self.dtype, n, self.delta, self.codec)

    def chunks(self):
        """The records in key order, in chunks (each run's sub-blocks are released as
        they are consumed)."""
        try:
            if not self.runs:                     # everything fits in one block: plain sort
                if self.nbuf:
                    run, order = self._buffer_order()
                    run = np.take(run, order)
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
        runs, self.runs = self.runs, []
        if self.merge_rows is not None:
            fan_in = max(2, self.merge_rows // self.sub_rows)
            while len(runs) > fan_in:
                group = runs[:min(fan_in, len(runs) - fan_in + 1)]
                runs = runs[len(group):] + [self._merge_into_run(group)]
                self.passes += len(group)
        yield from self._merge_runs(runs)

    def _merge_into_run(self, runs):
        """Merge ``runs`` into one ``StoredRun``.  On disk the sub-blocks are written as they
        come; in memory they are gathered first."""
        metas, packed, rest = [], [], None
        for chunk in self._merge_runs(runs):
            block = chunk if rest is None else _concat((rest, chunk))
            whole = len(block) - len(block) % self.sub_rows
            for i in range(0, whole, self.sub_rows):
                packed.append((self.sub_rows, pack(block[i:i + self.sub_rows], self.delta, self.codec)))
            rest = block[whole:] if whole < len(block) else None
            if self.folder is not None and packed:
                metas.append(self._write(packed))
                packed = []
        if rest is not None:
            packed.append((len(rest), pack(rest, self.delta, self.codec)))
        if self.folder is None:
            return self._put_run(packed)
        if packed:
            metas.append(self._write(packed))
        return StoredRun(np.concatenate(metas) if metas else np.empty((0, 3), np.int64))

    def _merge_runs(self, runs):
        """Yield the records of ``runs`` (``StoredRun``) in key order.
        Every round yields what is <= the smallest last key of the windows of runs with more to
        come (``cut``): nothing later can sort before it.  Two heaps keep a round's work to the
        runs it takes from: the windows by first key, the runs with more to come by last key."""
        k = len(runs)
        bufs, first, last, version = [None] * k, [None] * k, [None] * k, [0] * k
        ready, lasts = [], []          # (first key, run) of every window; (last key, version, run)

        def load(i):
            b = bufs[i] = self._window(runs[i])
            if b is not None:
                version[i] += 1
                first[i], last[i] = self._ends(b)
                heapq.heappush(ready, (first[i], i))
                if runs[i]:
                    heapq.heappush(lasts, (last[i], version[i], i))

        for i in range(k):
            load(i)
        while ready:
            while lasts and lasts[0][1] != version[lasts[0][2]]:    # that window is gone
                heapq.heappop(lasts)
            cut = lasts[0][0] if lasts else None
            pieces, ends, cut_into, used = [], [], [], []
            while ready and (cut is None or ready[0][0] <= cut):
                i = heapq.heappop(ready)[1]
                b = bufs[i]
                take = len(b) if cut is None or last[i] <= cut else int(np.count_nonzero(_le(self.keyfn(b), cut)))
                pieces.append(b[:take])                  # a prefix: b is sorted
                ends.append(last[i] if take == len(b) else self._key(b[:take], -1))
                if take < len(b):
                    bufs[i] = b[take:]
                    cut_into.append(i)
                else:
                    used.append(i)
            for i in cut_into:
                first[i] = self._key(bufs[i], 0)
                heapq.heappush(ready, (first[i], i))
            for i in used:
                load(i)
            out = pieces[0] if len(pieces) == 1 else _concat(pieces)
            # the pieces came by first key: already in order unless one overlaps the next
            if any(ends[j] > self._key(pieces[j + 1], 0) for j in range(len(pieces) - 1)):
                out = np.take(out, np.lexsort(self.keyfn(out)[::-1]))     # (out[order]: 10x slower)
            yield out

    def _ends(self, b):
        """The keys (tuples of ints) of the first and the last record of ``b`` (one ``keyfn`` call)."""
        keys = self.keyfn(np.take(b, [0, len(b) - 1]))
        return tuple(int(k[0]) for k in keys), tuple(int(k[1]) for k in keys)

    def _key(self, b, i):
        return tuple(int(k[0]) for k in self.keyfn(b[i:i + 1] if i >= 0 else b[i:]))

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
            if self.path is not None:            # a named file not handed over
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
        self.runs = []
        self.buf = None
        self.nbuf = 0
