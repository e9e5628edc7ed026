"""The job-level critical path's graph in its lean forms (issue 48, 4,096 ranks' memory):
``critical_ranks.capped_edges`` keying the edges a chunk at a time and sorting only the peers'
stretches the top rank has, against a plain-Python reading of its rule; ``critical_path.solve_step``
over the edges streamed from an ``EdgeFile`` (in memory, on disk in chunks of a few edges), against
the twins' passes over the kept edges copied out."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import streamtrace.aggregate.critical_ranks as cr
from streamtrace.aggregate.critical_graph import Anchor, Edge
from streamtrace.aggregate.critical_path import JobGraph, solve_step
from streamtrace.kernels.reference.critical import latest_times_py, longest_path_py
from streamtrace.kernels.sentinels import NEG, POS

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORED = settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
"""For the tests of both edge stores (``edge_store``: the same store for every example)."""


@st.composite
def graphs(draw):
    """A job graph's arrays as ``capped_edges`` reads them: nodes (``kind``, ``part``), members of
    barriers (``m_arr`` / ``m_end`` / ``m_bar``), edges (``src``, ``dst``, ``w``, ``etype``)."""
    n = draw(st.integers(2, 14))
    kinds = [Anchor.step_start, Anchor.step_end, Anchor.arrival, Anchor.end, -1]
    kind = np.asarray(draw(st.lists(st.sampled_from(kinds), min_size=n, max_size=n)), np.int64)
    part = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64)
    nm = draw(st.integers(0, n // 2))
    m_nodes = draw(st.permutations(range(n)))[:2 * nm]
    m_arr, m_end = np.asarray(m_nodes[:nm], np.int64), np.asarray(m_nodes[nm:2 * nm], np.int64)
    m_bar = np.asarray(draw(st.lists(st.integers(0, 2), min_size=nm, max_size=nm)), np.int64)
    ne = draw(st.integers(0, 30))
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    edges = draw(st.lists(pair, min_size=ne, max_size=ne))
    src = np.asarray([u for u, _ in edges], np.int64).reshape(-1)
    dst = np.asarray([v for _, v in edges], np.int64).reshape(-1)
    low, high = draw(st.sampled_from([(0, 50), (-50, 50), (2 ** 61, 2 ** 62)]))   # (packed; not: below 0, past 62 bits)
    w = np.asarray(draw(st.lists(st.integers(low, high), min_size=ne, max_size=ne)), np.int64)
    etype = np.asarray(draw(st.lists(st.sampled_from([Edge.local, Edge.local, Edge.wait, Edge.transfer]),
                                     min_size=ne, max_size=ne)), np.int8)
    g = SimpleNamespace(t=np.zeros(n, np.int64), kind=kind, part=part, m_arr=m_arr, m_end=m_end, m_bar=m_bar,
                        src=src, dst=dst, w=w, etype=etype)
    return g, draw(st.one_of(st.none(), st.integers(0, 3)))


def _as_job_graph(g, folder=None) -> JobGraph:
    """A ``JobGraph`` of the plain arrays ``g`` (nodes, members, edges appended to its ``EdgeFile``)."""
    job = JobGraph(folder=folder)
    for c in ("t", "kind", "part", "m_arr", "m_end", "m_bar"):
        setattr(job, c, getattr(g, c, np.zeros(0, np.int64)))
    job.edges.append(np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64), np.asarray(g.w, np.int64))
    job.etype = np.asarray(getattr(g, "etype", np.zeros(len(g.src), np.int8)), np.int8)
    job.n = len(g.t)
    return job


def _capped_py(g, part):
    """``capped_edges``' rule read plainly: a node's code (step start / end, a barrier's arrival /
    end), a LOCAL edge's stretch the pair of its ends' codes; each of ``part``'s stretches capped at
    the median of the other parts' same stretch (``np.median``: the mean of the two middle values)."""
    if part is None:
        return None
    code = {}
    for i, k in enumerate(g.kind.tolist()):
        code[i] = "start" if k == Anchor.step_start else "end" if k == Anchor.step_end else None
    for a, e, b in zip(g.m_arr.tolist(), g.m_end.tolist(), g.m_bar.tolist()):
        code[a], code[e] = ("arrival", b), ("end", b)
    key = [(code[u], code[v]) if t == Edge.local and code[u] is not None and code[v] is not None else None
           for u, v, t in zip(g.src.tolist(), g.dst.tolist(), g.etype.tolist())]
    peers: dict = {}
    for e, k in enumerate(key):
        if k is not None and g.part[g.src[e]] != part:
            peers.setdefault(k, []).append(int(g.w[e]))
    w, changed = [int(x) for x in g.w], False
    for e, k in enumerate(key):
        if k is None or g.part[g.src[e]] != part or k not in peers:
            continue
        v = sorted(peers[k])
        m = int((float(v[(len(v) - 1) // 2]) + float(v[len(v) // 2])) / 2)
        if m < w[e]:
            w[e], changed = m, True
    return w if changed else None


@SETTINGS
@given(graphs(), st.sampled_from([1, 3, 1 << 20]), st.sampled_from([1, 2, 4, 8, 1 << 20]))
def test_capped_edges_follow_the_rule_in_any_chunk(case, chunk, batch):
    """The capped stretches as the plain rule gives them, for any chunk and batch size, weights that pack
    into one int64 with their stretch and weights that do not (one below 0, or past 2**61)."""
    g, part = case
    before = g.w.copy()
    job = _as_job_graph(g)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cr, "STRETCH_CHUNK", chunk)
        mp.setattr(cr, "STRETCH_BATCH", batch)
        got = cr.capped_edges(job, part)
    assert job.edges.load()[2].tolist() == before.tolist()              # read, not changed
    want = _capped_py(g, part)
    assert (got is None) == (want is None)
    if got is not None:
        edges, w = got
        assert edges.tolist() == [e for e in range(len(want)) if want[e] != before[e]]
        capped = before.copy()
        capped[edges] = w
        assert capped.tolist() == want


def _job_graph(t, kind, part, src, dst, w, folder=None):
    """``(JobGraph, plain)``: a ``JobGraph`` with its node arrays set and its edges appended (no
    collectives; ``folder``: its ``EdgeFile`` on disk there), and the same arrays plain (``src``, ``dst``,
    ``w`` int64)."""
    i64 = lambda x: np.asarray(x, np.int64).reshape(-1)  # noqa: E731
    plain = SimpleNamespace(t=i64(t), kind=i64(kind), part=i64(part), src=i64(src), dst=i64(dst), w=i64(w))
    return _as_job_graph(plain, folder), plain


@pytest.fixture(params=["memory", "disk"])
def edge_store(request, tmp_path_factory):
    """``(folder, chunk)``: the graphs' edges in memory, or on disk read three at a time."""
    if request.param == "memory":
        yield None, None
        return
    import streamtrace.aggregate.job_edges as je
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(je, "MEMORY_EDGES", 0)
        mp.setattr(je, "CHUNK_EDGES", 3)
        yield tmp_path_factory.mktemp("edges"), 3


@st.composite
def chains(draw):
    """Ranks' steps as chains of anchors at increasing times (some equal), edges along each chain
    and a few between them, some running back in time (dropped by the solve)."""
    nr = draw(st.integers(1, 3))
    t, kind, part, src, dst, w = [], [], [], [], [], []
    for r in range(nr):
        k = draw(st.integers(2, 5))
        base = len(t)
        times = sorted(draw(st.lists(st.integers(0, 40), min_size=k, max_size=k)))
        t += times
        kind += [Anchor.step_start] + [Anchor.arrival] * (k - 2) + [Anchor.step_end]
        part += [r] * k
        for i in range(k - 1):
            src.append(base + i)
            dst.append(base + i + 1)
            w.append(times[i + 1] - times[i] + draw(st.integers(0, 3)))
    for u, v in draw(st.lists(st.tuples(st.integers(0, len(t) - 1), st.integers(0, len(t) - 1)), max_size=4)):
        if u != v:
            src.append(u)
            dst.append(v)
            w.append(draw(st.integers(0, 9)))
    return t, kind, part, src, dst, w


@STORED
@given(case=chains())
def test_solve_step_equals_the_passes_over_the_kept_edges(case, edge_store):
    """Every edge forward or some back in time (dropped), the edges in memory or on disk read a few at a
    time: the earliest and latest times and the path's end are the twins' over the kept edges copied out,
    ``dropped`` counts the others, the path's nodes and weights are its edges'."""
    job, g = _job_graph(*case, folder=edge_store[0])
    solved = solve_step(job)
    assert solved is not None
    pos = solved.pos
    fwd = pos[g.src] < pos[g.dst]
    keep = np.flatnonzero(fwd)
    assert solved.dropped == int((~fwd).sum())
    path = solved.path.tolist()
    assert solved.src.tolist() == g.src[path].tolist() and solved.dst.tolist() == g.dst[path].tolist()
    assert solved.w.tolist() == g.w[path].tolist()
    n = len(g.t)
    init = np.full(n, NEG, np.int64)
    for i in np.flatnonzero(g.kind == Anchor.step_start).tolist():
        init[pos[i]] = int(g.t[i])
    ps, pd, pw = pos[g.src[keep]], pos[g.dst[keep]], g.w[keep]
    dist, _, _ = longest_path_py(n, ps, pd, pw, init)
    assert solved.dist.tolist() == dist.tolist()
    deadline = np.full(n, POS, np.int64)
    for i in np.flatnonzero(g.kind == Anchor.step_end).tolist():
        deadline[pos[i]] = dist[pos[solved.end]]
    assert solved.late.tolist() == np.asarray(latest_times_py(n, ps, pd, pw, deadline)).tolist()
    assert all(fwd[e] for e in path)
    assert all(g.dst[a] == g.src[b] for a, b in zip(path, path[1:]))      # one chain of edges
    if path:
        assert g.dst[path[-1]] == solved.end
        assert dist[pos[solved.end]] == dist[pos[g.src[path[0]]]] + int(g.w[path].sum())


@STORED
@given(case=chains(), data=st.data())
def test_solve_path_equals_a_full_solve_with_the_other_weights(case, data, edge_store):
    """What bounds next's re-solve (``solve_path``: the first solve's order and kept edges, no
    backward pass) finds the path and end a full ``solve_step`` with the same weights finds (every
    edge's, or the changed ones' ``(ids, ns)``), and that path is a longest one over the kept edges (the
    twin's distance at its end); the path's weights are the new ones."""
    from streamtrace.aggregate.critical_path import solve_path
    job, g = _job_graph(*case, folder=edge_store[0])
    base = solve_step(job)
    w = np.asarray(data.draw(st.lists(st.integers(0, 60), min_size=len(g.w), max_size=len(g.w))), np.int64)
    full, again = solve_step(job, w), solve_path(job, w, base)
    changed = np.flatnonzero(w != g.w)
    sparse = solve_path(job, (changed, w[changed]), base)
    assert again.dist is None and again.late is None
    assert again.path.tolist() == full.path.tolist() == sparse.path.tolist()
    assert again.end == full.end == sparse.end
    assert again.w.tolist() == sparse.w.tolist() == w[again.path].tolist()
    pos = base.pos
    keep = np.flatnonzero(pos[g.src] < pos[g.dst])
    n = len(g.t)
    init = np.full(n, NEG, np.int64)
    for i in np.flatnonzero(g.kind == Anchor.step_start).tolist():
        init[pos[i]] = int(g.t[i])
    dist, _, _ = longest_path_py(n, pos[g.src[keep]], pos[g.dst[keep]], w[keep], init)
    path = again.path.tolist()
    if path:
        assert dist[pos[again.end]] == dist[pos[g.src[path[0]]]] + int(w[path].sum())


@SETTINGS
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-2 ** 40, 2 ** 40) | st.integers(0, 2)
                          | st.integers(-2 ** 63, 2 ** 63 - 1), st.integers(-1, 2)), max_size=40),
       st.lists(st.integers(0, 40), max_size=3), st.booleans())
