"""A job-level step graph's edges on disk, for the what-if replay's graph
(``streamtrace.aggregate.whatif_job.JobStep``): appended in id order as the graph is built
(``EdgeFile.append``: the ranks' reduced edges a chunk at a time, then the collectives'), then the edges
that run forward in the graph's topological positions written again in order of destination position,
then id (``EdgeFile.sort``), the order ``kernels.critical.longest_path_sorted`` takes them in; a forward
pass reads them back a chunk at a time (``EdgeFile.chunks``) and writes each position's chosen in-edge out
as it leaves it (``Chosen``), so that only the earliest times are held by position.

Why: a step of 4,096 synthetic ranks has 5.1 M edges; their source, destination and weight held in
memory were ~61 MB of the replay's process (the epilogue's largest at that size), and their joins
another ~100 MB under its build.  On disk the process holds a chunk (``CHUNK_EDGES`` edges) and one
bucket of the sort; the files are read through the page cache, not mapped (a mapped file's pages count
in the process's RSS as it reads them).  A graph of at most ``MEMORY_EDGES`` edges stays in memory (the
same records, no file: the 8 x A100 job's ~150 small step graphs each wrote ~35 files, +7 % of aggregate's
CPU).
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

from ..kernels.critical import latest_times_sorted, longest_path_sorted
from . import job_nodes
from .job_nodes import NodeColumn

RAW = np.dtype([("src", "<i4"), ("dst", "<i4"), ("w", "<i8")])
"""An edge in id order: its source and destination node ids and weight (ns)."""
SORTED = np.dtype([("id", "<i4"), ("u", "<i4"), ("v", "<i4"), ("part", "<i4"), ("w", "<i8")])
"""A kept edge in order of destination position: its id, source and destination positions, the part of a
rank's own edge (-1: a collective's) and weight (ns)."""
CHUNK_EDGES = 1 << 15
"""Edges a pass reads or writes at once (0.7 MB of ``SORTED`` records, as much again as columns, and the
rows the pass writes out: a pass's temporaries beside its arrays by node; 2^18 held ~20 MB more at the
replay's peak, 4,096 synthetic ranks, for no measurable time, and 2^16 ~2.5 MB more than 2^15)."""
MEMORY_EDGES = 1 << 18
"""The most edges an ``EdgeFile`` holds in memory (6 MB of ``SORTED`` records); past it, on disk."""
_MAX_ID = int(np.iinfo(np.int32).max)
BUCKETS = 32
"""Buckets of destination positions ``sort`` distributes the kept edges into, each sorted in memory
(a 32nd of a 4,096-rank step's edges: ~3.8 MB)."""


class EdgeFile:
    """A graph's edges, in memory while they are at most ``MEMORY_EDGES``, else in a folder of their own
    (made in ``folder``, the system's temporary folder when None; removed by ``close`` or when the object
    is collected).  ``n`` edges appended; after ``sort``: ``n_kept`` kept, and per part (int64 arrays
    indexed by part) ``local`` the rank's own edges (ids below ``t_first``) and ``local_kept`` those kept.
    ``dir`` is None while nothing went to disk."""

    def __init__(self, folder=None):
        self.folder, self.dir, self._done = folder, None, None
        self.n, self.n_kept = 0, 0
        self.local = self.local_kept = np.zeros(0, np.int64)
        self._f = None
        self._held: list | None = []                   # (RAW records while in memory; None once on disk)
        self._sorted = None                             # (the sorted records, when in memory)

    def _to_disk(self):
        """Make the folder and write the held records to its ``raw`` file (once)."""
        self.dir = Path(tempfile.mkdtemp(prefix=".job-edges.", dir=self.folder))
        self._done = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self._f = open(self.dir / "raw", "wb")
        for rec in self._held:
            rec.tofile(self._f)
        self._held = None

    def append(self, src, dst, w):
        """Append edges ``src -> dst`` (node ids, < 2^31; ValueError past it, or past 2^31 - 1 edges: the
        records' ids are int32) of weights ``w`` (ns), numbered on from ``n``; written
        ``CHUNK_EDGES`` at a time (the records of a chunk held, not of all: the collectives' 1.3 M edges at
        4,096 synthetic ranks were 21 MB)."""
        for i in range(0, len(w), CHUNK_EDGES):
            j = slice(i, i + CHUNK_EDGES)
            self._append(src[j], dst[j], w[j])

    def _append(self, src, dst, w):
        if self.n + len(w) > _MAX_ID or (len(w) and max(int(np.max(src)), int(np.max(dst))) > _MAX_ID):
            raise ValueError("a job graph of more than 2^31 - 1 edges or nodes")   # (its int32 ids)
        rec = np.empty(len(w), RAW)
        rec["src"], rec["dst"], rec["w"] = src, dst, w
        self.n += len(rec)
        if self._held is not None and self.n > MEMORY_EDGES:
            self._to_disk()
        if self._held is not None:
            self._held.append(rec)
        else:
            rec.tofile(self._f)

    def raw_chunks(self, rows: int | None = None):
        """``(first id, RAW records)`` of the edges in id order, ``rows`` (``CHUNK_EDGES``) at a time."""
        rows = rows or CHUNK_EDGES
        if self._held is not None:
            every = self._every()
            for at in range(0, self.n, rows):
                yield at, every[at:at + rows]
            return
        self._closed()
        with open(self.dir / "raw", "rb") as f:
            at = 0
            while at < self.n:
                rec = np.fromfile(f, RAW, min(rows, self.n - at))
                yield at, rec
                at += len(rec)

    def _every(self) -> np.ndarray:
        """The held records joined (in memory)."""
        if len(self._held) != 1:
            self._held = [np.concatenate(self._held) if self._held else np.zeros(0, RAW)]
        return self._held[0]

    def load(self) -> tuple:
        """Every edge's ``(src, dst)`` (int32) and ``w`` (int64), in id order: for a topological order
        that needs the whole graph (``whatif_job._kahn``)."""
        src, dst, w = np.empty(self.n, np.int32), np.empty(self.n, np.int32), np.empty(self.n, np.int64)
        for at, rec in self.raw_chunks():
            j = slice(at, at + len(rec))
            src[j], dst[j], w[j] = rec["src"], rec["dst"], rec["w"]
        return src, dst, w

    def backward(self, pos) -> bool:
        """Does an edge run backwards (or stand still) in the positions ``pos`` (by node)?"""
        return any(bool((pos[rec["src"]] >= pos[rec["dst"]]).any()) for _, rec in self.raw_chunks())

    def sort(self, pos, part=None, t_first: int = 0, drop_parts=None):
        """Write the edges that run forward in ``pos`` (by node) in order of destination position, then id
        (``SORTED``); an edge with id below ``t_first`` is its rank's own (``part`` of its source: ``part``
        by node; None: no edge is, ``t_first`` 0), and with ``drop_parts`` (part indices) those of these parts
        are left out.  Counts ``n_kept``, ``local`` and ``local_kept``.  On disk, two passes: the kept edges
        into ``BUCKETS`` files by destination position, then each file sorted (stable: ids ascend within a
        position) and appended; in memory, one stable sort.  Sorting again (other positions) replaces the
        order."""
        n_nodes = len(pos)
        if part is None:
            part, t_first = np.zeros(0, np.int32), 0
        nparts = int(part.max()) + 1 if len(part) else 0
        local, kept_local = np.zeros(nparts, np.int64), np.zeros(nparts, np.int64)
        drop = np.zeros(nparts + 1, bool)                 # (the last: part -1, a collective's edge, never dropped)
        if drop_parts is not None and len(drop_parts):
            d = np.asarray(drop_parts, np.int64)
            drop[d[(d >= 0) & (d < nparts)]] = True      # (a part with no node has no edge)
        if self._held is not None:                        # (in memory: one sort, no buckets)
            rec = self._kept((0, self._every()), pos, part, t_first, drop, local, kept_local)
            self._sorted = rec[np.argsort(rec["v"], kind="stable")]
            self.n_kept = len(rec)
            self.local, self.local_kept = local, kept_local
            return
        paths = [self.dir / f"bucket-{b:02d}" for b in range(BUCKETS)]
        files = [open(p, "wb") for p in paths]
        try:
            for at, rec in self.raw_chunks():
                out = self._kept((at, rec), pos, part, t_first, drop, local, kept_local)
                b = (out["v"].astype(np.int64) * BUCKETS) // max(n_nodes, 1)
                o = np.argsort(b, kind="stable")
                cut = np.searchsorted(b[o], np.arange(BUCKETS + 1))
                for k in np.flatnonzero(np.diff(cut)).tolist():
                    out[o[cut[k]:cut[k + 1]]].tofile(files[k])
        finally:
            for f in files:
                f.close()
        self.n_kept = 0
        with open(self.dir / "sorted", "wb") as f:
            for path in paths:
                rec = np.fromfile(path, SORTED)
                path.unlink()
                rec[np.argsort(rec["v"], kind="stable")].tofile(f)
                self.n_kept += len(rec)
        self.local, self.local_kept = local, kept_local

    @staticmethod
    def _kept(chunk, pos, part, t_first, drop, local, kept_local) -> np.ndarray:
        """``sort``'s records (``SORTED``) of the kept edges of ``chunk`` ``(first id, RAW records)``, the
        rank's own edges counted into ``local`` / ``kept_local`` (by part, in place)."""
        at, rec = chunk
        ids = np.arange(at, at + len(rec), dtype=np.int32)
        u, v = pos[rec["src"]], pos[rec["dst"]]
        p = np.full(len(rec), -1, np.int32)
        if t_first > at:
            own = ids < t_first
            p[own] = part[rec["src"][own]]
        local += np.bincount(p[p >= 0], minlength=len(local))
        keep = (u < v) & ~drop[p]
        kept_local += np.bincount(p[keep & (p >= 0)], minlength=len(local))
        out = np.empty(int(keep.sum()), SORTED)
        for c, x in zip(SORTED.names, (ids, u, v, p, rec["w"])):
            out[c] = x[keep]
        return out

    def chunks(self, rows: int | None = None, reverse: bool = False):
        """The kept edges in order of destination position, then id (``reverse``: the other way, last
        first), ``rows`` (``CHUNK_EDGES``) at a time: ``(ids, u, v, part, w)`` contiguous arrays (int32 but
        ``w`` int64)."""
        rows = rows or CHUNK_EDGES
        starts = range(0, self.n_kept, rows)
        starts = reversed(starts) if reverse else starts
        step = -1 if reverse else 1
        f = None if self._sorted is not None else open(self.dir / "sorted", "rb")
        try:
            for i in starts:
                if f is None:
                    rec = self._sorted[i:i + rows][::step]
                else:
                    f.seek(i * SORTED.itemsize)
                    rec = np.fromfile(f, SORTED, min(rows, self.n_kept - i))[::step]
                cols = tuple(np.ascontiguousarray(rec[c]) for c in SORTED.names)
                del rec                                 # (not held while the caller reads the columns)
                yield cols
        finally:
            if f is not None:
                f.close()

    def forward_pass(self, dist, over=None, drop=None, extra=None) -> "Chosen":
        """``kernels.critical.longest_path_sorted`` over the kept edges' chunks (after ``sort``): ``dist``
        (int64[n] by position, each node's own value, ``NEG`` none) updated in place; ``over`` ``(ids
        ascending, ns)`` weights that replace the edges' own as read (None: as written); ``drop`` bool by
        part, one more for -1 (a collective's edge: False), whose own edges are skipped (None: none);
        ``extra`` ``(ids, u, v, w)`` edges merged in (``longest_path_sorted``'s ``x``; None: none).
        Returns each position's chosen in-edge as the pass writes them out (``Chosen``: on disk, in
        ``folder``, when the graph's edges are), which the caller closes."""
        at = np.zeros(1, np.int64)
        tie = np.full(3, -1, np.int64)
        none = np.zeros(0, np.int32)
        x = extra if extra is not None else (none, none, none, np.zeros(0, np.int64))
        chosen = Chosen(len(dist), self.folder)
        try:
            for ids, u, v, part, w in self.chunks():
                _override(w, ids, over)
                skip = drop[part] if drop is not None else np.zeros(len(ids), bool)
                chosen.add(*_pass_chunk(dist, tie, at, (ids, u, v, w, skip), x, False))
            chosen.add(*_pass_chunk(dist, tie, at, (none, none, none, np.zeros(0, np.int64), np.zeros(0, bool)), x,
                                    True))
        except BaseException:
            chosen.close()
            raise
        return chosen

    def latest_pass(self, late, over=None):
        """``kernels.critical.latest_times_sorted`` over the kept edges' chunks read last first (after
        ``sort``): ``late`` (int64[n] by position, each node's own deadline, ``POS`` none) updated in place to
        each node's latest time (the critical-path method's backward pass); ``over`` as ``forward_pass``'s."""
        for ids, u, v, _, w in self.chunks(reverse=True):
            _override(w, ids, over)
            latest_times_sorted(late, u, v, w)

    def _closed(self):
        if self._f is not None:
            self._f.close()
            self._f = None

    def close(self):
        """Remove the folder and its files (or let the held records go)."""
        self._closed()
        self._held = self._sorted = None
        if self._done is not None:
            self._done()


def _override(w, ids, over):
    """``w[i] = `` the weight ``over`` ``(ids ascending, ns)`` gives edge ``ids[i]``, where it gives one (in
    place; ``over`` None: nothing)."""
    if over is None or not len(over[0]):
        return
    k = np.minimum(np.searchsorted(over[0], ids), len(over[0]) - 1)
    hit = over[0][k] == ids
    w[hit] = over[1][k[hit]]


def _pass_chunk(dist, tie, at, chunk, x, flush) -> tuple:
    """``longest_path_sorted`` of one chunk ``(ids, u, v, w, skip)`` and the extra edges ``x``: the
    positions, edge ids and sources it wrote out (int32 arrays, ascending positions).  Its outputs are as
    long as what it may write: a destination for each edge it may take (a chunk's own and the extra edges
    before its last destination; every extra edge left when ``flush``) and the one it leaves open (a
    job-wide change's extra edges, every rank's, were 12 MB of outputs per chunk)."""
    v = chunk[2]
    left = len(x[0]) if flush or not len(v) else int(np.searchsorted(x[2], v[-1]))
    k = len(v) + max(left - int(at[0]), 0) + 1
    out = np.empty(k, np.int32), np.empty(k, np.int32), np.empty(k, np.int32)
    m = longest_path_sorted(dist, tie, at, *chunk, *x, flush, *out)
    return tuple(o[:m] for o in out)


GAP_ROWS = 1 << 16
"""Positions ``Chosen.add`` writes at once (0.5 MB of int64)."""


class Chosen:
    """Each position's chosen in-edge of a forward pass (``EdgeFile.forward_pass``), written out as
    the pass leaves each destination: the edge's id and source position packed as ``id << 32 | source``
    (int64, -1 none) in a ``job_nodes.NodeColumn`` by position: in memory for a graph of at most
    ``job_nodes.MEMORY_ROWS`` positions ``n``, else in an unnamed file in ``folder`` (the system's temporary
    folder when None) from the first.  ``path`` reads back the few positions a path has.

    Why: the predecessors and their sources by position (int32 each) were 12 MB of the what-if replay's
    process under every forward pass at 4,096 synthetic ranks (1.5 M positions), its peak."""

    def __init__(self, n: int, folder=None):
        self.n = n
        self._col = NodeColumn(np.int64, folder, on_disk=n > job_nodes.MEMORY_ROWS)    # (a large graph's:
        #                                       to disk from its first chunk, not held up to MEMORY_ROWS first)

    def add(self, pos, e, src):
        """The chosen edges ``e`` (ids) and their sources ``src`` of positions ``pos`` (int arrays;
        ascending, each above those added before; ValueError otherwise); the positions between, none."""
        if not len(pos):
            return
        first, last = int(pos[0]), int(pos[-1]) + 1
        if first < len(self._col) or (len(pos) > 1 and not (pos[1:] > pos[:-1]).all()):
            raise ValueError("Chosen.add: positions not ascending")
        packed = (np.asarray(e, np.int64) << 32) | np.asarray(src, np.int64)
        while len(self._col) < first:
            self._col.append(np.full(min(GAP_ROWS, first - len(self._col)), -1, np.int64))
        for lo in range(first, last, GAP_ROWS):
            a, b = np.searchsorted(pos, [lo, lo + GAP_ROWS]).tolist()
            block = np.full(min(GAP_ROWS, last - lo), -1, np.int64)
            block[np.asarray(pos[a:b], np.int64) - lo] = packed[a:b]
            self._col.append(block)

    def edge(self, v: int) -> tuple | None:
        """``(edge id, source position)`` chosen into position ``v``, None when none is."""
        if not 0 <= v < len(self._col):
            return None
        x = int(self._col[v])
        return None if x < 0 else (x >> 32, x & 0xFFFFFFFF)

    def path(self, end: int) -> list:
        """The longest path to position ``end`` as ``(edge id, source position, destination position)``,
        first to last, walked back through the chosen edges (at most ``n`` steps)."""
        out, v = [], int(end)
        while len(out) < self.n:
            got = self.edge(v)
            if got is None:
                break
            out.append((got[0], got[1], v))
            v = got[1]
        return out[::-1]

    def close(self):
        """Let the values go (and the file)."""
        self._col.close()


def nodes_at(pos, positions) -> dict:
    """``{position: node}`` of ``positions`` under ``pos`` (by node; one flag a node, not an inverse of
    ``pos``)."""
    mark = np.zeros(len(pos), bool)
    mark[np.asarray(positions, np.int64)] = True
    nodes = np.flatnonzero(mark[pos])
    return dict(zip(pos[nodes].tolist(), nodes.tolist()))
