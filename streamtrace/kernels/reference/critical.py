"""Plain-Python twin of ``streamtrace.kernels.critical``: repeated relaxation of every edge
until nothing changes (Bellman-Ford order, no use of the topological numbering), and a
recursive walk for the latest times."""
from __future__ import annotations

import numpy as np

__all__ = ["longest_path_py", "longest_path_masked_py", "longest_path_sorted_py", "latest_times_py",
           "latest_times_masked_py", "latest_times_sorted_py", "trace_back_py",
           "path_edges_py", "reduce_local_py", "back_within_instant_py", "time_positions_py"]

NEG, POS = -(2 ** 62), 2 ** 62


def _check(n, src, dst):
    for u, v in zip(src.tolist(), dst.tolist()):
        if u >= v or u < 0 or v >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")


def longest_path_py(n, src, dst, w, init):
    """Twin of ``longest_path``: relax every edge, in index
    order, until no value changes; then each node's chosen in-edge is the largest
    ``(value, source node, -edge index)``, kept only when its value beats ``init``."""
    _check(n, src, dst)
    src, dst, w = src.tolist(), dst.tolist(), w.tolist()
    dist = [int(x) for x in init]
    changed = True
    while changed:
        changed = False
        for e, (u, v) in enumerate(zip(src, dst)):
            if dist[u] > NEG and dist[u] + w[e] > dist[v]:
                dist[v] = dist[u] + w[e]
                changed = True
    pred = []
    for v in range(n):
        cands = [(dist[u] + w[e], u, -e) for e, (u, x) in enumerate(zip(src, dst)) if x == v and dist[u] > NEG]
        top = max(cands) if cands else None
        pred.append(-top[2] if top is not None and top[0] > int(init[v]) else -1)
    origin = []
    for v in range(n):
        x = v
        while pred[x] >= 0:
            x = src[pred[x]]
        origin.append(x)
    return np.asarray(dist, np.int64), np.asarray(pred, np.int64), np.asarray(origin, np.int64)


def longest_path_masked_py(n, pos, src, dst, w, mask, x_src, x_dst, x_w, x_mask, init, window=None):
    """Twin of ``longest_path_masked``: the kept edges copied out (positions through ``pos``),
    ``longest_path_py`` over them, its edge indices mapped back to the ids ``e`` / ``E + x``; the
    distances written into ``init`` and returned as it, as the kernel does.  ``window`` (the
    kernel's memory bound) is not read: the answer does not depend on it."""
    pos = np.asarray(pos, np.int64)
    ids = np.r_[np.flatnonzero(mask), len(src) + np.flatnonzero(x_mask)].astype(np.int64)
    ks = np.r_[pos[np.asarray(src, np.int64)[mask]], pos[np.asarray(x_src, np.int64)[x_mask]]].astype(np.int64)
    kd = np.r_[pos[np.asarray(dst, np.int64)[mask]], pos[np.asarray(x_dst, np.int64)[x_mask]]].astype(np.int64)
    kw = np.r_[np.asarray(w, np.int64)[mask], np.asarray(x_w, np.int64)[x_mask]].astype(np.int64)
    dist, pred, _ = longest_path_py(n, ks, kd, kw, init)
    has = pred >= 0
    out = np.full(n, -1, np.int64)
    out[has] = ids[pred[has]]
    init[:] = dist
    return init, out


def longest_path_sorted_py(n, init, chunks, x):
    """Twin of ``longest_path_sorted`` over all its chunks at once: ``chunks`` a list of ``(ids, u, v,
    w, skip)`` (positions), ``x`` ``(ids, u, v, w)``; the edges not skipped, in any order,
    ``longest_path_py`` over them (positions as nodes), its chosen edges mapped back to their ids.
    Returns ``(dist, pred, psrc)`` by position (int64[n]): the earliest times as the kernel leaves them, each
    position's chosen edge and its source as the kernel writes them out (-1 none)."""
    ids, us, vs, ws = [], [], [], []
    for cid, cu, cv, cw, skip in chunks:
        keep = ~np.asarray(skip, bool)
        for a, b in zip((ids, us, vs, ws), (cid, cu, cv, cw)):
            a += np.asarray(b, np.int64)[keep].tolist()
    for a, b in zip((ids, us, vs, ws), x):
        a += np.asarray(b, np.int64).tolist()
    o = np.argsort(np.asarray(ids, np.int64), kind="stable")      # (id order: the twin's ties by index)
    ids, us, vs, ws = (np.asarray(a, np.int64)[o] for a in (ids, us, vs, ws))
    dist, pred, _ = longest_path_py(n, us, vs, ws, np.asarray(init, np.int64).copy())
    has = pred >= 0
    out, src = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    out[has], src[has] = ids[pred[has]], us[pred[has]]
    return dist, out, src


