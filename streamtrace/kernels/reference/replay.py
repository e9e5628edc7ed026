"""Plain-Python twin of ``streamtrace.kernels.replay``: every path from each source enumerated
(depth first), the longest direct one and the longest hopping one compared per target."""
from __future__ import annotations

import numpy as np

__all__ = ["anchor_pairs_py"]

NEG = -(2 ** 62)


def anchor_pairs_py(n, src, dst, w, cat, is_src, is_sink, vend, ncat):
    """Twin of ``anchor_pairs``: for each source, a depth-first walk
    over every path (an edge, or a virtual hop arrival -> its end of weight 0) records per node the
    longest *direct* length (no hop, no other source before the node) and the longest *hopping* one;
    a target is kept when its direct length beats every hopping one.  Returns the same ``pairs``
    (the heaviest-edge column and ``cats`` of one longest direct path, not necessarily the kernel's
    choice among equally long paths) and ``cats``."""
    src, dst, w, cat = (np.asarray(x).tolist() for x in (src, dst, w, cat))
    for u, v, x, c in zip(src, dst, w, cat):
        if u >= v or u < 0 or v >= n or x < 0 or c < 0 or c >= ncat:
            raise ValueError("edge not in topological order, node or category out of range, or negative weight")
    out = {u: [e for e in range(len(src)) if src[e] == u] for u in range(n)}
    rows, cats = [], []
    for o in range(n):
        if not is_src[o]:
            continue
        best0, path0, best1 = {}, {}, {}

        def walk(u, length, edges, hopped):
            if u != o:
                if hopped:
                    best1[u] = max(best1.get(u, NEG), length)
                elif length > best0.get(u, NEG):
                    best0[u], path0[u] = length, list(edges)
            hop = hopped or (u != o and bool(is_src[u]))
            for e in out[u]:
                walk(dst[e], length + w[e], edges + [e], hop)
            if int(vend[u]) > u:
                walk(int(vend[u]), length, edges, True)
        walk(o, 0, [], False)
        for v in sorted(best0):
            if (is_sink[v] or is_src[v]) and best0[v] > best1.get(v, NEG):
                p = path0[v]
                row = [0] * ncat
                for e in p:
                    row[cat[e]] += w[e]
                top = max(p, key=lambda e: (w[e], -e)) if p else -1
                rows.append([o, v, best0[v], top])
                cats.append(row)
    return np.asarray(rows, np.int64).reshape(-1, 4), np.asarray(cats, np.int64).reshape(-1, ncat)
