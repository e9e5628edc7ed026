"""Property tests of the longest-path / latest-time kernels (``streamtrace.kernels.critical``)
against their plain-Python twins and against a brute force that enumerates every path of small
random DAGs, plus hand-checked cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels.critical import (EDGE_WINDOW, NEG, POS, WINDOW_BUCKETS, back_within_instant, latest_times,
                                          latest_times_masked, latest_times_sorted, longest_path, longest_path_masked,
                                          longest_path_sorted, reduce_local, time_positions,
                                          trace_back)
from streamtrace.kernels.reference import (back_within_instant_py, latest_times_masked_py, latest_times_py,
                                           latest_times_sorted_py,
                                           longest_path_masked_py, longest_path_py, longest_path_sorted_py,
                                           reduce_local_py, time_positions_py, trace_back_py)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dags(draw):
    """Up to 9 nodes, edges u < v in any order (repeats allowed), weights with ties, zeros and
    negatives; a few sources with an init value, a few sinks with a deadline."""
    n = draw(st.integers(0, 9))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=20)) if pairs else []
    w = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, -3, 10]), min_size=len(edges), max_size=len(edges)))
    init = draw(st.lists(st.sampled_from([NEG, NEG, 0, 3, 7]), min_size=n, max_size=n))
    dl = draw(st.lists(st.sampled_from([POS, POS, 20, 9]), min_size=n, max_size=n))
    a = lambda x: np.asarray(x, np.int64).reshape(-1)  # noqa: E731
    return n, a([u for u, _ in edges]), a([v for _, v in edges]), a(w), a(init), a(dl)


def _paths(n, src, dst):
    """Every path (list of edge indices) of the graph, by enumeration."""
    out_edges = {u: [e for e in range(len(src)) if src[e] == u] for u in range(n)}
    out = []

    def walk(path, v):
        out.append(list(path))
        for e in out_edges[v]:
            walk(path + [e], int(dst[e]))
    for v in range(n):
        walk([], v)
    return out


@SETTINGS
@given(dags())
def test_longest_path_matches_twin_and_brute_force(g):
    n, src, dst, w, init, dl = g
    dist, pred, origin = longest_path(n, src, dst, w, init)
    d2, p2, o2 = longest_path_py(n, src, dst, w, init)
    assert dist.tolist() == d2.tolist() and pred.tolist() == p2.tolist() and origin.tolist() == o2.tolist()
    want = [int(x) for x in init]
    for path in _paths(n, src, dst):
        if not path:
            continue
        s0 = int(src[path[0]])
        if init[s0] <= NEG:
            continue
        v = int(dst[path[-1]])
        want[v] = max(want[v], int(init[s0]) + sum(int(w[e]) for e in path))
    assert dist.tolist() == want
    for v in range(n):                 # the chosen path is a real path of that length
        edges = trace_back(pred, src, v)
        assert edges.tolist() == trace_back_py(pred, src, v).tolist()
        start = int(src[edges[0]]) if len(edges) else v
        assert start == origin[v]
        if dist[v] > NEG:
            assert int(init[start]) + int(w[edges].sum()) == dist[v]


@st.composite
def masked_graphs(draw):
    """A graph as ``longest_path_masked`` reads it: nodes numbered in any order (``pos`` a random
    permutation), base edges (int32) with a random mask, extra edges with theirs; a kept edge runs
    forward in ``pos``, a masked one may not (a replay masks its replaced and backward edges)."""
    n = draw(st.integers(1, 9))
    perm = draw(st.permutations(range(n)))
    node_at = {p: v for v, p in enumerate(perm)}              # the node at each position
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]

    def edges(size):
        k = draw(st.integers(0, size))
        fwd = draw(st.lists(st.sampled_from(pairs), min_size=k, max_size=k)) if pairs else []
        keep = draw(st.lists(st.booleans(), min_size=len(fwd), max_size=len(fwd)))
        back = [(v, u) if not kp and draw(st.booleans()) else (u, v) for (u, v), kp in zip(fwd, keep)]
        w = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, -3, 10]), min_size=len(fwd), max_size=len(fwd)))
        return [node_at[u] for u, _ in back], [node_at[v] for _, v in back], w, keep
    bs, bd, bw, bk = edges(14)
    xs, xd, xw, xk = edges(6)
    init = draw(st.lists(st.sampled_from([NEG, NEG, 0, 3, 7]), min_size=n, max_size=n))
    i64 = lambda x: np.asarray(x, np.int64).reshape(-1)  # noqa: E731
    i32 = lambda x: np.asarray(x, np.int32).reshape(-1)  # noqa: E731
    return (n, i32(perm), i32(bs), i32(bd), i64(bw), np.asarray(bk, bool), i64(xs), i64(xd), i64(xw),
            np.asarray(xk, bool), i64(init))


@SETTINGS
@given(masked_graphs(), st.integers(1, 5), st.data())
def test_longest_path_sorted_matches_the_masked_pass(g, chunk, data):
    """``longest_path_sorted`` over a graph's kept edges in order of destination position, then id, read
    ``chunk`` edges at a time (a destination's edges split across chunks), some skipped, the extra edges
    merged in: the distances and chosen edges of ``longest_path_masked`` over the same edges (the skipped
    ones masked) and of its own twin; ``psrc`` the chosen edge's source position."""
    n, pos, src, dst, w, mask, xs, xd, xw, xm, init = g
    skip_all = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(src), max_size=len(src))), bool)
    keep = np.flatnonzero(mask)
    o = keep[np.argsort(pos[dst[keep]], kind="stable")]         # (ids ascend within a destination)
    i32 = lambda x: np.asarray(x, np.int32)  # noqa: E731
    ids, u, v, ww, skip = i32(o), i32(pos[src[o]]), i32(pos[dst[o]]), w[o].astype(np.int64), skip_all[o]
    xk = np.flatnonzero(xm)
    xo = xk[np.argsort(pos[xd[xk]], kind="stable")]
    x = (i32(len(src) + xo), i32(pos[xs[xo]]), i32(pos[xd[xo]]), xw[xo].astype(np.int64))
    dist, pred, psrc = init.copy(), np.full(n, -1, np.int32), np.full(n, -1, np.int32)
    at, tie = np.zeros(1, np.int64), np.full(3, -1, np.int64)
    chunks = [slice(i, i + chunk) for i in range(0, len(ids), chunk)]
    written = []                                                   # (the positions written out, in order)

    def call(j, flush):
        k = (j.stop - j.start if j is not None else 0) + len(xo) - int(at[0]) + 1
        out = np.full(k, -7, np.int32), np.full(k, -7, np.int32), np.full(k, -7, np.int32)
        c = (ids[j], u[j], v[j], ww[j], skip[j]) if j is not None else \
            (none, none, none, np.zeros(0, np.int64), np.zeros(0, bool))
        m = longest_path_sorted(dist, tie, at, *c, *x, flush, *out)
        assert (out[0][m:] == -7).all()                               # (nothing past what it says it wrote)
        written.extend(out[0][:m].tolist())
        pred[out[0][:m]], psrc[out[0][:m]] = out[1][:m], out[2][:m]

    none = np.zeros(0, np.int32)
    for j in chunks:
        call(j, False)
    call(None, True)
    assert written == sorted(set(written))                            # (ascending, each once)
    assert at[0] == len(xo)
    d2, p2 = longest_path_masked(n, pos, src, dst, w, mask & ~skip_all, xs, xd, xw, xm, init.copy(), EDGE_WINDOW)
    assert dist.tolist() == d2.tolist() and pred.tolist() == p2.tolist()
    want_src = [-1 if e < 0 else pos[src[e]] if e < len(src) else pos[xs[e - len(src)]] for e in p2.tolist()]
    assert psrc.tolist() == want_src
    d3, p3, s3 = longest_path_sorted_py(n, init, [(ids[j], u[j], v[j], ww[j], skip[j]) for j in chunks], x)
    assert (dist.tolist(), pred.tolist(), psrc.tolist()) == (d3.tolist(), p3.tolist(), s3.tolist())


