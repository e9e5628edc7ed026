"""The text hash index (``streamtrace.kernels.texthash``, merge's pid lookup, issue 49) against its
twin ``streamtrace.kernels.reference.texthash.find_text_py`` (a dict): random tables of distinct
byte strings (empty ones, equal lengths, shared prefixes), indexed all at once or one by one, and
probes that are in the table or not, read from a larger buffer at an offset."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import texthash as TH
from streamtrace.kernels.reference.texthash import find_text_py

TEXT = st.binary(min_size=0, max_size=6) | st.sampled_from([b"1", b"12", b"21", b'"Spans"', b"-1", b""])


def _table(texts):
    off = np.zeros(len(texts) + 1, np.int64)
    off[1:] = np.cumsum([len(t) for t in texts]) if texts else []
    text = np.frombuffer(b"".join(texts) or b"\0", np.uint8)
    return text, off


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, max_size=40, unique=True), st.lists(TEXT, max_size=20), st.booleans(), st.binary(max_size=4))
def test_find_text_equals_a_dict_lookup(texts, probes, at_once, pad):
    text, off = _table(texts)
    slots = np.zeros(TH.slots_for(len(texts)), np.int64)
    if at_once:
        TH.index_texts(text, off, len(texts), slots)
    else:
        for k in range(len(texts)):
            TH.insert_text(text, off, k, slots)
    for p in probes + texts[:5]:
        buf = np.frombuffer(pad + p + pad, np.uint8)
        s, e = len(pad), len(pad) + len(p)
        assert TH.find_text(buf, s, e, text, off, slots) == find_text_py(buf, s, e, text, off, len(texts))


def test_a_million_distinct_texts_index_in_linear_time():
    texts = [str(i).encode() for i in range(1_000_000)]
    text, off = _table(texts)
    slots = np.zeros(TH.slots_for(len(texts)), np.int64)
    TH.index_texts(text, off, len(texts), slots)
    buf = np.frombuffer(b"999999 123456 x", np.uint8)
    assert TH.find_text(buf, 0, 6, text, off, slots) == 999_999
    assert TH.find_text(buf, 7, 13, text, off, slots) == 123_456
    assert TH.find_text(buf, 14, 15, text, off, slots) == -1
