"""The critical path's second round (issue 44): CUDA-graph replays, zero-length ops, waits between
threads, blocking copies, slack.  Expected values come from the generated trace files read with
``json``, from hand-built inputs, or from plain-Python brute forces (a memoised longest path over
every edge, a forward simulation of a job with one anchor delayed), never from the code under test."""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.kernels.reference.chains import covering, instant_order
from streamtrace.aggregate.critical_graph import CATEGORIES, Anchor, edge_texts
from streamtrace.aggregate.critical_local import reduce_step, step_graph
from streamtrace.synth.job import SynthSpec, generate_job

from support import exact_ns, load_json


def _pipeline(tmp, spec):
    truth = generate_job(tmp / "traces", spec)
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "out", AggregateOptions(jobs=1))
    return truth


@pytest.mark.slow
def test_cuda_graph_replays_keep_the_path_whole(tmp_path):
    truth = _pipeline(tmp_path, SynthSpec(world_size=2, tp=2, pp=1, layers=2, microbatches=2, graph_replays=True))
    # the overlaps in the files: a GPU event on a stream starting before the previous one there ends
    overlaps = 0
    for r in truth.ranks:
        ev = [e for e in load_json(r.path, decimal=True)["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                           "gpu_memset")]
        by = {}
        for e in ev:
            by.setdefault(e["tid"], []).append((exact_ns(e["ts"]), exact_ns(e["ts"]) + exact_ns(e["dur"])))
        for spans in by.values():
            spans.sort()
            overlaps += sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
    assert overlaps >= 50
    meta = json.loads((tmp_path / "out" / "aggregate.json").read_text())["critical_path"]
    assert meta["clipped_events"] == overlaps and meta["dropped_edges"] == 0 and meta["paths_not_summing"] == 0
    segs = pq.read_table(tmp_path / "out" / "critical_path.parquet").to_pylist()
    for a, b in zip(segs, segs[1:]):
        assert b["start_ns"] == a["end_ns"]
    assert sum(s["weight_ns"] for s in segs) == segs[-1]["end_ns"] - segs[0]["start_ns"]
    assert not [s for s in segs if s["category"] == "wait" and s["dur_ns"] > 0]
    assert sum(s["weight_ns"] for s in segs if s["category"] == "compute_kernel") > 0.3 * segs[-1]["end_ns"] \
        - 0.3 * segs[0]["start_ns"]


def _brute_longest(n, edges, src) -> dict:
    """Longest path (plain Python, memoised) from node ``src`` to every node, over every edge
    ``(u, v, w)``; raises on a cycle."""
    into: dict = {}
    for u, v, w in edges:
        into.setdefault(v, []).append((u, w))
    seen = set()

    @lru_cache(maxsize=None)
    def best(v):
        if v == src:
            return 0
        assert v not in seen, "cycle"
        seen.add(v)
        vals = [best(u) + w for u, w in into.get(v, []) if best(u) is not None]
        seen.discard(v)
        return max(vals) if vals else None
    import sys
    sys.setrecursionlimit(max(10_000, 4 * n))
    return {v: best(v) for v in range(n)}


def test_one_rank_step_graph_against_a_brute_force(tmp_path):
    """A one-rank job (CUDA-graph replays, the autograd thread, a pageable copy with a sync): the
    reduced edge from the step start to the step end is the longest path over every edge of the step's
    graph, none dropped."""
    from streamtrace.aggregate.alignment import Job
    from streamtrace.aggregate import critical_local as cl
    _pipeline(tmp_path, SynthSpec(world_size=1, tp=1, pp=1, layers=2, microbatches=2, graph_replays=True))
    job = Job([tmp_path / "an"], "global", None, None, 1, None, False, False, None)
    part = job.parts[0]
    tables = cl.part_reads(part)
    ops, k, calls, texts = cl._columns(part, tables)
    cl.clip_stream_overlaps(k)
    (step, tid, s0, s1), = cl._steps(ops)
    t, cols, anc, order = step_graph(ops, k, step, tid, s0, s1, calls, texts=texts)
    pos, (o, s, w), marked, dropped = reduce_step(t, cols, anc, order)
    assert dropped == 0
    nodes, kinds = anc[:2]
    start, end = int(nodes[kinds == Anchor.step_start][0]), int(nodes[kinds == Anchor.step_end][0])
    brute = _brute_longest(len(t), list(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist())), start)
    i = np.flatnonzero(s == pos[end])
    assert len(i) == 1 and pos[start] == o[i[0]]
    assert brute[end] == w[i[0]] == t[end] - t[start]


def _tree(draw_ops):
    """Ops of one thread as (ts, te, depth, parent) from a nested draw (lists of children)."""
    out = []

    def place(children, lo, hi, depth, parent) -> bool:
        """Place ``children`` in ``[lo, hi]``; True when a zero-length op ends the last subtree at ``hi``."""
        cur, tail = lo, False
        for kids, a, b in children:
            ts = min(max(cur, lo + a), hi)
            te = min(ts + b, hi)
            i = len(out)
            out.append([ts, te, depth, parent])
            zero_end = place(kids, ts, te, depth + 1, i) or te == ts
            # a sibling starting where a zero-length op ends this one would be its parent in a call
            # tree built by start (longer first): it starts later
            cur, tail = te + zero_end, zero_end and te == hi
        return tail
    place(draw_ops, 0, 1_000, 0, -1)
    return out


node = st.recursive(st.tuples(st.just([]), st.integers(0, 3), st.integers(0, 4)),
                    lambda kids: st.tuples(st.lists(kids, max_size=3), st.integers(0, 3), st.integers(0, 4)),
                    max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(st.lists(node, min_size=1, max_size=4))
def test_instants_nest_as_the_call_tree(draw):
    """Instants of equal time ordered as the tree nests them (zero-length ops included, nested or at
    their parent's end): the order equals a depth-first walk (children by start, longer first, then
    by index: analyze's call-tree order); each interval is named after the innermost op covering it
    (brute force over every op)."""
    ops = _tree(draw)
    n = len(ops)
    ts = np.asarray([o[0] for o in ops], np.int64)
    te = np.asarray([o[1] for o in ops], np.int64)
    depth = np.asarray([o[2] for o in ops], np.int64)
    parent = np.asarray([o[3] for o in ops], np.int64)
    got = instant_order(ts, te, depth, parent)
    kids: dict = {}
    for i in range(n):
        kids.setdefault(int(parent[i]), []).append(i)
    want = []

    def walk(i):
        want.append(i)                                   # start
        for c in sorted(kids.get(i, []), key=lambda c: (ts[c], -te[c], c)):
            walk(c)
        want.append(n + i)                               # end
    for c in sorted(kids.get(-1, []), key=lambda c: (ts[c], -te[c], c)):
        walk(c)
    assert got.tolist() == want
    # naming: the op covering each positive-length interval between consecutive instants
    t = np.concatenate([ts, te])[got]
    op = np.r_[np.arange(n), np.arange(n)][got]
    is_start = got < n
    inner = np.where(is_start, op, parent[op])[:-1]
    named = covering({"ts_ns": ts, "dur_ns": te - ts, "parent": parent}, inner, t[:-1], t[1:])
    for i in np.flatnonzero(t[1:] > t[:-1]).tolist():
        cover = [j for j in range(n) if ts[j] <= t[i] and te[j] >= t[i + 1]]
        assert named[i] == (max(cover, key=lambda j: depth[j]) if cover else -1)


def _ops(rows, n_extra=()):
    """Hand-built op columns: rows ``(name, tid, ts, dur, depth, parent, correlation)``."""
    n = len(rows)
    ops = {"tid": np.asarray([r[1] for r in rows], np.int64), "name": np.asarray([r[0] for r in rows], object),
           "ts_ns": np.asarray([r[2] for r in rows], np.int64), "dur_ns": np.asarray([r[3] for r in rows], np.int64),
           "depth": np.asarray([r[4] for r in rows], np.int64), "parent": np.asarray([r[5] for r in rows], np.int64),
           "correlation": np.asarray([r[6] for r in rows], np.int64), "cat": np.full(n, "", object),
           "external_id": np.arange(n, dtype=np.int64)}
    ops["is_step"] = ops["name"] == "ProfilerStep#1"
    ops["is_sync"] = ops["name"] == "cudaStreamSynchronize"
    ops["is_copy"] = ops["name"] == "cudaMemcpyAsync"
    ops["is_wait"] = np.zeros(n, bool)
    ops["any_wait"] = False
    return ops


def _kernels(rows):
    """``(name, stream, ts, end, correlation, kind)`` rows of step 1."""
    return {"device": np.zeros(len(rows), np.int64), "stream": np.asarray([r[1] for r in rows], np.int64),
            "ts_ns": np.asarray([r[2] for r in rows], np.int64), "end_ns": np.asarray([r[3] for r in rows], np.int64),
            "name": np.asarray([r[0] for r in rows], object), "kind": np.asarray([r[5] for r in rows], object),
            "correlation": np.asarray([r[4] for r in rows], np.int64), "step": np.ones(len(rows), np.int64)}


def _path(ops, k, main=1, end=1_000):
    """The longest path of step 1 (0 .. ``end`` ns): ``[(lane, t0, t1, weight, category, name)]``."""
    t, cols, anc, order = step_graph(ops, k, 1, main, 0, end)
    pos, (o, s, w), marked, dropped = reduce_step(t, cols, anc, order)
    assert dropped == 0
    src, dst, ww, cat = cols[:4]
    lane, name = edge_texts(cols)
    seg = sorted(((str(lane[e]), int(t[src[e]]), int(t[dst[e]]), int(ww[e]), CATEGORIES[cat[e]], str(name[e]))
                  for e in marked.tolist()), key=lambda x: (x[1], x[2]))
    return [x for x in seg if x[3] or x[2] > x[1]]


def test_a_thread_waiting_for_the_backward_thread():
    # thread 1 (the step's) calls backward at 100 and shows nothing until 900; thread 2 runs two
    # backward functions (150-400, 420-850) in that stretch: the path runs through thread 2
    us = 1_000
    rows = [("ProfilerStep#1", 1, 0, 1_000 * us, 0, -1, 0), ("forward", 1, 10 * us, 90 * us, 1, 0, 0),
            ("optimizer", 1, 900 * us, 80 * us, 1, 0, 0),
            ("autograd::engine::evaluate_function: MmBackward0", 2, 150 * us, 250 * us, 0, -1, 0),
            ("autograd::engine::evaluate_function: AddBackward0", 2, 420 * us, 430 * us, 0, -1, 0)]
    segs = _path(_ops(rows), _kernels([]), end=1_000 * us)
    assert sum(x[3] for x in segs) == 1_000 * us
    on2 = [x for x in segs if x[0] == "thread 2 (backward)"]
    assert [(x[1] // us, x[2] // us, x[4]) for x in on2 if x[4] != "thread_wait"] == [
        (150, 400, "cpu_op"), (400, 420, "host_gap"), (420, 850, "cpu_op")]
    hand = [(x[1] // us, x[2] // us, x[5]) for x in segs if x[4] == "thread_wait"]
    assert hand == [(100, 150, "hand-over to thread 2 (backward)"), (850, 900, "hand-back from thread 2 (backward)")]
    assert not [x for x in segs if x[0] == "thread 1" and 100 * us <= x[1] < 900 * us and x[4] != "thread_wait"]
    # thread 2 busy for less than half of thread 1's stretch: thread 1's own time (no hand-over)
    rows[4] = ("autograd::engine::evaluate_function: AddBackward0", 2, 420 * us, 10 * us, 0, -1, 0)
    rows[3] = ("autograd::engine::evaluate_function: MmBackward0", 2, 150 * us, 50 * us, 0, -1, 0)
    segs = _path(_ops(rows), _kernels([]), end=1_000 * us)
    assert not [x for x in segs if x[4] == "thread_wait"] and sum(x[3] for x in segs) == 1_000 * us


def test_a_blocking_async_copy_waits_for_its_copy():
    # cudaMemcpyAsync 100-600 (correlation 5) whose copy (stream 7) runs 300-580 after a kernel
    # (200-300, launched at 50): the call waits for its copy, the path runs through the GPU
    rows = [("ProfilerStep#1", 1, 0, 1_000, 0, -1, 0), ("cudaLaunchKernel", 1, 50, 20, 1, 0, 4),
            ("cudaMemcpyAsync", 1, 100, 500, 1, 0, 5)]
    k = _kernels([("gemm", 7, 200, 300, 4, "kernel"), ("Memcpy DtoH (Device -> Pageable)", 7, 300, 580, 5, "memory")])
    segs = _path(_ops(rows), k)
    cats = [(x[1], x[2], x[4]) for x in segs]
    assert (200, 300, "compute_kernel") in cats and (300, 580, "memcpy") in cats and (580, 600, "sync") in cats
    assert not [x for x in segs if x[4] == "cpu_op" and x[5] == "cudaMemcpyAsync" and x[3] > 0 and x[2] > 300]
    # a copy that ends after the call returns (pinned memory): the call did not wait
    k = _kernels([("gemm", 7, 200, 300, 4, "kernel"), ("Memcpy DtoH (Device -> Pinned)", 7, 300, 650, 5, "memory")])
    segs = _path(_ops(rows), k)
    assert not [x for x in segs if x[4] == "sync"]


def test_zero_length_call_names_nothing():
    # a 0 ns call at 200 starting where a 300 ns op starts (analyze's call tree nests it in that op:
    # start ascending, end descending): the 300 ns are that op's, and the host gap after a 0 ns call
    # at 600 stays a host gap
    rows = [("ProfilerStep#1", 1, 0, 1_000, 0, -1, 0), ("cudaFuncSetAttribute", 1, 200, 300, 1, 0, 0),
            ("cudaDeviceGetAttribute", 1, 200, 0, 2, 1, 0), ("cudaGetDevice", 1, 600, 0, 1, 0, 0)]
    segs = _path(_ops(rows), _kernels([]))
    named = {(x[1], x[2]): (x[4], x[5]) for x in segs}
    assert named[(200, 500)] == ("cpu_op", "cudaFuncSetAttribute")
    assert named[(600, 1_000)][0] == "host_gap" and named[(500, 600)][0] == "host_gap"


# --- slack against a forward simulation of a small synchronous job --------------------------------

def _simulate(starts, work, xfer, tail, delay=None):
    """Times of a job whose ranks meet in K collectives: rank r arrives at collective k after
    ``work[r][k]`` ns of local work (from its start or its previous collective's end), every member
    ends it ``xfer[r][k]`` after the last arrival, and the rank ends ``tail[r]`` after its last
    collective.  ``delay``: ``(rank, anchor, ns)`` with anchor ``("a", k)``, ``("e", k)`` or
    ``("T",)`` delayed by ns.  Returns the latest step end."""
    R, K = len(starts), len(work[0])
    prev = list(starts)
    d = lambda r, a: delay[2] if delay and delay[0] == r and delay[1] == a else 0  # noqa: E731
    for k in range(K):
        arr = [prev[r] + work[r][k] + d(r, ("a", k)) for r in range(R)]
        last = max(arr)
        prev = [last + xfer[r][k] + d(r, ("e", k)) for r in range(R)]
    return max(prev[r] + tail[r] + d(r, ("T",)) for r in range(R))


def _job_graph(starts, work, xfer, tail):
    """The same job as ``JobGraph`` (anchors and reduced
    edges per rank, the collectives matched)."""
    from streamtrace.aggregate.critical_path import JobGraph
    R, K = len(starts), len(work[0])
    g = JobGraph()
    arrivals, ends = {}, {}
    prev = list(starts)
    times = []
    for k in range(K):
        arr = [prev[r] + work[r][k] for r in range(R)]
        prev = [max(arr) + xfer[r][k] for r in range(R)]
        times.append((arr, prev))
    for r in range(R):
        t = [starts[r]] + [x for k in range(K) for x in (times[k][0][r], times[k][1][r])] + \
            [times[-1][1][r] + tail[r]]
        kinds = [Anchor.step_start] + [Anchor.arrival, Anchor.end] * K + [Anchor.step_end]
        n = len(t)
        a = {"t_ns": np.asarray(t, np.int64), "kind": np.asarray(kinds, np.int64), "node": np.arange(n),
             "name": np.asarray(["c"] * n, object), "lane": np.asarray([f"thread {r}"] + [""] * (n - 1), object),
             "stream": np.full(n, 20), "correlation": np.asarray([-1] + [k for k in range(K) for _ in (0, 1)] + [-1])}
        src = [0] + [2 + 2 * k for k in range(K - 1)] + [2 * K]
        dst = [1 + 2 * k for k in range(K)] + [n - 1]
        w = [work[r][k] for k in range(K)] + [tail[r]]
        base = g.add_part(r, a, {"src": np.asarray(src), "dst": np.asarray(dst), "w_ns": np.asarray(w, np.int64)})
        for k in range(K):
            arrivals[(r, k, 20)] = base + 1 + 2 * k
            ends[(r, k, 20)] = base + 2 + 2 * k
    g.add_collectives(arrivals, ends, {(r, k, 20): k for r in range(R) for k in range(K)})
    return g


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4).flatmap(lambda R: st.integers(1, 3).flatmap(lambda K: st.tuples(
    st.lists(st.integers(0, 50), min_size=R, max_size=R),
    st.lists(st.lists(st.integers(1, 100), min_size=K, max_size=K), min_size=R, max_size=R),
    st.lists(st.lists(st.integers(0, 30), min_size=K, max_size=K), min_size=R, max_size=R),
    st.lists(st.integers(1, 60), min_size=R, max_size=R)))))
def test_slack_is_how_much_later_a_ranks_work_could_finish(job):
    """A rank's slack (critical_path_ranks' ``slack_ns``) is the largest delay of any one of its
    anchors that leaves the step's end where it is (forward simulation), 0 on the path."""
    from streamtrace.aggregate.critical_path import solve_step
    from streamtrace.aggregate.critical_ranks import rank_rows
    starts, work, xfer, tail = job
    R, K = len(starts), len(work[0])
    g = _job_graph(starts, work, xfer, tail)
    solved = solve_step(g)
    src, dst, w = g.edges.load()                       # (every edge, in id order: as the graph built them)
    path_ranks = {g.part[src[e]] for e in solved.path.tolist() if g.etype[e] == 0 and w[e] > 0} | \
        {g.part[dst[e]] for e in solved.path.tolist() if g.etype[e] == 2 and w[e] > 0}
    segs = {"rank": np.asarray(sorted(path_ranks), np.int64), "w": np.ones(len(path_ranks), np.int64)}
    rows = {x["rank"]: x for x in rank_rows(0, 1, g, solved, segs, {r: r for r in range(R)})}
    span = _simulate(starts, work, xfer, tail)
    for r in range(R):
        anchors = [("a", k) for k in range(K)] + [("e", k) for k in range(K)] + [("T",)]

        def tolerance(a):
            lo, hi = 0, 10_000
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _simulate(starts, work, xfer, tail, (r, a, mid)) == span:
                    lo = mid
                else:
                    hi = mid - 1
            return lo
        want = 0 if r in path_ranks else min(tolerance(a) for a in anchors)
        assert rows[r]["slack_ns"] == want, (r, rows[r], want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["mm", "add", "nccl:all_reduce", "é", "", None]),
                          st.integers(0, 10 ** 12)), max_size=40))
