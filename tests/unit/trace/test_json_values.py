"""JSON values orjson cannot handle (trace/writer.py's encode_json and JsonText, the reader's deep
metadata) and times written as strings (trace/decode.py's text_ns)."""
from __future__ import annotations

import json
import math
import pickle

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import scan as K
from streamtrace.trace.decode import text_ns
from streamtrace.trace.reader import MAX_NESTING, TraceReader
from streamtrace.trace.writer import JsonText, dumps_event, encode_json, nesting_depth

scalars = (st.none() | st.booleans() | st.integers(-2 ** 80, 2 ** 80) | st.text()
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
                      max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(values)
def test_encode_json_round_trips(v):
    """What the stdlib reads back is the value, and the text is the stdlib's compact text (lone
    surrogates aside, which it writes raw and encode_json as escapes)."""
    text = encode_json(v)
    text.decode("utf-8")                                    # valid UTF-8 whatever the strings hold
    assert json.loads(text) == v
    if not any(0xD800 <= ord(ch) <= 0xDFFF for ch in json.dumps(v, ensure_ascii=False)):
        assert text == json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def test_encode_json_odd_values():
    assert encode_json({"\udc80": [float("nan"), float("inf"), -float("inf"), 2 ** 70]}) == \
        b'{"\\udc80":[NaN,Infinity,-Infinity,1180591620717411303424]}'
    assert encode_json({"ts": JsonText(b"12.345"), 1: None}) == b'{"ts":12.345,"1":null}'
    deep = []
    for _ in range(100_000):
        deep = [deep]
    assert encode_json(deep) == b"[" * 100_001 + b"]" * 100_001
    assert nesting_depth(deep) == 100_001 and nesting_depth(3) == 0 and nesting_depth({"a": [1]}) == 2


def test_dumps_event_falls_back_exactly():
    ev = {"ts": JsonText(b"1.5"), "args": {"\udc80": 1, "big": 2 ** 70}}
    assert json.loads(dumps_event(ev)) == {"ts": 1.5, "args": {"\udc80": 1, "big": 2 ** 70}}
    assert dumps_event({"ts": JsonText(b"1.5"), "x": "é"}) == orjson.dumps({"ts": 1.5, "x": "é"})


def test_deep_metadata_is_kept_as_text_and_pickles(tmp_path):
    deep = "[" * 10_000 + "]" * 10_000
    shallow = "[" * MAX_NESTING + "]" * MAX_NESTING
    p = tmp_path / "t.json"
    p.write_text('{"deep": %s, "shallow": %s, "traceEvents": [], "n": 1}' % (deep, shallow))
    r = TraceReader(p)
    meta = r.read_metadata()
    assert meta["deep"] == JsonText(deep.encode()) and meta["n"] == 1
    assert nesting_depth(meta["shallow"]) == MAX_NESTING           # not deep enough to matter: a list
    assert pickle.loads(pickle.dumps(meta)) == meta
    assert dumps_event(meta["deep"]) == deep.encode()


numbers = st.one_of(
    st.integers(-10 ** 18, 10 ** 18).map(str),
    st.tuples(st.integers(-10 ** 15, 10 ** 15), st.integers(0, 10 ** 9)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(st.integers(-99999, 99999), st.integers(-12, 12)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.sampled_from(["9223372036854775.807", "9223372036854775.808", "-0.0005", "0.0005", "1e26", "00", "1.",
                     ".5", "+1", "1e", "-", "NaN", "0x10", " 12.5 "]))


@settings(max_examples=500, deadline=None)
@given(numbers)
def test_text_ns_reads_a_string_as_the_scanner_reads_a_number(text):
    """A ts written as a string holding a number is read (rounding, range) exactly as the byte
    scanner reads the same number written as a number; anything else is None."""
    raw = text.strip().encode()
    buf = np.frombuffer(raw + b",", np.uint8)
    ok, ns, end = K.parse_ns(buf, 0, len(buf))
    valid_json_number = end == len(raw) and _is_json_number(raw)
    want = ns if ok and valid_json_number else None
    assert text_ns(text) == want


def _is_json_number(raw: bytes) -> bool:
    try:
        v = json.loads(raw)
    except ValueError:
        return False
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isinf(v))


def test_text_ns_only_reads_strings():
    assert text_ns(12.5) is None and text_ns(None) is None and text_ns("12.5") == 12_500
