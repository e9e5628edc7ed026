"""Property tests: the run helpers of streamtrace.kernels.runs (sort_group, merge_runs through it,
union_into) against their plain-Python twins."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import reference as ref
from streamtrace.kernels import runs as nb

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def groups(draw):
    """(starts, ends, lo, hi): up to 120 intervals (several blocks of 16, odd block counts),
    starts from a narrow range (many ties, to check stability through the ends) or a wide one."""
    n = draw(st.integers(0, 120))
    top = draw(st.sampled_from([3, 1000, 2**62]))
    s = draw(st.lists(st.integers(-top, top), min_size=n, max_size=n))
    e = draw(st.lists(st.integers(-top, top), min_size=n, max_size=n))
    lo = draw(st.integers(0, n))
    hi = draw(st.integers(lo, n))
    return np.array(s, np.int64), np.array(e, np.int64), lo, hi


@SETTINGS
@given(groups())
def test_sort_group_matches_stable_sort(g):
    s, e, lo, hi = g
    a_s, a_e, b_s, b_e = s.copy(), e.copy(), s.copy(), e.copy()
    nb.sort_group(a_s, a_e, np.int64(lo), np.int64(hi))
    ref.sort_group_py(b_s, b_e, lo, hi)
    assert a_s.tolist() == b_s.tolist() and a_e.tolist() == b_e.tolist()   # outside [lo, hi) untouched too


@SETTINGS
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)), max_size=60), st.data())
def test_union_into_matches_twin(pairs, data):
    pairs = sorted(pairs)
    s = np.array([a for a, _ in pairs], np.int64)
    e = np.array([a + d for a, d in pairs], np.int64)
    lo = data.draw(st.integers(0, len(pairs)))
    hi = data.draw(st.integers(lo, len(pairs)))
    dst_s = np.zeros(len(pairs) + 1, np.int64)
    dst_e = np.zeros(len(pairs) + 1, np.int64)
    w, length = nb.union_into(s, e, np.int64(lo), np.int64(hi), dst_s, dst_e, np.int64(1))
    want, want_len = ref.union_into_py(s, e, lo, hi)
    assert list(zip(dst_s[1:1 + w].tolist(), dst_e[1:1 + w].tolist())) == want
    assert length == want_len


def test_sort_group_hand_checked():
    s = np.array([9, 5, 5, 1] + list(range(40, 0, -1)), np.int64)
    e = np.arange(len(s), dtype=np.int64)
    nb.sort_group(s, e, np.int64(1), np.int64(len(s)))
    assert s[0] == 9 and list(s[1:]) == sorted(s[1:])
    assert s[1:6].tolist() == [1, 1, 2, 3, 4] and e[1:3].tolist() == [3, 43]   # ties keep their order
    assert e[s == 5].tolist() == [1, 2, 39]
