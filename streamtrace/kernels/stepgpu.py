"""The GPU side of one rank's step graph in one pass (numba; plain-Python twin in
``streamtrace.kernels.reference.stepgpu``), for ``streamtrace.aggregate.critical_gpu.gpu_events``,
whose module docstring states the rules: each GPU event's duration, then what it waited for (its
launch, the previous event on its stream, an event on another stream, GPU work queued before the
step), the latest of them carrying the wait and the others weighing 0.

The events are one step's rows, sorted by device, stream and start (``n`` of them): ``dev`` /
``stream`` int64, ``ts`` / ``te`` int64 ns, ``comm`` / ``memory`` bool (a communication event, cut
from the graph, and a memory copy or set), ``sn`` / ``en`` their start and end node ids (int64; a
zero-length event's end is its start), ``launch_node`` (-1 none) and ``launch_t`` (int64 ns) their
launch, ``prior`` the end of earlier GPU work they queue behind (``NEG`` none).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache
from .sentinels import NEG

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["inferred_waits", "prev_on_stream", "gpu_edges", "gpu_step", "CATS"]

CATS = ("compute_kernel", "memcpy", "launch_delay", "kernel_gap", "wait", "queued")
"""The ``Category`` names whose codes ``gpu_edges``' ``cats`` holds, in this order."""


@njit(cache=True)
def _count_at_most(a, lo, hi, x, order):
    """How many of ``a[order[lo:hi]]`` (sorted ascending) are <= ``x``: ``np.searchsorted(...,
    "right")`` on the slice."""
    left, right = lo, hi
    while left < right:
        mid = (left + right) // 2
        if a[order[mid]] <= x:
            left = mid + 1
        else:
            right = mid
    return left - lo


@njit(cache=True)
def _count_below(a, x):
    """How many of ``a`` (sorted ascending) are < ``x``: ``np.searchsorted(a, x, "left")``."""
    left, right = 0, a.shape[0]
    while left < right:
        mid = (left + right) // 2
        if a[mid] < x:
            left = mid + 1
        else:
            right = mid
    return left


@njit(cache=True)
def inferred_waits(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits, has_waits):
    """Cross-stream waits where the trace does not link them (``critical_gpu``'s rule): per event the
    row of the latest end on its device at or before its start (ties: the last such row in row order)
    when that event is on another stream, else -1; with ``has_waits``, only for an event without a
    launch or the first launched on its stream after a wait call (``waits``: their sorted start times,
    int64 ns, after the previous event's launch, or ``s0`` for a stream's first).  int64[n]."""
    n = ts.shape[0]
    x = np.full(n, -1, np.int64)
    a = 0
    while a < n:
        b = a
        while b < n and dev[b] == dev[a]:
            b += 1
        order = np.argsort(te[a:b], kind="mergesort") + a       # the device's events by end, stable
        for i in range(a, b):
            j = _count_at_most(te, 0, b - a, ts[i], order) - 1
            if j >= 0:
                c = order[j]
                if stream[c] != stream[i]:
                    x[i] = c
        a = b
    if has_waits:
        for i in range(n):
            if launch_node[i] < 0 or x[i] < 0:
                continue
            lo = launch_t[prev[i]] if prev[i] >= 0 else s0
            if _count_below(waits, launch_t[i]) - _count_below(waits, lo + 1) <= 0:   # no wait call in (lo, launch)
                x[i] = -1
    return x


@njit(cache=True)
def prev_on_stream(dev, stream):
    """Per event the row of the previous event on its device and stream, -1 for a stream's first."""
    n = dev.shape[0]
    prev = np.full(n, -1, np.int64)
    for i in range(1, n):
        if dev[i] == dev[i - 1] and stream[i] == stream[i - 1]:
            prev[i] = i - 1
    return prev


@njit(cache=True)
def gpu_edges(ts, te, comm, memory, sn, en, launch_node, launch_t, prev, x, prior, first, s0, cats):
    """The edges of one step's GPU events (module docstring), ``prev`` / ``x`` the rows of the previous
    event on the stream and of the event on another stream each waits for (-1 none), ``first`` the
    step's start node at ``s0`` (ns), ``cats`` int8 codes of ``CATS``.  Returns ``(src, dst, w, cat,
    row)``: int64 node ids, int64 ns weights, int8 categories and the event each edge belongs to,
    grouped as the rule adds them: every event's duration (not a communication event's, not a
    zero-length one's), the launches, the stream order, the other streams, the queued events, the
    events with nothing to wait for; each group in row order.  O(n)."""
    n = ts.shape[0]
    cand = np.empty((n, 4), np.int64)
    bind = np.empty(n, np.int64)
    for i in range(n):
        cand[i, 0] = launch_t[i] if launch_node[i] >= 0 else NEG
        cand[i, 1] = te[prev[i]] if prev[i] >= 0 else NEG
        cand[i, 2] = te[x[i]] if x[i] >= 0 else NEG
        cand[i, 3] = prior[i]
        best = 0
        for c in range(4):
            if cand[i, c] > ts[i]:
                cand[i, c] = NEG                         # after the start: not what the event waited for
            if cand[i, c] > cand[i, best]:
                best = c
        bind[i] = best if cand[i, best] > NEG else -1
    m = 6 * n
    src = np.empty(m, np.int64)
    dst = np.empty(m, np.int64)
    w = np.empty(m, np.int64)
    cat = np.empty(m, np.int8)
    row = np.empty(m, np.int64)
    k = 0
    for i in range(n):
        if not comm[i] and en[i] != sn[i]:
            src[k], dst[k], w[k], cat[k], row[k] = sn[i], en[i], te[i] - ts[i], cats[1] if memory[i] else cats[0], i
            k += 1
    for c in range(3):
        for i in range(n):
            s = launch_node[i] if c == 0 else (en[prev[i]] if prev[i] >= 0 else -1) if c == 1 else \
                (en[x[i]] if x[i] >= 0 else -1)
            if s < 0 or cand[i, c] <= NEG:
                continue
            won = bind[i] == c
            src[k], dst[k], row[k] = s, sn[i], i
            w[k] = ts[i] - cand[i, c] if won else 0
            cat[k] = (cats[2] if c == 0 else cats[3]) if won else cats[4]
            k += 1
    for i in range(n):
        if bind[i] == 3:
            src[k], dst[k], w[k], cat[k], row[k] = first, sn[i], ts[i] - s0, cats[5], i
            k += 1
    for i in range(n):
        if bind[i] < 0:
            src[k], dst[k], w[k], cat[k], row[k] = first, sn[i], max(ts[i] - s0, 0), cats[3], i
            k += 1
    return src[:k].copy(), dst[:k].copy(), w[:k].copy(), cat[:k].copy(), row[:k].copy()


@njit(cache=True)
def gpu_step(dev, stream, ts, te, comm, memory, sn, en, launch_node, launch_t, links, has_links, waits, has_waits,
             prior, first, s0, cats):
    """``gpu_edges`` of one step's events with their ``prev_on_stream`` and cross-stream waits: the
    trace's ``links`` (int64[n], the row each event waits for, -1 none) with ``has_links``, else
    ``inferred_waits`` (``waits``, ``has_waits``).  One kernel for the three: each costs its process
    a few ms to load from the cache, whatever its size."""
    prev = prev_on_stream(dev, stream)
    x = links if has_links else inferred_waits(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits,
                                               has_waits)
    return gpu_edges(ts, te, comm, memory, sn, en, launch_node, launch_t, prev, x, prior, first, s0, cats)
