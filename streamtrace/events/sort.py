"""The external sort: records (a numpy structured dtype) sorted by a key in O(block) memory --
runs of ``block_rows`` records are sorted and stored as compressed sub-blocks (in memory or in a
temporary file), then merged (:class:`ExternalSorter`)."""
from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

from .codec import pack_columns, unpack

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
    ``delta``: fields coded as differences (those close to sorted); ``codec``: the
    sub-blocks' compression (:data:`~streamtrace.events.codec.CODECS`)."""

    def __init__(self, dtype, keyfn, block_rows, folder=None, sub_rows=2048, delta=(), codec="zstd"):
        self.dtype = np.dtype(dtype)
        self.keyfn = keyfn
        self.block_rows = max(1, int(block_rows))
        self.sub_rows = max(1, min(int(sub_rows), self.block_rows))
        self.delta = tuple(delta)
        self.codec = codec
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
        run, order = self._buffer_order()             # gathered sub-block by sub-block: no sorted copy,
        names = self.dtype.names                      # column by column (see codec.pack_columns)
        subs = []
        for i in range(0, len(run), self.sub_rows):
            o = order[i:i + self.sub_rows]
            subs.append((len(o), pack_columns({f: run[f][o] for f in names}, self.delta, self.codec)))
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

    def export_runs(self):
        """The records as sorted runs, each ``[(records, compressed bytes)]`` (sub-blocks of
        :func:`~streamtrace.events.codec.pack` with this sorter's ``delta`` and ``codec``), for another
        sorter's :meth:`add_runs`; the sorter is emptied."""
        if self.nbuf:
            self._spill_run()
        runs = [[(ref[0], bytes(self._raw(ref))) for ref in run] for run in self.runs]
        self.close()
        return runs

    def add_runs(self, runs):
        """Take sorted runs from :meth:`export_runs` of a sorter with the same dtype, key, delta and codec."""
        for subs in runs:
            self.count += sum(n for n, _ in subs)
            self.runs.append(self._put_run(subs))

    def _raw(self, ref):
        if self.folder is None:
            return ref[1]
        self._file.seek(ref[1])
        return self._file.read(ref[2])

    def _get(self, ref):
        return unpack(self._raw(ref), self.dtype, ref[0], self.delta, self.codec)

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
