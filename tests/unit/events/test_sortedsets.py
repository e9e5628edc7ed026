"""Sorted integer sets (``streamtrace.events.sortedsets``) against numpy's own set routines."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamtrace.events.sortedsets import in_sorted, sorted_difference, sorted_distinct, sorted_intersect

DTYPES = st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_])
small_keys = hnp.arrays(np.int64, st.integers(0, 120), elements=st.integers(-20, 20))


@settings(max_examples=300, deadline=None)
@given(DTYPES.flatmap(lambda dt: hnp.arrays(dt, st.integers(0, 200))), st.booleans())
def test_sorted_distinct_is_np_unique(values, nearly_sorted):
    """Any values of any integer dtype, in any order or already in order (the keys it is meant for)."""
    if nearly_sorted:
        values = np.sort(values)
    got = sorted_distinct(values)
    assert got.dtype == values.dtype
    assert got.tolist() == np.unique(values).tolist()


@settings(max_examples=300, deadline=None)
@given(small_keys, small_keys)
def test_in_sorted_is_np_isin(keys, pool):
    assert in_sorted(keys, np.sort(pool)).tolist() == np.isin(keys, pool).tolist()


@settings(max_examples=300, deadline=None)
@given(small_keys, small_keys)
def test_sorted_intersect_is_np_intersect1d(a, b):
    a, b = np.unique(a), np.unique(b)
    assert sorted_intersect(a, b).tolist() == np.intersect1d(a, b, assume_unique=True).tolist()


@settings(max_examples=300, deadline=None)
@given(small_keys, small_keys)
def test_sorted_difference_is_np_setdiff1d(a, b):
    """Either side the longer (each is looked up in the other), empty sides, no overlap."""
    a, b = np.unique(a), np.unique(b)
    got = sorted_difference(a, b)
    assert got.tolist() == np.setdiff1d(a, b, assume_unique=True).tolist()
    assert got.dtype == a.dtype and (not len(got) or not np.shares_memory(got, a))


def test_by_hand():
    keys = np.array([5, 1 << 45, 5, -3, 1 << 45, 0, -3], np.int64)
    assert sorted_distinct(keys).tolist() == [-3, 0, 5, 1 << 45]
    assert sorted_distinct(np.zeros(0, np.int64)).tolist() == []
    assert sorted_distinct(np.arange(10)[::-1]).tolist() == list(range(10))
    assert in_sorted(np.array([1, 2, 3]), np.zeros(0, np.int64)).tolist() == [False] * 3
    assert in_sorted(np.array([9, -1, 4]), np.array([-1, 4, 4, 8])).tolist() == [False, True, True]
    assert sorted_intersect(np.array([1, 3, 5, 7]), np.array([3, 4, 7])).tolist() == [3, 7]
    assert sorted_difference(np.array([1, 3, 5, 7]), np.array([3, 8])).tolist() == [1, 5, 7]
    assert sorted_difference(np.array([3]), np.array([1, 3, 5])).tolist() == []


def test_sorted_distinct_refuses_floats():
    with pytest.raises(TypeError, match="integer"):
        sorted_distinct(np.array([1.0, np.nan]))
