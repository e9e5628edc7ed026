"""Property tests: call-tree, correlation-linking and propagation kernels
against their plain-Python twins, plus hand-checked cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import reference as ref
from streamtrace.kernels import tree as nb

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

I64 = np.int64
BIG = 2**62
TRACK_KEYS = [0, 1, 7, -3, 2**40 + 5, 2**62]


def arr(*xs):
    return np.array(xs, dtype=I64)


# --------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------

@st.composite
def cpu_events(draw, max_size=40):
    """(track, start, end) of events on a few tracks.

    "forest": each event is placed inside a random earlier event of its track
    (or as a root), so most events nest; siblings may overlap, and ends are
    pushed past the enclosing event by small or large overruns.  "dense":
    unrelated intervals in a narrow window (partial overlaps everywhere).
    Both produce touching, identical and zero-length events."""
    mode = draw(st.sampled_from(["forest", "forest", "dense"]))
    base = draw(st.sampled_from([0, -500, 10**6, BIG]))
    keys = draw(st.lists(st.sampled_from(TRACK_KEYS), min_size=1, max_size=3, unique=True))
    n = draw(st.integers(0, max_size))
    tr, s, e = [], [], []
    for _ in range(n):
        k = draw(st.sampled_from(keys))
        if mode == "dense":
            a = base + draw(st.integers(0, 40))
            b = a + draw(st.integers(0, 25))
        else:
            same = [i for i in range(len(tr)) if tr[i] == k]
            p = draw(st.sampled_from(same)) if same and draw(st.integers(0, 5)) else None
            lo, hi = (base, base + 400) if p is None else (s[p], e[p])
            a = draw(st.integers(lo, hi))
            b = draw(st.integers(a, hi))
            bump = draw(st.sampled_from([0, 0, 0, 0, 1, 2, 5, 30, 200]))
            if draw(st.booleans()):
                a = draw(st.sampled_from([a, lo, hi]))     # touching / identical starts
                b = max(b, a)
            b += bump
        tr.append(k)
        s.append(a)
        e.append(b)
    if n and draw(st.booleans()):                            # exact duplicates
        for i in draw(st.lists(st.integers(0, n - 1), max_size=4)):
            tr.append(tr[i])
            s.append(s[i])
            e.append(e[i])
    perm = draw(st.permutations(range(len(tr))))
    return (np.array([tr[i] for i in perm], dtype=I64),
            np.array([s[i] for i in perm], dtype=I64),
            np.array([e[i] for i in perm], dtype=I64))


CLAMPS = st.sampled_from([0, 1, 3, 10, 1000])


@st.composite
def gpu_events(draw, n_cpu, base, max_size=40):
    """(owner, start, end): owners in [-1, n_cpu), overlapping, touching,
    nested, identical and zero-length intervals in a narrow window."""
    m = draw(st.integers(0, max_size))
    owners = draw(st.lists(st.integers(-1, n_cpu - 1), min_size=m, max_size=m))
    starts = [base + x for x in draw(st.lists(st.integers(0, 80), min_size=m, max_size=m))]
    lens = draw(st.lists(st.sampled_from([0, 1, 2, 5, 10, 30]), min_size=m, max_size=m))
    return (np.array(owners, dtype=I64), np.array(starts, dtype=I64),
            np.array([a + d for a, d in zip(starts, lens)], dtype=I64))


@st.composite
def random_forests(draw, max_size=40):
    """(parent, order) of a random forest whose order is a random topological
    order (generally not a preorder)."""
    n = draw(st.integers(0, max_size))
    order = draw(st.permutations(range(n)))
    parent = [-1] * n
    for k in range(1, n):
        if draw(st.integers(0, 4)):
            parent[order[k]] = order[draw(st.integers(0, k - 1))]
    return np.array(parent, dtype=I64), np.array(order, dtype=I64)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def assert_tree_equal(got, want):
    for g, w, dt in zip(got[:3], want[:3], (np.int64, np.int32, np.int64)):
        assert g.dtype == dt
        np.testing.assert_array_equal(g, w)
    assert got[3:] == want[3:]
    assert all(type(x) is int for x in got[3:])


def check_tree_invariants(track, start, end, parent, depth, order, n_clamped, n_overrun):
    n = track.shape[0]
    assert sorted(order.tolist()) == list(range(n))
    pos = np.empty(n, dtype=I64)
    pos[order] = np.arange(n)
    # order: per track sorted by (track, start asc, end desc, index asc)
    keys = [(int(track[i]), int(start[i]), -int(end[i]), i) for i in order]
    assert keys == sorted(keys)
    for i in range(n):
        p = int(parent[i])
        if p < 0:
            assert depth[i] == 0
            continue
        assert depth[i] == depth[p] + 1
        assert pos[p] < pos[i]
        assert track[p] == track[i]
        assert start[p] <= start[i] < end[p]        # parent holds the child's start
    # every subtree is contiguous in order (order is a preorder)
    size = np.ones(n, dtype=I64)
    for v in order[::-1]:
        if parent[v] >= 0:
            size[parent[v]] += size[v]
    for v in range(n):
        block = order[pos[v]:pos[v] + size[v]]
        for u in block[1:]:
            w = int(u)
            while w != -1 and w != v:
                w = int(parent[w])
            assert w == v
    assert 0 <= n_clamped and 0 <= n_overrun and n_clamped + n_overrun <= n


# --------------------------------------------------------------------------
# build_call_tree
# --------------------------------------------------------------------------

@SETTINGS
@given(cpu_events(), CLAMPS)
def test_build_call_tree_matches_twin(ev, clamp):
    got = nb.build_call_tree(*ev, clamp_ns=clamp)
    assert_tree_equal(got, ref.build_call_tree_ref(*ev, clamp_ns=clamp))
    check_tree_invariants(*ev, *got)


@SETTINGS
@given(cpu_events())
def test_build_call_tree_laminar_is_smallest_container(ev):
    """Without overruns (clamp 0), the parent is the innermost earlier event
    containing the child (a third formulation, checked independently)."""
    track, start, end = ev
    parent, depth, order, n_clamped, n_overrun = nb.build_call_tree(*ev, clamp_ns=0)
    assert n_clamped == 0
    if n_overrun:
        return
    key = {int(i): (int(track[i]), int(start[i]), -int(end[i]), int(i)) for i in order}
    for c in range(track.shape[0]):
        cands = [p for p in range(track.shape[0])
                 if key[p] < key[c] and track[p] == track[c]
                 and start[p] <= start[c] < end[p] and end[c] <= end[p]]
        want = max(cands, key=lambda p: key[p]) if cands else -1
        assert parent[c] == want
    # a large clamp changes nothing on laminar input
    assert_tree_equal(nb.build_call_tree(*ev, clamp_ns=10**9), (parent, depth, order, 0, 0))


@SETTINGS
@given(cpu_events())
def test_build_call_tree_tracks_are_independent(ev):
    """Each track's forest equals the forest built from that track alone."""
    track, start, end = ev
    parent, depth, _, n_c, n_o = nb.build_call_tree(*ev, clamp_ns=3)
    tot_c = tot_o = 0
    for k in np.unique(track):
        idx = np.flatnonzero(track == k)
        p, d, _, c, o = nb.build_call_tree(track[idx], start[idx], end[idx], clamp_ns=3)
        np.testing.assert_array_equal(parent[idx], np.where(p >= 0, idx[np.maximum(p, 0)], -1))
        np.testing.assert_array_equal(depth[idx], d)
        tot_c += c
        tot_o += o
    assert (tot_c, tot_o) == (n_c, n_o)


