"""Property tests of the what-if reduction kernel (``streamtrace.kernels.replay``) against its
plain-Python twin (every path enumerated) on small random graphs, adversarial ones included (no
edge, parallel edges, zero weights, a source that is also a sink, hops backwards, ties)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels.replay import anchor_pairs
from streamtrace.kernels.reference import anchor_pairs_py

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NCAT = 3


@st.composite
def graphs(draw):
    n = draw(st.integers(0, 9))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=18)) if pairs else []
    w = draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, 10]), min_size=len(edges), max_size=len(edges)))
    cat = draw(st.lists(st.integers(0, NCAT - 1), min_size=len(edges), max_size=len(edges)))
    is_src = draw(st.lists(st.sampled_from([0, 0, 1]), min_size=n, max_size=n))
    is_sink = draw(st.lists(st.sampled_from([0, 1, 1]), min_size=n, max_size=n))
    vend = [draw(st.sampled_from([-1, -1] + list(range(n)))) for _ in range(n)]
    a = lambda x, t=np.int64: np.asarray(x, t).reshape(-1)  # noqa: E731
    return (n, a([u for u, _ in edges]), a([v for _, v in edges]), a(w), a(cat, np.int8), a(is_src, np.int8),
            a(is_sink, np.int8), a(vend))


@SETTINGS
@given(graphs())
def test_pairs_equal_the_enumeration(g):
    n, src, dst, w, cat, is_src, is_sink, vend = g
    k = anchor_pairs(n, src, dst, w, cat, is_src, is_sink, vend, NCAT)
    p = anchor_pairs_py(n, src, dst, w, cat, is_src, is_sink, vend, NCAT)
    assert k[0][:, :3].tolist() == p[0][:, :3].tolist()
    assert (k[1].sum(axis=1) == k[0][:, 2]).all()
    for o, v, length, top in k[0].tolist():          # the heaviest edge lies between the pair's ends
        if top >= 0:
            assert src[top] >= o and dst[top] <= v and w[top] <= length


def test_a_collective_hop_dominates_the_long_way_round():
    # 0 = step start, 1 = arrival of c (its end is 2), 3 = step end; 0 -> 3 directly weighs 5, through
    # the collective 0 -> 1 (4) -> hop -> 2 -> 3 (2) weighs 6: the pair (0, 3) is dominated
    src, dst, w = (np.asarray(x, np.int64) for x in ([0, 0, 2], [1, 3, 3], [4, 5, 2]))
    cat = np.zeros(3, np.int8)
    is_src = np.asarray([1, 0, 1, 0], np.int8)
    is_sink = np.asarray([0, 1, 0, 1], np.int8)
    vend = np.asarray([-1, 2, -1, -1], np.int64)
    pairs, _ = anchor_pairs(4, src, dst, w, cat, is_src, is_sink, vend, 1)
    assert pairs[:, :3].tolist() == [[0, 1, 4], [2, 3, 2]]
    w[1] = 7                                          # now the direct way is longer: kept
    pairs, _ = anchor_pairs(4, src, dst, w, cat, is_src, is_sink, vend, 1)
    assert pairs[:, :3].tolist() == [[0, 1, 4], [0, 3, 7], [2, 3, 2]]


def test_bad_edges_raise():
    one = np.zeros(1, np.int8)
    with pytest.raises(ValueError):
        anchor_pairs(2, np.asarray([1]), np.asarray([0]), np.asarray([1]), one, np.ones(2, np.int8),
                     np.ones(2, np.int8), np.full(2, -1), 1)
    with pytest.raises(ValueError):
        anchor_pairs_py(2, np.asarray([0]), np.asarray([1]), np.asarray([-1]), one, np.ones(2, np.int8),
                        np.ones(2, np.int8), np.full(2, -1), 1)