def test_key_codes_number_the_distinct_rows_in_their_order(rows, cuts, as_columns):
    """``critical_graph.key_codes``: each row's code is the place of its value among the distinct
    rows sorted (columns in order), as a plain ``sorted(set(...))`` numbers them; the rows given in
    blocks (arrays or their columns) as if joined; spans past 63 bits (the unpacked sort) alike."""
    from streamtrace.aggregate.critical_graph import key_codes
    keys = np.asarray(rows, np.int64).reshape(-1, 3)
    rank = {r: i for i, r in enumerate(sorted(set(rows)))}
    edges = [0] + sorted(min(c, len(rows)) for c in cuts) + [len(rows)]
    blocks = [keys[a:b] for a, b in zip(edges, edges[1:])]
    if as_columns:
        blocks = [[b[:, 0].astype(np.int32) if b[:, 0].size else b[:, 0], b[:, 1], b[:, 2]] for b in blocks]
    assert key_codes(*blocks).tolist() == [rank[r] for r in rows]
    assert key_codes(keys).tolist() == [rank[r] for r in rows]


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(-5, 5)), max_size=40), st.integers(0, 3))
def test_last_of_keeps_the_last_value_of_each_code(rows, extra):
    """``critical_graph.last_of``: what a dict built in row order holds, -1 for a code no row has."""
    from streamtrace.aggregate.critical_graph import last_of
    n = max((c for c, _ in rows), default=-1) + 1 + extra
    held = {}
    for c, v in rows:
        held[c] = v
    codes = np.asarray([c for c, _ in rows], np.int64)
    values = np.asarray([v for _, v in rows], np.int64)
    assert last_of(codes, values, n).tolist() == [held.get(c, -1) for c in range(n)]


