"""Longest path and slack over a DAG whose nodes are numbered in topological order (numba;
plain-Python twin in ``streamtrace.kernels.reference.critical``), for the critical path of
``streamtrace.aggregate.critical_path``.

The graph is ``n`` nodes and E edges given as three int64 arrays ``src``, ``dst``, ``w`` (edge e
runs ``src[e] -> dst[e]`` with weight ``w[e]``, int64 ns); every edge must satisfy
``src[e] < dst[e]`` (the node numbering is a topological order), edges may come in any order and
may repeat.  This is the classic critical-path method (Kelley & Walker, 1959): a forward pass gives
each node's earliest time (the longest path reaching it), a backward pass its latest time (the
latest it may happen without delaying the given deadlines); slack = latest - earliest.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache
from .sentinels import NEG, POS

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["NEG", "POS", "EDGE_WINDOW", "longest_path", "longest_path_masked", "longest_path_sorted", "latest_times",
           "latest_times_masked", "latest_times_sorted",
           "trace_back", "reduce_local", "back_within_instant", "time_positions", "TIME_DIGIT_BITS"]


_MAX_INT32 = 2147483647
WINDOW_BUCKETS = 255
"""``longest_path_masked``'s buckets of destination positions (a byte an edge: 0 .. 254, 255 masked)."""
EDGE_WINDOW = 1 << 20
"""The kept edges ``longest_path_masked`` orders at once, as its callers pass it (4 MiB of int32 ids)."""


@njit(cache=True)
def _stable_order(key, n, descending):
    """The indices of ``key`` (int64[m], each in ``[0, n)``) ordered by key (``descending`` or
    not), equal keys in index order: ``np.argsort(key or -key, kind="mergesort")`` as a counting
    sort, O(m + n).  int32 (half an int64 order's memory: 5 M edges at 4,096 synthetic ranks);
    raises ValueError past 2^31 - 1 keys."""
    m = key.shape[0]
    if m > _MAX_INT32:
        raise ValueError("more than 2^31 - 1 edges")
    fill = np.zeros(n + 1, np.int64)
    for e in range(m):
        fill[(n - 1 - key[e] if descending else key[e]) + 1] += 1
    for v in range(n):
        fill[v + 1] += fill[v]
    order = np.empty(m, np.int32)
    for e in range(m):
        b = n - 1 - key[e] if descending else key[e]
        order[fill[b]] = e
        fill[b] += 1
    return order


@njit(cache=True)
def longest_path(n, src, dst, w, init):
    """Forward pass.  ``init`` (int64[n]): a node's own earliest value (its start time when it is a
    source), ``NEG`` when it has none.  ``dist[v]`` = max(``init[v]``, max over in-edges e of
    ``dist[src[e]] + w[e]`` where ``dist[src[e]]`` > NEG): the longest path reaching v.

    Returns ``(dist, pred, origin)``, int64[n] each: ``pred[v]`` the in-edge achieving ``dist[v]``
    (-1 when ``init[v]`` is at least as large as every edge's value, or v is unreached); among
    edges of equal value the one with the larger source node, then the lower edge index.
    ``origin[v]`` the node where that path begins (v itself when ``pred[v]`` = -1).
    O(E + n).  Raises ValueError when an edge has ``src >= dst`` or a node out of range."""
    m = src.shape[0]
    for e in range(m):
        if src[e] >= dst[e] or src[e] < 0 or dst[e] >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
    order = _stable_order(dst, n, np.bool_(False))     # (typed: a literal is a compile of its own)
    dist = init.copy()
    pred = np.full(n, -1, np.int64)
    origin = np.arange(n).astype(np.int64)
    for k in range(m):
        e = order[k]
        u, v = src[e], dst[e]
        if dist[u] <= NEG:
            continue
        val = dist[u] + w[e]
        p = pred[v]
        if val > dist[v] or (val == dist[v] and p >= 0 and (u > src[p] or (u == src[p] and e < p))):
            dist[v] = val
            pred[v] = e
            origin[v] = origin[u]
    return dist, pred, origin


@njit(cache=True)
def _windows(count, window):
    """The windows of ``longest_path_masked``: consecutive buckets (``count[b + 1]`` kept edges into
    bucket ``b``, int64[B + 1], ``count[0]`` 0) joined while they hold at most ``window`` edges (a
    bucket past it alone).  Returns the first bucket of each window and one past the last, int64[W + 1]."""
    nbk = count.shape[0] - 1
    out = np.empty(nbk + 1, np.int64)
    out[0] = 0
    k, held = 0, 0
    for b in range(nbk):
        c = count[b + 1]
        if held > 0 and held + c > window:
            k += 1
            out[k] = b
            held = 0
        held += c
    out[k + 1] = nbk
    return out[:k + 2]