def test_longest_path_sorted_refuses_an_edge_backwards():
    """An edge that does not run forward in positions is an error (as ``longest_path``'s)."""
    one = lambda x, t=np.int32: np.asarray([x], t)  # noqa: E731
    none = np.zeros(0, np.int32)
    with pytest.raises(ValueError):
        longest_path_sorted(np.zeros(2, np.int64), np.full(3, -1, np.int64),
                            np.zeros(1, np.int64), one(0), one(1), one(1), one(3, np.int64), np.zeros(1, bool),
                            none, none, none, np.zeros(0, np.int64), True, *(np.zeros(2, np.int32),) * 3)


def test_longest_path_sorted_refuses_edges_out_of_destination_order_and_short_outputs():
    """A destination below the one open (the edges not sorted by destination) is an error, not a chosen
    edge lost; so is an output too short for a destination written out."""
    i32 = lambda *x: np.asarray(x, np.int32)  # noqa: E731
    none = np.zeros(0, np.int32)
    x = (none, none, none, np.zeros(0, np.int64))
    dist = np.asarray([0, NEG, NEG], np.int64)
    with pytest.raises(ValueError):
        longest_path_sorted(dist.copy(), np.full(3, -1, np.int64), np.zeros(1, np.int64), i32(0, 1), i32(0, 0),
                            i32(2, 1), np.asarray([1, 1], np.int64), np.zeros(2, bool), *x, True,
                            *(np.zeros(3, np.int32),) * 3)
    with pytest.raises(ValueError):
        longest_path_sorted(dist.copy(), np.full(3, -1, np.int64), np.zeros(1, np.int64), i32(0, 1), i32(0, 0),
                            i32(1, 2), np.asarray([1, 1], np.int64), np.zeros(2, bool), *x, True,
                            *(np.zeros(1, np.int32),) * 3)


