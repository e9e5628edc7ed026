"""A rank cut into byte ranges under ``--steps`` / ``--window``: the flows kept across its ranges
(``streamtrace.merge.split_filter.kept_by_range``) against a plain-Python twin, and the flow
extents of one range (``streamtrace.merge.deferred.flow_extents``) against a dict."""
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.merge.deferred import flow_extents
from streamtrace.merge.split_filter import kept_by_range

CATS = ["ac2g", "fwdbwd", "gpu_user_annotation", "x"]

# one flow event: (category, id) with a plain key, or an "other" flow named by a tuple; its ts
flow_event = st.tuples(st.sampled_from(CATS), st.integers(0, 6), st.booleans(), st.integers(0, 40))
one_range = st.lists(flow_event, max_size=25)


def range_filter(events):
    """A parked range's filter as kept_by_range reads it: its category table (first seen first), its
    Python-numbered flows, and its flow events' keys (in its own numbering) and ts in order, built by
    plain Python."""
    cats, other, order, times = [], [], [], []
    for cat, fid, is_other, ts in events:
        if is_other:
            name = (cat, str(fid))
            if name not in other:
                other.append(name)
            key = -1 - other.index(name)
        else:
            if cat not in cats:
                cats.append(cat)
            key = (cats.index(cat) << 40) | fid
        order.append(key)
        times.append(ts)
    events = np.array(order, np.int64), np.array(times, np.int64)
    return SimpleNamespace(cats=cats, other=other, flow_events=lambda: events)


def twin(ranges, lo, hi):
    """Per range, the sorted local keys of the flows (by name, over every range) whose every ts is in
    [lo, hi]."""
    span = {}
    for events in ranges:
        for cat, fid, is_other, ts in events:
            name = (is_other, cat, fid)
            a, b = span.get(name, (ts, ts))
            span[name] = (min(a, ts), max(b, ts))
    out = []
    for events in ranges:
        d = range_filter(events)
        kept = set()
        for cat, fid, is_other, _ in events:
            a, b = span[(is_other, cat, fid)]
            if lo <= a and b <= hi:
                kept.add(-1 - d.other.index((cat, str(fid))) if is_other else (d.cats.index(cat) << 40) | fid)
        out.append(sorted(kept))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(one_range, min_size=1, max_size=5), st.integers(0, 40), st.integers(0, 40))
def test_kept_by_range_matches_a_plain_twin(ranges, lo, hi):
    """Category tables in different orders per range, Python-numbered flows, flows spanning ranges."""
    got = kept_by_range([range_filter(events) for events in ranges], lo, hi)
    assert [g.tolist() for g in got] == twin(ranges, lo, hi)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 5), st.integers(-10, 10)), max_size=30))
def test_flow_extents_matches_a_dict(events):
    span = {}
    for key, ts in events:
        a, b = span.get(key, (ts, ts))
        span[key] = (min(a, ts), max(b, ts))
    keys, first, last = flow_extents(np.array([k for k, _ in events], np.int64),
                                     np.array([t for _, t in events], np.int64))
    assert keys.tolist() == sorted(span)
    assert list(zip(first.tolist(), last.tolist())) == [span[k] for k in sorted(span)]
