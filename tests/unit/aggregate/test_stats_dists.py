"""``launch_stats``' distributions (``stats._dists``): the percentiles of several arrays in one call
equal numpy's percentiles of each array alone (the plain definition), max and mean too."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.stats import _dists

ints = st.integers(min_value=0, max_value=10 ** 12)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=40).flatmap(
    lambda n: st.tuples(st.lists(ints, min_size=n, max_size=n), st.lists(ints, min_size=n, max_size=n))))
def test_stacked_percentiles_equal_each_arrays_own(pair):
    a, b = (np.asarray(x, np.int64) for x in pair)
    got = _dists(("x", a), ("y", b))
    for (prefix, v), row in zip((("x", a), ("y", b)), got):
        if not len(v):
            assert row == {f"{prefix}_{k}_ns": None for k in ("p50", "p95", "max", "mean")}
            continue
        p50, p95 = np.percentile(v, [50, 95])
        assert row == {f"{prefix}_p50_ns": float(p50), f"{prefix}_p95_ns": float(p95),
                       f"{prefix}_max_ns": int(v.max()), f"{prefix}_mean_ns": float(v.mean())}
