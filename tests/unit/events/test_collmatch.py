"""The one collective matcher (streamtrace.events.collmatch): by sequence number where every kernel of
a group carries one, by order otherwise; a rank that missed or added a collective reported, not
silently shifted.  Expected ordinals are written out by hand."""
from __future__ import annotations

import numpy as np

from streamtrace.events.collmatch import group_key, is_all_to_all, match_ordinals, mismatch_warning, signature


def _run(rows):
    """rows: (part, group, seq, sig) tuples, each part's in issue order."""
    part, group, seq, sig = (np.asarray(x, np.int64) for x in zip(*rows))
    return match_ordinals(part, group, seq, sig)


def test_group_key_spellings():
    assert group_key("[0, 1]", "13", 22) == "ranks:0,1"
    assert group_key("0,1", "", 22) == "ranks:0,1"
    assert group_key([0, 1], None, 22) == "ranks:0,1"
    assert group_key("", "13", 22) == "pg:13"
    assert group_key("[]", None, 84) == "stream:84"
    assert group_key(None, None, 84) == "stream:84"


def test_signature_drops_size_for_all_to_all():
    assert signature("AllReduce", 24576) != signature("AllReduce", 8)
    assert signature("AllToAll", 3392 * 4) == signature("AllToAll", 768 * 4)
    assert all(is_all_to_all(x) for x in ("AllToAll", "all_to_allv", "alltoall_base_", "nccl:all_to_all"))
    assert not is_all_to_all("AllReduce")


def test_by_sequence_number_leaves_a_hole():
    # part 1 lacks seq 11: its seq 12 still meets part 0's seq 12
    m = _run([(0, 0, 10, 0), (0, 0, 11, 0), (0, 0, 12, 0), (1, 0, 10, 0), (1, 0, 12, 0)])
    assert m.ordinal.tolist() == [0, 1, 2, 0, 2]
    assert m.matched_by == {0: "seq"}
    assert [(b.part, b.count, b.most, b.shift) for b in m.mismatches] == [(1, 2, 3, 0)]


def test_by_order_equal_counts_no_report():
    m = _run([(0, 0, -1, 0), (0, 0, -1, 1), (1, 0, -1, 0), (1, 0, -1, 1)])
    assert m.ordinal.tolist() == [0, 1, 0, 1] and m.matched_by == {0: "order"} and m.mismatches == []


def test_by_order_missed_collective_realigned_and_reported():
    # signatures A B C D on part 0; part 1 missed A (its trace starts one later): B C D
    m = _run([(0, 0, -1, 0), (0, 0, -1, 1), (0, 0, -1, 2), (0, 0, -1, 3),
              (1, 0, -1, 1), (1, 0, -1, 2), (1, 0, -1, 3)])
    assert m.ordinal.tolist() == [0, 1, 2, 3, 1, 2, 3]
    assert [(b.part, b.count, b.most, b.shift) for b in m.mismatches] == [(1, 3, 4, -1)]
    w = mismatch_warning([{"rank": 1, "group": "ranks:0,1", "count": 3, "most": 4}], "collectives")
    assert len(w) == 1 and "rank 1 3 of 4 on ranks:0,1" in w[0]


def test_mixed_seq_falls_back_to_order_per_group():
    # group 0 carries seq everywhere, group 1 only on one part: group 1 by order
    m = _run([(0, 0, 5, 0), (0, 1, 7, 0), (1, 0, 5, 0), (1, 1, -1, 0)])
    assert m.matched_by == {0: "seq", 1: "order"}
    assert m.ordinal.tolist() == [0, 0, 0, 0]


def test_empty():
    m = match_ordinals([], [], [], [])
    assert len(m.ordinal) == 0 and m.mismatches == []
