"""Property tests: numba interval kernels against their plain-Python twins."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import intervals as nb
from streamtrace.kernels import reference as ref

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

I64 = np.int64
BIG = 2**62


# --------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------

@st.composite
def interval_lists(draw, max_size=30):
    """Arbitrary (start, end) int64 arrays: unsorted, overlapping, nested,
    touching, zero-length and duplicated intervals, small or near 2**62."""
    mode = draw(st.sampled_from(["dense", "sparse", "huge", "wide"]))
    n = draw(st.integers(0, max_size))
    if mode == "wide":
        starts = draw(st.lists(st.integers(0, BIG), min_size=n, max_size=n))
        lengths = draw(st.lists(st.integers(0, 2**61), min_size=n, max_size=n))
    else:
        base, spread, maxlen = {
            "dense": (draw(st.sampled_from([0, -40, 1_000_000])), 60, 15),
            "sparse": (0, 10**6, 10**5),
            "huge": (draw(st.sampled_from([BIG - 10**4, BIG, BIG + 10**6])), 200, 50),
        }[mode]
        starts = [base + x for x in draw(st.lists(st.integers(0, spread), min_size=n, max_size=n))]
        lengths = draw(st.lists(st.integers(0, maxlen), min_size=n, max_size=n))
    pairs = [(s, s + d) for s, d in zip(starts, lengths)]
    if pairs:  # exact duplicates
        pairs += draw(st.lists(st.sampled_from(pairs), max_size=5))
        pairs = draw(st.permutations(pairs))
    return (np.array([p[0] for p in pairs], dtype=I64),
            np.array([p[1] for p in pairs], dtype=I64))


@st.composite
def disjoint_sorted_lists(draw, max_size=30):
    """Disjoint sorted lists that are NOT canonical: touching neighbours and
    zero-length intervals allowed (cut points of a sorted multiset)."""
    base = draw(st.sampled_from([0, -100, BIG]))
    pts = sorted(base + x for x in draw(st.lists(st.integers(0, 200), max_size=2 * max_size)))
    pairs = [(pts[i], pts[i + 1]) for i in range(len(pts) - 1)]
    keep = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    pairs = [p for p, k in zip(pairs, keep) if k]
    return (np.array([p[0] for p in pairs], dtype=I64),
            np.array([p[1] for p in pairs], dtype=I64))


def canonical(pair):
    return nb.union(*pair)


def assert_same(got, want):
    gs, ge = got
    ws, we = want
    assert gs.dtype == np.int64 and ge.dtype == np.int64
    np.testing.assert_array_equal(gs, ws)
    np.testing.assert_array_equal(ge, we)


def assert_canonical(pair):
    s, e = pair
    assert s.dtype == np.int64 and e.dtype == np.int64 and s.shape == e.shape
    assert np.all(e > s)
    assert np.all(s[1:] > e[:-1])


def total(pair):
    s, e = pair
    return sum(int(b) - int(a) for a, b in zip(s, e))


def concat(a, b):
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])


# --------------------------------------------------------------------------
# kernel == twin
# --------------------------------------------------------------------------

@SETTINGS
@given(interval_lists())
def test_union_matches_twin(a):
    got = nb.union(*a)
    assert_same(got, ref.union(*a))
    assert_canonical(got)
    length = nb.union_length(*a)
    assert length == ref.union_length(*a) == total(got)
    assert isinstance(length, int)


@SETTINGS
@given(interval_lists(), interval_lists())
def test_intersect_subtract_match_twin_on_unions(a, b):
    ua, ub = canonical(a), canonical(b)
    got = nb.intersect(*ua, *ub)
    assert_same(got, ref.intersect(*ua, *ub))
    assert_canonical(got)
    assert nb.intersect_length(*ua, *ub) == ref.intersect_length(*ua, *ub) == total(got)
    got = nb.subtract(*ua, *ub)
    assert_same(got, ref.subtract(*ua, *ub))
    assert_canonical(got)
    assert nb.subtract_length(*ua, *ub) == ref.subtract_length(*ua, *ub) == total(got)


@SETTINGS
@given(disjoint_sorted_lists(), disjoint_sorted_lists())
def test_intersect_subtract_match_twin_on_touching_and_empty(a, b):
    for nb_f, ref_f in ((nb.intersect, ref.intersect), (nb.subtract, ref.subtract)):
        got = nb_f(*a, *b)
        assert_same(got, ref_f(*a, *b))
        assert_canonical(got)
    assert nb.intersect_length(*a, *b) == ref.intersect_length(*a, *b)
    assert nb.subtract_length(*a, *b) == ref.subtract_length(*a, *b)
    # non-canonical input means the same set as its union
    assert_same(nb.intersect(*a, *b), nb.intersect(*canonical(a), *canonical(b)))
    assert_same(nb.subtract(*a, *b), nb.subtract(*canonical(a), *canonical(b)))


# --------------------------------------------------------------------------
# algebra
# --------------------------------------------------------------------------

@SETTINGS
@given(interval_lists(), interval_lists())
def test_inclusion_exclusion(a, b):
    ua, ub = canonical(a), canonical(b)
    inter = nb.intersect_length(*ua, *ub)
    assert nb.union_length(*concat(a, b)) == total(ua) + total(ub) - inter
    assert nb.subtract_length(*ua, *ub) == total(ua) - inter
    assert nb.subtract_length(*ub, *ua) == total(ub) - inter
    # commutativity of the intersection, and A = (A - B) ∪ (A ∩ B) as a partition
    assert_same(nb.intersect(*ua, *ub), nb.intersect(*ub, *ua))
    diff, both = nb.subtract(*ua, *ub), nb.intersect(*ua, *ub)
    assert nb.intersect_length(*diff, *both) == 0
    assert_same(nb.union(*concat(diff, both)), ua)
    # union of A - B and B is A ∪ B
    assert_same(nb.union(*concat(diff, ub)), nb.union(*concat(a, b)))


@SETTINGS
@given(interval_lists())
def test_union_idempotent_and_self_ops(a):
    ua = canonical(a)
    assert_same(nb.union(*ua), ua)
    assert_same(nb.union(*concat(a, a)), ua)
    assert_same(nb.intersect(*ua, *ua), ua)
    s, e = nb.subtract(*ua, *ua)
    assert s.size == 0 and e.size == 0
    assert nb.intersect_length(*ua, *ua) == nb.union_length(*a)
    assert nb.subtract_length(*ua, *ua) == 0


# --------------------------------------------------------------------------
# hand-checked cases
# --------------------------------------------------------------------------

def arr(*xs):
    return np.array(xs, dtype=I64)


@pytest.mark.parametrize("mod", [nb, ref], ids=["numba", "twin"])
def test_hand_checked(mod):
    # unsorted, nested, touching, duplicate, zero-length
    s, e = mod.union(arr(10, 0, 2, 5, 10, 30, 40), arr(20, 5, 3, 10, 20, 30, 41))
    np.testing.assert_array_equal(s, arr(0, 40))
    np.testing.assert_array_equal(e, arr(20, 41))
    assert mod.union_length(arr(10, 0, 2, 5, 10, 30, 40), arr(20, 5, 3, 10, 20, 30, 41)) == 21
    # only zero-length intervals and empty input
    s, e = mod.union(arr(3, 3), arr(3, 3))
    assert s.size == 0 and e.size == 0 and s.dtype == np.int64
    assert mod.union_length([], []) == 0
    s, e = mod.union([], [])
    assert s.size == 0 and e.dtype == np.int64

    a = (arr(0, 10, 30), arr(5, 20, 40))
    b = (arr(3, 12, 20, 35), arr(11, 15, 32, 50))
    s, e = mod.intersect(*a, *b)
    np.testing.assert_array_equal(s, arr(3, 10, 12, 30, 35))
    np.testing.assert_array_equal(e, arr(5, 11, 15, 32, 40))
    assert mod.intersect_length(*a, *b) == 2 + 1 + 3 + 2 + 5
    s, e = mod.subtract(*a, *b)
    np.testing.assert_array_equal(s, arr(0, 11, 15, 32))
    np.testing.assert_array_equal(e, arr(3, 12, 20, 35))
    assert mod.subtract_length(*a, *b) == 3 + 1 + 5 + 3
    # a B interval spanning several A intervals; touching pieces in the output merge
    s, e = mod.subtract(arr(0, 10, 20), arr(10, 20, 30), arr(5), arr(25))
    np.testing.assert_array_equal(s, arr(0, 25))
    np.testing.assert_array_equal(e, arr(5, 30))
    s, e = mod.intersect(arr(0, 10), arr(10, 20), arr(0), arr(20))
    np.testing.assert_array_equal(s, arr(0))
    np.testing.assert_array_equal(e, arr(20))
    # near 2**62
    s, e = mod.union(arr(BIG + 5, BIG), arr(BIG + 9, BIG + 5))
    np.testing.assert_array_equal(s, arr(BIG))
    np.testing.assert_array_equal(e, arr(BIG + 9))
    assert mod.subtract_length(arr(0), arr(BIG + 9), arr(1), arr(BIG)) == 10


@pytest.mark.parametrize("mod", [nb, ref], ids=["numba", "twin"])
def test_errors(mod):
    with pytest.raises(ValueError):
        mod.union(arr(0, 5), arr(1, 4))            # end < start
    with pytest.raises(ValueError):
        mod.union_length(arr(0, 5), arr(1))        # lengths differ
    with pytest.raises(ValueError):
        mod.intersect(arr(0), arr(1, 2), arr(0), arr(1))
    with pytest.raises(ValueError):
        mod.intersect(arr(5, 0), arr(6, 1), arr(0), arr(1))   # A unsorted
    with pytest.raises(ValueError):
        mod.subtract(arr(0), arr(10), arr(0, 5), arr(6, 8))   # B overlapping
    with pytest.raises(ValueError):
        mod.subtract_length(arr(0), arr(10), arr(3), arr(2))  # end < start
    with pytest.raises(ValueError):
        mod.intersect_length(arr(0, 3), arr(4, 5), arr(0), arr(1))  # A overlapping
    with pytest.raises(TypeError):
        mod.union(np.array([0.5]), np.array([1.5]))


def test_accepts_other_integer_inputs():
    s, e = nb.union([4, 0], np.array([6, 5], dtype=np.int32))
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, arr(0))
    np.testing.assert_array_equal(e, arr(6))
    # inputs are not modified (sorting happens on copies)
    a_s, a_e = arr(9, 1), arr(10, 2)
    nb.union(a_s, a_e)
    np.testing.assert_array_equal(a_s, arr(9, 1))


# --------------------------------------------------------------------------
# union_lengths: every class set's union in one sweep
# --------------------------------------------------------------------------

@st.composite
def classed_lists(draw):
    """An interval list, a class per interval (of 1-4 classes) and 1-5 sets of classes."""
    s, e = draw(interval_lists())
    n_cls = draw(st.integers(1, 4))
    cls = np.array(draw(st.lists(st.integers(0, n_cls - 1), min_size=len(s), max_size=len(s))), np.int8)
    sets = np.array(draw(st.lists(st.lists(st.booleans(), min_size=n_cls, max_size=n_cls), min_size=1,
                                  max_size=5)), bool)
    return s, e, cls, sets


@SETTINGS
@given(classed_lists())
def test_union_lengths_matches_twin_and_subsets(a):
    s, e, cls, sets = a
    got = nb.union_lengths(s, e, cls, sets)
    assert got == ref.union_lengths(s, e, cls, sets)
    assert got == [nb.union_length(s[row[cls]], e[row[cls]]) for row in sets]
    assert all(isinstance(x, int) for x in got)


def test_union_lengths_hand_checked_and_errors():
    s = np.array([0, 5, 8, 20], I64)
    e = np.array([10, 6, 12, 20], I64)          # [0,10) [5,6) [8,12) [20,20) empty
    cls = np.array([0, 1, 1, 0], np.int8)
    sets = np.array([[1, 1], [1, 0], [0, 1]], bool)
    for mod in (nb, ref):
        assert mod.union_lengths(s, e, cls, sets) == [12, 10, 5]
        with pytest.raises(ValueError):
            mod.union_lengths(s, e, np.array([0, 1, 2, 0], np.int8), sets)      # class 2 of 2
        with pytest.raises(ValueError):
            mod.union_lengths(s, e, cls, np.array([1, 1], bool))               # sets not 2-D
        with pytest.raises(ValueError):
            mod.union_lengths(s, np.array([10, 6, 7, 20], I64), cls, sets)    # end < start