@SETTINGS
@given(masked_graphs(), st.sampled_from([1, 2, 3, EDGE_WINDOW]))
def test_longest_path_masked_matches_the_copied_edges(g, window):
    """``longest_path_masked`` against its twin and against ``longest_path`` over the kept edges copied
    out (what the what-if replay did before): the same distances, the same chosen edges (as ids),
    whatever its window (one node a bucket here: a window of 1 is one destination at a time); the path
    walked back from the chosen edges' sources as ``longest_path``'s."""
    n, pos, src, dst, w, mask, xs, xd, xw, xm, init = g
    given = init.copy()
    dist, pred = longest_path_masked(n, pos, src, dst, w, mask, xs, xd, xw, xm, given, window)
    assert np.shares_memory(dist, given)                            # (written in place: no copy of n values)
    d2, p2 = longest_path_masked_py(n, pos, src, dst, w, mask, xs, xd, xw, xm, init.copy())
    assert dist.tolist() == d2.tolist() and pred.tolist() == p2.tolist()
    d4, p4 = longest_path_masked(n, pos, src, dst, w.astype(np.int32), mask, xs, xd, xw, xm, init.copy(), window)
    assert dist.tolist() == d4.tolist() and pred.tolist() == p4.tolist()
    psrc = np.asarray([-1 if e < 0 else pos[src[e]] if e < len(src) else pos[xs[e - len(src)]]
                       for e in pred.tolist()], np.int64)
    ids = np.r_[np.flatnonzero(mask), len(src) + np.flatnonzero(xm)]
    ks = np.r_[pos[src[mask]], pos[xs[xm]]].astype(np.int64)
    kd = np.r_[pos[dst[mask]], pos[xd[xm]]].astype(np.int64)
    kw = np.r_[w[mask], xw[xm]].astype(np.int64)
    d3, p3, _ = longest_path(n, ks, kd, kw, init)
    assert dist.tolist() == d3.tolist()
    assert pred.tolist() == [int(ids[e]) if e >= 0 else -1 for e in p3.tolist()]
    assert psrc.tolist() == [int(ks[e]) if e >= 0 else -1 for e in p3.tolist()]
    assert pred.dtype == np.int32                                    # (half an int64 id's memory)
    on = pred.copy()                                  # the job level's walk back by position, as int32
    on[pred >= 0] = np.flatnonzero(pred >= 0)
    for v in range(n):
        assert trace_back(on, psrc, v).tolist() == trace_back_py(on, psrc, v).tolist()


