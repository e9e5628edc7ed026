"""Plain-Python twin of ``streamtrace.kernels.stepgpu``: the rules in NumPy, a column at a time, as
``streamtrace.aggregate.critical_gpu`` ran them before the kernel (each device's events sorted by
end, every candidate of every event stacked and the latest taken by ``argmax``)."""
from __future__ import annotations

import numpy as np

__all__ = ["inferred_waits_py", "prev_on_stream_py", "gpu_edges_py"]

NEG = -(2 ** 62)


def prev_on_stream_py(dev, stream):
    """Twin of ``prev_on_stream``."""
    n = len(dev)
    same = np.concatenate(([False], (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])))[:n]
    return np.where(same, np.arange(n) - 1, -1).astype(np.int64)


def inferred_waits_py(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits, has_waits):
    """Twin of ``inferred_waits``."""
    n = len(ts)
    x = np.full(n, -1, np.int64)
    for d in np.unique(dev).tolist():
        on = np.flatnonzero(dev == d)
        oe = on[np.argsort(te[on], kind="stable")]
        j = np.searchsorted(te[oe], ts[on], "right") - 1
        cand = np.where(j >= 0, oe[np.maximum(j, 0)], -1)
        x[on] = np.where((cand >= 0) & (stream[np.maximum(cand, 0)] != stream[on]), cand, -1)
    if has_waits:
        lo = np.where(prev >= 0, launch_t[np.maximum(prev, 0)], s0)
        after = np.searchsorted(waits, launch_t, "left") - np.searchsorted(waits, lo, "right") > 0
        x = np.where(after | (launch_node < 0), x, -1)
    return x


def gpu_edges_py(ts, te, comm, memory, sn, en, launch_node, launch_t, prev, x, prior, first, s0, cats):
    """Twin of ``gpu_edges``."""
    n = len(ts)
    rows = np.arange(n)
    out = []

    def add(src, dst, w, cat, row):
        out.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64),
                    np.broadcast_to(np.asarray(cat, np.int8), len(row)), np.asarray(row, np.int64)))
    body = ~comm & (en != sn)
    add(sn[body], en[body], (te - ts)[body], np.where(memory[body], cats[1], cats[0]), rows[body])
    cand_t = np.stack([np.where(launch_node >= 0, launch_t, NEG), np.where(prev >= 0, te[np.maximum(prev, 0)], NEG),
                       np.where(x >= 0, te[np.maximum(x, 0)], NEG), prior]).reshape(4, n)
    cand_t = np.where(cand_t <= ts, cand_t, NEG)
    bind = np.argmax(cand_t, axis=0)
    has = cand_t.max(axis=0) > NEG
    for c, srcs, cat in ((0, launch_node, cats[2]), (1, np.where(prev >= 0, en[np.maximum(prev, 0)], -1), cats[3]),
                         (2, np.where(x >= 0, en[np.maximum(x, 0)], -1), cats[3])):
        m = (srcs >= 0) & (cand_t[c] > NEG)
        won = has[m] & (bind[m] == c)
        add(srcs[m], sn[m], np.where(won, ts[m] - cand_t[c][m], 0), np.where(won, cat, cats[4]), rows[m])
    m = has & (bind == 3)
    add(np.full(int(m.sum()), first), sn[m], ts[m] - s0, cats[5], rows[m])
    m = ~has
    add(np.full(int(m.sum()), first), sn[m], np.maximum(ts[m] - s0, 0), cats[3], rows[m])
    return tuple(np.concatenate([o[i] for o in out]).astype(t) for i, t in
                 enumerate((np.int64, np.int64, np.int64, np.int8, np.int64)))
