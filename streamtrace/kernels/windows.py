"""The innermost annotation window around each query time, exactly (numba).

A *window* is a half-open interval ``[start[i], end[i])`` of int64 ns (an annotation:
``ProfilerStep#N``, ``forward_step``, a recompute window, ...).  For a query time ``t``
the windows *containing* it are those with ``start <= t < end``; a zero-length window
(``end == start``) contains nothing, and ``end < start`` is an error.

**Innermost** (the result of ``innermost``) is, among the windows containing ``t``:

1. the one with the latest ``start``;
2. among those starting at the same time, the one with the earliest ``end`` (the
   shortest: with nesting windows, the inner one);
3. among exact duplicates (same start and end), the one at the highest position in the
   input arrays (for windows sorted by start with a stable sort, the last in file order).

``-1`` when no window contains ``t``.  Nothing is assumed about the windows: they may
come from several threads and overlap partially, nest to any depth, have any number of
siblings, share starts and ends; the answer is the rule above for any input.

Algorithm: the windows are put in (start asc, end desc, position asc) order (no sort
when they already are), so rule 1-3 picks the *last* window in that order with
``start <= t`` and ``end > t``.  The queries are visited in increasing ``t`` (argsort,
skipped when already sorted); windows are pushed as their start passes, onto a stack
whose ends strictly decrease from bottom to top: a push first pops every window whose
end is <= the new one's (an earlier window that ends no later is never the last
containing one again), and a query first pops the windows that ended at or before it
(ends only grow out of reach: queries come in increasing ``t``).  The top is then the
answer.  Every window is pushed and popped at most once: O(N + Q) after the sorts,
O(N log N + Q log Q) in all; memory: the stack (N int64) and the orders (N + Q int64).

**Shortest overlapping** (``shortest_overlapping``, for GPU-side annotations, which are
matched to the GPU events they *overlap*, as HolisticTraceAnalysis does): for a query interval
``[qs, qe)``, among the non-empty windows ``[s, e)`` overlapping it (``s < qe`` and ``qs < e``;
a zero-length query at ``t`` overlaps the windows that contain ``t``):

1. the shortest (``e - s``);
2. among equally long ones, the one with the latest ``start``;
3. then the one at the highest input position.

Algorithm: the queries are sorted by start, with the running maximum of their ends; the windows
are visited in rule order (shortest first) and each claims every still-unclaimed query it
overlaps, found between two binary searches (queries starting before ``e``, and from the first
whose running end reaches ``s``); claimed queries are skipped through a union-find "next
unclaimed" pointer.  O((N + Q) log) when the queries' ends grow with their starts (one CUDA
stream: kernels do not overlap); an unclaimed query that ends before a window's start but after
an earlier query's end is looked at again by every later window, so O(N·Q) in the worst case.

Plain-Python twins (brute force over every window):
``streamtrace.kernels.reference.windows.innermost_window_ref``,
``streamtrace.kernels.reference.windows.shortest_overlapping_ref``; property tests in
``tests/kernels/test_windows.py``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .intervals import as_int64
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["innermost", "WindowIndex", "shortest_overlapping"]


@njit(cache=True, nogil=True)
def _in_key_order(s, e):
    """True when (s asc, e desc) already holds (ties of both keep their positions)."""
    for i in range(1, s.shape[0]):
        if s[i] < s[i - 1] or (s[i] == s[i - 1] and e[i] > e[i - 1]):
            return False
    return True


@njit(cache=True, nogil=True)
def _is_sorted(t):
    for i in range(1, t.shape[0]):
        if t[i] < t[i - 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def _sweep(ks, ke, t, qord, out):
    """``out[j]``: the last window (in key order) with ``ks <= t[j] < ke``, or -1.
    Queries visited as ``qord`` lists them (ascending ``t``; empty ``qord``: ``t`` is
    sorted)."""
    n = ks.shape[0]
    stack = np.empty(n, np.int64)
    top = 0
    i = 0
    ident = qord.shape[0] == 0
    for k in range(t.shape[0]):
        j = k if ident else qord[k]
        tj = t[j]
        while i < n and ks[i] <= tj:
            ei = ke[i]
            while top > 0 and ke[stack[top - 1]] <= ei:
                top -= 1
            stack[top] = i
            top += 1
            i += 1
        while top > 0 and ke[stack[top - 1]] <= tj:
            top -= 1
        out[j] = stack[top - 1] if top > 0 else -1


@njit(cache=True, nogil=True)
def _back(pos, perm):
    """Key-order positions -> input positions (in place)."""
    for j in range(pos.shape[0]):
        if pos[j] >= 0:
            pos[j] = perm[pos[j]]


class WindowIndex:
    """Windows prepared once (validated, put in key order) for any number of query
    batches: ``WindowIndex(start, end).innermost(t)`` equals ``innermost(start, end, t)``."""

    def __init__(self, start, end):
        s = as_int64(start, "windows start")
        e = as_int64(end, "windows end")
        if s.shape[0] != e.shape[0]:
            raise ValueError(f"windows: start and end lengths differ ({s.shape[0]} != {e.shape[0]})")
        if s.shape[0] and bool(np.any(e < s)):
            i = int(np.argmax(e < s))
            raise ValueError(f"windows: end < start at index {i} ({int(e[i])} < {int(s[i])})")
        self.n = s.shape[0]
        if _in_key_order(s, e):
            self.perm = None
            self.ks, self.ke = s, e
        else:
            # start asc, end desc (~e: no overflow at int64 min), position asc
            self.perm = np.lexsort((np.arange(self.n), ~e, s)).astype(np.int64)
            self.ks, self.ke = s[self.perm], e[self.perm]

    def innermost(self, t):
        """For each query time, the input position of its innermost window, or -1 (int64)."""
        t = as_int64(t, "query times")
        out = np.full(t.shape[0], -1, np.int64)
        if self.n == 0 or t.shape[0] == 0:
            return out
        qord = np.zeros(0, np.int64) if _is_sorted(t) else np.argsort(t, kind="stable").astype(np.int64)
        _sweep(self.ks, self.ke, t, qord, out)
        if self.perm is not None:
            _back(out, self.perm)
        return out


def innermost(start, end, t):
    """For each query time ``t[j]``, the position ``i`` (into ``start``/``end`` as given)
    of the innermost window ``[start[i], end[i])`` containing it, or -1 (module docstring:
    latest start, then earliest end, then highest position).  Windows in any order;
    queries in any order.  int64 array of ``len(t)``."""
    return WindowIndex(start, end).innermost(t)


def _checked(start, end, what):
    s = as_int64(start, what + " start")
    e = as_int64(end, what + " end")
    if s.shape[0] != e.shape[0]:
        raise ValueError(f"{what}: start and end lengths differ ({s.shape[0]} != {e.shape[0]})")
    if s.shape[0] and bool(np.any(e < s)):
        i = int(np.argmax(e < s))
        raise ValueError(f"{what}: end < start at index {i} ({int(e[i])} < {int(s[i])})")
    return s, e


@njit(cache=True, nogil=True)
def _find(nxt, j):
    """The first unclaimed sorted query at or after ``j`` (``len`` when none); path compression."""
    r = j
    while nxt[r] != r:
        r = nxt[r]
    while nxt[j] != r:
        k = nxt[j]
        nxt[j] = r
        j = k
    return r


@njit(cache=True, nogil=True)
def _paint(order, ws, we, qs, qe, reach, out):
    """Windows in ``order`` (rule order) claim the unclaimed sorted queries they overlap."""
    n = qs.shape[0]
    nxt = np.arange(n + 1)
    for k in range(order.shape[0]):
        i = order[k]
        a, b = ws[i], we[i]
        if b <= a:
            continue                                      # a zero-length window overlaps nothing
        j = _find(nxt, np.searchsorted(reach, a))         # before it every query ends before a
        hi = np.searchsorted(qs, b)                       # from hi on every query starts at or after b
        while j < hi:
            s, e = qs[j], qe[j]
            overlaps = (e > a) if e > s else (s >= a)     # a zero-length query: a <= s (< b)
            if overlaps:
                out[j] = i
                nxt[j] = j + 1
            j = _find(nxt, j + 1)


def shortest_overlapping(start, end, q_start, q_end):
    """For each query interval ``[q_start[j], q_end[j])`` (int64 ns), the position ``i`` (into
    ``start``/``end`` as given) of the shortest non-empty window ``[start[i], end[i])`` that
    overlaps it, or -1 (module docstring: shortest, then latest start, then highest position).
    int64 array of ``len(q_start)``.  ValueError for unequal lengths or ``end < start``,
    TypeError for non-integer input."""
    s, e = _checked(start, end, "windows")
    qs, qe = _checked(q_start, q_end, "queries")
    out = np.full(qs.shape[0], -1, np.int64)
    if s.shape[0] == 0 or qs.shape[0] == 0:
        return out
    length = e.view(np.uint64) - s.view(np.uint64)        # no overflow: e >= s
    order = np.lexsort((~np.arange(s.shape[0]), ~s, length)).astype(np.int64)
    qo = np.argsort(qs, kind="stable")
    qs_sorted, qe_sorted = qs[qo], qe[qo]
    found = np.full(qs.shape[0], -1, np.int64)
    _paint(order, s, e, qs_sorted, qe_sorted, np.maximum.accumulate(qe_sorted), found)
    out[qo] = found
    return out
