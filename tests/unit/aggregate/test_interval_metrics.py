"""``rank_metrics.interval_metrics`` against the points each class of GPU events covers, counted in plain
Python (events on a small integer axis: a length is the number of unit steps covered)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.rank_metrics import interval_metrics

EVENT = st.tuples(st.integers(0, 40), st.integers(0, 12), st.sampled_from([0, 1, 2, 5]))


def _covered(events, classes) -> set:
    return {x for s, d, k in events if k in classes for x in range(s, s + d)}


@settings(deadline=None)         # (the first call loads the interval kernels)
@given(st.lists(EVENT, min_size=1, max_size=25))
def test_metrics_are_the_covered_points(events):
    s = np.asarray([x[0] for x in events], np.int64)
    e = s + np.asarray([x[1] for x in events], np.int64)
    got = interval_metrics(s, e, np.asarray([x[2] for x in events], np.int8))
    busy = len(_covered(events, {0, 1, 2, 5}))
    compute, comm = _covered(events, {0}), _covered(events, {1})
    overlap = len(compute & comm)
    wall = int(e.max() - s.min())
    assert got == {"kernels": len(events), "start_ns": int(s.min()), "end_ns": int(e.max()), "wall_ns": wall,
                   "busy_ns": busy, "idle_ns": wall - busy, "compute_ns": len(compute), "comm_ns": len(comm),
                   "memory_ns": len(_covered(events, {2})), "overlap_ns": overlap,
                   "exposed_comm_ns": len(comm) - overlap, "compute_only_ns": len(compute) - overlap,
                   "kernel_time_ns": sum(x[1] for x in events)}


def test_no_event():
    got = interval_metrics(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))
    assert got["kernels"] == 0 and got["start_ns"] is None and got["busy_ns"] == 0