@SETTINGS
@given(st.lists(st.integers(-4, 6), max_size=40), st.sampled_from([np.int8, np.int64]))
def test_tie_classes_order_equal_times_as_the_rule_says(kinds, dtype):
    """``tie_classes``: end < step start < arrival < barrier < step end among nodes of one time, any
    other kind last, whatever the kinds' integer type (the replay's int8, the critical path's int64)."""
    from streamtrace.aggregate.critical_graph import BARRIER, tie_classes
    rule = {Anchor.end: 0, Anchor.step_start: 1, Anchor.arrival: 2, BARRIER: 3, Anchor.step_end: 4}
    got = tie_classes(np.asarray(kinds, dtype))
    assert got.dtype == np.int8
    assert got.tolist() == [rule.get(k, 5) for k in kinds]


@SETTINGS
@given(st.permutations(range(40)).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, 40))),
       st.sampled_from([1, 3, 1 << 20]))
def test_positions_invert_the_order(case, chunk):
    """``positions``: each node's place in ``order`` (``np.argsort`` of the permutation), whatever the
    chunk it is written by."""
    import streamtrace.aggregate.critical_graph as cg
    perm, n = case
    order = np.asarray([x for x in perm if x < n], np.int64)        # a permutation of 0 .. n - 1
    old = cg.POSITION_CHUNK
    cg.POSITION_CHUNK = chunk
    try:
        got = cg.positions(order)
    finally:
        cg.POSITION_CHUNK = old
    assert got.dtype == np.int32 and got.tolist() == np.argsort(order).tolist()   # (int32: half the memory)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([-2 ** 62, -5, 0, 3, 3, 2 ** 59, 2 ** 62]), st.integers(0, 5)), max_size=30))
