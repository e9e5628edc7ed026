"""The what-if replay's reduction against a brute-force replay of the whole job's graph: on small
random multi-rank step graphs joined by collectives, every rank's replayed step end from the reduced
job graph (``streamtrace.aggregate.whatif_local`` + ``streamtrace.aggregate.whatif_job``)
equals the one of plain relaxation (Bellman-Ford) over every rank's whole graph with the same
barriers, for random costs and random transfer factors."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.aggregate.critical_graph import Anchor, Category
from streamtrace.aggregate.whatif import graph_rows, join_rows, step_tables
from streamtrace.aggregate.whatif_job import JobStep, sparse_factors
from streamtrace.aggregate.whatif_members import Members
from streamtrace.aggregate.whatif_local import ReplayRows
from streamtrace.aggregate.whatif_spill import SpilledRows, spill_rows
from streamtrace.kernels.critical import longest_path_masked

NEG = -(2 ** 62)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def jobs(draw):
    """1-3 ranks, each a step graph of up to 10 nodes in time order: node 0 its start, the last its
    end, ``k`` collectives (an arrival node, later its end node) shared by every rank (instance j =
    the j-th of each rank), random forward edges of random weight."""
    nranks = draw(st.integers(1, 3))
    k = draw(st.integers(0, 2))
    ranks = []
    for r in range(nranks):
        n = draw(st.integers(2 + 2 * k, 10))
        t = np.cumsum(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))).astype(np.int64) + 100 * r
        inner = list(range(1, n - 1))
        comm = []
        for j in range(k):
            a, e = sorted(draw(st.lists(st.sampled_from(inner), min_size=2, max_size=2, unique=True)))
            inner = [x for x in inner if x not in (a, e)]
            comm.append((a, e))
            if len(inner) < 2 * (k - j - 1):
                break
        if len(comm) < k:
            return draw(jobs())
        pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
        edges = draw(st.lists(st.sampled_from(pairs), max_size=16))
        edges += [(u, u + 1) for u in range(n - 1) if draw(st.booleans())]
        w = [draw(st.integers(0, 9)) for _ in edges]
        ranks.append((t, comm, edges, w))
    return ranks


def _graph(t, comm, edges, w):
    n = len(t)
    src = np.asarray([u for u, _ in edges], np.int64)
    dst = np.asarray([v for _, v in edges], np.int64)
    cols = [src, dst, np.asarray(w, np.int64), np.full(len(edges), Category.cpu_op, np.int8),
            np.zeros(len(edges), np.int32), np.ones(len(edges), np.int32), np.full(len(edges), -1),
            np.asarray(["thread 1", "op"], object)]               # (lane and name: codes of the texts)
    nodes = np.asarray([0] + [a for a, _ in comm] + [e for _, e in comm] + [n - 1], np.int64)
    kinds = np.asarray([Anchor.step_start] + [Anchor.arrival] * len(comm) + [Anchor.end] * len(comm) +
                       [Anchor.step_end], np.int64)
    corr = np.asarray([-1] + list(range(len(comm))) * 2 + [-1], np.int64)
    anc = (nodes, kinds, corr, np.zeros(len(nodes), np.int64), np.full(len(nodes), "", object),
           np.full(len(nodes), "", object))
    return t, cols, anc, np.arange(n)


def _brute(ranks, factor):
    """Every rank's step end by relaxation over the whole job's graph (the transfers as
    ``JobStep`` measures them, times ``factor``)."""
    nodes, src, dst, w, init, ends = [], [], [], [], [], []
    base = 0
    arrivals, end_of = {}, {}
    for r, (t, comm, edges, ww) in enumerate(ranks):
        nodes += t.tolist()
        src += [base + u for u, _ in edges]
        dst += [base + v for _, v in edges]
        w += ww
        init += [t[0]] + [NEG] * (len(t) - 1)
        ends.append(base + len(t) - 1)
        for j, (a, e) in enumerate(comm):
            arrivals.setdefault(j, []).append(base + a)
            end_of[base + a] = base + e
        base += len(t)
    for j, arr in arrivals.items():
        b = len(nodes)
        last = max(nodes[a] for a in arr)
        nodes.append(last)
        init.append(NEG)
        for m, a in enumerate(arr):
            e = end_of[a]
            own = nodes[e] < last if len(arr) > 1 else True
            src += [a, a if own else b]
            dst += [b, e]
            tr = nodes[e] - (nodes[a] if own else last)
            w += [0, int(round(tr * (factor if len(arr) > 1 else 1.0)))]
    dist = list(init)
    for _ in range(len(nodes) + 1):
        for u, v, x in zip(src, dst, w):
            if dist[u] > NEG and dist[u] + x > dist[v]:
                dist[v] = dist[u] + x
    return [dist[e] for e in ends]


@SETTINGS
@given(jobs(), st.sampled_from([1.0, 0.0, 0.5, 2.0]), st.booleans())
def test_reduced_replay_equals_the_whole_graph(ranks, factor, sparse):
    """The replay of the ranks' reduced graphs ends each rank's step where the brute force over the whole
    job's graph does; a node found from its part's first node and its anchor (anchors numbered 0 .. m - 1 in
    each part, as ``whatif_local`` writes them) or, ``sparse``, by its key searched."""
    results, key = [], {}
    for r, (t, comm, edges, w) in enumerate(ranks):
        rows = ReplayRows(0, r, r)
        rows.add(None, 5, *_graph(t, comm, edges, w))
        results.append(rows.result())
        for j in range(len(comm)):
            key[(r, j, 0)] = j
    multi = len(ranks) > 1
    members = Members(key if multi else {}, {})
    tabs = step_tables(join_rows(results))[(0, 5)]
    if sparse:                                      # anchors numbered 1, 4, 7, ... in each part: found by key
        for cols, names in ((tabs.anchors, ("anchor",)), (tabs.edges, ("src", "dst"))):
            for c in names:
                cols[c] = cols[c] * 3 + 1
    g = JobStep(tabs, members)
    assert (g.first is None) == sparse and (g.key is None) != sparse    # (numbered 0 .. m - 1: by offsets)
    view = g.members(members)
    measured = g.edges.load()
    got = g.solve(np.full(len(view.instance), factor) if multi and len(view.instance) else None)
    assert all(np.array_equal(a, b) for a, b in zip(g.edges.load(), measured))   # (scaled as read, not written)
    want = _brute(ranks, factor)
    assert [got.end.get(r, NEG) for r in range(len(ranks))] == want
    if multi and len(view.instance):               # the factors given sparse: those not 1 only
        again = g.solve(sparse_factors(np.full(len(view.instance), factor)))
        assert [again.end.get(r, NEG) for r in range(len(ranks))] == want
        assert all(np.array_equal(a, b) for a, b in zip(g.edges.load(), measured))
    _check_rank0_doubled(g, ranks, sparse)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.sampled_from([1.0, 0.5]))
def test_replay_in_chunks_of_a_few_edges_equals_the_whole_graph(ranks, factor):
    """The graph's node lookups (``JobStep._gid``, ``PartsView``'s mask) and its edges written ``CHUNK`` edges
    at a time, its anchors matched to the collectives ``MATCH_ROWS`` at a time, the edge file read
    ``CHUNK_EDGES`` at a time and sorted in ``BUCKETS`` buckets on disk (``MEMORY_EDGES`` 0 and 2: a chunk's
    last destination's edges continued in the next, the extra edges merged across chunks): with 1 and 3, the
    same ends as the brute force."""
    import streamtrace.aggregate.job_edges as je
    import streamtrace.aggregate.whatif_job as wj
    for chunk in (1, 3):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(wj, "CHUNK", chunk)
            mp.setattr(wj, "MATCH_ROWS", chunk)       # (the collectives matched a part or so at a time)
            mp.setattr(je, "CHUNK_EDGES", chunk)
            mp.setattr(je, "BUCKETS", chunk)
            mp.setattr(je, "MEMORY_EDGES", chunk - 1)     # (on disk: 0 edges, or past 2)
            test_reduced_replay_equals_the_whole_graph.hypothesis.inner_test(ranks, factor, chunk == 3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.sampled_from([2 ** 24, 2 ** 26, 2 ** 28]), st.sampled_from([1.0, 2.0, 64.0]))
def test_weights_past_int32_replay_as_the_whole_graph(ranks, scale, factor):
    """Times and costs scaled up to seconds (``scale`` ns a unit), a transfer scaled past 2^31 ns: the
    brute force's step ends (Python ints), the graph's weights on disk as measured after it."""
    big = [(t * scale, comm, edges, [x * scale for x in w]) for t, comm, edges, w in ranks]
    results, key = [], {}
    for r, (t, comm, edges, w) in enumerate(big):
        rows = ReplayRows(0, r, r)
        rows.add(None, 5, *_graph(t, comm, edges, w))
        results.append(rows.result())
        key.update({(r, j, 0): j for j in range(len(comm))})
    multi = len(big) > 1
    members = Members(key if multi else {}, {})
    g = JobStep(step_tables(join_rows(results))[(0, 5)], members)
    measured = g.edges.load()
    view = g.members(members)
    got = g.solve(np.full(len(view.instance), factor) if multi and len(view.instance) else None)
    assert all(np.array_equal(a, b) for a, b in zip(g.edges.load(), measured))
    assert [got.end.get(r, NEG) for r in range(len(big))] == _brute(big, factor)


def _check_rank0_doubled(g, ranks, sparse=False):
    """Rank 0 re-reduced with its costs doubled, swapped into the job's graph ``g``: the same as the whole graph
    (``sparse``: its anchors numbered as the graph's, 1, 4, 7, ...)."""
    t, comm, edges, w = ranks[0]
    rows = ReplayRows(0, 0, 0)
    rows.add(None, 5, *_graph(t, comm, edges, [2 * x for x in w]))
    new = rows.result()["edges"]
    if sparse:
        new = new | {c: new[c] * 3 + 1 for c in ("src", "dst")}
    got = g.with_parts([0], new).solve()
    want = _brute([(t, comm, edges, [2 * x for x in w])] + ranks[1:], 1.0)
    assert [got.end.get(r, NEG) for r in range(len(ranks))] == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_spilled_rows_replay_as_the_whole_graph(ranks):
    """The same through aggregate's way: every rank's rows spilled to files (``spill_rows``), the job
    graph from the columns loaded back (``graph_rows``), rank 0 swapped in doubled (``with_parts``)."""
    key = {(r, j, 0): j for r, (_, comm, _, _) in enumerate(ranks) for j in range(len(comm))}
    members = Members(key if len(ranks) > 1 else {}, {})
    with tempfile.TemporaryDirectory() as d:
        parts = []
        for r, (t, comm, edges, w) in enumerate(ranks):
            rows = ReplayRows(0, r, r)
            rows.add(None, 5, *_graph(t, comm, edges, w))
            parts.append(spill_rows(rows.result(), d, r))
        spilled = SpilledRows(d, parts)
        g = JobStep(step_tables(graph_rows(spilled, spilled.ranks()))[(0, 5)], members)
        assert [g.solve().end.get(r, NEG) for r in range(len(ranks))] == _brute(ranks, 1.0)
        _check_rank0_doubled(g, ranks)


def _in_memory_ends(g) -> tuple:
    """The step ends of ``g``'s forward pass over its edges loaded whole (``longest_path_masked``, the edges
    that run forward in ``g.pos`` kept: the pass the replay made before its edges went to disk), and how
    many edges it drops."""
    src, dst, w = g.edges.load()
    n = len(g.kind)
    keep = g.pos[src] < g.pos[dst]
    init = np.full(n, NEG, np.int64)
    init[g.pos[g.starts]] = g.start_t
    none = np.zeros(0, np.int64)
    dist, _ = longest_path_masked(n, g.pos, src, dst, w, keep, none, none, none, np.zeros(0, bool), init, 1 << 20)
    ends = np.flatnonzero(g.kind == Anchor.step_end)
    out = {}
    for p, x in zip(g.part[ends].tolist(), dist[g.pos[ends]].tolist()):
        if x > NEG:
            out[p] = max(out.get(p, NEG), x)
    return out, len(src) - int(keep.sum())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.data(), st.booleans())
def test_times_against_the_order_replay_as_in_memory(ranks, data, on_disk):
    """Anchor times against the graph's order (clock skew, zero-length events: some job-level edges run
    backwards in time): the base graph's edges sorted over Kahn's order (``_kahn``) replay as the pass over
    its edges loaded whole; rank 0's re-reduction in a view (an edge file of its own when its edges need
    Kahn's order, ``PartsView._own_file``) replays as a graph built with it; the edges held in memory or
    (``on_disk``) written to disk.  Both ways are taken (counted for ``test_both_ways_were_taken``)."""
    import streamtrace.aggregate.job_edges as je
    import streamtrace.aggregate.whatif_job as wj
    skewed = []
    for t, comm, edges, w in ranks:
        noise = data.draw(st.lists(st.integers(-6, 6), min_size=len(t), max_size=len(t)))
        skewed.append((t + np.asarray(noise, np.int64), comm, edges, w))
    key = {(r, j, 0): j for r, (_, comm, _, _) in enumerate(skewed) for j in range(len(comm))}
    members = Members(key if len(skewed) > 1 else {}, {})

    def rows(r, t, comm, edges, w):
        x = ReplayRows(0, r, r)
        x.add(None, 5, *_graph(t, comm, edges, w))
        return x.result()
    seen = {"kahn": 0, "own": 0}
    kahn, own = wj._kahn, wj.PartsView._own_file

    def counted(name, f):
        def g(*a, **k):
            seen[name] += 1
            return f(*a, **k)
        return g
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wj, "_kahn", counted("kahn", kahn))
        mp.setattr(wj.PartsView, "_own_file", counted("own", own))
        mp.setattr(je, "MEMORY_EDGES", 0 if on_disk else je.MEMORY_EDGES)
        g = JobStep(step_tables(join_rows([rows(r, *x) for r, x in enumerate(skewed)]))[(0, 5)], members)
        got = g.solve()
        assert (got.end, got.dropped) == _in_memory_ends(g)
        t, comm, edges, w = skewed[0]
        doubled = [(t, comm, edges, [2 * x for x in w])] + skewed[1:]
        new = rows(0, *doubled[0])["edges"]
        whole = JobStep(step_tables(join_rows([rows(r, *x) for r, x in enumerate(doubled)]))[(0, 5)], members)
        assert g.with_parts([0], new).solve().end == whole.solve().end
    TAKEN["kahn"] += seen["kahn"] > 0
    TAKEN["own"] += seen["own"] > 0
    TAKEN["runs"] += 1


TAKEN = {"kahn": 0, "own": 0, "runs": 0}


def test_both_ways_were_taken():
    """The test above reached Kahn's order and a view's own edge file (run after it, in file order)."""
    if not TAKEN["runs"]:
        test_times_against_the_order_replay_as_in_memory()
    assert TAKEN["kahn"] > 0 and TAKEN["own"] > 0, TAKEN


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=40), st.sampled_from([1, 2, 3, 1 << 18]))
def test_rows_in_order_are_those_a_stable_sort_leaves(rows, chunk):
    """``_in_order`` (the anchors' order checked ``CHUNK`` rows at a time, across the chunks' seams) is true
    exactly when numpy's stable sort by (part, anchor) is the identity: the replay then skips the sort."""
    from unittest import mock

    from streamtrace.aggregate import whatif_job
    part = np.asarray([p for p, _ in rows], np.int32)
    anchor = np.asarray([a for _, a in rows], np.int64)
    want = bool((np.lexsort((anchor, part)) == np.arange(len(rows))).all())
    with mock.patch.object(whatif_job, "CHUNK", chunk):
        assert whatif_job._in_order(part, anchor) == want