# --------------------------------------------------------------------------
# link_by_correlation
# --------------------------------------------------------------------------

@st.composite
def link_inputs(draw, max_size=40):
    ranks = st.sampled_from([0, 1, 2, -1, 2**40])
    corrs = st.integers(-2, 12)
    n = draw(st.integers(0, max_size))
    m = draw(st.integers(0, max_size))
    lk = draw(st.lists(ranks, min_size=n, max_size=n))
    lc = draw(st.lists(corrs, min_size=n, max_size=n))
    gk = draw(st.lists(ranks, min_size=m, max_size=m))
    gc = draw(st.lists(corrs, min_size=m, max_size=m))
    return tuple(np.array(x, dtype=I64) for x in (lk, lc, gk, gc))


@SETTINGS
@given(link_inputs())
def test_link_matches_twin(x):
    launcher, dup = nb.link_by_correlation(*x)
    want, want_dup = ref.link_by_correlation_ref(*x)
    assert launcher.dtype == np.int64 and type(dup) is int
    np.testing.assert_array_equal(launcher, want)
    assert dup == want_dup
    lk, lc, gk, gc = x
    for j, i in enumerate(launcher):
        if i >= 0:       # same rank and correlation, and the lowest such index
            assert lk[i] == gk[j] and lc[i] == gc[j] >= 0
            assert not np.any((lk[:i] == gk[j]) & (lc[:i] == gc[j]))
        else:
            assert gc[j] < 0 or not np.any((lk == gk[j]) & (lc == gc[j]))


