"""One thread's chain of op boundaries in a step graph (numba; plain-Python twin in
``streamtrace.kernels.reference.chains``), for ``streamtrace.aggregate.critical_cpu.chain``, whose
module docstring states the rules: the thread's ``2n`` instants (each op's start and end) in the
call tree's depth-first order, and per edge between consecutive instants the innermost op of the
thread open over it (the op naming the edge).

The op columns are the part's (``N`` rows, aligned ns): ``ts`` / ``dur`` int64, ``parent`` int64
(a row, -1 none; a row outside ``[0, N)`` is none too), ``depth`` int32, ``tid`` int64, ``is_step``
bool.  One call per thread and step window: ``sel`` the thread's op rows in the window (sorted,
unique).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["DENSE_SPAN", "MAX_UP", "RUN_REACH", "thread_chain", "thread_waits"]

MAX_UP = 256
"""How many levels an edge's naming op is moved up the call tree at most (``thread_chain``)."""


@njit(cache=True)
def _before(i, j, k1, k2, k3):
    """Does ``i`` come before ``j`` on the key ``(k1, k2, k3, index)``?"""
    if k1[i] != k1[j]:
        return k1[i] < k1[j]
    if k2[i] != k2[j]:
        return k2[i] < k2[j]
    if k3[i] != k3[j]:
        return k3[i] < k3[j]
    return i < j


DENSE_SPAN = 8
"""``thread_chain`` finds each op's parent among ``sel`` in a table indexed by row when ``sel`` spans
at most ``DENSE_SPAN`` rows an op (+4,096), by binary search otherwise."""

RUN_REACH = 8
"""How far back (rows) ``_sort3`` moves a row to keep it in the run it is building."""


@njit(cache=True)
def _sort3(a, k1, k2, k3):
    """The permutation ``a`` (int64[n], indices of ``k1``, ``k2``, ``k3``, int64[n] each) sorted on
    ``(k1, k2, k3, index)``, a new array.  A natural merge sort: ``a`` is cut into runs already in
    order, a row that belongs at most ``RUN_REACH`` rows back moved there (a tie of a parent and its
    child listed child first), then neighbouring runs are merged until one is left.  O(n) on a
    sorted ``a`` or a few sorted stretches (a thread's ops in start order, read from two files; its
    ends in the post-order ``thread_chain`` guesses), O(n log n) at worst.  The key is total, so the
    result does not depend on ``a``."""
    n = a.shape[0]
    a = a.copy()
    bounds = np.empty(n + 1, np.int64)
    nr = 0
    i = 0
    while i < n:
        bounds[nr] = i
        nr += 1
        start = i
        i += 1
        while i < n:
            x = a[i]
            j = i
            while j > start and i - j < RUN_REACH and _before(x, a[j - 1], k1, k2, k3):
                j -= 1
            if j > start and i - j == RUN_REACH and _before(x, a[j - 1], k1, k2, k3):
                break                               # it belongs further back: a new run starts here
            for k in range(i, j, -1):
                a[k] = a[k - 1]
            a[j] = x
            i += 1
    bounds[nr] = n
    b = np.empty(n, np.int64)
    while nr > 1:
        m = 0
        for r in range(0, nr, 2):
            lo = bounds[r]
            mid = bounds[r + 1]
            hi = bounds[r + 2] if r + 2 <= nr else mid
            bounds[m] = lo
            m += 1
            if mid >= hi or _before(a[mid - 1], a[mid], k1, k2, k3):
                for k in range(lo, hi):     # (a loop: an array-to-slice assignment costs ~3 s to compile)
                    b[k] = a[k]
                continue
            p, q = lo, mid
            for k in range(lo, hi):
                if q >= hi or (p < mid and _before(a[p], a[q], k1, k2, k3)):
                    b[k] = a[p]
                    p += 1
                else:
                    b[k] = a[q]
                    q += 1
        bounds[m] = n
        nr = m
        a, b = b, a
    return a


@njit(cache=True)
def _post_order(by_pre, t0, t1):
    """A guess at the ops' order by end (int64[n]): ``by_pre`` (the ops in pre-order, starts
    ``t0``, ends ``t1``) walked with a stack of the open ops, an op leaving when the next one starts
    at or after its end.  The exact order of properly nested ops; ``_sort3`` corrects the rest."""
    n = by_pre.shape[0]
    out = np.empty(n, np.int64)
    stack = np.empty(n, np.int64)
    sp = 0
    c = 0
    for k in range(n):
        s = by_pre[k]
        while sp > 0 and t1[stack[sp - 1]] <= t0[s]:
            sp -= 1
            out[c] = stack[sp]
            c += 1
        stack[sp] = s
        sp += 1
    while sp > 0:
        sp -= 1
        out[c] = stack[sp]
        c += 1
    return out