@SETTINGS
@given(masked_graphs(), st.lists(st.sampled_from([POS, POS, 0, 4, 9, 20]), min_size=9, max_size=9))
def test_latest_times_masked_matches_the_copied_edges(g, deadlines):
    """``latest_times_masked`` against its twin and against ``latest_times`` over the kept edges copied
    out (what the critical path's solve did before): the same latest times by position."""
    n, pos, src, dst, w, mask = g[:6]
    deadline = np.asarray(deadlines[:n], np.int64)
    late = latest_times_masked(n, pos, src, dst, w, mask, deadline)
    assert late.tolist() == np.asarray(latest_times_masked_py(n, pos, src, dst, w, mask, deadline)).tolist()
    ks, kd = pos[src[mask]].astype(np.int64), pos[dst[mask]].astype(np.int64)
    assert late.tolist() == latest_times(n, ks, kd, w[mask].astype(np.int64), deadline).tolist()


@SETTINGS
@given(masked_graphs(), st.lists(st.sampled_from([POS, POS, 0, 4, 9, 20]), min_size=9, max_size=9),
       st.integers(1, 5), st.randoms(use_true_random=False))
def test_latest_times_sorted_matches_the_masked_pass(g, deadlines, chunk, rnd):
    """``latest_times_sorted`` over a graph's kept edges by destination position, last first (the edges of
    one destination shuffled: their order does not matter), ``chunk`` edges a call: the latest times of
    ``latest_times_masked`` over the same edges, and of its own twin."""
    n, pos, src, dst, w, mask = g[:6]
    deadline = np.asarray(deadlines[:n], np.int64)
    keep = np.flatnonzero(mask)
    keep = keep[rnd.sample(range(len(keep)), len(keep))] if len(keep) else keep
    o = keep[np.argsort(-pos[dst[keep]].astype(np.int64), kind="stable")]
    u, v, ww = pos[src[o]].astype(np.int32), pos[dst[o]].astype(np.int32), w[o].astype(np.int64)
    late = deadline.copy()
    chunks = [slice(i, i + chunk) for i in range(0, len(o), chunk)]
    for j in chunks:
        latest_times_sorted(late, u[j], v[j], ww[j])
    assert late.tolist() == latest_times_masked(n, pos, src, dst, w, mask, deadline).tolist()
    assert late.tolist() == latest_times_sorted_py(n, deadline, [(u[j], v[j], ww[j]) for j in chunks]).tolist()


def test_latest_times_sorted_refuses_an_edge_backwards():
    """An edge that does not run forward in positions is an error (as ``latest_times``')."""
    late = np.asarray([POS, 7], np.int64)
    with pytest.raises(ValueError):
        latest_times_sorted(late, np.asarray([1], np.int32), np.asarray([1], np.int32), np.asarray([5], np.int64))
    with pytest.raises(ValueError):
        latest_times_sorted(late, np.asarray([0], np.int32), np.asarray([2], np.int32), np.asarray([5], np.int64))


def test_latest_times_masked_refuses_a_kept_edge_backwards():
    pos = np.asarray([1, 0], np.int32)
    src, dst, w = np.asarray([0], np.int32), np.asarray([1], np.int32), np.asarray([5], np.int64)
    deadline = np.asarray([POS, 7], np.int64)
    with pytest.raises(ValueError):
        latest_times_masked(2, pos, src, dst, w, np.ones(1, bool), deadline)
    assert latest_times_masked(2, pos, src, dst, w, np.zeros(1, bool), deadline).tolist() == [POS, 7]


