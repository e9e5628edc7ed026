"""``events.ingest.group_rows``: the rows of each key, in row order, keys in the order first met, as
a plain dictionary filled row by row would hold them."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.events.ingest import group_rows


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.sampled_from([0, 7, 2 ** 40])), max_size=80))
def test_group_rows_is_a_dict_filled_row_by_row(rows):
    cols = [np.asarray([r[0] for r in rows], np.int64), np.asarray([r[1] for r in rows], np.int64)]
    want: dict = {}
    for i, key in enumerate(rows):
        want.setdefault(key, []).append(i)
    got = group_rows(cols)
    assert list(got) == list(want)
    for key, idx in want.items():
        g = got[key]
        assert (list(range(len(rows)))[g] if isinstance(g, slice) else g.tolist()) == idx
    assert all(type(x) is int for key in got for x in key)        # (Python ints: the store's partition keys)
