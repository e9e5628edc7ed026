"""Per-node facts inherited down a call tree (numba; plain-Python twins in
``streamtrace.kernels.reference.ancestry``).

``parent``/``order`` come from ``streamtrace.kernels.tree.build_call_tree``
(``order`` lists parents before children).  Each kernel is one pass over ``order``,
except ``same_name_ancestor``, which walks up from every node.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["nearest_marked", "outermost_marked", "same_name_ancestor"]


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


@njit(cache=True)
def same_name_ancestor(parent, code):
    """For each node, True when one of its proper ancestors has the same ``code`` (int[N],
    e.g. the op name's index in a dictionary): a ``aten::linear`` inside ``aten::linear``,
    a Python frame inside the same frame.  ``parent``: int64[N], -1 for roots, any row order.
    O(N x depth); a walk stops after N steps, so a (malformed) cycle cannot hang it."""
    n = parent.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(n):
        j = parent[i]
        steps = 0
        while j >= 0 and steps < n:
            if code[j] == code[i]:
                out[i] = True
                break
            j = parent[j]
            steps += 1
    return out
