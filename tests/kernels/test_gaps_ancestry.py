"""Property tests of the idle-breakdown gap kernel and the same-name ancestry kernel against
their plain-Python twins, plus hand-checked cases."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels.ancestry import same_name_ancestor
from streamtrace.kernels.gaps import running_end_before
from streamtrace.kernels.reference import running_end_before_py, same_name_ancestor_py

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def segments(draw):
    """Sorted (ts, end) rows in a few segments: gaps, touching, contained, overlapping,
    zero-length and identical events, times near 0, negative and near 2**62."""
    base = draw(st.sampled_from([0, -1000, 10**6, 2**62]))
    first, end = [], []
    for _ in range(draw(st.integers(0, 4))):
        rows = sorted((base + a, base + a + d) for a, d in draw(st.lists(
            st.tuples(st.integers(0, 60), st.sampled_from([0, 0, 1, 2, 5, 30, 100])), max_size=12)))
        for k, (_, e) in enumerate(rows):
            first.append(k == 0)
            end.append(e)
    return np.asarray(first, bool), np.asarray(end, np.int64)


@SETTINGS
@given(segments())
def test_running_end_before_matches_twin(seg):
    first, end = seg
    got = running_end_before(first, end)
    want = running_end_before_py(first, end)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


def test_running_end_before_by_hand():
    # one segment: [0,10) [5,8) (contained) [12,20); a second segment starts at row 3
    first = np.array([True, False, False, True, False])
    end = np.array([10, 8, 20, 4, 9], np.int64)
    prev_end, prev_row = running_end_before(first, end)
    assert prev_end[[1, 2, 4]].tolist() == [10, 10, 4]
    assert prev_row.tolist() == [-1, 0, 0, -1, 3]
    e, r = running_end_before(np.zeros(0, bool), np.zeros(0, np.int64))
    assert len(e) == 0 and len(r) == 0
    # first[0] False still starts a segment
    assert running_end_before(np.array([False, False]), np.array([3, 1], np.int64))[1].tolist() == [-1, 0]


@st.composite
def forests(draw):
    """parent (a forest, any row order: parents may come after children) and name codes."""
    n = draw(st.integers(0, 40))
    perm = draw(st.permutations(list(range(n))))          # position of the k-th created node
    parent_k = [-1 if k == 0 or draw(st.integers(0, 4)) == 0 else draw(st.integers(0, k - 1)) for k in range(n)]
    parent = np.full(n, -1, np.int64)
    for k in range(n):
        if parent_k[k] >= 0:
            parent[perm[k]] = perm[parent_k[k]]
    code = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64)
    return parent, code


@SETTINGS
@given(forests())
def test_same_name_ancestor_matches_twin(f):
    parent, code = f
    assert same_name_ancestor(parent, code).tolist() == same_name_ancestor_py(parent, code).tolist()


def test_same_name_ancestor_by_hand():
    # 0 a > 1 b > 2 a > 3 a ; 4 b (root); 5 b under 0 (a) -> not nested; 6 c under 3
    parent = np.array([-1, 0, 1, 2, -1, 0, 3], np.int64)
    code = np.array([0, 1, 0, 0, 1, 1, 2], np.int64)
    assert same_name_ancestor(parent, code).tolist() == [False, False, True, True, False, False, False]
    # a cycle (malformed input) ends (a node on it meets itself: True)
    assert same_name_ancestor(np.array([1, 0, 0], np.int64), np.array([5, 6, 7], np.int64)).tolist() == [True, True, False]
