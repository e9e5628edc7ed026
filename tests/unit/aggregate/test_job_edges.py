"""The job-level graphs' edges on disk (``streamtrace.aggregate.job_edges.EdgeFile``: the what-if replay's,
the critical path's) against the same edges held in plain Python lists: what ``sort`` keeps, in which order
(either way), and what it counts; its forward and backward passes with weights replaced as read against
the twins' over the kept edges copied out; the chosen edges the forward pass writes out (``Chosen``) and
``nodes_at``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamtrace.aggregate.job_edges as je
import streamtrace.aggregate.job_nodes as jn
from streamtrace.aggregate.job_edges import Chosen, EdgeFile, nodes_at
from streamtrace.kernels.reference.critical import latest_times_py, longest_path_py
from streamtrace.kernels.sentinels import NEG, POS


@st.composite
def graphs(draw):
    """Nodes with a random position each and a part (-1: a barrier), edges in id order (the first
    ``t_first`` a rank's own), some parts to drop (one past the last part too)."""
    n = draw(st.integers(1, 8))
    pos = np.asarray(draw(st.permutations(range(n))), np.int32)
    part = np.asarray(draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)), np.int32)
    m = draw(st.integers(0, 20))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    w = draw(st.lists(st.integers(-5, 2 ** 40), min_size=m, max_size=m))
    t_first = draw(st.integers(0, m))
    drop = draw(st.lists(st.integers(0, 5), max_size=3))
    return pos, part, src, dst, w, t_first, drop


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 4), st.integers(1, 4), st.integers(1, 5), st.sampled_from([0, 7, 1 << 18]))
def test_sort_keeps_the_forward_edges_by_destination_then_id(g, chunk, buckets, parts_of_append, memory):
    """Appended in pieces, read back in chunks, sorted in any number of buckets, held in memory or on disk
    (``MEMORY_EDGES`` 0: always on disk; 7: on disk past seven edges): the edges that run forward in the
    positions and are not a dropped part's own, by (destination position, id); the rank's own edges
    counted by part, kept or not; ``load`` gives back every edge as appended; on disk while past
    ``MEMORY_EDGES``, its folder removed by ``close``."""
    pos, part, src, dst, w, t_first, drop = g
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(je, "CHUNK_EDGES", chunk)
        mp.setattr(je, "BUCKETS", buckets)
        mp.setattr(je, "MEMORY_EDGES", memory)
        f = EdgeFile()
        try:
            cut = np.linspace(0, len(w), parts_of_append + 1).astype(int)
            for a, b in zip(cut[:-1], cut[1:]):
                f.append(np.asarray(src[a:b], np.int32), np.asarray(dst[a:b], np.int32), np.asarray(w[a:b], np.int64))
            f.sort(pos, part, t_first, drop_parts=drop)
            got = [tuple(int(x[i]) for x in c) for c in f.chunks() for i in range(len(c[0]))]
            back = [tuple(int(x[i]) for x in c) for c in f.chunks(reverse=True) for i in range(len(c[0]))]
            loaded = [x.tolist() for x in f.load()]
            folder = f.dir
        finally:
            f.close()
    assert (folder is not None) == (len(w) > memory)    # (on disk past MEMORY_EDGES)
    assert folder is None or not folder.exists()        # (closed: its folder removed)
    assert loaded == [src, dst, w]
    want, local, kept_local = [], {}, {}
    for e, (u, v, x) in enumerate(zip(src, dst, w)):
        p = int(part[u]) if e < t_first else -1
        if p >= 0:
            local[p] = local.get(p, 0) + 1
        if pos[u] < pos[v] and not (p >= 0 and p in drop):
            want.append((e, int(pos[u]), int(pos[v]), p, x))
            if p >= 0:
                kept_local[p] = kept_local.get(p, 0) + 1
    want.sort(key=lambda r: (r[2], r[0]))
    assert got == want and f.n_kept == len(want) and f.n == len(w)
    assert back == want[::-1]                           # (last first: the backward pass's order)
    nparts = int(part.max()) + 1
    assert f.local.tolist() == [local.get(p, 0) for p in range(nparts)]
    assert f.local_kept.tolist() == [kept_local.get(p, 0) for p in range(nparts)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 4), st.sampled_from([0, 1 << 18]), st.sampled_from([0, 3, 1 << 18]), st.data())
