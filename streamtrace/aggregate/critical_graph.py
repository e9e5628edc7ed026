"""The vocabulary of the critical path's graphs (:mod:`streamtrace.aggregate.critical_local`, one rank's
step; :mod:`streamtrace.aggregate.critical_path`, the job's): segment categories, anchor kinds, and the
growing node / edge arrays of one step.

Nodes are instants (int64 ns on aggregate's aligned axis); an edge ``u -> v`` says "v cannot happen
before u", weighted by the time it stands for (int64 ns), with a :class:`Category`, the lane it lies
on (``thread <tid>``, ``device <d> stream <s>``), the name of the event it stands for and that
event's id in its rank's trace (``ref``).
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np


class Category(IntEnum):
    """What an edge of the path stands for (``critical_path.parquet``'s ``category``, by name)."""
    cpu_op = 0           # CPU time inside an op (the innermost open op names it)
    launch_delay = 1     # runtime call start -> the GPU event it launched
    compute_kernel = 2   # a kernel's duration
    comm_transfer = 3    # a collective's transfer after its last member arrived
    memcpy = 4           # a memory copy / set's duration
    kernel_gap = 5       # a GPU event waiting for the previous one on its stream or another stream
    sync = 6             # a CPU call waking up after the GPU work (or the thread) it waited for
    host_gap = 7         # CPU time outside any profiled op (data loading, Python)
    wait = 8             # a zero-weight edge: time something waited for another edge; never on a consistent path
    queued = 9           # the step's first GPU event waited behind GPU work launched before the step
    thread_wait = 10     # a thread handing work to another thread (autograd's backward, a worker) and back


CATEGORIES = tuple(c.name for c in Category)
"""Category names by code (``CATEGORIES[code]``)."""


class Anchor(IntEnum):
    """Kinds of the nodes a rank's step graph is reduced to (the job level joins them)."""
    step_start = 0       # the rank's step start: a source
    arrival = 1          # a communication event's start: a sink (it waits for the collective's last member)
    end = 2              # a communication event's end: a source
    step_end = 3         # the rank's step end: a sink


BARRIER = -1
"""The kind of a job-level node that is a collective's barrier (not an :class:`Anchor`)."""


class Edge(IntEnum):
    """Types of the job graph's edges (the critical path's and the what-if replay's; ``etype``)."""
    local = 0            # within one rank: a stretch of its reduced step graph
    wait = 1             # a member's arrival -> the collective's barrier (it waits for the last member)
    transfer = 2         # the barrier -> a member's end (or a send -> its receive): the transfer itself


class StepGraph:
    """Growing node and edge arrays of one rank's step (node ids in creation order)."""

    def __init__(self):
        self.t, self.cls, self.e = [], [], []
        self.order = np.zeros(0, np.int64)

    @property
    def size(self) -> int:
        """The number of nodes so far."""
        return sum(len(x) for x in self.t)

    def nodes(self, t, cls=1) -> np.ndarray:
        """New nodes at times ``t`` (int64 ns); returns their ids (int64).  ``cls`` orders nodes of
        equal time (a GPU end 0, a CPU instant 1, a GPU start 2, the step end 3; then creation
        order), so that every edge runs forward."""
        base = self.size
        self.t.append(np.asarray(t, np.int64))
        self.cls.append(np.broadcast_to(np.asarray(cls, np.int8), len(t)))
        return base + np.arange(len(t), dtype=np.int64)

    def edges(self, src, dst, w, cat, lane, name, ref=-1):
        """Append edges ``src -> dst`` (node ids) of weight ``w`` (int64 ns) and :class:`Category`
        ``cat``; ``lane``, ``name``: object arrays (or scalars) naming each edge's thread/stream and
        event; ``ref``: the event's id in the trace (the GPU event's ``correlation`` for GPU
        categories, the CPU op's ``External id`` for CPU ones; -1 none).  Arrays broadcast."""
        n = len(src)
        if n:
            b = lambda x: np.broadcast_to(np.asarray(x, object), n)  # noqa: E731
            self.e.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64),
                           np.broadcast_to(np.asarray(cat, np.int8), n), b(lane), b(name),
                           np.broadcast_to(np.asarray(ref, np.int64), n)))

    def arrays(self):
        """``(t, cols)``: node times (int64[n]) and the edge columns ``[src, dst, w, cat, lane,
        name, ref]``; sets :attr:`order`, the nodes in topological order (:func:`topological_order`)."""
        t = np.concatenate(self.t) if self.t else np.zeros(0, np.int64)
        cols = [np.concatenate([e[i] for e in self.e]) if self.e else
                np.zeros(0, object if i in (4, 5) else np.int8 if i == 3 else np.int64) for i in range(7)]
        cls = np.concatenate(self.cls) if self.cls else np.zeros(0, np.int8)
        self.order = topological_order(t, cls, cols[0], cols[1])
        return t, cols


MAX_LEVELS = 64
"""How many edges deep a chain of same-instant edges is ordered (:func:`topological_order`)."""


def topological_order(t, cls, src, dst) -> np.ndarray:
    """The nodes (times ``t`` int64 ns, classes ``cls``) in an order every edge ``src -> dst``
    (node ids, ``t[src] <= t[dst]``) follows: by time, then, among nodes of one instant, by their
    depth in the edges between them (a node after every node with an edge into it), then by class,
    then by id.  Returns the node ids in order (int64).  Edges against time, and same-instant chains
    deeper than :data:`MAX_LEVELS`, are left for the caller to drop."""
    ids = np.arange(len(t))
    order = np.lexsort((ids, cls, t))
    if not len(src):
        return order
    pos = np.empty(len(t), np.int64)
    pos[order] = ids
    eq = t[src] == t[dst]
    if not (eq & (pos[src] > pos[dst])).any():
        return order
    es, ed = src[eq], dst[eq]
    level = np.zeros(len(t), np.int64)
    for _ in range(MAX_LEVELS):
        new = level.copy()
        np.maximum.at(new, ed, level[es] + 1)
        if (new == level).all():
            break
        level = np.minimum(new, MAX_LEVELS)
    return np.lexsort((ids, cls, level, t))
