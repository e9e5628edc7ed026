"""Numba kernels for sets of half-open integer intervals.

An *interval list* is a pair of equally long one-dimensional ``int64`` arrays
``(start, end)``; element ``i`` stands for the half-open interval
``[start[i], end[i])``.  Values are nanoseconds in streamtrace, but nothing here
depends on the unit.  Intervals with ``end == start`` are empty and contribute
nothing; ``end < start`` is an error.

A *canonical union* is an interval list that is sorted, has only non-empty
intervals, and whose intervals are strictly separated
(``start[i + 1] > end[i]``): touching or overlapping intervals are merged.
``union`` returns one; ``intersect`` and ``subtract`` return one.

``intersect`` and ``subtract`` take *disjoint sorted* lists: sorted by
start, pairwise non-overlapping (``start[i + 1] >= end[i]``; touching and empty
intervals are accepted).  Every canonical union qualifies.  The wrappers check
this in O(N) and raise ``ValueError`` otherwise.

Each public function is a thin Python wrapper (validation, dtype conversion,
sorting) around an ``@njit`` core.  Plain-Python twins with the same signatures
and a different algorithm live in ``streamtrace.kernels.reference``; the
property tests in ``tests/test_intervals.py`` check that both agree.

Lengths are returned as Python ``int`` holding an int64 value.  No kernel adds
two timestamps, so any int64 values work for the set operations; a length
overflows only if the covered extent exceeds ``2**63 - 1``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache
from .runs import union_into

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = [
    "as_int64",
    "disjoint_length",
    "union",
    "union_length",
    "union_lengths",
    "intersect",
    "intersect_length",
    "subtract",
    "subtract_length",
]


# --------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------

def as_int64(x, what):
    """One-dimensional int64 copy/view of ``x``; TypeError for non-integer data."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        raise TypeError(f"{what} must hold integers (int64 ns), got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{what} has values above the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_pair(start, end, what):
    s = as_int64(start, what + " start")
    e = as_int64(end, what + " end")
    if s.shape[0] != e.shape[0]:
        raise ValueError(
            f"{what}: start and end lengths differ ({s.shape[0]} != {e.shape[0]})"
        )
    if s.shape[0] and bool(np.any(e < s)):
        i = int(np.argmax(e < s))
        raise ValueError(f"{what}: end < start at index {i} ({int(e[i])} < {int(s[i])})")
    return s, e


def _check_disjoint_sorted(start, end, what):
    s, e = _check_pair(start, end, what)
    if s.shape[0] > 1 and bool(np.any(s[1:] < e[:-1])):
        i = int(np.argmax(s[1:] < e[:-1]))
        raise ValueError(
            f"{what} is not a disjoint sorted interval list: interval {i + 1} starts at "
            f"{int(s[i + 1])} before interval {i} ends at {int(e[i])} "
            "(pass it through union() first)"
        )
    return s, e


def _sorted_by_start(s, e):
    order = np.argsort(s, kind="stable")
    return s[order], e[order]


# --------------------------------------------------------------------------
# njit cores (inputs already validated)
# --------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _union_sorted(s, e):
    """Canonical union of intervals sorted by start (``runs.union_into``). O(N)."""
    n = s.shape[0]
    out_s = np.empty(n, dtype=np.int64)
    out_e = np.empty(n, dtype=np.int64)
    k, _ = union_into(s, e, np.int64(0), n, out_s, out_e, np.int64(0))   # (typed: a literal 0 compiles apart)
    return out_s[:k].copy(), out_e[:k].copy()