def test_the_passes_equal_the_twins_over_the_kept_edges(g, chunk, memory, rows, data):
    """``forward_pass`` / ``latest_pass`` after ``sort`` (no parts: every edge the collectives'), some
    edges' weights replaced as read (``(ids ascending, ns)``), in memory or on disk in chunks of ``chunk``,
    the chosen edges in memory or in a file (``job_nodes.MEMORY_ROWS`` ``rows``): the earliest and latest
    times of ``longest_path_py`` / ``latest_times_py`` over the kept edges copied out with those weights;
    extra edges (positions, ids after the graph's) merged into the forward pass as the twin's own; the
    path ``Chosen.path`` walks back is the twin's, ``nodes_at`` inverts ``pos``."""
    pos, _, src, dst, w, _, _ = g
    n = len(pos)
    w = [x % 1000 for x in w]
    over = sorted(data.draw(st.sets(st.integers(0, max(len(w) - 1, 0)), max_size=len(w))) if w else [])
    new = data.draw(st.lists(st.integers(0, 99), min_size=len(over), max_size=len(over)))
    init = np.asarray(data.draw(st.lists(st.sampled_from([NEG, 0, 3]), min_size=n, max_size=n)), np.int64)
    xe = sorted({(b, a) for a, b in data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                                                        max_size=6)) if a < b})
    xw = data.draw(st.lists(st.integers(0, 999), min_size=len(xe), max_size=len(xe)))
    x = (np.arange(len(w), len(w) + len(xe), dtype=np.int32), np.asarray([a for _, a in xe], np.int32),
         np.asarray([b for b, _ in xe], np.int32), np.asarray(xw, np.int64))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(je, "CHUNK_EDGES", chunk)
        mp.setattr(je, "MEMORY_EDGES", memory)
        mp.setattr(jn, "MEMORY_ROWS", rows)
        f = EdgeFile()
        try:
            f.append(np.asarray(src, np.int32), np.asarray(dst, np.int32), np.asarray(w, np.int64))
            f.sort(pos)
            o = (np.asarray(over, np.int64), np.asarray(new, np.int64))
            dist = init.copy()
            chosen = f.forward_pass(dist, o, extra=x)
            paths = [chosen.path(v) for v in range(n)]
            chosen.close()
            deadline = np.where(np.arange(n) == n - 1, 50, POS).astype(np.int64)
            late = deadline.copy()
            f.latest_pass(late, o)
        finally:
            f.close()
    weight = list(w)
    for e, y in zip(over, new):
        weight[e] = y
    kept = [e for e in range(len(w)) if pos[src[e]] < pos[dst[e]]]
    ks = np.asarray([pos[src[e]] for e in kept], np.int64)
    kd = np.asarray([pos[dst[e]] for e in kept], np.int64)
    kw = np.asarray([weight[e] for e in kept], np.int64)
    assert late.tolist() == latest_times_py(n, ks, kd, kw, deadline).tolist()
    kept += x[0].tolist()                                # (the extra edges: the forward pass's only)
    ks, kd, kw = np.r_[ks, x[1]].astype(np.int64), np.r_[kd, x[2]].astype(np.int64), np.r_[kw, x[3]]
    d2, p2, _ = longest_path_py(n, ks, kd, kw, init.copy())
    assert dist.tolist() == d2.tolist()
    for v in range(n):
        want, x = [], v
        while p2[x] >= 0:
            want.append((kept[p2[x]], int(ks[p2[x]]), x))
            x = int(ks[p2[x]])
        assert paths[v] == want[::-1]
    node = {int(pos[i]): i for i in range(n)}
    some = data.draw(st.lists(st.integers(0, n - 1), max_size=n))
    assert nodes_at(pos, some) == {p: node[p] for p in some}


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.sampled_from([0, 5, 1 << 18]), st.sampled_from([1, 4, 1 << 16]), st.data())
def test_chosen_holds_what_was_added_by_position(n, rows, gap, data):
    """``Chosen`` added to in ascending runs of positions, with gaps, in memory or in a file: each
    position's ``(edge, source)`` as added, None elsewhere (and past the last); ``path`` walks the
    sources back as a dict of the same pairs does; positions not ascending are refused."""
    pos = sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n))) if n else []
    pairs = {p: (data.draw(st.integers(0, 2 ** 31 - 1)), data.draw(st.integers(0, max(p - 1, 0)))) for p in pos}
    cuts = sorted(data.draw(st.lists(st.integers(0, len(pos)), max_size=4)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jn, "MEMORY_ROWS", rows)
        mp.setattr(je, "GAP_ROWS", gap)
        c = Chosen(max(n, 1))
        try:
            for a, b in zip([0] + cuts, cuts + [len(pos)]):
                run = pos[a:b]
                c.add(np.asarray(run, np.int32), np.asarray([pairs[p][0] for p in run], np.int32),
                      np.asarray([pairs[p][1] for p in run], np.int32))
            assert [c.edge(v) for v in range(n + 2)] == [pairs.get(v) for v in range(n + 2)]
            for v in range(n):
                want, x = [], v
                while x in pairs and len(want) < max(n, 1):
                    want.append((pairs[x][0], pairs[x][1], x))
                    x = pairs[x][1]
                assert c.path(v) == want[::-1]
            if pos:
                with pytest.raises(ValueError):
                    c.add(np.asarray([pos[-1]], np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32))
        finally:
            c.close()


def test_ids_past_31_bits_are_refused():
    """Node ids or edge counts the int32 records cannot hold are an error, not ids wrapped round."""
    f = EdgeFile()
    try:
        with pytest.raises(ValueError):
            f.append(np.asarray([0]), np.asarray([2 ** 31]), np.asarray([1]))
        f.n = 2 ** 31 - 1                                # (as if that many were appended)
        with pytest.raises(ValueError):
            f.append(np.asarray([0]), np.asarray([1]), np.asarray([1]))
        f.n = 0
        f.append(np.asarray([0]), np.asarray([2 ** 31 - 1]), np.asarray([1]))
        assert f.load()[1].tolist() == [2 ** 31 - 1]
    finally:
        f.close()