@settings(max_examples=40, deadline=None)
@given(st.integers(WINDOW_BUCKETS + 1, 3_000), st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 100, EDGE_WINDOW]))
def test_longest_path_masked_windows_of_many_positions(n, seed, window):
    """More nodes than buckets (a bucket holds several destinations, a window several buckets), many
    edges into the same nodes, ties of weight: the windowed pass gives its twin's answer."""
    rng = np.random.default_rng(seed)
    pos = rng.permutation(n).astype(np.int32)
    node_at = np.argsort(pos)
    m = int(rng.integers(0, 4 * n))
    u = rng.integers(0, n - 1, m)
    v = np.minimum(n - 1, u + 1 + rng.geometric(0.05, m))      # (mostly near: many sources for one node)
    mask = rng.random(m) < 0.9
    src, dst = node_at[u].astype(np.int32), node_at[v].astype(np.int32)
    w = rng.choice([0, 1, 2, 5, 10], m).astype(np.int64)
    k = int(rng.integers(0, n))
    xu = rng.integers(0, n - 1, k)
    xs, xd = node_at[xu], node_at[np.minimum(n - 1, xu + 1 + rng.geometric(0.1, k))]
    xw, xm = rng.choice([0, 3, 7], k).astype(np.int64), rng.random(k) < 0.8
    init = np.where(rng.random(n) < 0.1, rng.integers(0, 50, n), NEG).astype(np.int64)
    got = longest_path_masked(n, pos, src, dst, w, mask, xs, xd, xw, xm, init.copy(), window)
    want = longest_path_masked_py(n, pos, src, dst, w, mask, xs, xd, xw, xm, init.copy())
    assert all(a.tolist() == b.tolist() for a, b in zip(got, want))


def test_longest_path_masked_refuses_a_kept_edge_backwards():
    """A kept edge against ``pos`` is an error (as ``longest_path``'s); masked, it is left out."""
    pos = np.asarray([1, 0], np.int32)                            # node 0 after node 1
    src, dst, w = np.asarray([0], np.int32), np.asarray([1], np.int32), np.asarray([5], np.int64)
    none, init = np.zeros(0, np.int64), np.asarray([0, 0], np.int64)
    with pytest.raises(ValueError):
        longest_path_masked(2, pos, src, dst, w, np.ones(1, bool), none, none, none, np.zeros(0, bool), init,
                            EDGE_WINDOW)
    dist, pred = longest_path_masked(2, pos, src, dst, w, np.zeros(1, bool), none, none, none,
                                     np.zeros(0, bool), init, EDGE_WINDOW)
    assert dist.tolist() == [0, 0] and pred.tolist() == [-1, -1]


@SETTINGS
@given(dags())
def test_latest_times_matches_twin_and_brute_force(g):
    n, src, dst, w, init, dl = g
    late = latest_times(n, src, dst, w, dl)
    assert late.tolist() == latest_times_py(n, src, dst, w, dl).tolist()
    want = [int(x) for x in dl]
    for path in _paths(n, src, dst):
        if path and dl[int(dst[path[-1]])] < POS:
            u = int(src[path[0]])
            want[u] = min(want[u], int(dl[int(dst[path[-1]])]) - sum(int(w[e]) for e in path))
    assert late.tolist() == want