def test_path_sums_by_name_keep_the_first_seen_order(rows):
    """The summary's sums by name (``critical_ranks._sums`` of an object array of str / None) equal
    a dict filled row by row: the same keys, in the order first met, the same int sums."""
    from streamtrace.aggregate.critical_ranks import _sums
    want: dict = {}
    for k, w in rows:
        want[k] = want.get(k, 0) + w
    keys = np.asarray([k for k, _ in rows] + [None], object)[:-1]
    got = _sums(keys, np.asarray([w for _, w in rows], np.int64))
    assert list(got.items()) == list(want.items())
    assert all(type(v) is int for v in got.values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 3, 7, -2, 2 ** 40]), st.integers(0, 10 ** 12)), max_size=40),
       st.sampled_from([np.int8, np.int64]))
def test_path_sums_by_number_keep_the_first_seen_order(rows, dtype):
    """``critical_ranks._sums`` of int keys (ranks, category codes; a wide range sorted, a small one counted)
    equals a dict filled row by row, keys and sums Python ints."""
    from streamtrace.aggregate.critical_ranks import _sums
    if dtype is np.int8:
        rows = [(k % 100, w) for k, w in rows]
    want: dict = {}
    for k, w in rows:
        want[k] = want.get(k, 0) + w
    got = _sums(np.asarray([k for k, _ in rows], dtype), np.asarray([w for _, w in rows], np.int64))
    assert list(got.items()) == list(want.items())
    assert all(type(k) is int and type(v) is int for k, v in got.items())