def test_time_positions_sort_by_time_class_and_node(nodes):
    """``critical_graph.time_positions``: each node's place in Python's sort of ``(t, class, node)``, int32,
    whether the times' span fits the radix sort's key (below 2^60 ns) or not (the lexsort then)."""
    from streamtrace.aggregate.critical_graph import time_positions
    t = np.asarray([x for x, _ in nodes], np.int64)
    cls = np.asarray([c for _, c in nodes], np.int8)
    order = sorted(range(len(nodes)), key=lambda v: (nodes[v][0], nodes[v][1], v))
    got = time_positions(t, cls)
    assert got.dtype == np.int32 and [order[p] for p in range(len(order))] == np.argsort(got).tolist()


def test_joined_ints_are_int32_until_one_does_not_fit():
    from streamtrace.aggregate.critical_graph import joined_ints
    small = joined_ints(np.asarray([0, 2 ** 31 - 1], np.int64), np.asarray([-2 ** 31], np.int64))
    assert small.dtype == np.int32 and small.tolist() == [0, 2 ** 31 - 1, -2 ** 31]
    big = joined_ints(np.asarray([1], np.int32), np.asarray([2 ** 31], np.int64))
    assert big.dtype == np.int64 and big.tolist() == [1, 2 ** 31]
    assert joined_ints().dtype == np.int32 and len(joined_ints(np.zeros(0, np.int64))) == 0
    ids = joined_ints(np.asarray([0, 5], np.int64), np.asarray([7], np.int64), np.zeros(0, np.int64))   # node ids
    assert ids.dtype == np.int32 and ids.tolist() == [0, 5, 7]