@njit(cache=True)
def longest_path_masked(n, pos, src, dst, w, mask, x_src, x_dst, x_w, x_mask, init, window):
    """``longest_path`` over the edges a graph holds in place, without copying them: the edges
    ``e`` of ``(src, dst, w)`` (int32[E] node ids, int32 or int64[E] ns: the weights are added to int64
    distances) with ``mask[e]`` (bool[E]), then
    the extra edges ``x`` of ``(x_src, x_dst, x_w)`` (int64[X]) with ``x_mask[x]``, every node id
    mapped to its topological position by ``pos`` (int32 as ``aggregate.critical_graph.positions``
    makes them, or int64: the positions ``0 .. n - 1``).  An edge's id is ``e``, or ``E + x`` for an
    extra one.

    The same answer as ``longest_path(n, ks, kd, kw, init)`` over the kept edges copied out
    (``ks = pos[src[mask]]`` followed by ``pos[x_src[x_mask]]``, and so on): the edges taken in
    the same order, ties broken the same way (ids grow with the copies' indices).  Returns ``(dist,
    pred)`` by position: ``dist`` int64[n] as ``longest_path``'s, ``pred[v]`` the id of the chosen
    in-edge (-1 none), int32[n] (half the memory of int64 ids: 2.3 M nodes in a step of 4,096
    synthetic ranks); its source position is ``pos[src[pred[v]]]`` (or ``x_src``'s), read there when
    a tie needs it, not held per node (6 MB at 1.5 M nodes).  ``init`` is written in
    place: the ``dist`` returned is that array (no copy of n values; a caller that needs ``init``
    again passes a copy), left as it was when ValueError is raised.

    The kept edges are taken in order of destination position (then id), a window of positions at a
    time: consecutive buckets of positions (``WINDOW_BUCKETS`` of them, a byte an edge says its
    bucket) holding at most ``window`` (>= 1) kept edges, or one bucket that holds more.  The order
    held is a window's, not every kept edge's: the what-if replay's step of 4,096 synthetic ranks (5.1 M
    edges, 1.5 M nodes) held 20 MB of int32 ids and 6 MB of counts by node at once, with
    ``EDGE_WINDOW`` ~4 MB, 1.2 MB and the 5 MB of buckets, for ~25 % more time in the pass (each window
    reads the buckets twice).  The answer does not depend on ``window``.  Memory O(E bytes + window +
    n / windows); the edges themselves are not copied.  Raises ValueError when a kept edge runs
    backwards or out of range, or past 2^31 - 1 edges or nodes.
    """
    if n > _MAX_INT32:
        raise ValueError("more than 2^31 - 1 nodes")
    nb, nx = src.shape[0], x_src.shape[0]
    if nb + nx > _MAX_INT32:
        raise ValueError("more than 2^31 - 1 edges")
    nbk = max(1, min(n, WINDOW_BUCKETS))
    count = np.zeros(nbk + 1, np.int64)
    bucket = np.empty(nb + nx, np.uint8)            # each edge's bucket of destination positions (255: masked)
    for e in range(nb + nx):                        # check the kept edges, count them by bucket
        if e < nb:
            if not mask[e]:
                bucket[e] = 255
                continue
            u, v = pos[src[e]], pos[dst[e]]
        else:
            if not x_mask[e - nb]:
                bucket[e] = 255
                continue
            u, v = pos[x_src[e - nb]], pos[x_dst[e - nb]]
        if u >= v or u < 0 or v >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
        b = (v * nbk) // n
        bucket[e] = b
        count[b + 1] += 1
    bounds = _windows(count, max(1, window))
    most, span = 0, 0
    for b in range(nbk):
        count[b + 1] += count[b]
    for k in range(bounds.shape[0] - 1):
        b0, b1 = bounds[k], bounds[k + 1]
        most = max(most, count[b1] - count[b0])
        span = max(span, (b1 * n + nbk - 1) // nbk - (b0 * n + nbk - 1) // nbk)
    order = np.empty(most, np.int32)                # (a window's kept edges by destination, stable)
    fill = np.empty(span + 1, np.int32)             # (a window's nodes' first places in ``order``)
    dist = init                                     # (the caller's: written in place, no copy of n values)
    pred = np.full(n, -1, np.int32)
    for k in range(bounds.shape[0] - 1):
        b0, b1 = bounds[k], bounds[k + 1]
        lo = (b0 * n + nbk - 1) // nbk              # the window's positions lo .. hi - 1
        hi = (b1 * n + nbk - 1) // nbk
        fill[:hi - lo + 1] = 0
        for e in range(nb + nx):
            b = bucket[e]
            if b >= b0 and b < b1:
                v = (pos[dst[e]] if e < nb else pos[x_dst[e - nb]]) - lo
                fill[v + 1] += 1
        for v in range(hi - lo):
            fill[v + 1] += fill[v]
        m = fill[hi - lo]
        for e in range(nb + nx):
            b = bucket[e]
            if b >= b0 and b < b1:
                v = (pos[dst[e]] if e < nb else pos[x_dst[e - nb]]) - lo
                order[fill[v]] = e
                fill[v] += 1
        for i in range(m):
            e = order[i]
            if e < nb:
                u, v, we = pos[src[e]], pos[dst[e]], w[e]
            else:
                u, v, we = pos[x_src[e - nb]], pos[x_dst[e - nb]], x_w[e - nb]
            if dist[u] <= NEG:
                continue
            val = dist[u] + we
            if val > dist[v]:
                dist[v] = val
                pred[v] = e
            elif val == dist[v] and pred[v] >= 0:
                p = pred[v]
                ps = pos[src[p]] if p < nb else pos[x_src[p - nb]]     # (the chosen edge's source)
                if u > ps or (u == ps and e < p):
                    pred[v] = e
    return dist, pred


@njit(cache=True)
def longest_path_sorted(dist, tie, at, ids, u, v, w, skip, x_ids, x_u, x_v, x_w, flush, out_pos, out_e, out_src):
    """One chunk of ``longest_path``'s forward pass over edges read in order of destination position,
    then id (a graph's edges streamed from disk: ``streamtrace.aggregate.job_edges``): the chunk's
    edges ``ids`` (int32[C] edge ids), ``u`` / ``v`` (int32[C] source and destination positions), ``w``
    (int64[C] ns), those with ``skip`` (bool[C]) left out; merged with the extra edges ``x_*`` (ids,
    positions and weights as int32 / int64 arrays sorted by destination position, then id; every id
    above the chunks' ids), of which ``at`` (int64[1], read and advanced) says how many are taken.
    An extra edge is taken before the first chunk edge of a larger destination position; ``flush``
    takes those left (the last call, with an empty chunk or the last one).

    ``dist`` (int64[n], by position: the node's own value, ``NEG`` none, as ``longest_path``'s
    ``init``) is updated in place.  Each node's chosen in-edge is not kept by node: the destinations
    come in ascending order, so only the one whose in-edges are being read is open, in ``tie``
    (int64[3]: its position, its chosen edge's id and that edge's source position; -1 each before the
    first call); once a larger destination comes (or ``flush``), a node with a chosen edge is written
    to ``out_pos`` / ``out_e`` / ``out_src`` (int32[K], K at least the edges the call takes, the chunk's
    and the extra ones, plus one), in ascending position.  Returns how many were written (int64).  Over all chunks,
    the answer of ``longest_path_masked`` over the same kept edges (ties: the larger source position,
    then the lower id).  Raises ValueError when an edge runs backwards (``u >= v``), out of range, or
    comes before the open destination, or when ``out_*`` is too short."""
    n = dist.shape[0]
    nx = x_ids.shape[0]
    k = at[0]
    c = ids.shape[0]
    m = 0
    for i in range(c + 1):
        if i < c:
            if skip[i]:
                continue
            lim = v[i]
        elif flush:
            lim = n
        else:
            break
        while k < nx and x_v[k] < lim:                    # the extra edges before this destination
            m = _relax(dist, tie, out_pos, out_e, out_src, m, n, x_ids[k], x_u[k], x_v[k], x_w[k])
            k += 1
        if i < c:
            m = _relax(dist, tie, out_pos, out_e, out_src, m, n, ids[i], u[i], v[i], w[i])
    at[0] = k
    if flush:
        m = _close(tie, out_pos, out_e, out_src, m)
        tie[0] = -1
    return m


@njit(cache=True, inline="always")
def _close(tie, out_pos, out_e, out_src, m):
    """``longest_path_sorted``'s open destination ``tie`` written out when it has a chosen edge."""
    if tie[0] >= 0 and tie[1] >= 0:
        if m >= out_pos.shape[0]:
            raise ValueError("longest_path_sorted: out_pos / out_e / out_src too short")
        out_pos[m] = tie[0]
        out_e[m] = tie[1]
        out_src[m] = tie[2]
        m += 1
    return m


@njit(cache=True, inline="always")
def _relax(dist, tie, out_pos, out_e, out_src, m, n, e, a, b, we):
    """``longest_path_sorted``'s step: edge ``e`` from position ``a`` to ``b`` of weight ``we`` (the
    open destination closed first when ``b`` is a new one); returns the rows written so far."""
    if a >= b or a < 0 or b >= n or b < tie[0]:
        raise ValueError("edge not in topological order (src >= dst), node out of range, or edges not in "
                         "order of destination")
    if b != tie[0]:
        m = _close(tie, out_pos, out_e, out_src, m)
        tie[0] = b
        tie[1] = -1
        tie[2] = -1
    if dist[a] <= NEG:
        return m
    val = dist[a] + we
    if val > dist[b]:
        dist[b] = val
        tie[1] = e
        tie[2] = a
    elif val == dist[b] and tie[1] >= 0 and (a > tie[2] or (a == tie[2] and e < tie[1])):
        tie[1] = e
        tie[2] = a
    return m


@njit(cache=True)
def latest_times(n, src, dst, w, deadline):
    """Backward pass.  ``deadline`` (int64[n]): the latest a node may happen on its own (the step's
    end for the final node), ``POS`` when it has none.  ``late[u]`` = min(``deadline[u]``, min
    over out-edges e of ``late[dst[e]] - w[e]`` where ``late[dst[e]]`` < POS).  Returns ``late``,
    int64[n].  O(E + n).  Raises ValueError as ``longest_path``.  ``latest_times_masked`` with every
    edge kept, each node its own position (one relaxation loop for both)."""
    m = src.shape[0]
    for e in range(m):                              # (checked here: the masked pass reads ``pos[src[e]]``)
        if src[e] >= dst[e] or src[e] < 0 or dst[e] >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
    return latest_times_masked(n, np.arange(n).astype(np.int32), src.astype(np.int32), dst.astype(np.int32), w,
                               np.ones(m, np.bool_), deadline)


@njit(cache=True)
def latest_times_masked(n, pos, src, dst, w, mask, deadline):
    """``latest_times`` over the edges a graph holds in place, without copying them: the edges ``e``
    of ``(src, dst, w)`` (int32[E] node ids, int64[E] ns) with ``mask[e]`` (bool[E]), every node id
    mapped to its topological position by ``pos`` (int32 or int64, the positions ``0 .. n - 1``).  The
    same answer as ``latest_times(n, pos[src[mask]], pos[dst[mask]], w[mask], deadline)`` (the edges
    taken in the same order); memory O(n + kept edges) for the order (int32), none for the edges
    (the critical path of 4,096 synthetic ranks: 5 M edges).  Returns ``late``, int64[n] by
    position.  Raises ValueError when a kept edge runs backwards or out of range, or past 2^31 - 1
    edges."""
    m = src.shape[0]
    if m > _MAX_INT32:
        raise ValueError("more than 2^31 - 1 edges")
    fill = np.zeros(n + 1, np.int32)                # (int32: fewer than 2^31 edges)
    for e in range(m):                              # count the kept edges out of each node, check them
        if not mask[e]:
            continue
        u, v = pos[src[e]], pos[dst[e]]
        if u >= v or u < 0 or v >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
        fill[n - u] += 1                            # (descending by source: bucket n - 1 - u, shifted by 1)
    for b in range(n):
        fill[b + 1] += fill[b]
    order = np.empty(fill[n], np.int32)             # the kept edges by source, last first, stable
    for e in range(m):
        if mask[e]:
            b = n - 1 - pos[src[e]]
            order[fill[b]] = e
            fill[b] += 1
    late = deadline.copy()
    for k in range(order.shape[0]):
        e = order[k]
        u, v = pos[src[e]], pos[dst[e]]
        if late[v] >= POS:
            continue
        val = late[v] - w[e]
        if val < late[u]:
            late[u] = val
    return late


@njit(cache=True)
def latest_times_sorted(late, u, v, w):
    """One chunk of ``latest_times``' backward pass over edges read in order of destination position,
    last first (a graph's edges streamed from disk backwards: ``streamtrace.aggregate.job_edges.EdgeFile.
    latest_pass``): the chunk's edges from position ``u`` to ``v`` (int32[C]) of weights ``w`` (int64[C]
    ns), taken in the order given.  ``late`` (int64[n] by position: a node's own deadline, ``POS`` none)
    is updated in place: ``late[u] = min(late[u], late[v] - w)`` where ``late[v]`` < ``POS``.

    Why that order is enough: every out-edge of a node ``v`` ends past ``v``, so it comes before any
    edge into ``v`` when the edges go by destination, last first: ``late[v]`` is final when an edge into
    ``v`` reads it.  Over all chunks, the answer of ``latest_times_masked`` over the same edges (a
    minimum: the order among edges of one destination does not matter).  Raises ValueError when an
    edge runs backwards (``u >= v``) or out of range."""
    n = late.shape[0]
    for i in range(u.shape[0]):
        a, b = u[i], v[i]
        if a >= b or a < 0 or b >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
        if late[b] >= POS:
            continue
        val = late[b] - w[i]
        if val < late[a]:
            late[a] = val


@njit(cache=True)
def trace_back(pred, src, end):
    """The edges of the longest path ending at node ``end``, first to last (int64[k]), following
    ``pred`` (from ``longest_path``) and ``src`` (both int64, or both int32 as ``longest_path_masked``
    returns them).  O(k)."""
    k = 0
    v = end
    while v >= 0 and pred[v] >= 0 and k < pred.shape[0]:
        k += 1
        v = src[pred[v]]
    out = np.empty(k, np.int64)
    v = end
    for i in range(k - 1, -1, -1):
        out[i] = pred[v]
        v = src[pred[v]]
    return out


TIME_DIGIT_BITS = 12
"""``time_positions``' widest radix digit: 4,096 buckets a pass, three passes for a key of 36 bits."""


@njit(cache=True)
def time_positions(t, cls, lo):
    """Each node's place in the order by ``(t, cls, node)``: ``pos[order[i]] = i`` for ``order =
    np.lexsort((cls, t))`` (the job graphs' time order: ``streamtrace.aggregate.critical_graph.
    time_positions``).  ``t`` int64[n] ns, ``cls`` int8[n] in ``[0, 8)``, ``lo`` at most ``t.min()``;
    every ``t - lo`` below 2^60.  A stable least-significant-digit radix sort of node ids (LSD radix sort,
    Knuth, TAOCP vol. 3, 5.2.5) on the key ``(t - lo) << 3 | cls``, read through the ids (no key array;
    every digit's counts in one read first): two int32[n] buffers, the second one ends as the positions
    (an int64 order and positions held 24 bytes a node).  Returns int32[n].  Raises ValueError past
    2^31 - 1 nodes, for a class outside ``[0, 8)`` or a time below ``lo`` or 2^60 past it."""
    n = t.shape[0]
    if n > _MAX_INT32:
        raise ValueError("more than 2^31 - 1 nodes")
    top = 7
    for v in range(n):
        d = t[v] - lo
        if d < 0 or d >= (1 << 60) or cls[v] < 0 or cls[v] >= 8:
            raise ValueError("a time below lo or 2^60 past it, or a class outside [0, 8)")
        top = max(top, d << 3 | 7)
    bits = 0
    while (top >> bits) > 0:
        bits += 1
    passes = (bits + TIME_DIGIT_BITS - 1) // TIME_DIGIT_BITS
    width = (bits + passes - 1) // passes
    mask = (1 << width) - 1
    count = np.zeros((passes, (1 << width) + 1), np.int64)
    for v in range(n):                   # (every pass's counts: one read of the keys)
        key = (t[v] - lo) << 3 | cls[v]
        for p in range(passes):
            count[p, (key >> (p * width) & mask) + 1] += 1
    a = np.empty(n, np.int32)
    b = np.empty(n, np.int32)
    for p in range(passes):
        c = count[p]
        for k in range(1 << width):
            c[k + 1] += c[k]
        for i in range(n):
            v = i if p == 0 else a[i]
            k = ((t[v] - lo) << 3 | cls[v]) >> (p * width) & mask
            b[c[k]] = v
            c[k] += 1
        a, b = b, a
    for i in range(n):                  # (``a`` holds the order; the positions into the other buffer)
        b[a[i]] = i
    return b


@njit(cache=True)
def _positions(order):
    """``pos[order[i]] = i``: each node's place in ``order`` (int64[n], a permutation)."""
    pos = np.empty(order.shape[0], np.int64)
    for i in range(order.shape[0]):
        pos[order[i]] = i
    return pos


@njit(cache=True)
def back_within_instant(order, t, src, dst):
    """Does an edge ``src[e] -> dst[e]`` (node ids, int64[E]) run back in ``order`` (node ids,
    int64[n], a permutation) between two nodes of the same time ``t`` (int64[n] ns)?  The test
    ``streamtrace.aggregate.critical_graph.topological_order`` makes before ordering same-instant
    chains; O(n + E)."""
    pos = _positions(order)
    for e in range(src.shape[0]):
        u, v = src[e], dst[e]
        if pos[u] > pos[v] and t[u] == t[v]:
            return True
    return False


@njit(cache=True)
def reduce_local(t, order, src, dst, w, sources, sinks):
    """One rank's step graph reduced to its longest local paths (``streamtrace.aggregate.
    critical_local.reduce_step``) in one pass: node ``i`` at time ``t[i]`` (int64[n] ns) sits at
    ``pos[i]`` in ``order`` (node ids in topological order, int64[n]); edges ``src -> dst`` (node
    ids, int64[E]) of weight ``w`` (int64[E] ns), those with ``pos[src] >= pos[dst]`` dropped
    (counted); ``sources`` (node ids) start at their own time, every other node unreached until an
    edge reaches it; ``sinks`` (node ids, in the caller's order).

    The forward pass is ``longest_path``'s over the kept edges at their positions (same order,
    same ties: the larger source position, then the lower edge index); the marked edges are the
    union of ``trace_back``'s walks from each reached sink (each walk stops at a node an earlier
    walk passed).  Returns ``(pos, origin, sink, weight,
    marked, dropped)``: ``pos`` int64[n]; per reached sink, in the order of ``sinks``, the position
    its longest path starts at, its own position and that path's weight (int64 ns: its value minus
    the origin's time); ``marked`` the edges on those paths (indices into ``src``, ascending);
    ``dropped`` the number of edges dropped.  O(n + E)."""
    n = t.shape[0]
    m = src.shape[0]
    pos = _positions(order)
    fill = np.zeros(n + 1, np.int64)
    dropped = 0
    for e in range(m):
        if pos[src[e]] >= pos[dst[e]]:
            dropped += 1
        else:
            fill[pos[dst[e]] + 1] += 1
    for v in range(n):
        fill[v + 1] += fill[v]
    by_dst = np.empty(m - dropped, np.int64)          # kept edges by destination position, stable
    for e in range(m):
        v = pos[dst[e]]
        if pos[src[e]] < v:
            by_dst[fill[v]] = e
            fill[v] += 1
    init = np.full(n, NEG, np.int64)
    for i in range(sources.shape[0]):
        init[pos[sources[i]]] = t[sources[i]]
    dist = init.copy()
    pred = np.full(n, -1, np.int64)
    psrc = np.full(n, -1, np.int64)
    origin = np.arange(n)
    for k in range(by_dst.shape[0]):
        e = by_dst[k]
        u, v = pos[src[e]], pos[dst[e]]
        if dist[u] <= NEG:
            continue
        val = dist[u] + w[e]
        p = pred[v]
        if val > dist[v] or (val == dist[v] and p >= 0 and (u > psrc[v] or (u == psrc[v] and e < p))):
            dist[v] = val
            pred[v] = e
            psrc[v] = u
            origin[v] = origin[u]
    r = 0
    for i in range(sinks.shape[0]):
        if dist[pos[sinks[i]]] > NEG:
            r += 1
    o_out = np.empty(r, np.int64)
    s_out = np.empty(r, np.int64)
    w_out = np.empty(r, np.int64)
    seen = np.zeros(n, np.bool_)
    on = np.zeros(m, np.bool_)
    j = 0
    k = 0
    for i in range(sinks.shape[0]):
        v = pos[sinks[i]]
        if dist[v] <= NEG:
            continue
        o_out[j], s_out[j], w_out[j] = origin[v], v, dist[v] - init[origin[v]]
        j += 1
        while not seen[v] and pred[v] >= 0:
            seen[v] = True
            on[pred[v]] = True
            k += 1
            v = psrc[v]
    marked = np.empty(k, np.int64)
    j = 0
    for e in range(m):
        if on[e]:
            marked[j] = e
            j += 1
    return pos, o_out, s_out, w_out, marked, dropped
