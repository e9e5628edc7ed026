"""Plain-Python twin of ``streamtrace.kernels.chains``: the instants sorted at once on their whole
key (no merge), each edge's naming op walked up the call tree one edge at a time, the cut ops'
nesting counted per edge from scratch; and the two rules it implements, in NumPy, as the critical path
specified them first (``instant_order``, ``covering``: tested against brute forces in
tests/unit/aggregate/test_critical_round2.py)."""
from __future__ import annotations

import numpy as np

__all__ = ["thread_chain_py", "thread_waits_py", "instant_order", "covering"]


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


def instant_order(ts, te, depth, parent) -> np.ndarray:
    """The order of one thread's ``2n`` instants (``n`` starts ``ts``, then ``n`` ends ``te``, int64
    ns; ``depth`` int[n]; ``parent`` int[n]: each op's parent as an index into these ops, -1 none):
    the depth-first walk of the call tree, which is time order.  Ops are numbered in the call tree's
    pre-order (start ascending, end descending, index: the order analyze's call tree nests them
    in); at equal time a start comes at its op's number, an end after the last op of its subtree,
    deeper ends first.  So a zero-length op's end follows its own start (and its zero-length
    children), inside its parent even when that ends at the same instant."""
    n = len(ts)
    pre = np.empty(n, np.int64)
    pre[np.lexsort((np.arange(n), -te, ts))] = np.arange(n)
    last = pre.copy()                                   # the pre-order number of the subtree's last op
    has = parent >= 0
    for d in range(int(depth.max()) if n else 0, 0, -1):
        m = has & (depth == d)
        np.maximum.at(last, parent[m], last[m])
    t = np.concatenate([ts, te])
    start = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    key = np.r_[2 * pre, 2 * last + 1]
    deep = np.r_[np.zeros(n, np.int64), -depth.astype(np.int64)]
    return np.lexsort((~start, deep, key, t))


def covering(ops, inner, t0, t1) -> np.ndarray:
    """``inner`` (op rows, -1 none) moved up the call tree until the op covers ``[t0, t1]`` (int64
    ns each): the innermost op open over the whole interval, -1 when none is."""
    ts, te, parent = ops["ts_ns"], ops["ts_ns"] + ops["dur_ns"], ops["parent"]
    n = len(ts)
    cur = inner.copy()
    for _ in range(256):
        ok = cur >= 0
        c = np.maximum(cur, 0)
        bad = ok & ((ts[c] > t0) | (te[c] < t1))
        if not bad.any():
            break
        up = parent[c[bad]]
        cur[bad] = np.where((up >= 0) & (up < n), up, -1)
    return cur


def thread_waits_py(t, w, keep, xt, xw, xcat, xkeep, min_wait, busy_code):
    """Twin of ``thread_waits`` (same arguments and results): the candidate edges tested at once with
    NumPy, from the worker's running sums, as ``critical_cpu`` did before the kernel."""
    t, xt = np.asarray(t, np.int64), np.asarray(xt, np.int64)
    if len(t) < 2 or len(xt) < 2:
        return np.zeros((0, 3), np.int64)
    cand = np.flatnonzero(np.asarray(keep) & (np.asarray(w) >= min_wait))
    a, b = t[cand], t[cand + 1]
    busy = np.asarray(xcat) == busy_code
    f = np.searchsorted(xt, a, "left")
    last = np.searchsorted(xt, b, "right") - 1
    cum = np.concatenate(([0], np.cumsum(np.where(busy, xw, 0))))
    cut = np.concatenate(([0], np.cumsum(~np.asarray(xkeep, bool))))
    fm, lm = np.minimum(f, len(xt) - 1), np.maximum(last, 0)
    idle_a = (fm == 0) | ~busy[np.maximum(fm - 1, 0)]
    idle_b = (lm >= len(xw)) | ~busy[np.minimum(lm, len(xw) - 1)]
    work = cum[np.maximum(lm, fm)] - cum[fm]
    ok = (f < last) & idle_a & idle_b & (2 * work >= (b - a)) & (cut[np.maximum(lm, fm)] == cut[fm])
    return np.stack([cand[ok], fm[ok], lm[ok]], axis=1).astype(np.int64).reshape(-1, 3)
