"""A job-level step graph's node columns that only its output reads, on disk: the critical path's
(``streamtrace.aggregate.critical_path.JobGraph``) anchors' ``local`` node ids, ``name`` / ``lane`` text codes
and correlation ids.  The passes read none of them; the path's segments read them for the path's few nodes,
the ranks' rows one lane a part, the barriers one name each.

Why: at 4,096 synthetic ranks (1.3 M anchors) the four columns were 21 MB of the critical path's process
through its build and the collective figures (its peak), and a memory map lent for the path's segments
brought ~25 MB of their pages into its RSS (a page for each value read).  ``NodeColumn`` appends a part's
values as the graph is built and reads values back with ``os.pread`` through the page cache (not mapped):
the process holds a chunk of ``READ_ROWS`` values while it reads.  A column of at most ``MEMORY_ROWS``
values stays in memory (no file: the 8 x A100 job's small step graphs).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

MEMORY_ROWS = 1 << 18
"""The most values a ``NodeColumn`` holds in memory (1-2 MB); past it, on disk."""
READ_ROWS = 1 << 18
"""Values ``NodeColumn.take`` reads at once from disk (a chunk of 1-2 MB, read only where an index falls)."""


class NodeColumn:
    """One node column of ``dtype`` (a numpy integer type), appended part by part (``append``), read by
    index (``col[i]`` a numpy scalar, ``col[idx]`` / ``take(idx)`` an array of ``idx``' shape, ``array()``
    the whole column, ``tolist()``).  In memory while it has at most ``MEMORY_ROWS`` values, else in an
    unnamed temporary file in ``folder`` (the system's temporary folder when None), removed by ``close``
    or when the object is collected (``on_disk``: in the file from the first value).  Raises IndexError for
    an index outside ``0 .. len - 1`` and OSError when the file cannot be written or read."""

    def __init__(self, dtype, folder=None, on_disk: bool = False):
        self.dtype = np.dtype(dtype)
        self.folder = folder
        self.n = 0
        self._held: list | None = []
        self._f = None
        if on_disk:                                      # (in a file from the first value)
            self._to_file()

    def _to_file(self):
        self._f = tempfile.TemporaryFile(dir=self.folder, prefix=".nodes.")
        for x in self._held:
            self._f.write(memoryview(x))
        self._held = None

    def __len__(self) -> int:
        return self.n

    def append(self, values):
        """Append ``values`` (any integer array; cast to ``dtype``, which must hold them)."""
        values = np.ascontiguousarray(np.asarray(values).astype(self.dtype, copy=False))
        if self._held is not None and self.n + len(values) > MEMORY_ROWS:
            self._to_file()
        if self._held is not None:
            self._held.append(values.copy())
        else:
            self._f.write(memoryview(values))          # (not a copy as bytes)
        self.n += len(values)

    def _read(self, lo: int, hi: int) -> np.ndarray:
        """Values ``lo`` .. ``hi - 1``."""
        if self._held is not None:
            if len(self._held) > 1:
                self._held = [np.concatenate(self._held)]
            return self._held[0][lo:hi] if self._held else np.zeros(0, self.dtype)
        self._f.flush()
        size = self.dtype.itemsize
        got = os.pread(self._f.fileno(), (hi - lo) * size, lo * size)
        if len(got) != (hi - lo) * size:
            raise OSError(f"a job graph's node column: {len(got)} of {(hi - lo) * size} bytes read back")
        return np.frombuffer(got, self.dtype)

    def take(self, idx) -> np.ndarray:
        """The values at ``idx`` (an int array, any shape), read a ``READ_ROWS`` chunk at a time where an
        index falls (ascending)."""
        idx = np.asarray(idx, np.int64)
        flat = idx.reshape(-1)
        if len(flat) and (flat.min() < 0 or flat.max() >= self.n):
            raise IndexError(f"a job graph's node column of {self.n} values has no value {int(flat.max())}"
                             if flat.max() >= self.n else "a job graph's node column has no negative index")
        out = np.empty(len(flat), self.dtype)
        o = np.argsort(flat, kind="stable")
        s = flat[o]
        for lo in range(0, self.n, READ_ROWS):
            a, b = np.searchsorted(s, [lo, lo + READ_ROWS]).tolist()
            if a < b:
                out[o[a:b]] = self._read(lo, min(lo + READ_ROWS, self.n))[s[a:b] - lo]
        return out.reshape(idx.shape)

    def __getitem__(self, idx):
        if np.ndim(idx) == 0:
            i = int(idx)
            if not 0 <= i < self.n:
                raise IndexError(f"a job graph's node column of {self.n} values has no value {i}")
            return self._read(i, i + 1)[0]
        return self.take(idx)

    def array(self) -> np.ndarray:
        """The whole column (int array of ``dtype``; a copy)."""
        return self._read(0, self.n).copy()

    def tolist(self) -> list:
        """The whole column as Python ints."""
        return self.array().tolist()

    def close(self):
        """Let the values go and remove the file."""
        self._held = []
        if self._f is not None:
            self._f.close()
            self._f = None
        self.n = 0