def latest_times_py(n, src, dst, w, deadline):
    """Twin of ``latest_times`` (memoised recursion over the
    out-edges)."""
    _check(n, src, dst)
    out = {}
    for e, u in enumerate(src.tolist()):
        out.setdefault(u, []).append(e)
    memo = {}

    def late(u):
        if u not in memo:
            vals = [int(deadline[u])]
            for e in out.get(u, []):
                lv = late(int(dst[e]))
                if lv < POS:
                    vals.append(lv - int(w[e]))
            memo[u] = min(vals)
        return memo[u]
    return np.asarray([late(u) for u in range(n)], np.int64)


def latest_times_masked_py(n, pos, src, dst, w, mask, deadline):
    """Twin of ``latest_times_masked``: ``latest_times_py`` over the kept edges copied out (their
    positions by ``pos``)."""
    pos, mask = np.asarray(pos, np.int64), np.asarray(mask, bool)
    return latest_times_py(n, pos[np.asarray(src, np.int64)[mask]], pos[np.asarray(dst, np.int64)[mask]],
                           np.asarray(w, np.int64)[mask], np.asarray(deadline, np.int64))


def latest_times_sorted_py(n, deadline, chunks):
    """Twin of ``latest_times_sorted`` over all its chunks at once: ``chunks`` a list of ``(u, v, w)``
    (positions, ns), in any order; ``latest_times_py`` over every edge (positions as nodes)."""
    us, vs, ws = ([int(x) for c in chunks for x in np.asarray(c[i]).tolist()] for i in range(3))
    a = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return latest_times_py(n, a(us), a(vs), a(ws), a(deadline).copy())


def trace_back_py(pred, src, end):
    """Twin of ``trace_back``."""
    edges = []
    v = end
    while v >= 0 and pred[v] >= 0:
        edges.append(int(pred[v]))
        v = int(src[pred[v]])
    return np.asarray(edges[::-1], np.int64)


def path_edges_py(pred, src, ends):
    """The distinct edges of the longest paths ending at ``ends`` (ascending): every walk of
    ``trace_back_py`` in full, then their union (``reduce_local_py`` marks its paths with it)."""
    edges = set()
    for v in ends:
        edges.update(trace_back_py(pred, src, int(v)).tolist())
    return np.asarray(sorted(edges), np.int64)


def back_within_instant_py(order, t, src, dst):
    """Twin of ``back_within_instant``: the edges back in ``order``, then whether any joins two
    nodes of one time."""
    place = {int(v): i for i, v in enumerate(np.asarray(order).tolist())}
    return any(place[int(u)] > place[int(v)] and int(t[u]) == int(t[v]) for u, v in zip(src, dst))


def reduce_local_py(t, order, src, dst, w, sources, sinks):
    """Twin of ``reduce_local``: the edges copied out at their positions without the backward ones,
    ``longest_path_py`` over them from ``sources`` at their times, ``path_edges_py`` from the reached
    sinks, the kept edges' indices mapped back."""
    n = len(t)
    pos = np.empty(n, np.int64)
    pos[np.asarray(order, np.int64)] = np.arange(n)
    ps, pd = pos[src], pos[dst]
    keep = np.flatnonzero(ps < pd)
    init = np.full(n, NEG, np.int64)
    init[pos[sources]] = np.asarray(t, np.int64)[sources]
    dist, pred, origin = longest_path_py(n, ps[keep], pd[keep], np.asarray(w, np.int64)[keep], init)
    at = pos[sinks]
    at = at[dist[at] > NEG]
    marked = path_edges_py(pred, ps[keep], at)
    return (pos, origin[at], at, dist[at] - init[origin[at]], keep[marked].astype(np.int64),
            int(len(src) - len(keep)))


def time_positions_py(t, cls, lo):
    """Twin of ``time_positions``: Python's sort of the node ids by ``(t, cls, id)``, then each id's
    place in it; the same refusals (a time below ``lo`` or 2^60 past it, a class outside ``[0, 8)``)."""
    t, cls = [int(x) for x in t], [int(x) for x in cls]
    if any(x < lo or x - lo >= 2 ** 60 for x in t) or any(c < 0 or c >= 8 for c in cls):
        raise ValueError("a time below lo or 2^60 past it, or a class outside [0, 8)")
    order = sorted(range(len(t)), key=lambda v: (t[v], cls[v], v))
    pos = [0] * len(t)
    for i, v in enumerate(order):
        pos[v] = i
    return np.array(pos, np.int32)