# --------------------------------------------------------------------------
# propagate
# --------------------------------------------------------------------------

def assert_prop_equal(got, want):
    for g, w in zip(got, want):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, w)


def check_prop_invariants(parent, owner, gs, ge, count, total, busy):
    n = parent.shape[0]
    assert np.all(busy <= total) and np.all(busy >= 0) and np.all(count >= 0)
    roots = np.flatnonzero(parent < 0)
    owned = owner >= 0
    assert count[roots].sum() == owned.sum()
    assert total[roots].sum() == (ge - gs)[owned].sum()
    for v in range(n):     # a parent covers at least what any child covers
        p = parent[v]
        if p >= 0:
            assert count[p] >= count[v] and total[p] >= total[v] and busy[p] >= busy[v]


@SETTINGS
@given(st.data(), cpu_events(), CLAMPS)
def test_propagate_matches_twin_on_call_trees(data, ev, clamp):
    parent, depth, order, _, _ = nb.build_call_tree(*ev, clamp_ns=clamp)
    n = parent.shape[0]
    if n == 0:
        owner, gs, ge = arr(), arr(), arr()
    else:
        owner, gs, ge = data.draw(gpu_events(n, data.draw(st.sampled_from([0, -90, BIG]))))
    got = nb.propagate(parent, order, owner, gs, ge)
    assert_prop_equal(got, ref.propagate_ref(parent, order, owner, gs, ge))
    check_prop_invariants(parent, owner, gs, ge, *got)
    # any other topological order (here: by depth) gives the same result
    bfs = np.argsort(depth, kind="stable")
    assert_prop_equal(nb.propagate(parent, bfs, owner, gs, ge), got)


@SETTINGS
@given(st.data(), random_forests())
def test_propagate_matches_twin_on_random_forests(data, forest):
    parent, order = forest
    n = parent.shape[0]
    if n == 0:
        owner, gs, ge = arr(), arr(), arr()
    else:
        owner, gs, ge = data.draw(gpu_events(n, 0, max_size=60))
    got = nb.propagate(parent, order, owner, gs, ge)
    assert_prop_equal(got, ref.propagate_ref(parent, order, owner, gs, ge))
    check_prop_invariants(parent, owner, gs, ge, *got)
    # busy of a node is the union length of its subtree's GPU intervals
    for v in range(n):
        members = set()
        for j, o in enumerate(owner):
            w = int(o)
            while w != -1 and w != v:
                w = int(parent[w])
            if o >= 0 and w == v:
                members.add(j)
        idx = sorted(members)
        assert got[2][v] == ref.union_length(gs[idx], ge[idx])


