"""Plain-Python twin of ``streamtrace.kernels.chains``: the instants sorted at once on their whole
key (no merge), each edge's naming op walked up the call tree one edge at a time, the cut ops'
nesting counted per edge from scratch."""
from __future__ import annotations

import numpy as np

__all__ = ["thread_chain_py"]


def thread_chain_py(sel, ts, dur, parent, depth, tid, is_step, this_tid, cut, host_gap, cpu_op):
    """Twin of ``thread_chain`` (same arguments and results)."""
    sel = [int(x) for x in sel]
    ts, dur, parent, depth, tid = (np.asarray(x).tolist() for x in (ts, dur, parent, depth, tid))
    is_step, cut = np.asarray(is_step).tolist(), set(np.asarray(cut).tolist())
    n, nops = len(sel), len(ts)
    start = [ts[r] for r in sel]
    end = [ts[r] + dur[r] for r in sel]
    dep = [depth[r] for r in sel]
    loc = [sel.index(parent[r]) if parent[r] >= 0 and parent[r] in sel else -1 for r in sel]
    by_pre = sorted(range(n), key=lambda i: (start[i], -end[i], i))
    pre = [0] * n
    for k, i in enumerate(by_pre):
        pre[i] = k
    last = list(pre)
    for d in range(max(dep), 0, -1):                 # deepest first; one depth read before it is written
        level = [(loc[i], last[i]) for i in range(n) if loc[i] >= 0 and dep[i] == d]
        for p, v in level:
            last[p] = max(last[p], v)
    inst = [(start[i], 2 * pre[i], 0, False, i) for i in range(n)] + \
           [(end[i], 2 * last[i] + 1, -dep[i], True, n + i) for i in range(n)]
    inst.sort()
    t = [x[0] for x in inst]
    is_start = [not x[3] for x in inst]
    at = [x[4] % n for x in inst]
    op = [sel[i] for i in at]
    w, cat, inner, keep = [], [], [], []
    for k in range(2 * n - 1):
        w.append(t[k + 1] - t[k])
        x = op[k] if is_start[k] else parent[op[k]]
        if not 0 <= x < nops or tid[x] != this_tid:
            x = -1
        steps = 0
        while x >= 0 and not (ts[x] <= t[k] and ts[x] + dur[x] >= t[k + 1]) and steps < 256:
            x = parent[x] if 0 <= parent[x] < nops else -1
            steps += 1
        inner.append(x)
        cat.append(host_gap if x < 0 or is_step[x] else cpu_op)
        opened = sum(1 if is_start[j] else -1 for j in range(k + 1) if op[j] in cut)
        keep.append(opened <= 0)
    a = lambda v, d: np.asarray(v, d).reshape(-1)  # noqa: E731
    return (a(t, np.int64), a(is_start, bool), a(op, np.int64), a(at, np.int64), a(w, np.int64), a(cat, np.int8),
            a(inner, np.int64), a(keep, bool))
