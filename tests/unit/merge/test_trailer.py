"""The merged trace's end (its metadata: every rank's entry) is written in pieces, never as one
``bytes`` of the whole (issue 48: ~190 MB held twice at 16,384 ranks), and the file holds the same
bytes as before: the text Python's json and orjson write for the value, and the gzip member
``gzip.compress`` makes of it."""
from __future__ import annotations

import gzip
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.merge import output
from streamtrace.merge.output import gzip_piece, json_pieces, trailer_pieces

SCALARS = st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.text(max_size=8) | \
    st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5) |
                      st.dictionaries(st.text(max_size=5), inner, max_size=5), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(VALUES, st.integers(0, 3))
def test_pieces_are_the_compact_json_of_the_value(value, depth):
    text = b"".join(json_pieces(value, depth))
    assert text == output.dumps_event(value)               # orjson's bytes, member by member
    assert json.loads(text) == json.loads(json.dumps(value))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), VALUES, max_size=6), st.booleans(),
       st.sampled_from([1, 6, 9]), st.integers(1, 4096))
def test_trailer_written_in_pieces_is_the_joined_trailer(meta, compress, level, piece_bytes):
    joined = b"]" + b"".join(b"," + output.dumps_event(k) + b":" + output.dumps_event(v) for k, v in meta.items()) \
        + b"}\n"
    assert b"".join(trailer_pieces(meta)) == joined
    old = output.PIECE_BYTES
    output.PIECE_BYTES = piece_bytes
    try:
        f = io.BytesIO()
        output._write_pieces(f, trailer_pieces(meta), compress, level)
    finally:
        output.PIECE_BYTES = old
    assert f.getvalue() == gzip_piece(joined, compress, level)
    if compress:
        assert gzip.decompress(f.getvalue()) == joined


def test_a_dict_with_other_keys_is_written_whole():
    """orjson refuses non-string keys; the fallback writer decides them, for the whole value, as before."""
    value = {"ranks": [{"a": 1}], "by_rank": {3: "x"}}
    assert b"".join(json_pieces(value, 2)) == b'{"ranks":[{"a":1}],"by_rank":' + output.dumps_event({3: "x"}) + b"}"