@st.composite
def merged_traces(draw):
    """Several ranks, each with 1-2 threads of CPU events and kernels whose
    correlation ids collide across ranks (every rank numbers from 1)."""
    n_ranks = draw(st.integers(1, 4))
    tr, s, e, corr, rank_of = [], [], [], [], []
    g_rank, g_corr, g_s, g_e = [], [], [], []
    for r in range(n_ranks):
        ev_tr, ev_s, ev_e = draw(cpu_events(max_size=15))
        for k, a, b in zip(ev_tr.tolist(), ev_s.tolist(), ev_e.tolist()):
            tr.append(r * 8 + (k % 2))          # (rank, tid) -> key
            s.append(a)
            e.append(b)
            rank_of.append(r)
            corr.append(draw(st.sampled_from([-1, 1, 2, 3, 4, 5])))
        for _ in range(draw(st.integers(0, 12))):
            g_rank.append(r)
            g_corr.append(draw(st.sampled_from([-1, 1, 2, 3, 4, 5, 6])))
            a = draw(st.integers(0, 60))
            g_s.append(a)
            g_e.append(a + draw(st.sampled_from([0, 1, 4, 9])))
    return tuple(np.array(x, dtype=I64) for x in
                 (tr, s, e, rank_of, corr, g_rank, g_corr, g_s, g_e))


@SETTINGS
@given(merged_traces(), CLAMPS)
def test_pipeline_on_merged_ranks_matches_twin(x, clamp):
    tr, s, e, rank_of, corr, g_rank, g_corr, g_s, g_e = x
    tree = nb.build_call_tree(tr, s, e, clamp_ns=clamp)
    assert_tree_equal(tree, ref.build_call_tree_ref(tr, s, e, clamp_ns=clamp))
    parent, _, order, _, _ = tree
    launcher, dup = nb.link_by_correlation(rank_of, corr, g_rank, g_corr)
    want_l, want_dup = ref.link_by_correlation_ref(rank_of, corr, g_rank, g_corr)
    np.testing.assert_array_equal(launcher, want_l)
    assert dup == want_dup
    ok = launcher >= 0
    assert np.all(rank_of[launcher[ok]] == g_rank[ok])        # never across ranks
    got = nb.propagate(parent, order, launcher, g_s, g_e)
    assert_prop_equal(got, ref.propagate_ref(parent, order, launcher, g_s, g_e))
    # per rank, the figures equal those of the rank's own trace
    for r in np.unique(rank_of):
        ci = np.flatnonzero(rank_of == r)
        gi = np.flatnonzero(g_rank == r)
        p, _, o, _, _ = nb.build_call_tree(tr[ci], s[ci], e[ci], clamp_ns=clamp)
        lr, _ = nb.link_by_correlation(rank_of[ci], corr[ci], g_rank[gi], g_corr[gi])
        sub = nb.propagate(p, o, lr, g_s[gi], g_e[gi])
        for g, w in zip(got, sub):
            np.testing.assert_array_equal(g[ci], w)


# --------------------------------------------------------------------------
# hand-checked cases
# --------------------------------------------------------------------------

TREES = [(nb.build_call_tree, nb.link_by_correlation, nb.propagate),
         (ref.build_call_tree_ref, ref.link_by_correlation_ref, ref.propagate_ref)]
IDS = ["numba", "twin"]


