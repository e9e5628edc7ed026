"""``stats.group_ids``: the group of each row is its key tuple's place among the distinct tuples in
sorted order, and each group's first row is the lowest row holding that tuple (the plain definition,
in Python over the rows' tuples)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.stats import group_ids

keys = st.integers(min_value=-3, max_value=3) | st.integers(min_value=-(2 ** 62), max_value=2 ** 62)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=4).flatmap(
    lambda k: st.lists(st.tuples(*[keys] * k), max_size=60).map(lambda rows: (k, rows))))
def test_group_ids_number_tuples_in_sorted_order(case):
    k, rows = case
    cols = [np.asarray([r[c] for r in rows], np.int64) for c in range(k)]
    gid, first = group_ids(*cols)
    distinct = sorted(set(rows))
    assert gid.dtype == np.int64 and first.dtype == np.int64
    assert gid.tolist() == [distinct.index(r) for r in rows]
    assert first.tolist() == [rows.index(t) for t in distinct]


def test_group_ids_of_no_rows():
    gid, first = group_ids(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert gid.tolist() == [] and first.tolist() == []
