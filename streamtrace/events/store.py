"""Where ``streamtrace analyze`` keeps event rows between reading and analysing them, in
bounded memory: rows grouped by key (``("cpu" | "gpu" | "gpuanno", rank, pid, tid)``), as compressed blocks.

* ``STORE_DTYPE`` -- what the analysis keeps per complete event (60 bytes; pid, tid
  and rank live in the store key).
* ``EventStore`` -- the protocol every store follows and the analysis relies on.
* ``MemoryStore`` (default) and ``SpillStore`` (``--chunked``: one file per
  key) -- rows appended as blocks of at most ``chunk_events`` rows (pending rows are
  compressed, ``streamtrace.events.codec``, whenever ``chunk_events`` of them have
  accumulated).
* ``MergedStore`` -- the stores that the workers of one split trace filled
  (``streamtrace.events.parallel_ingest``), seen as one, in file order.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np

from .codec import pack, unpack
from .columns import STR_ID_BASE, is_str_id

# What the analysis keeps per complete event (60 bytes; pid/tid/rank live in the store key).
STORE_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("cat", "i4"), ("name", "i4"), ("correlation", "i8"),
                        ("external_id", "i8"), ("stream", "i8"), ("device", "i8"), ("comm", "i4")])
STORE_DELTA = ("ts", "correlation", "external_id")   # delta-coded columns of stored blocks (~increasing)
CHUNK_EVENTS = 32768       # default rows per stored block, per sorted run, per analysis step


class EventStore(Protocol):
    """Event rows (``STORE_DTYPE``) grouped by key, read back block by block in the order
    they were added.  ``MemoryStore``, ``SpillStore`` and ``MergedStore`` follow it."""

    def keys(self) -> list:
        """Every key, sorted by ``repr``."""

    def rows(self, key) -> int:
        """Number of rows of ``key``."""

    def blocks(self, key) -> Iterator[np.ndarray]:
        """The key's rows, block by block, in the order they were added."""

    def block_spans(self, key) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per block of ``key``, in ``blocks`` order: ``(rows, first_ts, last_end)`` int64
        arrays -- its row count, smallest ``ts`` and largest ``ts + dur`` (ns) -- without
        decompressing any block."""

    def block(self, key, j: int) -> np.ndarray:
        """Block ``j`` of ``key`` (as ``blocks`` gives it)."""

    def get(self, key) -> np.ndarray:
        """All rows of ``key`` as one array."""

    def drop(self, key) -> None:
        """Forget a key's rows (the analysis is done with them)."""

    def take(self, key) -> np.ndarray:
        """``get``, then ``drop``."""


