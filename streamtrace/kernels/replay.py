"""The reduction of one rank's step graph for the what-if replay (numba; plain-Python twin in
``streamtrace.kernels.reference.replay``), for ``streamtrace.aggregate.whatif_local``.

The graph is ``n`` nodes numbered in topological order and E edges ``src[e] -> dst[e]`` (int64,
``src < dst``) of weight ``w[e]`` (int64 ns, >= 0) and category ``cat[e]`` (int8, ``0 <= cat <
ncat``).  Some nodes are *sources* (``is_src``: their time is given from outside the rank: the
step's start, a collective's end) and some *sinks* (``is_sink``: a collective's arrival, the step's
end); ``vend[a]`` names, for an arrival ``a``, the node of the same collective's end (-1 none): at
the job level that end never comes before its arrival (``end >= barrier >= arrival``).

For every source ``o`` and every sink or other source ``v``, ``L(o, v)`` is the longest path from
``o`` to ``v`` that passes through no other source (a source's successors are reached from that
source's own time).  The pair is kept only when it is not *dominated*: when no path that hops from
an arrival to its end (a virtual edge of weight 0, standing for the collective) or through another
source is at least as long.  Any replay that keeps each end at or after its arrival then gives
every node the same earliest time from the kept pairs as from the whole graph (the forward pass of
the critical-path method, Kelley & Walker 1959, composed at the job level), whatever the
collectives' and the other ranks' times are.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["NEG", "anchor_pairs"]

NEG = -(2 ** 62)


@njit(cache=True)
def _record(pairs, cats, k, o, hits, d0, pred, src, w, cat):
    """Rows ``k``.. of ``pairs`` / ``cats`` (grown as needed) for the kept targets ``hits`` of
    source ``o``: each path walked back along ``pred`` (``d0`` its length).  Returns ``(pairs, cats,
    k)``.  (Apart from the sweep: a loop that reassigns arrays pays numba's reference counting on
    every iteration.)"""
    need = k + hits.shape[0]
    if need > pairs.shape[0]:
        size = max(need, 2 * pairs.shape[0])
        grown = np.zeros((size, 4), np.int64)
        wider = np.zeros((size, cats.shape[1]), np.int64)
        for r in range(k):              # (loops: 2-d slice assignments cost seconds to compile)
            for c in range(4):
                grown[r, c] = pairs[r, c]
            for c in range(cats.shape[1]):
                wider[r, c] = cats[r, c]
        pairs, cats = grown, wider
    for i in range(hits.shape[0]):
        u = hits[i]
        pairs[k, 0] = o
        pairs[k, 1] = u
        pairs[k, 2] = d0[u]
        top, x = -1, u
        while x != o:
            e = pred[x]
            cats[k, cat[e]] += w[e]
            if top < 0 or w[e] > w[top]:
                top = e
            x = src[e]
        pairs[k, 3] = top
        k += 1
    return pairs, cats, k


@njit(cache=True)
def anchor_pairs(n, src, dst, w, cat, is_src, is_sink, vend, ncat):
    """The kept pairs of the module docstring.  ``is_src`` / ``is_sink``: int8[n] (0/1);
    ``vend``: int64[n]; ``ncat``: the number of categories.

    Returns ``(pairs, cats)``: ``pairs`` int64[k, 4] rows ``(o, v, L(o, v), heaviest edge on the
    path)`` ordered by ``o`` then ``v``; ``cats`` int64[k, ncat]: the path's weight by category
    (each row sums to ``L``).  Among paths of equal length the one whose last edge leaves the
    earliest node (then has the lowest index) is the one described.  Each source's sweep stops
    after the last node a direct path still reaches: a direct length no longer than the hopping one
    at a node is dropped there (every direct path on through it is dominated too, so no kept pair
    changes).  O(S (n + E) + E log E) for S sources at worst.  Raises ValueError when an edge has
    ``src >= dst``, a node out of range, a negative weight or a category out of range."""
    m = src.shape[0]
    for e in range(m):
        if src[e] >= dst[e] or src[e] < 0 or dst[e] >= n or w[e] < 0 or cat[e] < 0 or cat[e] >= ncat:
            raise ValueError("edge not in topological order, node or category out of range, or negative weight")
    first = np.zeros(n + 1, np.int64)
    for e in range(m):
        first[src[e] + 1] += 1
    for v in range(n):
        first[v + 1] += first[v]
    order = np.empty(m, np.int64)                   # the edges by source, stably (a counting sort)
    fill = first[:n].copy()
    for e in range(m):
        order[fill[src[e]]] = e
        fill[src[e]] += 1
    dst_o = np.empty(m, np.int64)                   # destinations and weights in that order: a sweep reads
    w_o = np.empty(m, np.int64)                     # them in sequence, not through ``order``
    for j in range(m):
        dst_o[j] = dst[order[j]]
        w_o[j] = w[order[j]]
    d0 = np.full(n, NEG, np.int64)
    d1 = np.full(n, NEG, np.int64)
    pred = np.full(n, -1, np.int64)
    hits = np.empty(n, np.int64)                    # a source's kept targets, in node order
    pairs = np.zeros((16, 4), np.int64)
    cats = np.zeros((16, ncat), np.int64)
    k = np.int64(0)         # (typed: a literal 0 would compile _record once more)
    for o in range(n):
        if is_src[o] == 0:
            continue
        d0[o:] = NEG
        d1[o:] = NEG
        pred[o:] = -1
        d0[o] = 0
        nh = 0
        hi = o                                      # the last node a direct path reaches so far
        for u in range(o, n):
            if u > hi:
                break
            a0, a1 = d0[u], d1[u]
            if a0 <= NEG and a1 <= NEG:
                continue
            other = u != o and is_src[u] != 0
            if u != o and (is_sink[u] != 0 or other) and a0 > NEG and a0 > a1:
                hits[nh] = u
                nh += 1
            b1 = max(a0, a1)
            if other or (u != o and a0 <= a1):      # a path on from another source is that source's own
                a0 = NEG                            # (only as a hop); a dominated one stays dominated
            if vend[u] > u:
                if b1 > d1[vend[u]]:
                    d1[vend[u]] = b1
            for j in range(first[u], first[u + 1]):
                v = dst_o[j]
                if a0 > NEG:
                    val = a0 + w_o[j]
                    if val > d0[v]:
                        d0[v] = val
                        pred[v] = order[j]
                        hi = max(hi, v)
                if other and b1 > NEG:
                    val = b1 + w_o[j]
                elif a1 > NEG:
                    val = a1 + w_o[j]
                else:
                    continue
                if val > d1[v]:
                    d1[v] = val
        if nh:
            pairs, cats, k = _record(pairs, cats, k, o, hits[:nh], d0, pred, src, w, cat)
    return pairs[:k], cats[:k]