@SETTINGS
@given(chains(), st.sampled_from([1, 2 ** 26, 2 ** 30]))
def test_solve_step_over_weights_past_32_bits(case, scale):
    """The same graph with its times and weights ``scale`` ns a unit (weights past 2^31 ns at the largest):
    the earliest and latest times scale with it, the path and end are the same."""
    t, kind, part, src, dst, w = case
    a = solve_step(_job_graph(t, kind, part, src, dst, w)[0])
    b = solve_step(_job_graph([x * scale for x in t], kind, part, src, dst, [x * scale for x in w])[0])
    big = lambda x: [v if abs(v) >= 2 ** 62 else v * scale for v in x.tolist()]  # noqa: E731
    assert big(a.dist) == b.dist.tolist() and big(a.late) == b.late.tolist()
    assert a.path.tolist() == b.path.tolist() and a.end == b.end and a.dropped == b.dropped


@st.composite
def barriers(draw):
    """Nodes at random times on random parts; barriers (some point-to-point) each with members (an
    arrival and an end node)."""
    n = draw(st.integers(1, 12))
    t = np.asarray(draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)), np.int64)
    part = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
    nb = draw(st.integers(0, 4))
    b_node = np.asarray(draw(st.lists(st.integers(0, n - 1), min_size=nb, max_size=nb)), np.int64)
    b_p2p = np.asarray(draw(st.lists(st.booleans(), min_size=nb, max_size=nb)), bool)
    nm = draw(st.integers(0, 10)) if nb else 0
    m_bar = np.sort(np.asarray(draw(st.lists(st.integers(0, max(nb - 1, 0)), min_size=nm, max_size=nm)), np.int64))
    node = st.lists(st.integers(0, n - 1), min_size=nm, max_size=nm)
    m_arr, m_end = (np.asarray(draw(node), np.int64) for _ in range(2))
    return SimpleNamespace(t=t, part=part, b_node=b_node, b_p2p=b_p2p, m_bar=m_bar, m_arr=m_arr, m_end=m_end)