@njit(cache=True, nogil=True)
def _union_lengths_sorted(s, e, cls, order, sets):
    """Union length of each class set ``sets[j]`` of the intervals taken in ``order`` (their
    start order): one running union per set, as ``_union_length_sorted``. O(N * J)."""
    nset = sets.shape[0]
    total = np.zeros(nset, dtype=np.int64)
    cs = np.zeros(nset, dtype=np.int64)
    ce = np.zeros(nset, dtype=np.int64)
    have = np.zeros(nset, dtype=np.bool_)
    for i in range(order.shape[0]):
        r = order[i]
        a = s[r]
        b = e[r]
        if b <= a:
            continue
        c = cls[r]
        for j in range(nset):
            if not sets[j, c]:
                continue
            if have[j] and a <= ce[j]:
                if b > ce[j]:
                    ce[j] = b
            else:
                if have[j]:
                    total[j] += ce[j] - cs[j]
                cs[j] = a
                ce[j] = b
                have[j] = True
    for j in range(nset):
        if have[j]:
            total[j] += ce[j] - cs[j]
    return total


@njit(cache=True, nogil=True)
def _union_length_sorted(s, e):
    """Length of the union of intervals sorted by start. O(N), no allocation."""
    total = np.int64(0)
    have = False
    cs = np.int64(0)
    ce = np.int64(0)
    for i in range(s.shape[0]):
        a = s[i]
        b = e[i]
        if b <= a:
            continue
        if have and a <= ce:
            if b > ce:
                ce = b
        else:
            if have:
                total += ce - cs
            cs = a
            ce = b
            have = True
    if have:
        total += ce - cs
    return total


@njit(cache=True, nogil=True)
def _emit(out_s, out_e, k, lo, hi):
    """Append [lo, hi) (non-empty, lo >= last end) merging with a touching last piece."""
    if k > 0 and out_e[k - 1] == lo:
        out_e[k - 1] = hi
        return k
    out_s[k] = lo
    out_e[k] = hi
    return k + 1


@njit(cache=True, nogil=True)
def _intersect_sorted(a_s, a_e, b_s, b_e):
    """Two-pointer intersection of two disjoint sorted lists. O(N + M)."""
    n = a_s.shape[0]
    m = b_s.shape[0]
    out_s = np.empty(n + m, dtype=np.int64)
    out_e = np.empty(n + m, dtype=np.int64)
    k = np.int64(0)               # typed: a literal 0 would compile _emit twice
    i = 0
    j = 0
    while i < n and j < m:
        lo = a_s[i] if a_s[i] > b_s[j] else b_s[j]
        hi = a_e[i] if a_e[i] < b_e[j] else b_e[j]
        if lo < hi:
            k = _emit(out_s, out_e, k, lo, hi)
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return out_s[:k].copy(), out_e[:k].copy()


@njit(cache=True, nogil=True)
def _intersect_length_sorted(a_s, a_e, b_s, b_e):
    """Length of the intersection of two disjoint sorted lists. O(N + M)."""
    n = a_s.shape[0]
    m = b_s.shape[0]
    total = np.int64(0)
    i = 0
    j = 0
    while i < n and j < m:
        lo = a_s[i] if a_s[i] > b_s[j] else b_s[j]
        hi = a_e[i] if a_e[i] < b_e[j] else b_e[j]
        if lo < hi:
            total += hi - lo
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return total


@njit(cache=True, nogil=True)
def _subtract_sorted(a_s, a_e, b_s, b_e):
    """a minus b for two disjoint sorted lists. O(N + M)."""
    n = a_s.shape[0]
    m = b_s.shape[0]
    out_s = np.empty(n + m, dtype=np.int64)
    out_e = np.empty(n + m, dtype=np.int64)
    k = np.int64(0)               # typed: a literal 0 would compile _emit twice
    j = 0
    for i in range(n):
        cur = a_s[i]
        stop = a_e[i]
        if stop <= cur:
            continue
        # b intervals ending at or before cur cannot touch this or any later a.
        while j < m and b_e[j] <= cur:
            j += 1
        p = j
        while p < m and b_s[p] < stop:
            if b_s[p] > cur:
                k = _emit(out_s, out_e, k, cur, b_s[p])
            if b_e[p] > cur:
                cur = b_e[p]
            if cur >= stop:
                break
            p += 1
        if cur < stop:
            k = _emit(out_s, out_e, k, cur, stop)
    return out_s[:k].copy(), out_e[:k].copy()


