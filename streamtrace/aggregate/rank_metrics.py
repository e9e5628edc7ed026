"""The interval metrics of a set of GPU events, per rank, step, phase and micro-batch (``ranks`` and
``rank_phase`` of ``streamtrace.aggregate.run``; ``streamtrace diff`` compares two runs with
them).

Definitions (``shared/traces/README.md``; unions and intersections by
``streamtrace.kernels.intervals``): ``wall_ns`` = last end - first start; ``busy_ns`` = |union of
all|; ``compute_ns``, ``comm_ns``, ``memory_ns`` = |union of each class|; ``overlap_ns`` = |union(comm)
∩ union(compute)|; ``exposed_comm_ns`` = comm - overlap; ``compute_only_ns`` = compute - overlap;
``idle_ns`` = wall - busy; ``kernel_time_ns`` = sum of durations.  Times are int64 ns.
"""
from __future__ import annotations

import numpy as np

from ..kernels import intervals
from .folder import RANK_METRICS

KIND_CODE = {"compute": 0, "communication": 1, "memory": 2}
"""A kernel's ``kind`` -> its class code in ``interval_metrics``."""


SETS = np.asarray([[1, 1, 1, 1],        # busy: every event (a code outside 0-2 too)
                 [1, 0, 0, 0],        # compute
                 [0, 1, 0, 0],        # communication
                 [0, 0, 1, 0],        # memory
                 [1, 1, 0, 0]], bool)  # compute or communication
"""The class sets whose union lengths ``interval_metrics`` takes in one pass (``intervals.union_lengths``;
classes 0 compute, 1 communication, 2 memory, 3 any other code)."""


def interval_metrics(start, end, kind) -> dict:
    """Metrics (int ns, see the module docstring) of GPU events ``[start, end)`` (int64 arrays,
    shape (N,)) with class codes ``kind`` (0 compute, 1 communication, 2 memory).  The overlap is
    |union(comm) ∩ union(compute)| = comm + compute - |union(comm and compute events)| (exact for
    lengths of unions): every length from one sort and one sweep (``intervals.union_lengths``)."""
    s, e, k = np.asarray(start, np.int64), np.asarray(end, np.int64), np.asarray(kind)
    if not len(s):
        return dict.fromkeys(RANK_METRICS, 0) | {"start_ns": None, "end_ns": None}
    cls = np.where((k >= 0) & (k <= 2), k, 3).astype(np.int8)
    busy, compute, comm, memory, either = intervals.union_lengths(s, e, cls, SETS)
    overlap = compute + comm - either
    wall = int(e.max() - s.min())
    return {"kernels": int(len(s)), "start_ns": int(s.min()), "end_ns": int(e.max()), "wall_ns": wall,
            "busy_ns": busy, "idle_ns": wall - busy, "compute_ns": compute, "comm_ns": comm,
            "memory_ns": memory, "overlap_ns": overlap,
            "exposed_comm_ns": comm - overlap, "compute_only_ns": compute - overlap,
            "kernel_time_ns": int((e - s).sum())}


def clipped_length(us, ue, lo, hi) -> int:
    """|canonical union (us, ue) ∩ [lo, hi)|."""
    return intervals.intersect_length(us, ue, np.asarray([lo], np.int64), np.asarray([hi], np.int64))