@pytest.mark.parametrize("build,link,prop", TREES, ids=IDS)
def test_hand_checked_tree(build, link, prop):
    #        0          1         2          3         4          5        6         7
    s = arr(0,        10,       20,        20,       30,        40,      50,       100)
    e = arr(100,      20,       30,        30,       30,        60,      100,      110)
    tr = arr(0, 0, 0, 0, 0, 0, 0, 0)
    parent, depth, order, n_c, n_o = build(tr, s, e, clamp_ns=5)
    # 1 and 2 touch (siblings); 3 is identical to 2 and nests in it; 4 is
    # zero-length at 2's end: 2 and 3 are closed, so it is a child of 0;
    # 6 starts inside 5 and ends 40 ns later: overrun, child of 0, closes 5;
    # 7 starts at 0's end: a root.
    np.testing.assert_array_equal(parent, arr(-1, 0, 0, 2, 0, 0, 0, -1))
    np.testing.assert_array_equal(depth, np.array([0, 1, 1, 2, 1, 1, 1, 0], dtype=np.int32))
    np.testing.assert_array_equal(order, arr(0, 1, 2, 3, 4, 5, 6, 7))
    assert (n_c, n_o) == (0, 1)
    # clamping: with clamp_ns=41, 6 (40 ns past 5) stays a child of 5
    parent, depth, order, n_c, n_o = build(tr, s, e, clamp_ns=41)
    np.testing.assert_array_equal(parent, arr(-1, 0, 0, 2, 0, 0, 5, -1))
    assert (n_c, n_o) == (1, 0)
    # a clamped child's end becomes its parent's (50): a grandchild ending at 53
    # is judged against 50 (overrun 3, not clamped) rather than 52
    parent, depth, order, n_c, n_o = build(arr(5, 5, 5), arr(0, 10, 20), arr(50, 52, 53), clamp_ns=3)
    np.testing.assert_array_equal(parent, arr(-1, 0, -1))
    np.testing.assert_array_equal(depth, np.array([0, 1, 0], dtype=np.int32))
    assert (n_c, n_o) == (1, 1)
    parent, depth, order, n_c, n_o = build(arr(5, 5, 5), arr(0, 10, 20), arr(50, 52, 52), clamp_ns=3)
    np.testing.assert_array_equal(parent, arr(-1, 0, 1))
    np.testing.assert_array_equal(depth, np.array([0, 1, 2], dtype=np.int32))
    assert (n_c, n_o) == (2, 0)
    # a large overrun out of a deep stack attaches to the first ancestor holding it
    parent, _, _, n_c, n_o = build(arr(1, 1, 1, 1, 1), arr(0, 10, 20, 25, 26),
                                   arr(1000, 200, 50, 300, 40), clamp_ns=10)
    np.testing.assert_array_equal(parent, arr(-1, 0, 1, 0, 3))
    assert (n_c, n_o) == (0, 1)
    # two tracks never relate; unsorted input, order grouped by track key
    parent, depth, order, _, _ = build(arr(9, 2, 9, 2), arr(5, 0, 0, 1), arr(6, 10, 10, 2))
    np.testing.assert_array_equal(parent, arr(2, -1, -1, 1))
    np.testing.assert_array_equal(order, arr(1, 3, 2, 0))
    # zero-length events: identical ones are siblings, one at a parent's start nests
    parent, _, _, _, _ = build(arr(0, 0, 0, 0), arr(5, 5, 0, 10), arr(5, 5, 10, 10))
    np.testing.assert_array_equal(parent, arr(2, 2, -1, -1))
    # empty input
    parent, depth, order, n_c, n_o = build(arr(), arr(), arr())
    assert parent.shape == depth.shape == order.shape == (0,) and (n_c, n_o) == (0, 0)
    assert parent.dtype == np.int64 and depth.dtype == np.int32


@pytest.mark.parametrize("build,link,prop", TREES, ids=IDS)
def test_hand_checked_link(build, link, prop):
    # launches: rank 0 corr 7 (graph), rank 1 corr 7 (colliding id), rank 0 corr
    # 8, a launch without correlation, and a duplicate of rank 0 corr 8
    lk = arr(0, 1, 0, 0, 0)
    lc = arr(7, 7, 8, -1, 8)
    gk = arr(0, 0, 0, 1, 0, 1, 2, 0)
    gc = arr(7, 7, 7, 7, 8, 9, 7, -1)
    launcher, dup = link(lk, lc, gk, gc)
    np.testing.assert_array_equal(launcher, arr(0, 0, 0, 1, 2, -1, -1, -1))
    assert dup == 1
    launcher, dup = link(arr(), arr(), gk, gc)
    np.testing.assert_array_equal(launcher, np.full(8, -1))
    assert dup == 0


