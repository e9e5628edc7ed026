"""Plain-Python twin of ``streamtrace.kernels.gaps``."""
from __future__ import annotations

import numpy as np

__all__ = ["running_end_before_py"]


def running_end_before_py(first, end):
    """Twin of ``running_end_before``: for every row, look back over the earlier rows of
    its segment and take the largest end (the earliest row holding it)."""
    n = len(end)
    starts = [i for i in range(n) if i == 0 or first[i]]
    prev_end = np.asarray(end, np.int64).copy()
    prev_row = np.full(n, -1, np.int64)
    for k, s in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else n
        for i in range(s + 1, stop):
            earlier = [int(end[j]) for j in range(s, i)]
            best = max(earlier)
            prev_end[i] = best
            prev_row[i] = s + earlier.index(best)
    return prev_end, prev_row
