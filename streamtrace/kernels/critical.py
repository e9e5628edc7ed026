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

__all__ = ["NEG", "POS", "longest_path", "latest_times", "trace_back", "path_edges"]



@njit(cache=True)
def _stable_order(key, n, descending):
    """The indices of ``key`` (int64[m], each in ``[0, n)``) ordered by key (``descending`` or
    not), equal keys in index order: ``np.argsort(key or -key, kind="mergesort")`` as a counting
    sort, O(m + n)."""
    m = key.shape[0]
    fill = np.zeros(n + 1, np.int64)
    for e in range(m):
        fill[(n - 1 - key[e] if descending else key[e]) + 1] += 1
    for v in range(n):
        fill[v + 1] += fill[v]
    order = np.empty(m, np.int64)
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
def latest_times(n, src, dst, w, deadline):
    """Backward pass.  ``deadline`` (int64[n]): the latest a node may happen on its own (the step's
    end for the final node), ``POS`` when it has none.  ``late[u]`` = min(``deadline[u]``, min
    over out-edges e of ``late[dst[e]] - w[e]`` where ``late[dst[e]]`` < POS).  Returns ``late``,
    int64[n].  O(E + n).  Raises ValueError as ``longest_path``."""
    m = src.shape[0]
    for e in range(m):
        if src[e] >= dst[e] or src[e] < 0 or dst[e] >= n:
            raise ValueError("edge not in topological order (src >= dst) or node out of range")
    order = _stable_order(src, n, np.bool_(True))
    late = deadline.copy()
    for k in range(m):
        e = order[k]
        u, v = src[e], dst[e]
        if late[v] >= POS:
            continue
        val = late[v] - w[e]
        if val < late[u]:
            late[u] = val
    return late


@njit(cache=True)
def trace_back(pred, src, end):
    """The edges of the longest path ending at node ``end``, first to last (int64[k]), following
    ``pred`` (from ``longest_path``) and ``src``.  O(k)."""
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


@njit(cache=True)
def path_edges(pred, src, ends):
    """The distinct edges of the longest paths ending at the nodes ``ends`` (int64[m]), ascending
    (int64[k]): the union of ``trace_back(pred, src, v)`` over ``v`` in ``ends``.  Each walk stops
    at a node an earlier walk passed (its edges back from there are taken already); the edges are
    marked, then read in order.  O(n + m + E) for E edges."""
    n = pred.shape[0]
    seen = np.zeros(n, np.bool_)
    on = np.zeros(src.shape[0], np.bool_)
    k = 0
    for i in range(ends.shape[0]):
        v = ends[i]
        while v >= 0 and not seen[v] and pred[v] >= 0:
            seen[v] = True
            on[pred[v]] = True
            k += 1
            v = src[pred[v]]
    out = np.empty(k, np.int64)
    j = 0
    for e in range(src.shape[0]):
        if on[e]:
            out[j] = e
            j += 1
    return out[:j]