def test_by_hand_slack():
    # 0 -> 1 (5), 1 -> 3 (5); 0 -> 2 (2), 2 -> 3 (1): path 0-1-3 of 10; node 2 has slack 7
    src, dst, w = (np.asarray(x, np.int64) for x in ([0, 1, 0, 2], [1, 3, 2, 3], [5, 5, 2, 1]))
    init = np.asarray([0, NEG, NEG, NEG], np.int64)
    dist, pred, origin = longest_path(4, src, dst, w, init)
    assert dist.tolist() == [0, 5, 2, 10] and trace_back(pred, src, 3).tolist() == [0, 1]
    late = latest_times(4, src, dst, w, np.asarray([POS, POS, POS, 10], np.int64))
    assert (late - dist).tolist() == [0, 0, 7, 0]
    # ties: equal values -> the edge from the later node
    src, dst, w = (np.asarray(x, np.int64) for x in ([0, 1], [2, 2], [4, 2]))
    dist, pred, _ = longest_path(3, src, dst, w, np.asarray([0, 2, NEG], np.int64))
    assert dist[2] == 4 and pred[2] == 1
    with pytest.raises(ValueError):
        longest_path(2, np.asarray([1], np.int64), np.asarray([0], np.int64), np.asarray([1], np.int64),
                     np.zeros(2, np.int64))
    e = np.zeros(0, np.int64)
    assert len(longest_path(0, e, e, e, e)[0]) == 0 and len(latest_times(0, e, e, e, e)) == 0


def test_brute_force_helper_counts_paths():
    # a diamond has 4 one-edge/two-edge paths + 4 empty ones
    src, dst = np.asarray([0, 0, 1, 2], np.int64), np.asarray([1, 2, 3, 3], np.int64)
    assert len(_paths(4, src, dst)) == 4 + 4 + 2


