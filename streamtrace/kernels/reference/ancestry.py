"""Plain-Python twins of :mod:`streamtrace.kernels.ancestry`."""
from __future__ import annotations

import numpy as np

__all__ = ["nearest_marked_py", "outermost_marked_py"]


def nearest_marked_py(parent, order, mark):
    """Twin of :func:`nearest_marked`: walk up from every node."""
    out = []
    for i in range(len(parent)):
        j = i
        while j >= 0 and not mark[j]:
            j = parent[j]
        out.append(j)
    return np.asarray(out, np.int64)


def outermost_marked_py(parent, order, mark):
    """Twin of :func:`outermost_marked`: walk up from every node, keep the last mark."""
    out = []
    for i in range(len(parent)):
        j, best = i, -1
        while j >= 0:
            if mark[j]:
                best = j
            j = parent[j]
        out.append(best)
    return np.asarray(out, np.int64)
