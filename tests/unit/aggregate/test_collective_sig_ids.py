"""``collectives._sig_ids``: each row's signature id, the text made once a distinct (collective, size),
against the plain definition (``collmatch.signature`` of every row, ids in first-seen order)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.collectives import _sig_ids
from streamtrace.events.collmatch import signature

NAMES = st.sampled_from(["AllReduce", "all_to_allv", "AllToAll", "alltoall_base", "Send", "ncclKernel_x", "", None])
SIZES = st.one_of(st.integers(-1, 1 << 40), st.sampled_from([0, 1, 1.0, True, None, float("nan")]))


def _plain(coll, size, sigs):
    out = []
    for c, b in zip(coll, size):
        text = f"{c}|" if isinstance(c, str) and "to" in c.lower() and "all" in c.lower() else f"{c}|{b}"
        out.append(sigs.setdefault(text, len(sigs)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, SIZES), max_size=40), st.lists(st.tuples(NAMES, SIZES), max_size=10))
def test_sig_ids_as_a_text_a_row(rows, before):
    sigs, want = {}, {}
    _plain([c for c, _ in before], [b for _, b in before], want)        # ids already given by earlier parts
    sigs.update(want)
    got = _sig_ids([c for c, _ in rows], [b for _, b in rows], sigs)
    assert got.dtype == np.int64 and got.tolist() == _plain([c for c, _ in rows], [b for _, b in rows], want)
    assert sigs == want


def test_signature_names():
    assert signature("all_to_allv", 8) == "all_to_allv|" and signature("AllReduce", 8) == "AllReduce|8"
    long_a2a, long_other = "x" * 300 + "AllToAll", "y" * 100_000           # (past the cached names' length)
    assert signature(long_a2a, 8) == long_a2a + "|" and signature(long_other, 8) == long_other + "|8"
    assert signature(None, 8) == "None|8" and signature(3, 8) == "3|8"
