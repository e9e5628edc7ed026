"""The start-ordered merge of an export's table streams (``merge_sorted``), against a plain
sort of everything, on random batches (ties, empty batches, one stream, many)."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrace.trace.nsys.streams import ROW_DTYPE, merge_sorted


def _stream(rng, n, batch, tag):
    ts = np.sort(rng.integers(0, 50, n))
    a = np.zeros(n, ROW_DTYPE)
    a["ts"], a["name"], a["correlation"] = ts, tag, np.arange(n)
    return [a[i:i + batch] for i in range(0, n, batch)] + [a[:0]]


@pytest.mark.parametrize("seed", range(20))
def test_merge_equals_stable_sort(seed):
    rng = np.random.default_rng(seed)
    streams = [_stream(rng, int(rng.integers(0, 40)), int(rng.integers(1, 9)), k)
               for k in range(int(rng.integers(1, 5)))]
    got = [b for b in merge_sorted([iter(s) for s in streams]) if len(b)]
    got = np.concatenate(got) if got else np.zeros(0, ROW_DTYPE)
    allrows = np.concatenate([np.concatenate(s) for s in streams])
    want = allrows[np.lexsort((allrows["correlation"], allrows["name"], allrows["ts"]))]
    assert (np.diff(got["ts"]) >= 0).all()
    # every row once, each stream in its own order
    key = lambda a: sorted(zip(a["ts"].tolist(), a["name"].tolist(), a["correlation"].tolist()))  # noqa: E731
    assert key(got) == key(want)
    for k in range(len(streams)):
        mine = got[got["name"] == k]
        assert mine["correlation"].tolist() == list(range(len(mine)))
