"""Plain-Python twin of ``streamtrace.kernels.windows``.

* innermost_window_ref: brute force, no sort and no stack: for every query, every window
  is tested for ``start <= t < end`` and the best one is kept by the rule's key
  ``(start, -end, position)``, largest wins.  O(N·Q).
* shortest_overlapping_ref: brute force as well: every window is tested for overlap with
  every query, the smallest ``(length, -start, -position)`` wins.  O(N·Q).
"""
from __future__ import annotations

import numpy as np

from .intervals import bounds, int_list

__all__ = ["innermost_window_ref", "shortest_overlapping_ref"]


def innermost_window_ref(start, end, t):
    """Twin of ``streamtrace.kernels.windows.innermost`` (brute force): int64 array of
    ``len(t)``, the input position of each query's innermost window or -1.  Same errors."""
    s, e = bounds(start, end, "windows")
    out = []
    for x in int_list(t, "query times"):
        best, best_key = -1, None
        for i, (a, b) in enumerate(zip(s, e)):
            if a <= x < b:
                key = (a, -b, i)
                if best_key is None or key > best_key:
                    best, best_key = i, key
        out.append(best)
    return np.array(out, dtype=np.int64)


def shortest_overlapping_ref(start, end, q_start, q_end):
    """Twin of ``streamtrace.kernels.windows.shortest_overlapping`` (brute force)."""
    s, e = bounds(start, end, "windows")
    qs, qe = bounds(q_start, q_end, "queries")
    out = []
    for x, y in zip(qs, qe):
        best, best_key = -1, None
        for i, (a, b) in enumerate(zip(s, e)):
            hit = a < b and (a <= x < b if x == y else (a < y and x < b))
            if hit and (best_key is None or (b - a, -a, -i) < best_key):
                best, best_key = i, (b - a, -a, -i)
        out.append(best)
    return np.array(out, dtype=np.int64)
