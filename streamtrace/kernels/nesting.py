"""Slice-nesting check for one track (numba; plain-Python twin in
``streamtrace.kernels.reference.nesting``).

Perfetto's JSON importer builds a stack of slices per (pid, tid) track: a slice
must end inside the slice that encloses its start, or it is cut / dropped.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["count_bad_nesting", "sort_track"]


@njit(cache=True)
def count_bad_nesting(start, end):
    """Count slices that overlap their enclosing slice without nesting in it.

    ``start``, ``end``: int64 arrays (ns) of one track, sorted by start ascending
    then end descending.  A slice starting inside the current top of the stack
    must end no later than it; otherwise it is counted as bad (and not pushed).
    O(N) amortised (each slice is pushed and popped at most once)."""
    n = start.shape[0]
    stack = np.empty(n, np.int64)   # ends of open slices
    top = 0
    bad = 0
    for i in range(n):
        s = start[i]
        e = end[i]
        while top > 0 and stack[top - 1] <= s:
            top -= 1
        if top > 0 and e > stack[top - 1]:
            bad += 1
            continue
        stack[top] = e
        top += 1
    return bad


def sort_track(start, end):
    """Sort a track's slices by start ascending, end descending (parents first)."""
    order = np.lexsort((-end, start))
    return start[order], end[order]
