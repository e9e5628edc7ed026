"""Plain-Python twins of ``streamtrace.kernels.intervals``.

* union: a coverage-counting event sweep (+1 at each start, -1 at each end;
  at equal times starts are processed first so touching intervals merge),
  instead of the sort-and-extend merge of the numba core.
* intersect / subtract: a sweep over *elementary segments*: every boundary of
  A and B is collected, and each segment between consecutive boundaries is kept
  when it lies in both (intersect) or in A but not in B (subtract); membership
  is looked up with ``bisect``.  The numba cores use two-pointer merges.
"""
from __future__ import annotations

import bisect

import numpy as np

__all__ = [
    "int_list",
    "union",
    "union_length",
    "union_lengths",
    "intersect",
    "intersect_length",
    "subtract",
    "subtract_length",
]

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


def int_list(x, what):
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return []
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must hold integers (int64 ns), got dtype {arr.dtype}")
    out = [int(v) for v in arr.tolist()]
    for v in out:
        if not _I64_MIN <= v <= _I64_MAX:
            raise ValueError(f"{what} has values above the int64 range")
    return out


def bounds(start, end, what):
    """``start`` and ``end`` (int64 ns, shape (N,)) as two lists of int, checked: same length,
    ``end >= start`` everywhere.  Raises ValueError / TypeError naming ``what``."""
    s = int_list(start, what + " start")
    e = int_list(end, what + " end")
    if len(s) != len(e):
        raise ValueError(f"{what}: start and end lengths differ ({len(s)} != {len(e)})")
    for i, (a, b) in enumerate(zip(s, e)):
        if b < a:
            raise ValueError(f"{what}: end < start at index {i} ({b} < {a})")
    return s, e


def _pairs(start, end, what):
    return list(zip(*bounds(start, end, what)))


def _disjoint_sorted(start, end, what):
    pairs = _pairs(start, end, what)
    for i in range(1, len(pairs)):
        if pairs[i][0] < pairs[i - 1][1]:
            raise ValueError(
                f"{what} is not a disjoint sorted interval list: interval {i} starts at "
                f"{pairs[i][0]} before interval {i - 1} ends at {pairs[i - 1][1]}"
            )
    return pairs


def _arrays(pairs):
    s = np.array([p[0] for p in pairs], dtype=np.int64)
    e = np.array([p[1] for p in pairs], dtype=np.int64)
    return s, e


def _union_pairs(pairs):
    # (time, order): order 0 = start, 1 = end, so at equal times every start is
    # seen before any end and coverage never drops to zero between touching ones.
    events = []
    for a, b in pairs:
        if b > a:
            events.append((a, 0))
            events.append((b, 1))
    events.sort()
    out = []
    depth = 0
    opened = 0
    for t, kind in events:
        if kind == 0:
            if depth == 0:
                opened = t
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                out.append((opened, t))
    return out


def _segments(a_pairs, b_pairs, keep):
    """Elementary-segment sweep; keep(in_a, in_b) decides which segments survive."""
    a_starts = [p[0] for p in a_pairs]
    b_starts = [p[0] for p in b_pairs]

    def member(pairs, starts, x):
        # the interval with the largest start <= x (disjoint sorted, so only it can
        # contain x; empty intervals never contain anything)
        k = bisect.bisect_right(starts, x) - 1
        while k >= 0 and pairs[k][0] == pairs[k][1]:
            k -= 1
        return k >= 0 and pairs[k][0] <= x < pairs[k][1]

    points = sorted({p for pr in a_pairs + b_pairs for p in pr})
    out = []
    for lo, hi in zip(points, points[1:]):
        if keep(member(a_pairs, a_starts, lo), member(b_pairs, b_starts, lo)):
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def union(start, end):
    """Twin of ``streamtrace.kernels.intervals.union`` (event sweep)."""
    return _arrays(_union_pairs(_pairs(start, end, "union")))


def union_length(start, end):
    """Twin of ``streamtrace.kernels.intervals.union_length``."""
    return sum(b - a for a, b in _union_pairs(_pairs(start, end, "union_length")))


def union_lengths(start, end, cls, sets):
    """Twin of ``streamtrace.kernels.intervals.union_lengths``: each set's subset through
    the event-sweep ``union_length`` (the kernel runs one sort-and-extend pass for all)."""
    pairs = _pairs(start, end, "union_lengths")
    c = int_list(cls, "union_lengths cls")
    m = np.asarray(sets, dtype=bool)
    if m.ndim != 2:
        raise ValueError("union_lengths: sets must be two-dimensional")
    if len(c) != len(pairs):
        raise ValueError("union_lengths: cls length differs")
    if any(x < 0 or x >= m.shape[1] for x in c) or m.shape[1] > 127:
        raise ValueError("union_lengths: class out of range")
    out = []
    for row in m.tolist():
        sub = [p for p, x in zip(pairs, c) if row[x]]
        out.append(sum(b - a for a, b in _union_pairs(sub)))
    return out


def intersect(a_start, a_end, b_start, b_end):
    """Twin of ``streamtrace.kernels.intervals.intersect`` (segment sweep)."""
    a = _disjoint_sorted(a_start, a_end, "intersect: A")
    b = _disjoint_sorted(b_start, b_end, "intersect: B")
    return _arrays(_segments(a, b, lambda in_a, in_b: in_a and in_b))


def intersect_length(a_start, a_end, b_start, b_end):
    """Twin of ``streamtrace.kernels.intervals.intersect_length``."""
    a = _disjoint_sorted(a_start, a_end, "intersect_length: A")
    b = _disjoint_sorted(b_start, b_end, "intersect_length: B")
    return sum(hi - lo for lo, hi in _segments(a, b, lambda in_a, in_b: in_a and in_b))


def subtract(a_start, a_end, b_start, b_end):
    """Twin of ``streamtrace.kernels.intervals.subtract`` (segment sweep)."""
    a = _disjoint_sorted(a_start, a_end, "subtract: A")
    b = _disjoint_sorted(b_start, b_end, "subtract: B")
    return _arrays(_segments(a, b, lambda in_a, in_b: in_a and not in_b))


def subtract_length(a_start, a_end, b_start, b_end):
    """Twin of ``streamtrace.kernels.intervals.subtract_length``."""
    a = _disjoint_sorted(a_start, a_end, "subtract_length: A")
    b = _disjoint_sorted(b_start, b_end, "subtract_length: B")
    return sum(hi - lo for lo, hi in _segments(a, b, lambda in_a, in_b: in_a and not in_b))
