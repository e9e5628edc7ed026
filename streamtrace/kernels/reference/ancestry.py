"""Plain-Python twins of ``streamtrace.kernels.ancestry``."""
from __future__ import annotations

import numpy as np

__all__ = ["nearest_marked_py", "outermost_marked_py", "same_name_ancestor_py"]


def nearest_marked_py(parent, order, mark):
    """Twin of ``nearest_marked``: walk up from every node."""
    out = []
    for i in range(len(parent)):
        j = i
        while j >= 0 and not mark[j]:
            j = parent[j]
        out.append(j)
    return np.asarray(out, np.int64)


def outermost_marked_py(parent, order, mark):
    """Twin of ``outermost_marked``: walk up from every node, keep the last mark."""
    out = []
    for i in range(len(parent)):
        j, best = i, -1
        while j >= 0:
            if mark[j]:
                best = j
            j = parent[j]
        out.append(best)
    return np.asarray(out, np.int64)


def same_name_ancestor_py(parent, code):
    """Twin of ``same_name_ancestor``: a depth-first walk from every root carrying the
    multiset of codes on the path from the root (nodes unreachable from a root: False)."""
    n = len(parent)
    children = [[] for _ in range(n)]
    roots = []
    for i in range(n):
        (children[int(parent[i])] if parent[i] >= 0 else roots).append(i)
    out = np.zeros(n, bool)
    for r in roots:
        stack = [(r, ())]
        while stack:
            i, path = stack.pop()
            out[i] = code[i] in path
            stack += [(c, path + (code[i],)) for c in children[i]]
    return out
