"""The critical path's segments (``streamtrace.aggregate.critical_path``): the path's job-level edges
expanded back into the local segments they stand for (each rank's reduced edge into the chain of its
step graph's edges the rank's worker spilled, ``critical_local.read_segments``; a wait or a transfer into
one segment of its own), the rows of ``critical_path.parquet``."""
from __future__ import annotations

import numpy as np

from ..kernels.critical import trace_back
from .critical_graph import Category, Edge
from .critical_local import read_segments

LOCAL, TRANSFER = Edge.local, Edge.transfer
SEGMENTS = ("rank", "lane", "t0", "t1", "w", "cat", "name", "ref")
"""The columns of a step's path segments (``segments``), as ``critical_ranks`` reads them."""
DTYPES = {"lane": object, "name": object, "cat": np.int8}
"""Their types but int64."""


class _Spill:
    """One part's spilled path segments (``part_paths``), read
    once (``read_segments``): its columns as numpy and each node's in-edge row (its last row, as a dict built
    in row order would), walked back by ``streamtrace.kernels.critical.trace_back`` (made on the first walk)."""

    def __init__(self, rec):
        self.num = read_segments(rec)          # (rec: the part's spill record, ``write_segments``)
        self.into: np.ndarray | None = None

    def _into(self) -> np.ndarray:
        dst, src = self.num["dst"], self.num["src"]
        r = np.arange(len(dst))[::-1]
        keys, first = np.unique(dst[r], return_index=True)
        ok = keys >= 0
        keys, rows = keys[ok], r[first][ok]
        top = max(int(dst.max()) if len(dst) else -1, int(src.max()) if len(src) else -1)
        into = np.full(top + 1, -1, np.int64)          # (every node a row names: the walk indexes them all)
        into[keys] = rows
        return into

    def chain(self, x: int, stop: int) -> np.ndarray:
        """The rows of the in-edges from node ``stop`` (or from a node with none) on to node ``x``, in
        path order (int64): the tree walked back from ``x``, cut at ``stop`` for the walk."""
        if self.into is None:
            self.into = self._into()
        into = self.into
        if x == stop or not 0 <= x < len(into):
            return np.zeros(0, np.int64)
        cut = 0 <= stop < len(into)
        if cut:
            saved, into[stop] = into[stop], -1
        try:
            return trace_back(into, self.num["src"], x)
        finally:
            if cut:
                into[stop] = saved

    def columns_of(self, rank: int, js) -> dict:
        """Segment columns (``SEGMENTS``) of rows ``js`` (int64 array)."""
        num = self.num
        return {"rank": np.full(len(js), rank, np.int64), "lane": num["lane"][js], "t0": num["t0"][js],
                "t1": num["t1"][js], "w": num["w"][js], "cat": num["cat"][js],
                "name": num["name"][js], "ref": num["ref"][js]}


def _one_segment(rank, lane, t0, t1, w, cat, name, ref) -> dict:
    """One segment row as ``SEGMENTS`` columns of length 1."""
    obj = lambda x: np.asarray([x], object)  # noqa: E731
    i64 = lambda x: np.asarray([x], np.int64)  # noqa: E731
    return {"rank": i64(rank), "lane": obj(lane), "t0": i64(t0), "t1": i64(t1), "w": i64(w),
            "cat": np.asarray([cat], np.int8), "name": obj(name), "ref": i64(ref)}


def segments(g, solved, spills: dict, rank_of: dict, cache: dict | None = None) -> dict:
    """The path's job edges (``solved``, a ``critical_path.Solved`` of the ``JobGraph`` ``g``) expanded into
    segment columns (``SEGMENTS``: ``rank``, ``lane``,
    ``t0``, ``t1``, ``w``, ``cat``, ``name``, ``ref``; int64 but ``cat`` (int8 ``Category`` codes) and the
    object columns of str ``lane`` and ``name``), in path order, without
    the segments of no length and no weight; ``cache``: ``{part: _Spill}`` kept across the steps (each
    part's spill read once)."""
    pieces = []
    cache = {} if cache is None else cache
    for e, u, v, w in zip(*(x.tolist() for x in (solved.path, solved.src, solved.dst, solved.w))):
        typ = int(g.etype[e])
        if typ == LOCAL:
            p = int(g.part[u])
            if p not in cache:
                cache[p] = _Spill(spills[p])
            sp = cache[p]
            pieces.append(sp.columns_of(rank_of[p], sp.chain(int(g.local[v]), int(g.local[u]))))
        else:
            end = v if typ == TRANSFER else u
            p = int(g.part[end])
            cat = Category.comm_transfer if typ == TRANSFER else Category.wait
            pieces.append(_one_segment(rank_of[p], g.texts[g.lane[end]], int(g.t[u]), int(g.t[v]),
                                       w if typ == TRANSFER else 0, cat, g.texts[g.name[end]],
                                       int(g.corr[end])))
    if not pieces:
        return {c: np.zeros(0, DTYPES.get(c, np.int64)) for c in SEGMENTS}
    segs = {c: np.concatenate([x[c] for x in pieces]) for c in SEGMENTS}
    keep = (segs["t1"] > segs["t0"]) | (segs["w"] != 0)
    return segs if keep.all() else {c: v[keep] for c, v in segs.items()}