@njit(cache=True)
def _subtree_last(pre, dep, loc):
    """The pre-order number of each op's subtree's last op: ``pre`` passed up from each op with a
    parent ``loc`` (>= 0) and ``depth`` >= 1 to that parent, deepest first, the ops of one depth
    all read before any is written (the vectorised rule of ``critical_cpu.instant_order``)."""
    n = pre.shape[0]
    last = pre.copy()
    m, top = 0, 0
    for i in range(n):
        if loc[i] >= 0 and dep[i] >= 1:
            m += 1
            top = max(top, dep[i])
    up = np.empty(m, np.int64)
    if top <= 4 * n + 16:                           # a counting sort on the depth, deepest first
        start = np.zeros(top + 2, np.int64)
        for i in range(n):
            if loc[i] >= 0 and dep[i] >= 1:
                start[top - dep[i] + 1] += 1
        for d in range(top + 1):
            start[d + 1] += start[d]
        for i in range(n):
            if loc[i] >= 0 and dep[i] >= 1:
                up[start[top - dep[i]]] = i
                start[top - dep[i]] += 1
    else:                                           # (depths far past the ops' number: sorted)
        kd = np.empty(m, np.int64)
        m = 0
        for i in range(n):
            if loc[i] >= 0 and dep[i] >= 1:
                up[m], kd[m] = i, -dep[i]
                m += 1
        z = np.zeros(m, np.int64)
        up = up[_sort3(np.arange(m), kd, z, z)]
    vals = np.empty(m, np.int64)
    a = 0
    while a < m:
        b = a
        while b < m and dep[up[b]] == dep[up[a]]:
            vals[b] = last[up[b]]
            b += 1
        for j in range(a, b):
            p = loc[up[j]]
            if vals[j] > last[p]:
                last[p] = vals[j]
        a = b
    return last


@njit(cache=True)
def _in(sorted_rows, r):
    j = np.searchsorted(sorted_rows, r)
    return j < sorted_rows.shape[0] and sorted_rows[j] == r


@njit(cache=True)
def thread_chain(sel, ts, dur, parent, depth, tid, is_step, this_tid, cut, host_gap, cpu_op):
    """The chain of thread ``this_tid``'s op rows ``sel`` (int64[n], n >= 1); ``cut``: sorted op
    rows (int64) of CPU collectives' runs; ``host_gap`` / ``cpu_op``: the two category codes.

    Returns ``(t, is_start, op, at, w, cat, inner, keep)``: per instant (``2n``, in order) its time
    (int64 ns), whether it is a start (bool), its op row (int64) and that row's index in ``sel``
    (int64); per edge ``i -> i+1``
    (``2n - 1``) its weight ``t[i+1] - t[i]`` (int64 ns), category (int8: ``host_gap`` when no op of
    the thread but a step op is open over it, else ``cpu_op``), naming op ``inner`` (int64 row, -1
    none) and ``keep`` (bool: the edge lies outside every op of ``cut``).

    Order (``critical_cpu.instant_order``): ops numbered in pre-order (start ascending, end
    descending, then ``sel`` order); instants by time, then a start at ``2 * pre``, an end at
    ``2 * last + 1`` (``last``: its subtree's last op), then deeper ends first, then ``sel`` order.
    A start and an end never tie on that key, so the starts (in pre-order) and the ends (sorted
    on their own) are merged.  Naming (``critical_cpu.covering``): the op a start opens, else the
    parent of the op an end closes, kept when it is a row of this thread, then moved up the call
    tree (at most ``MAX_UP`` levels) until it covers the whole edge.  O(n log n)."""
    n = sel.shape[0]
    nops = ts.shape[0]
    t0 = np.empty(n, np.int64)
    t1 = np.empty(n, np.int64)
    dep = np.empty(n, np.int64)
    loc = np.full(n, -1, np.int64)
    base = sel[0]
    span = sel[n - 1] - base + 1
    dense = span <= DENSE_SPAN * n + 4096           # (a binary search an op: ~45 ns, 43 % of the kernel)
    where = np.full(span if dense else 0, -1, np.int64)
    if dense:
        for i in range(n):
            where[sel[i] - base] = i
    for i in range(n):
        r = sel[i]
        t0[i], t1[i], dep[i] = ts[r], ts[r] + dur[r], depth[r]
        p = parent[r]
        if p >= 0:
            if dense:
                if p - base < span and p >= base:
                    loc[i] = where[p - base]
            else:
                j = min(np.searchsorted(sel, p), n - 1)
                if sel[j] == p:
                    loc[i] = j
    negt1 = np.empty(n, np.int64)
    for i in range(n):
        negt1[i] = -t1[i]
    by_pre = _sort3(np.arange(n), t0, negt1, np.zeros(n, np.int64))  # pre-order: start, end descending, index
    pre = np.empty(n, np.int64)
    for k in range(n):
        pre[by_pre[k]] = k
    last = _subtree_last(pre, dep, loc)
    negd = np.empty(n, np.int64)
    for i in range(n):
        negd[i] = -dep[i]
    ends = _sort3(_post_order(by_pre, t0, t1), t1, last, negd)
    m = 2 * n
    t = np.empty(m, np.int64)
    is_start = np.empty(m, np.bool_)
    op = np.empty(m, np.int64)
    at = np.empty(m, np.int64)
    a = b = 0
    for k in range(m):
        if b >= n:
            take = True
        elif a >= n:
            take = False
        else:
            s, e = by_pre[a], ends[b]
            take = t0[s] < t1[e] or (t0[s] == t1[e] and 2 * pre[s] < 2 * last[e] + 1)
        if take:
            s = by_pre[a]
            t[k], is_start[k], op[k], at[k] = t0[s], True, sel[s], s
            a += 1
        else:
            e = ends[b]
            t[k], is_start[k], op[k], at[k] = t1[e], False, sel[e], e
            b += 1
    w = np.empty(m - 1, np.int64)
    cat = np.empty(m - 1, np.int8)
    inner = np.empty(m - 1, np.int64)
    keep = np.ones(m - 1, np.bool_)
    depth_cut = 0
    for k in range(m - 1):
        w[k] = t[k + 1] - t[k]
        x = op[k] if is_start[k] else parent[op[k]]
        if x < 0 or x >= nops or tid[x] != this_tid:
            x = -1
        for _ in range(MAX_UP):
            if x < 0 or (ts[x] <= t[k] and ts[x] + dur[x] >= t[k + 1]):
                break
            up = parent[x]
            x = up if 0 <= up < nops else -1
        inner[k] = x
        cat[k] = host_gap if x < 0 or is_step[x] else cpu_op
        if cut.shape[0] and _in(cut, op[k]):
            depth_cut += 1 if is_start[k] else -1
        keep[k] = depth_cut <= 0
    return t, is_start, op, at, w, cat, inner, keep