@SETTINGS
@given(barriers())
def test_collective_figures_follow_the_rule(g):
    """``_collective_figures`` against its rule read plainly: per member of a group collective (not
    point-to-point) its wait (the barrier's time - its arrival, 0 when it ended before the barrier) and
    count; per barrier of two or more members, the last to arrive (ties: the larger part, then the later
    member) leads by its arrival - the one before it's."""
    n = 4
    wait, count, lead, last = ([0] * n for _ in range(4))
    groups: dict = {}
    for i, (bi, a, e) in enumerate(zip(g.m_bar.tolist(), g.m_arr.tolist(), g.m_end.tolist())):
        if g.b_p2p[bi]:
            continue
        tb, p = int(g.t[g.b_node[bi]]), int(g.part[a])
        wait[p] += tb - int(g.t[a]) if g.t[e] >= tb else 0
        count[p] += 1
        groups.setdefault(bi, []).append((int(g.t[a]), p, i))
    for members in groups.values():
        if len(members) >= 2:
            members.sort()
            lead[members[-1][1]] += members[-1][0] - members[-2][0]
            last[members[-1][1]] += 1
    got = cr._collective_figures(g, n)
    assert [x.tolist() for x in got] == [wait, count, lead, last]


def _matched_by_dicts(arrivals, ends, members, first_only):
    """``matched_members`` in plain Python: dicts built in row order, the arrivals kept in their order
    (each key once, at its first place, when ``first_only``)."""
    end, inst, last = {}, {}, {}
    for k, v in ends:
        end[k] = v
    for k, v in members:
        inst[k] = v
    for k, v in arrivals:
        last[k] = v
    rows = list({k: last[k] for k, _ in arrivals}.items()) if first_only else arrivals
    return [(a, end[k], inst.get(k, -1)) for k, a in rows if k in end]


_KEY = st.tuples(st.integers(0, 4), st.integers(-1, 3) | st.just(2 ** 40), st.integers(0, 2))


@SETTINGS
@given(st.lists(st.tuples(_KEY, st.integers(0, 99)), max_size=30),
       st.lists(st.tuples(_KEY, st.integers(0, 99)), max_size=30),
       st.lists(st.tuples(_KEY, st.integers(0, 9)), max_size=30), st.booleans())
def test_matched_members_are_what_dicts_hold(arrivals, ends, members, first_only):
    """``critical_graph.matched_members``: per arrival whose key has an end, its key's last end and last
    instance (-1 none), in the arrivals' order, each key once at its first place when asked (the critical
    path) or every arrival (the replay), as dicts built in row order answer."""
    from streamtrace.aggregate.critical_graph import matched_members

    def arrays(rows):
        keys = np.asarray([k for k, _ in rows], np.int64).reshape(-1, 3)
        return [keys[:, 0].astype(np.int32), keys[:, 1], keys[:, 2]], np.asarray([v for _, v in rows], np.int64)
    got = matched_members(arrays(arrivals), arrays(ends), arrays(members), first_only)
    assert all(x.dtype == np.int64 for x in got)
    assert list(zip(*(x.tolist() for x in got))) == _matched_by_dicts(arrivals, ends, members, first_only)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 7), _KEY, st.integers(0, 1)), max_size=40),
       st.lists(st.tuples(_KEY, st.integers(0, 9)), max_size=40), st.integers(1, 4))
