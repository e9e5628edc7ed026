"""What aggregate's parent keeps of the ranks' results as they come back (``aggregate.rank_results``):
the top kernels summed in any order of arrival against the plain sum in part order."""
from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.aggregate.rank_results import PART, PHASE, TOP, Kept, TopKernels, phase_rows


def _plain_sum(tops: list) -> dict:
    """The job's top kernels as the parts' dicts summed in part order: a name's kind from its first part."""
    out: dict = {}
    for top in tops:
        for name, (kind, count, total) in top.items():
            a = out.setdefault(name, [kind, 0, 0])
            a[1] += count
            a[2] += total
    return out


_TOPS = st.lists(st.dictionaries(st.sampled_from("abcdefg"), st.tuples(st.sampled_from(["gemm", "comm", "other"]),
                                                                     st.integers(0, 9), st.integers(0, 10**12)),
                                 max_size=5), max_size=6)


@settings(max_examples=300, deadline=None)
@given(_TOPS, st.randoms(use_true_random=False))
def test_top_kernels_in_any_arrival_order_equal_the_part_order_sum(tops, rnd):
    order = list(range(len(tops)))
    rnd.shuffle(order)
    acc = TopKernels()
    for part in order:
        acc.add(part, tops[part])
    want = _plain_sum(tops)
    got = acc.result()
    assert list(got.items()) == list(want.items())       # the values, and the names' order


def test_kept_result_takes_the_top_kernels_and_pickles_the_phase_rows():
    rows = [{"rank": 3, "phase": "forward", "ns": 5}]
    result = (rows, ["rank row"], {}, "timeline", {"k": ("gemm", 2, 7)}, {}, "explain", "piece", "replay", 3)
    kept = Kept()
    r = kept(result)
    assert len(r) == len(result) and r[TOP] is None and isinstance(r[PHASE], bytes)
    assert r[1:TOP] == result[1:TOP] and r[TOP + 1:] == result[TOP + 1:] and r[PART] == 3
    assert phase_rows(r[PHASE]) == rows and phase_rows(rows) == rows and pickle.loads(r[PHASE]) == rows
    assert kept.top.result() == {"k": ["gemm", 2, 7]}