class MemoryStore:
    """Event rows grouped by key, kept in memory as compressed blocks (the default mode).

    A block reference is ``(rows, data, first_ts, last_end)``: ``data`` the ``pack``
    bytes, then the block's smallest ``ts`` and largest ``ts + dur`` (int64 ns), so that
    ``block_spans`` answers without decompressing."""

    #: a key whose rows of one flush are at most this many, and that has no block yet, is kept
    #: in the flush's shared block (0: never; SpillStore)
    SMALL_ROWS = 8

    def __init__(self, chunk_events=CHUNK_EVENTS):
        self.chunk_events = max(1, int(chunk_events))
        self.pending: dict = {}
        self.npending = 0
        self.refs: dict = {}           # key -> [block reference]
        self.small: dict = {}          # key -> its rows in a shared block: (block << 40) | (offset << 16) | rows
        self.shared: list = []         # shared blocks: [STORE_DTYPE rows, keys not dropped yet]

    def add(self, key, rows):
        if len(rows):
            self.pending.setdefault(key, []).append(rows)
            self.npending += len(rows)
            if self.npending >= self.chunk_events:
                self.flush()

    def flush(self):
        """Pack the pending rows: a key's rows into blocks of at most ``chunk_events`` rows; the
        rows of keys with at most ``SMALL_ROWS`` pending rows and no block yet into one shared,
        uncompressed block (a million one-event threads packed one block each: ~0.3 ms of CPU and
        ~350 bytes of Python objects a key; shared: an int per key and 60 bytes a row, issue 49)."""
        tiny, at = [], 0
        for key, parts in self.pending.items():
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
            if len(rows) <= self.SMALL_ROWS and key not in self.refs and key not in self.small \
                    and at < 1 << 24:
                tiny.append((key, rows))
                at += len(rows)
                continue
            refs = self.refs.setdefault(key, [])
            if key in self.small:                          # its earlier rows first, as a block of their own
                refs.append(self._put(key, self._small_rows(key, drop=True)))
            for i in range(0, len(rows), self.chunk_events):
                refs.append(self._put(key, rows[i:i + self.chunk_events]))
        if tiny:
            sid, at = len(self.shared), 0
            for key, rows in tiny:
                self.small[key] = (sid << 40) | (at << 16) | len(rows)
                at += len(rows)
            self.shared.append([np.concatenate([r for _, r in tiny]), len(tiny)])
        self.pending = {}
        self.npending = 0

    def _small_rows(self, key, drop=False):
        """The rows of a key kept in a shared block (a copy); with ``drop``, forgotten there."""
        code = self.small.pop(key) if drop else self.small[key]
        block = self.shared[code >> 40]
        at = (code >> 16) & ((1 << 24) - 1)
        rows = block[0][at:at + (code & 0xFFFF)].copy()
        if drop:
            block[1] -= 1
            if not block[1]:
                block[0] = None                            # every key of the block dropped
        return rows

    def _put(self, key, rows):
        return (len(rows), pack(rows, STORE_DELTA), *_span(rows))

    def _load(self, ref):
        return unpack(ref[1], STORE_DTYPE, ref[0], STORE_DELTA)

    def keys(self):
        return sorted(set(self.refs) | set(self.pending) | set(self.small), key=repr)

    def rows(self, key) -> int:
        return sum(r[0] for r in self.refs.get(key, ())) + sum(len(p) for p in self.pending.get(key, ())) \
            + (self.small[key] & 0xFFFF if key in self.small else 0)

    def _head(self, key) -> list:
        """The key's rows in a shared block, as a list of one block (or none)."""
        return [self._small_rows(key)] if key in self.small else []

    def blocks(self, key):
        """The key's rows, block by block, in the order they were added."""
        yield from self._head(key)
        for ref in self.refs.get(key, ()):
            yield self._load(ref)
        yield from self.pending.get(key, ())

    def block_spans(self, key):
        """``(rows, first_ts, last_end)`` int64 arrays, one entry per block of ``key`` in
        ``blocks`` order: its row count, smallest ``ts`` and largest ``ts + dur`` (ns)."""
        spans = [(len(p), *_span(p)) for p in self._head(key)]
        spans += [(r[0], r[-2], r[-1]) for r in self.refs.get(key, ())]
        spans += [(len(p), *_span(p)) for p in self.pending.get(key, ())]
        return span_arrays(spans)

    def block(self, key, j):
        """Block ``j`` of ``key`` (as ``blocks`` gives it)."""
        head = self._head(key)
        if j < len(head):
            return head[j]
        j -= len(head)
        refs = self.refs.get(key, [])
        return self._load(refs[j]) if j < len(refs) else self.pending[key][j - len(refs)]

    def get(self, key):
        parts = list(self.blocks(key))
        return parts[0] if len(parts) == 1 else (np.concatenate(parts) if parts else np.zeros(0, STORE_DTYPE))

    def drop(self, key):
        """Forget a key's rows (the analysis is done with them)."""
        self.refs.pop(key, None)
        self.pending.pop(key, None)
        if key in self.small:
            self._small_rows(key, drop=True)

    def take(self, key):
        """``get``, then ``drop``."""
        out = self.get(key)
        self.drop(key)
        return out

    def export(self) -> dict:
        """``{key: [block reference]}`` (picklable), after ``flush``: what a worker of
        ``streamtrace.trace.ranges.ingest_parallel`` sends back; ``load_block`` reads one."""
        self._unshare()
        return {k: [("mem",) + r for r in v] for k, v in self.refs.items()}

    def _unshare(self):
        """``flush``, then every key of the shared blocks as a block of its own."""
        self.flush()
        for key in list(self.small):
            self.refs[key] = [self._put(key, self._small_rows(key, drop=True))] + self.refs.get(key, [])


class SpillStore(MemoryStore):
    """Event rows grouped by key, appended as compressed blocks every ``chunk_events`` rows
    (``--chunked``) to spill files in ``folder``: memory holds at most one chunk while reading.
    Every key's blocks go to the same file until it holds ``FILE_BYTES``, then to a new one; a file
    is removed once every key with a block in it is dropped (and it is not the one being written).
    A block reference is ``(rows, offset, nbytes, path, first_ts, last_end)``: where the block sits
    in its file, then its time span (ns).

    Why not a file per key: a rank's trace has several keys (its threads and streams), and creating a
    file is what costs -- a metadata server's round trip on Lustre or NFS; 0.05-0.9 ms of CPU on this
    project's VM's ext4 depending on its I/O, against ~0.01 ms to open one again: ``analyze --chunked``
    of 1,024 synthetic ranks created 8,192 spill files, 1,024 now."""

    SMALL_ROWS = 0             # every key in blocks of its own: memory holds no rows
    FILE_BYTES = 1 << 28
    """A spill file takes blocks until it holds this many bytes (the disk a dropped key's blocks
    hold until its file's other keys are dropped too)."""

    def __init__(self, folder, chunk_events):
        super().__init__(chunk_events)
        self.folder = Path(folder)
        self.files: dict = {}      # key -> the paths holding its blocks
        self.live: dict = {}       # path -> the keys not dropped with a block in it
        self.path = None           # the file being written, and its size
        self.size = 0
        self.made = 0              # files named so far (a name is never reused)

    def _put(self, key, rows):
        if self.path is None or self.size >= self.FILE_BYTES:
            full, self.path, self.size = self.path, self.folder / f"{self.made}.bin", 0
            if full is not None and not self.live[full]:      # (its keys dropped while it was written)
                del self.live[full]
                full.unlink(missing_ok=True)
            self.made += 1
            self.live[self.path] = 0
        path, held = self.path, self.files.setdefault(key, [])
        if path not in held:
            held.append(path)
            self.live[path] += 1
        data = pack(rows, STORE_DELTA)
        with open(path, "ab") as f:
            f.write(data)
        off = self.size
        self.size += len(data)
        return (len(rows), off, len(data), str(path), *_span(rows))

    def _load(self, ref):
        return unpack(_read_at(ref[3], ref[1], ref[2]), STORE_DTYPE, ref[0], STORE_DELTA)

    def drop(self, key):
        super().drop(key)
        for path in self.files.pop(key, ()):
            self.live[path] -= 1
            if not self.live[path] and path != self.path:
                del self.live[path]
                path.unlink(missing_ok=True)

    def export(self) -> dict:
        self._unshare()
        return {k: [("file",) + r for r in v] for k, v in self.refs.items()}