@st.composite
def step_graphs(draw):
    """Up to 9 nodes with times (ties), in a random order (not always topological: some edges run
    back, some join nodes of one time), edges between any two nodes (self-loops, repeats), weights with
    ties; a few sources and sinks (repeats allowed)."""
    n = draw(st.integers(1, 9))
    t = np.asarray(draw(st.lists(st.sampled_from([0, 5, 5, 9, 20]), min_size=n, max_size=n)), np.int64)
    order = np.asarray(draw(st.permutations(range(n))), np.int64)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20))
    w = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, -3, 10]), min_size=len(pairs), max_size=len(pairs)))
    a = lambda x: np.asarray(x, np.int64).reshape(-1)  # noqa: E731
    srcs = a(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    sinks = a(draw(st.lists(st.integers(0, n - 1), max_size=5)))
    return t, order, a([u for u, _ in pairs]), a([v for _, v in pairs]), a(w), srcs, sinks


@SETTINGS
@given(step_graphs())
def test_reduce_local_matches_twin_and_brute_force(g):
    """``reduce_local`` against its twin (the numpy reduction it replaced, over the twins of
    ``longest_path`` and of the union of ``trace_back``'s walks) and, for each reached sink, against
    the best of every path of kept edges from a source enumerated by brute force."""
    t, order, src, dst, w, sources, sinks = g
    got = reduce_local(t, order, src, dst, w, sources, sinks)
    want = reduce_local_py(t, order, src, dst, w, sources, sinks)
    for x, y in zip(got[:5], want[:5]):
        assert np.asarray(x).tolist() == np.asarray(y).tolist()
    assert got[5] == want[5]
    pos = got[0]
    keep = np.flatnonzero(pos[src] < pos[dst])
    assert got[5] == len(src) - len(keep)
    ks, kd, kw = pos[src[keep]], pos[dst[keep]], w[keep]
    starts = set(pos[sources].tolist())
    best = {s: int(t[order[s]]) for s in starts}                   # (a source's own time: the empty path)
    for path in _paths(len(t), ks, kd):
        if path and int(ks[path[0]]) in starts:
            s, v = int(ks[path[0]]), int(kd[path[-1]])
            best[v] = max(best.get(v, NEG), int(t[order[s]]) + sum(int(kw[e]) for e in path))
    _, o, sk, ww, marked, _ = got
    reached = [int(v) for v in pos[sinks].tolist() if int(v) in best]
    assert sk.tolist() == reached
    for oi, v, wv in zip(o.tolist(), sk.tolist(), ww.tolist()):
        assert int(t[order[oi]]) + wv == best[v]                  # the path's value from its own origin
    assert all(0 <= e < len(src) and pos[src[e]] < pos[dst[e]] for e in marked.tolist())


def test_reduce_local_by_hand():
    """Nodes 0..3 at times 0, 1, 4, 4 in order [0, 1, 3, 2]; a source at 0; edges 0->1 (1), 1->2 (3),
    0->2 (2), 2->3 (0, back: dropped), 1->3 (9); sinks 2 and 3."""
    t = np.asarray([0, 1, 4, 4], np.int64)
    order = np.asarray([0, 1, 3, 2], np.int64)
    src, dst = np.asarray([0, 1, 0, 2, 1], np.int64), np.asarray([1, 2, 2, 3, 3], np.int64)
    w = np.asarray([1, 3, 2, 0, 9], np.int64)
    pos, o, sk, ww, marked, dropped = reduce_local(t, order, src, dst, w, np.asarray([0], np.int64),
                                                   np.asarray([2, 3], np.int64))
    assert pos.tolist() == [0, 1, 3, 2] and dropped == 1
    assert o.tolist() == [0, 0] and sk.tolist() == [3, 2] and ww.tolist() == [4, 10]
    assert marked.tolist() == [0, 1, 4]


@SETTINGS
@given(step_graphs())
def test_back_within_instant_matches_twin(g):
    t, order, src, dst = g[:4]
    assert bool(back_within_instant(order, t, src, dst)) == back_within_instant_py(order, t, src, dst)


@st.composite
def timed_nodes(draw):
    """Node times with many ties (a few distinct values, or spread up to 2^60 - 1 past the least) and tie
    classes 0 .. 7; ``lo`` the least time or below it."""
    n = draw(st.integers(0, 60))
    span = draw(st.sampled_from([3, 2_000, 2 ** 40, 2 ** 60 - 1]))
    base = draw(st.integers(-(2 ** 61), 2 ** 61))
    t = draw(st.lists(st.integers(0, span), min_size=n, max_size=n))
    cls = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    t = np.asarray(t, np.int64) + base
    below = draw(st.integers(0, 2 ** 60 - 1 - span))
    return t, np.asarray(cls, np.int8), base - below


@SETTINGS
@given(timed_nodes())
def test_time_positions_matches_twin_and_lexsort(g):
    """The radix sort's positions equal Python's sort of ``(t, cls, id)`` (the twin) and the inverse of
    ``np.lexsort((cls, t))``, for times spread over up to 2^60 - 1 ns from any ``lo`` at most their least."""
    t, cls, lo = g
    got = time_positions(t, cls, lo)
    assert got.dtype == np.int32
    assert got.tolist() == time_positions_py(t, cls, lo).tolist()
    want = np.empty(len(t), np.int64)
    want[np.lexsort((cls, t))] = np.arange(len(t))
    assert got.tolist() == want.tolist()


def test_time_positions_many_nodes_and_every_digit():
    """200,000 nodes over a 2^50 ns span (five 11-bit digits) with ties: the inverse of ``np.lexsort``."""
    rng = np.random.default_rng(7)
    t = rng.integers(0, 2 ** 50, 200_000) // 1_000 * 1_000 + 123
    t[::7] = t[0]
    cls = rng.integers(0, 8, len(t)).astype(np.int8)
    want = np.empty(len(t), np.int64)
    want[np.lexsort((cls, t))] = np.arange(len(t))
    assert np.array_equal(time_positions(t, cls, int(t.min())), want)


@pytest.mark.parametrize("t, cls, lo", [([5, 3], [0, 0], 4), ([0, 2 ** 60], [0, 0], 0), ([1, 2], [0, 8], 0),
                                        ([1, 2], [-1, 0], 0)])
def test_time_positions_refuses_keys_that_do_not_fit(t, cls, lo):
    """A time below ``lo`` or 2^60 past it, or a class outside [0, 8): refused, by the twin as well."""
    t, cls = np.asarray(t, np.int64), np.asarray(cls, np.int8)
    with pytest.raises(ValueError):
        time_positions(t, cls, lo)
    with pytest.raises(ValueError):
        time_positions_py(t, cls, lo)