@pytest.mark.parametrize("build,link,prop", TREES, ids=IDS)
def test_hand_checked_merged_two_ranks(build, link, prop):
    # Two ranks with identical CPU stacks and colliding correlation ids.
    #   step (0-1000) > fwd (100-600) > cudaGraphLaunch (200-210, corr 1)
    #                                 > cudaLaunchKernel (300-305, corr 2)
    #                 > bwd (700-900) > cudaLaunchKernel (710-715, corr 3)
    s1 = [0, 100, 200, 300, 700, 710]
    e1 = [1000, 600, 210, 305, 900, 715]
    c1 = [-1, -1, 1, 2, -1, 3]
    tr = arr(*([0] * 6 + [8] * 6))
    s = arr(*(s1 + [x + 5 for x in s1]))
    e = arr(*(e1 + [x + 5 for x in e1]))
    rank = arr(*([0] * 6 + [1] * 6))
    corr = arr(*(c1 + c1))
    parent, _, order, _, _ = build(tr, s, e)
    np.testing.assert_array_equal(parent, arr(-1, 0, 1, 1, 0, 4, -1, 6, 7, 7, 6, 10))
    # rank 0: the graph (corr 1) replays 3 kernels, two of them overlapping
    # (two streams); corr 2 one kernel; a memcpy without launch (corr -1).
    # rank 1: corr 1 one kernel only, corr 3 one kernel, and a kernel whose
    # correlation (9) matches no launch.
    g_rank = arr(0, 0, 0, 0, 0, 1, 1, 1)
    g_corr = arr(1, 1, 1, 2, -1, 1, 3, 9)
    g_s = arr(250, 260, 290, 400, 500, 300, 800, 900)
    g_e = arr(280, 300, 295, 420, 550, 310, 850, 905)
    launcher, dup = link(rank, corr, g_rank, g_corr)
    np.testing.assert_array_equal(launcher, arr(2, 2, 2, 3, -1, 8, 11, -1))
    assert dup == 0
    count, total, busy = prop(parent, order, launcher, g_s, g_e)
    np.testing.assert_array_equal(count, arr(4, 4, 3, 1, 0, 0, 2, 1, 1, 0, 1, 1))
    np.testing.assert_array_equal(total, arr(95, 95, 75, 20, 0, 0, 60, 10, 10, 0, 50, 50))
    # graph: [250,280) u [260,300) u [290,295) = [250,300) -> 50; + [400,420)
    np.testing.assert_array_equal(busy, arr(70, 70, 50, 20, 0, 0, 60, 10, 10, 0, 50, 50))


@pytest.mark.parametrize("build,link,prop", TREES, ids=IDS)
def test_hand_checked_propagate(build, link, prop):
    # forest given directly, order not a preorder: 0 > {1 > 3, 2}, 4 alone
    parent = arr(-1, 0, 0, 1, -1)
    order = arr(4, 0, 2, 1, 3)
    owner = arr(3, 3, 2, -1, 0, 4)
    gs = arr(0, 10, 15, 0, 100, 7)
    ge = arr(10, 20, 30, 1000, 100, 7)      # touching pair, zero-length ones
    count, total, busy = prop(parent, order, owner, gs, ge)
    np.testing.assert_array_equal(count, arr(4, 2, 1, 2, 1))
    np.testing.assert_array_equal(total, arr(35, 20, 15, 20, 0))
    np.testing.assert_array_equal(busy, arr(30, 20, 15, 20, 0))
    count, total, busy = prop(arr(), arr(), arr(), arr(), arr())
    assert count.shape == (0,) and count.dtype == np.int64
    count, total, busy = prop(parent, order, arr(), arr(), arr())
    np.testing.assert_array_equal(count, np.zeros(5))