def test_the_job_graphs_names_and_lanes_are_codes_of_its_texts():
    """``JobGraph`` holds each node's name and lane as an int32 code of ``texts`` (the anchors' text, as
    given): the anchors' decode to their own, a barrier's name is its first member's and its lane empty;
    anchors given as codes of a shared ``Texts`` (as aggregate's job level reads them) are kept as they are;
    the four columns only the output reads are not held as arrays (``NodeColumn``: on disk past its first
    rows), and read back whole or by index as given."""
    from streamtrace.aggregate.critical_graph import Texts
    from streamtrace.aggregate.critical_path import BARRIER, JobGraph
    g = _job_graph([0, 5], [[10, 20], [30, 5]], [[1, 2], [3, 4]], [7, 9])
    from streamtrace.aggregate.job_nodes import NodeColumn
    assert all(isinstance(c, NodeColumn) for c in (g.local, g.name, g.lane, g.corr))
    assert g.name.dtype == g.lane.dtype == np.int32 and g.local.tolist()[:6] == list(range(6))
    names, lanes = [g.texts[c] for c in g.name.tolist()], [g.texts[c] for c in g.lane.tolist()]
    anchors = g.kind != BARRIER
    assert set(np.asarray(names, object)[anchors]) == {"c"}
    assert [x for x, a in zip(lanes, anchors) if a] == ["thread 0"] + [""] * 5 + ["thread 1"] + [""] * 5
    assert [x for x, a in zip(lanes, anchors) if not a] == ["", ""]
    texts = Texts()
    shared = JobGraph(texts)
    a = {"t_ns": np.asarray([0, 4], np.int64), "kind": np.asarray([0, 3], np.int64), "node": np.arange(2),
         "name": texts.codes(np.asarray(["x", None], object)),
         "lane": texts.codes(np.asarray(["thread 3", ""], object)),
         "stream": np.zeros(2, np.int64), "correlation": np.asarray([-1, 2 ** 40], np.int64)}
    shared.add_part(0, a, {"src": np.asarray([0]), "dst": np.asarray([1]), "w_ns": np.asarray([4], np.int64)})
    shared.add_collectives({}, {}, {})
    assert shared.texts is texts and [texts[c] for c in shared.name.tolist()] == ["x", None]
    assert [texts[c] for c in shared.lane.tolist()] == ["thread 3", ""]
    assert shared.corr.tolist() == [-1, 2 ** 40] and shared.corr[1] == 2 ** 40
    assert shared.corr[np.asarray([[1, 0]])].tolist() == [[2 ** 40, -1]]