@njit(cache=True, nogil=True)
def disjoint_length(s, e):
    """Total length (int64 ns) of disjoint intervals ``s[i]..e[i]`` (e.g. a ``union``)."""
    total = np.int64(0)
    for i in range(s.shape[0]):
        total += e[i] - s[i]
    return total


# --------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------

def union(start, end):
    """Merged union of an arbitrary interval list.

    Parameters
    ----------
    start, end : array_like of int, shape (N,)
        Interval ``i`` is ``[start[i], end[i])`` in int64 nanoseconds.  Any order;
        overlapping, nested, touching, duplicate and empty intervals are allowed.

    Returns
    -------
    (ustart, uend) : tuple of two new ``numpy.int64`` arrays, shape (K,), K <= N
        The canonical union: sorted, non-empty, strictly separated
        (``ustart[i + 1] > uend[i]``).  Touching intervals are merged; empty
        intervals contribute nothing.

    Complexity
    ----------
    O(N log N) for the stable argsort done here, then O(N) in the njit core.

    Raises
    ------
    ValueError
        if the lengths differ, an array is not one-dimensional, or ``end < start``
        somewhere.
    TypeError
        if the arrays do not hold integers.
    """
    s, e = _check_pair(start, end, "union")
    s, e = _sorted_by_start(s, e)
    return _union_sorted(s, e)


def union_length(start, end):
    """Total length covered by an arbitrary interval list, in the input unit (int64 ns).

    Same input, errors and complexity as ``union`` (O(N log N) sort, O(N)
    sweep without building the union).  Returns a Python ``int`` (int64 value);
    0 for an empty list.
    """
    s, e = _check_pair(start, end, "union_length")
    s, e = _sorted_by_start(s, e)
    return int(_union_length_sorted(s, e))


def union_lengths(start, end, cls, sets):
    """Length covered by the intervals of each set of classes, in one pass and without copies.

    Parameters
    ----------
    start, end : array_like of int, shape (N,)
        Interval ``i`` is ``[start[i], end[i])`` (int64 ns), any order, as for ``union``.
    cls : array_like of int, shape (N,)
        Each interval's class, ``0 <= cls[i] < C`` (C <= 127; held as int8).
    sets : array_like of bool, shape (J, C)
        ``sets[j, c]``: class ``c`` belongs to set ``j``.

    Returns
    -------
    list of J Python ``int``
        ``[union_length(start[m_j], end[m_j]) for each set j]`` with ``m_j = sets[j, cls]``:
        the same numbers as ``union_length`` of each subset.  Memory: one int64 index per
        interval (the start order); no subset, sorted copy or union is built, so N intervals
        cost 8 bytes each where the subsets' unions cost ~60 (the per-device metrics of a rank
        with 1.35 M kernels: ~11 MB instead of ~75).

    Complexity
    ----------
    O(N log N) for the stable argsort, then O(N * J) in the njit sweep.

    Raises
    ------
    ValueError
        for unequal lengths, ``end < start``, a class outside ``[0, C)`` or a ``sets`` that
        is not two-dimensional.
    TypeError
        if ``start``/``end``/``cls`` do not hold integers.
    """
    s, e = _check_pair(start, end, "union_lengths")
    c = as_int64(cls, "union_lengths cls") if not (isinstance(cls, np.ndarray) and cls.dtype.kind in "iu") else cls
    m = np.ascontiguousarray(sets, dtype=np.bool_)
    if m.ndim != 2:
        raise ValueError(f"union_lengths: sets must be two-dimensional (sets x classes), got shape {m.shape}")
    if c.shape[0] != s.shape[0]:
        raise ValueError(f"union_lengths: cls has {c.shape[0]} entries for {s.shape[0]} intervals")
    if c.shape[0] and (int(c.min()) < 0 or int(c.max()) >= m.shape[1] or m.shape[1] > 127):
        raise ValueError(f"union_lengths: classes must lie in [0, {m.shape[1]}) (at most 127 classes)")
    c = np.ascontiguousarray(c, dtype=np.int8)
    order = np.argsort(s, kind="stable")
    return [int(x) for x in _union_lengths_sorted(s, e, c, order, m)]