@njit(cache=True)
def _first_at_or_after(t, lo, hi, x, strict):
    """The first index ``i`` in ``[lo, hi)`` with ``t[i] >= x`` (``> x`` when ``strict``), ``hi`` when
    none: ``np.searchsorted`` on the sorted slice, ``left`` / ``right``, offset by ``lo``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if t[mid] > x or (not strict and t[mid] == x):
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def thread_waits(t, w, keep, xt, xw, xcat, xkeep, min_wait, busy_code):
    """The edges of one thread that wait for another (``streamtrace.aggregate.critical_cpu.thread_waits``
    states the rule): the waiting thread's chain, instants ``t`` (int64[n] ns, sorted), per edge ``j``
    (instant ``j`` -> ``j + 1``, int64[n - 1] ns) its weight ``w`` and ``keep`` (bool: outside every
    CPU collective's run); the worker's instants ``xt`` (sorted), per edge its weight ``xw``, category
    ``xcat`` (int8; ``busy_code``: an op of the thread is open over it) and ``xkeep``; ``min_wait``:
    the shortest waiting edge (ns).

    An edge ``a -> b`` of the waiting thread (kept, ``w >= min_wait``) waits for the worker when the
    worker's first instant at or after ``a`` comes before its last instant at or before ``b``, the
    worker is idle before the first and after the last, busy at least half of ``b - a`` between them
    and has no cut edge between them.  Returns int64[m, 3] ``(edge, first, last)``, by edge; ``first``
    / ``last`` index ``xt``.  The worker's busy time between two instants is summed edge by edge: the
    waiting edges are disjoint in time, so the stretches summed are too: O(E log N + N)."""
    n, nx = t.shape[0], xt.shape[0]
    out = np.empty((max(n - 1, 0), 3), np.int64)
    k = 0
    if nx < 2:
        n = 0
    for e in range(n - 1):
        if not keep[e] or w[e] < min_wait:
            continue
        f = _first_at_or_after(xt, 0, nx, t[e], False)
        last = _first_at_or_after(xt, 0, nx, t[e + 1], True) - 1
        if f >= last:
            continue
        if (f > 0 and xcat[f - 1] == busy_code) or (last < nx - 1 and xcat[last] == busy_code):
            continue                                # the worker was busy before or after: not idle
        work, cut = 0, 0
        for j in range(f, last):
            if xcat[j] == busy_code:
                work += xw[j]
            if not xkeep[j]:
                cut += 1
        if 2 * work >= t[e + 1] - t[e] and cut == 0:
            out[k, 0], out[k, 1], out[k, 2] = e, f, last
            k += 1
    res = np.empty((k, 3), np.int64)
    for r in range(k):
        res[r, 0], res[r, 1], res[r, 2] = out[r, 0], out[r, 1], out[r, 2]
    return res