@pytest.mark.parametrize("build,link,prop", TREES, ids=IDS)
def test_errors(build, link, prop):
    with pytest.raises(ValueError):
        build(arr(0, 0), arr(0, 5), arr(1, 4))                 # end < start
    with pytest.raises(ValueError):
        build(arr(0), arr(0, 5), arr(1, 6))                    # lengths differ
    with pytest.raises(ValueError):
        build(arr(0), arr(0), arr(1), clamp_ns=-1)
    with pytest.raises(TypeError):
        build(arr(0), arr(0), arr(1), clamp_ns=1.5)
    with pytest.raises(TypeError):
        build(arr(0), np.array([0.5]), np.array([1.5]))
    with pytest.raises(ValueError):
        link(arr(0, 1), arr(1), arr(0), arr(1))
    with pytest.raises(ValueError):
        link(arr(0), arr(1), arr(0), arr(1, 2))
    with pytest.raises(TypeError):
        link(arr(0), np.array([1.0]), arr(0), arr(1))
    ok = (arr(-1, 0), arr(0, 1), arr(1), arr(0), arr(5))
    prop(*ok)
    bad = [
        (arr(-1, 0), arr(1, 0), arr(1), arr(0), arr(5)),       # child before parent
        (arr(1, 0), arr(0, 1), arr(), arr(), arr()),           # cycle
        (arr(-1, 0), arr(0, 0), arr(), arr(), arr()),          # not a permutation
        (arr(-1, 0), arr(0, 2), arr(), arr(), arr()),          # out of range
        (arr(-1, 5), arr(0, 1), arr(), arr(), arr()),          # parent out of range
        (arr(-1, 0), arr(0), arr(), arr(), arr()),             # lengths differ
        (arr(-1, 0), arr(0, 1), arr(2), arr(0), arr(5)),       # owner out of range
        (arr(-1, 0), arr(0, 1), arr(1, 1), arr(0), arr(5)),    # gpu lengths differ
        (arr(-1, 0), arr(0, 1), arr(1), arr(5), arr(0)),       # gpu end < start
        (arr(-2, 0), arr(0, 1), arr(), arr(), arr()),          # parent -2
    ]
    for case in bad:
        with pytest.raises(ValueError):
            prop(*case)
    with pytest.raises(TypeError):
        prop(arr(-1), arr(0), arr(0), np.array([0.5]), np.array([1.5]))


def test_accepts_other_integer_inputs_and_does_not_modify():
    tr = np.array([1, 0], dtype=np.int32)
    s, e = np.array([5, 0], dtype=np.uint16), arr(6, 10)
    parent, depth, order, _, _ = nb.build_call_tree(tr.tolist(), s, e)
    assert parent.dtype == np.int64
    np.testing.assert_array_equal(parent, arr(-1, -1))
    np.testing.assert_array_equal(order, arr(1, 0))
    np.testing.assert_array_equal(s, [5, 0])
    owner = arr(0, 0)
    gs, ge = arr(9, 1), arr(10, 2)
    nb.propagate(arr(-1), arr(0), owner, gs, ge)
    np.testing.assert_array_equal(gs, arr(9, 1))


def test_deep_chain_and_wide_node():
    """A 2000-deep chain (shared unions) and a node with 2000 children whose
    kernels arrive out of order (run merging) agree with the twin."""
    rng = np.random.default_rng(7)
    n = 2000
    parent = np.arange(-1, n - 1, dtype=I64)
    order = np.arange(n, dtype=I64)
    m = 600
    owner = rng.integers(0, n, m).astype(I64)
    gs = rng.integers(0, 10**6, m).astype(I64)
    ge = gs + rng.integers(0, 500, m)
    got = nb.propagate(parent, order, owner, gs, ge)
    assert_prop_equal(got, ref.propagate_ref(parent, order, owner, gs, ge))
    parent = np.full(n, 0, dtype=I64)
    parent[0] = -1
    got = nb.propagate(parent, order, owner, gs, ge)
    assert_prop_equal(got, ref.propagate_ref(parent, order, owner, gs, ge))
    assert got[2][0] == ref.union_length(gs[owner >= 0], ge[owner >= 0])


def test_big_graph_launch_and_many_own_events():
    """Launches owning many GPU events (a large CUDA graph: the per-launch sort
    switches from insertion sort to argsort) next to children with their own."""
    rng = np.random.default_rng(11)
    parent = arr(-1, 0, 0, 1, 1, -1)
    order = arr(5, 0, 1, 3, 4, 2)
    owner = np.concatenate([np.full(50, 3), np.full(17, 0), np.full(16, 2),
                            rng.integers(-1, 6, 40)]).astype(I64)
    gs = rng.integers(0, 2000, owner.shape[0]).astype(I64)
    ge = gs + rng.integers(0, 60, owner.shape[0])
    perm = rng.permutation(owner.shape[0])
    owner, gs, ge = owner[perm], gs[perm], ge[perm]
    got = nb.propagate(parent, order, owner, gs, ge)
    assert_prop_equal(got, ref.propagate_ref(parent, order, owner, gs, ge))
    assert got[0][0] == np.count_nonzero(owner >= 0) - np.count_nonzero(owner == 5)