def intersect(a_start, a_end, b_start, b_end):
    """Intersection of two disjoint sorted interval lists.

    Parameters
    ----------
    a_start, a_end : array_like of int, shape (N,)
    b_start, b_end : array_like of int, shape (M,)
        Each pair is a disjoint sorted list in int64 nanoseconds (for example the
        output of ``union``): sorted by start and ``start[i + 1] >= end[i]``.

    Returns
    -------
    (s, e) : tuple of two new ``numpy.int64`` arrays, shape (K,), K < N + M
        The canonical union of the points lying in both A and B.

    Complexity
    ----------
    O(N + M) two-pointer merge (plus O(N + M) validation).

    Raises
    ------
    ValueError
        if a pair's lengths differ, ``end < start`` somewhere, or a list is not
        disjoint sorted.
    TypeError
        if the arrays do not hold integers.
    """
    a_s, a_e = _check_disjoint_sorted(a_start, a_end, "intersect: A")
    b_s, b_e = _check_disjoint_sorted(b_start, b_end, "intersect: B")
    return _intersect_sorted(a_s, a_e, b_s, b_e)


def intersect_length(a_start, a_end, b_start, b_end):
    """Length of the intersection of two disjoint sorted lists (int64 ns, as Python ``int``).

    Same inputs, errors and O(N + M) complexity as ``intersect``; nothing is
    allocated besides the validation temporaries.
    """
    a_s, a_e = _check_disjoint_sorted(a_start, a_end, "intersect_length: A")
    b_s, b_e = _check_disjoint_sorted(b_start, b_end, "intersect_length: B")
    return int(_intersect_length_sorted(a_s, a_e, b_s, b_e))


def subtract(a_start, a_end, b_start, b_end):
    """Set difference A minus B of two disjoint sorted interval lists.

    Parameters
    ----------
    a_start, a_end : array_like of int, shape (N,)
    b_start, b_end : array_like of int, shape (M,)
        Each pair is a disjoint sorted list in int64 nanoseconds (for example the
        output of ``union``).

    Returns
    -------
    (s, e) : tuple of two new ``numpy.int64`` arrays, shape (K,), K <= N + M
        The canonical union of the points of A not in B.

    Complexity
    ----------
    O(N + M): B is scanned with a pointer that never moves back past an interval
    ending before the current A interval.

    Raises
    ------
    ValueError
        if a pair's lengths differ, ``end < start`` somewhere, or a list is not
        disjoint sorted.
    TypeError
        if the arrays do not hold integers.
    """
    a_s, a_e = _check_disjoint_sorted(a_start, a_end, "subtract: A")
    b_s, b_e = _check_disjoint_sorted(b_start, b_end, "subtract: B")
    return _subtract_sorted(a_s, a_e, b_s, b_e)


def subtract_length(a_start, a_end, b_start, b_end):
    """Length of A minus B (int64 ns, as Python ``int``), computed as |A| - |A ∩ B|.

    Same inputs, errors and O(N + M) complexity as ``subtract``.
    """
    a_s, a_e = _check_disjoint_sorted(a_start, a_end, "subtract_length: A")
    b_s, b_e = _check_disjoint_sorted(b_start, b_end, "subtract_length: B")
    return int(disjoint_length(a_s, a_e) - _intersect_length_sorted(a_s, a_e, b_s, b_e))
