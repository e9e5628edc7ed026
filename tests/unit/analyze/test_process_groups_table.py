"""summary.json's table of process groups built as analyze's results come back (``ProcessGroups``), in
any order: the same table and per-rank indices as a plain first-seen-first reading of the ranks in
summary.json's order."""
from __future__ import annotations

import copy
import json

from hypothesis import given, settings, strategies as st

from streamtrace.analyze.outputs import PG_ENTRIES_KEY, PG_GROUPS_KEY, ProcessGroups, share_process_groups

group = st.builds(lambda name, ranks, flip: dict(reversed([("pg_name", name), ("ranks", ranks)]) if flip else
                                                  [("pg_name", name), ("ranks", ranks)]),
                  st.sampled_from(["0", "1", "2", "3"]), st.lists(st.integers(0, 7), max_size=4, unique=True),
                  st.booleans())          # (the keys in either order: equal entries, written differently)


@st.composite
def job(draw):
    n = draw(st.integers(0, 8))
    ranks = []
    for i in range(n):
        entries = draw(st.lists(group, max_size=4))
        as_text = draw(st.booleans())                  # how analyze's workers hand them back
        tm = {PG_ENTRIES_KEY: json.dumps(entries).encode() if as_text else entries} if draw(st.booleans()) else {}
        ranks.append({"iteration": draw(st.sampled_from([None, 3, 4])), "rank": i, "trace_metadata": tm})
    return ranks, draw(st.permutations(range(n)))


def _order(r):
    return -1 if r["iteration"] is None else r["iteration"], r["rank"]


def _plain(ranks) -> tuple:
    """Ranks in summary.json's order, each entry's index where its JSON text (keys sorted) is first seen."""
    table, index, ids = [], {}, []
    for r in sorted(ranks, key=_order):
        tm = r["trace_metadata"]
        if PG_ENTRIES_KEY not in tm:
            ids.append(None)
            continue
        entries = tm[PG_ENTRIES_KEY]
        got = []
        for e in json.loads(entries) if isinstance(entries, bytes) else entries:
            text = json.dumps(e, sort_keys=True)
            if text not in index:
                index[text] = len(table)
                table.append(e)
            got.append(index[text])
        ids.append(got)
    return table, ids


@settings(max_examples=200, deadline=None)
@given(job())
def test_groups_shared_in_any_arrival_order_equal_the_plain_first_seen_table(drawn):
    ranks, arrival = drawn
    want_table, want_ids = _plain(copy.deepcopy(ranks))
    again = copy.deepcopy(ranks)
    groups = ProcessGroups(_order)
    for i in arrival:                                  # one task's result at a time, in the order they finish
        groups.on_result([ranks[i]])
    got = groups.entries()
    assert json.dumps(got) == json.dumps(want_table)     # (as written: the keys' order too)
    got_ids = [r["trace_metadata"].get(PG_GROUPS_KEY) for r in sorted(ranks, key=_order)]
    assert got_ids == want_ids and not any(PG_ENTRIES_KEY in r["trace_metadata"] for r in ranks)
    assert json.dumps(share_process_groups(sorted(again, key=_order))) == json.dumps(want_table)