def test_a_graph_matched_a_batch_of_parts_at_a_time(anchors, members, size):
    """``JobGraph.match`` over batches of whole parts (``critical_members.PartMembers.of`` their part
    range, as ``critical_path._build`` calls it) joins, in ``add_barriers``, into the whole graph's
    matching: the dict reading of every part's arrivals, ends and members at once."""
    from streamtrace.aggregate.critical_members import PartMembers
    parts = sorted({p for p, _, _ in anchors})
    rows = [(p, (p, c, s), kind) for p, (_, c, s), kind in anchors]        # (a key's part is its anchor's)
    rows.sort(key=lambda r: r[0])                                         # (the parts' order, stable)
    node = {i: i for i in range(len(rows))}
    arrivals = [(k, node[i]) for i, (_, k, kind) in enumerate(rows) if kind == 0]
    ends = [(k, node[i]) for i, (_, k, kind) in enumerate(rows) if kind == 1]
    cols = np.asarray([k for k, _ in members], np.int64).reshape(-1, 3)
    pm = PartMembers(cols[:, 0], cols[:, 1], cols[:, 2], np.asarray([v for _, v in members], np.int64))
    assert np.all(np.diff(pm.part) >= 0) and len(pm) == len(members)
    g = JobGraph()
    for i in range(0, len(parts), size):
        batch = set(parts[i:i + size])

        def block(xs, batch=batch):
            keys = np.asarray([k for k, _ in xs if k[0] in batch], np.int64).reshape(-1, 3)
            return [keys[:, 0], keys[:, 1], keys[:, 2]], np.asarray([v for k, v in xs if k[0] in batch], np.int64)
        (mk, mi) = pm.of(min(batch), max(batch))
        assert sorted(zip(*(c.tolist() for c in mk), mi.tolist())) == \
            sorted((*k, v) for k, v in members if min(batch) <= k[0] <= max(batch))
        g.match(block(arrivals), block(ends), (mk, mi))
    got = [tuple(np.concatenate([m[j] for m in g._matched] or [np.zeros(0)]).tolist()) for j in range(3)]
    assert list(zip(*got)) == _matched_by_dicts(arrivals, ends, members, True)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(-1, 3)), max_size=25),
       st.lists(st.integers(0, 30), min_size=10, max_size=10), st.integers(1, 6))
def test_barrier_and_member_edges_follow_the_rule_in_any_slices(members, times, step):
    """``barrier_edges`` then ``member_edges`` a slice of ``step`` members at a time (as the critical path
    writes them): one barrier per instance (numbered in the order first met, at its last arrival), per
    matched member in that order a wait (arrival -> barrier, 0) and a transfer (barrier -> end, end - last
    arrival; arrival -> end, end - arrival, when it ended before the last arrival), as read plainly."""
    from streamtrace.aggregate.critical_graph import barrier_edges, member_edges, member_types
    t = np.asarray(times, np.int64)
    arr, end, inst = (np.asarray([m[i] for m in members], np.int64) for i in range(3))
    first = 100
    c = barrier_edges(t, arr, end, inst, first)
    got = [np.concatenate(x) if x else np.zeros(0) for x in zip(*member_edges(c, first, step))]
    got.append(member_types(len(c["m_arr"])))
    order = list(dict.fromkeys(i for i in inst.tolist() if i >= 0))          # instances in the order first met
    last = {i: max(int(t[a]) for a, _, j in members if j == i) for i in order}
    want = []
    for b, i in enumerate(order):
        for a, e, j in members:
            if j != i:
                continue
            own = t[e] < last[i]
            want += [(a, first + b, 0, Edge.wait),
                     (a if own else first + b, e, int(t[e]) - (int(t[a]) if own else last[i]), Edge.transfer)]
    assert c["bar_t"].tolist() == [last[i] for i in order] and c["bar_inst"].tolist() == order
    assert list(zip(*(x.tolist() for x in got))) == want if want else all(len(x) == 0 for x in got)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), max_size=30), st.sampled_from([np.int32, np.int64]),
       st.lists(st.integers(-2 ** 40, 2 ** 40), max_size=10))
def test_search_finds_what_searchsorted_finds(values, dtype, needles):
    """``critical_graph.search`` (the values cast to the sorted array's type where they fit) gives
    ``np.searchsorted``'s places, values outside the array's type included."""
    from streamtrace.aggregate.critical_graph import search
    a = np.sort(np.asarray(values, np.int64)).astype(dtype)
    v = np.asarray(needles, np.int64)
    assert search(a, v).tolist() == np.searchsorted(a.astype(np.int64), v).tolist()
    assert search(a, needles).tolist() == np.searchsorted(a.astype(np.int64), v).tolist()
