"""A thread waiting for a CPU collective that runs on a gloo worker thread (DDP's reducer blocks in
``work.wait()`` inside ``backward``): the stretch is a wait on the collective's end, in the critical
path and the what-if replay alike (``streamtrace.aggregate.critical_cpu.collective_waits``).
Expected values are the hand-built inputs' own times, never the code's."""
from __future__ import annotations

import numpy as np

from streamtrace.aggregate.critical_graph import CATEGORIES, Anchor, edge_texts
from streamtrace.aggregate.critical_local import step_graph
from streamtrace.aggregate.whatif_local import replay_costs

US = 1_000


def _ops(rows):
    """Op columns from rows ``(name, tid, ts us, dur us, depth, parent)``."""
    n = len(rows)
    ops = {"tid": np.asarray([r[1] for r in rows], np.int64), "name": np.asarray([r[0] for r in rows], object),
           "ts_ns": np.asarray([r[2] * US for r in rows], np.int64),
           "dur_ns": np.asarray([r[3] * US for r in rows], np.int64),
           "depth": np.asarray([r[4] for r in rows], np.int64), "parent": np.asarray([r[5] for r in rows], np.int64),
           "correlation": np.zeros(n, np.int64), "cat": np.full(n, "", object),
           "external_id": np.arange(n, dtype=np.int64)}
    ops["is_step"] = ops["name"] == "ProfilerStep#1"
    ops["is_sync"] = np.zeros(n, bool)
    ops["is_copy"] = np.zeros(n, bool)
    ops["is_wait"] = np.zeros(n, bool)
    ops["any_wait"] = False
    return ops


NO_KERNELS = {"device": np.zeros(0, np.int64), "stream": np.zeros(0, np.int64), "ts_ns": np.zeros(0, np.int64),
              "end_ns": np.zeros(0, np.int64), "name": np.zeros(0, object), "kind": np.zeros(0, object),
              "correlation": np.zeros(0, np.int64), "step": np.zeros(0, np.int64)}


def _graph(caller_ops, run_us):
    """Step 1 (0-1,000 us) of thread 1: ``backward`` 100-900 holding ``c10d::allreduce_`` 150-170
    and ``caller_ops`` (rows after it), ``optimizer`` 900-980; thread 2 runs the call's
    ``gloo:all_reduce`` over ``run_us`` (start, end).  Returns ``(edges, anchors)``: ``[(lane, t0 us,
    t1 us, w us, category, cost us)]`` and ``{kind: [t us]}``."""
    rows = [("ProfilerStep#1", 1, 0, 1_000, 0, -1), ("backward", 1, 100, 800, 1, 0),
            ("c10d::allreduce_", 1, 150, 20, 2, 1), ("optimizer", 1, 900, 80, 1, 0),
            ("gloo:all_reduce", 2, run_us[0], run_us[1] - run_us[0], 0, -1)] + list(caller_ops)
    t, cols, anc, order = step_graph(_ops(rows), NO_KERNELS, 1, 1, 0, 1_000 * US, np.asarray([[2, 4]], np.int64))
    src, dst, w, cat = cols[:4]
    lane, _ = edge_texts(cols)
    cost = replay_costs(t, cols)
    edges = [(str(lane[i]), t[src[i]] / US, t[dst[i]] / US, w[i] / US, CATEGORIES[cat[i]], cost[i] / US)
             for i in range(len(src))]
    kinds: dict = {}
    for node, kind in zip(anc[0].tolist(), anc[1].tolist()):
        kinds.setdefault(Anchor(kind).name, []).append(t[node] / US)
    return edges, kinds


def test_a_caller_waiting_past_the_runs_end():
    # the run ends at 650, the caller wakes at 700 (copy_bucket_to_grad 700-720): its stretch
    # 170-700 waited for the run; the run's end -> the wake-up is a sync of 50 us
    edges, kinds = _graph([("copy_bucket_to_grad", 1, 700, 20, 2, 1)], (160, 650))
    wait = [e for e in edges if e[0] == "thread 1" and (e[1], e[2]) == (170, 700)]
    assert wait == [("thread 1", 170, 700, 0, "wait", 0)]
    assert [e for e in edges if e[4] == "sync"] == [("thread 1", 650, 700, 50, "sync", 50)]
    assert kinds["end"] == [650]


def test_a_caller_waking_before_the_runs_record_closes():
    # the worker's record closes at 780 (the scheduler ran the caller first): the caller woke at
    # 700; the run is taken to end there, the stretch 170-700 is the wait
    edges, kinds = _graph([("copy_bucket_to_grad", 1, 700, 20, 2, 1)], (160, 780))
    assert [e for e in edges if e[0] == "thread 1" and (e[1], e[2]) == (170, 700)] == [
        ("thread 1", 170, 700, 0, "wait", 0)]
    assert [e for e in edges if e[4] == "sync"] == [("thread 1", 700, 700, 0, "sync", 0)]
    assert kinds["end"] == [700]


def test_a_busy_caller_does_not_wait():
    # the caller computes (a leaf op 170-890) over the run's end: its own work, no wait; a short
    # gap (600-625) between two ops ending long before the run's end is no wake-up either
    edges, kinds = _graph([("aten::mm", 1, 170, 720, 2, 1)], (160, 780))
    assert not [e for e in edges if e[4] == "wait" and e[0] == "thread 1" and e[2] > e[1]]
    assert kinds["end"] == [780]
    assert [e for e in edges if e[0] == "thread 1" and (e[1], e[2]) == (170, 890)][0][4] == "cpu_op"
    edges, kinds = _graph([("aten::mm", 1, 170, 430, 2, 1), ("aten::mm", 1, 625, 265, 2, 1)], (160, 900))
    assert kinds["end"] == [900]
    assert [e for e in edges if (e[1], e[2]) == (600, 625)][0][4] == "cpu_op"      # backward's own 25 us


def test_the_wait_picked_is_the_callers_longest_stretch_near_the_end():
    # two outstanding runs (DDP's two buckets): thread 1 waits 170-700 for the first (its record
    # closing at 720, after the caller's wake-up), copies 700-720, then waits 720-880 for the
    # second (thread 3, ends 860): each stretch is matched to its own run
    rows = [("ProfilerStep#1", 1, 0, 1_000, 0, -1), ("backward", 1, 100, 800, 1, 0),
            ("c10d::allreduce_", 1, 150, 20, 2, 1), ("optimizer", 1, 900, 80, 1, 0),
            ("gloo:all_reduce", 2, 160, 560, 0, -1), ("c10d::allreduce_", 1, 140, 5, 2, 1),
            ("gloo:all_reduce", 3, 145, 715, 0, -1), ("copy_bucket_to_grad", 1, 700, 20, 2, 1),
            ("copy_bucket_to_grad", 1, 880, 10, 2, 1)]
    t, cols, anc, order = step_graph(_ops(rows), NO_KERNELS, 1, 1, 0, 1_000 * US,
                                     np.asarray([[2, 4], [5, 6]], np.int64))
    src, dst, w, cat = cols[:4]
    lane, _ = edge_texts(cols)
    got = sorted((t[src[i]] // US, t[dst[i]] // US, w[i] // US, CATEGORIES[cat[i]]) for i in range(len(src))
                 if lane[i] == "thread 1" and CATEGORIES[cat[i]] in ("wait", "sync"))
    assert got == [(170, 700, 0, "wait"), (700, 700, 0, "sync"), (720, 880, 0, "wait"), (860, 880, 20, "sync")]