def _span(rows) -> tuple[int, int]:
    """``(smallest ts, largest ts + dur)`` of a non-empty block of ``STORE_DTYPE`` rows."""
    return int(rows["ts"].min()), int((rows["ts"] + rows["dur"]).max())


def span_arrays(spans):
    """``(rows, first_ts, last_end)`` int64 arrays (times in ns) from one such tuple per block."""
    a = np.asarray(spans, np.int64).reshape(-1, 3)
    return a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy()


def _read_at(path, offset, nbytes) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


def load_block(ref) -> np.ndarray:
    """Rows of an exported block reference (``MemoryStore.export``)."""
    if ref[0] == "mem":
        return unpack(ref[2], STORE_DTYPE, ref[1], STORE_DELTA)
    return unpack(_read_at(ref[4], ref[2], ref[3]), STORE_DTYPE, ref[1], STORE_DELTA)


# -- external sort -----------------------------------------------------------------------


class MergedStore:
    """The stores of several byte ranges seen as one, in file order; string ids and
    collective-args rows of each range are remapped to the shared table on read."""

    def __init__(self, chunk_events=65536):
        self.chunk_events = chunk_events
        self.parts = []        # (dict key -> [block reference], lut int64, comm offset)
        self.users: dict = {}  # spill file -> the (range, key)s with blocks in it (SpillStore shares a file)

    def add_range(self, parts, lut, comm_offset):

        def canon(v):                      # string pids/tids: this range's table -> the shared one
            return int(STR_ID_BASE + lut[v - STR_ID_BASE]) if is_str_id(v) else v
        parts = {(k[0], k[1], *map(canon, k[2:])): v for k, v in parts.items()}
        for refs in parts.values():
            for path in {ref[4] for ref in refs if ref[0] == "file"}:
                self.users[path] = self.users.get(path, 0) + 1
        self.parts.append((parts, lut, comm_offset))

    def keys(self):
        return sorted({k for p, _, _ in self.parts for k in p}, key=repr)

    def rows(self, key) -> int:
        return sum(ref[1] for parts, _, _ in self.parts for ref in parts.get(key, ()))

    def _refs(self, key):
        """``[(block reference, lut, comm offset)]`` of ``key``, ranges in file order."""
        return [(ref, lut, off) for parts, lut, off in self.parts for ref in parts.get(key, ())]

    @staticmethod
    def _load(ref, lut, off):
        """One block's rows, string ids and collective-args rows remapped."""
        a = load_block(ref)
        for col in ("cat", "name"):
            m = a[col] >= 0
            a[col][m] = lut[a[col][m]]
        m = a["comm"] >= 0
        a["comm"][m] += off
        return a

    def blocks(self, key):
        """The key's rows block by block, ranges in file order, ids remapped."""
        for ref, lut, off in self._refs(key):
            yield self._load(ref, lut, off)

    def block_spans(self, key):
        """Per block, in ``blocks`` order: ``(rows, first_ts, last_end)`` int64 arrays
        (see ``streamtrace.events.store.MemoryStore.block_spans``)."""
        return span_arrays([(ref[1], ref[-2], ref[-1]) for ref, _, _ in self._refs(key)])

    def block(self, key, j):
        """Block ``j`` of ``key`` (as ``blocks`` gives it)."""
        return self._load(*self._refs(key)[j])

    def get(self, key):
        out = list(self.blocks(key))
        return np.concatenate(out) if out else np.zeros(0, STORE_DTYPE)

    def drop(self, key):
        """Release this key's blocks, and each spill file no key not dropped has a block in."""
        for parts, _, _ in self.parts:
            for path in {ref[4] for ref in parts.pop(key, ()) if ref[0] == "file"}:
                self.users[path] -= 1
                if not self.users[path]:
                    del self.users[path]
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def take(self, key):
        """``get``, then ``drop``."""
        out = self.get(key)
        self.drop(key)
        return out
