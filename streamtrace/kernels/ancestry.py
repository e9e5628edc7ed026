"""Per-node facts inherited down a call tree (numba; plain-Python twins in
:mod:`streamtrace.kernels.reference.ancestry`).

``parent``/``order`` come from :func:`streamtrace.kernels.tree.build_call_tree`
(``order`` lists parents before children).  Each kernel is one pass over ``order``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["nearest_marked", "outermost_marked"]


@njit(cache=True)
def nearest_marked(parent, order, mark):
    """For each node, the index of the nearest ancestor-or-self with ``mark`` set
    (bool[N]), or -1.  O(N)."""
    out = np.full(parent.shape[0], -1, np.int64)
    for q in range(order.shape[0]):
        i = order[q]
        if mark[i]:
            out[i] = i
        elif parent[i] >= 0:
            out[i] = out[parent[i]]
    return out


@njit(cache=True)
def outermost_marked(parent, order, mark):
    """For each node, the index of the outermost ancestor-or-self with ``mark`` set,
    or -1.  O(N)."""
    out = np.full(parent.shape[0], -1, np.int64)
    for q in range(order.shape[0]):
        i = order[q]
        p = parent[i]
        if p >= 0 and out[p] >= 0:
            out[i] = out[p]
        elif mark[i]:
            out[i] = i
    return out
