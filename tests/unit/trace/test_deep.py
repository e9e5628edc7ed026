"""Events nested too deep to decode whole (streamtrace.trace.deep, issue 49): decoded down to the limit,
the values below kept as their exact text, checked to be JSON, counted.  Expected values from the
stdlib json module on the same text (shallow enough for it) and from slicing the bytes."""
from __future__ import annotations

import json

import pytest

from streamtrace.runtime.errors import TraceError
from streamtrace.trace.decode import decode_value
from streamtrace.trace.deep import decode_deep, take_deep, too_deep
from streamtrace.trace.writer import JsonText, dumps_event


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def test_depth_ignores_brackets_inside_strings():
    text = b'{"name": "' + b"[" * 500 + b'", "a": [1]}'
    assert not too_deep(text, 10)
    assert too_deep(b'{"a": ' + _nested(11).encode() + b"}", 10)


@pytest.mark.parametrize("limit", [3, 4, 10])
def test_values_below_the_limit_are_their_text(limit):
    deep = _nested(limit + 5, '"x]"')
    text = ('{"name": "k", "ts": 1, "args": {"a": ' + deep + ', "b": [1, 2], "c": ' + deep + '}}').encode()
    take_deep("p")
    ev = decode_deep(text, "p", 0, decode_value, limit)
    assert take_deep("p") == 1
    ref = json.loads(text)
    assert ev["name"] == ref["name"] and ev["ts"] == ref["ts"] and ev["args"]["b"] == ref["args"]["b"]
    for key in ("a", "c"):
        a = ev["args"][key]            # the event is level 1, args 2, a's first bracket 3
        for _ in range(limit - 2):
            assert isinstance(a, list) and len(a) == 1
            a = a[0]
        k = limit - 2                  # a's brackets decoded; the rest, level limit + 1 on, is text
        assert isinstance(a, JsonText) and a.text == deep[k:len(deep) - k].encode()
    assert json.loads(dumps_event(ev)) == ref            # written back, the same document


def test_a_100000_level_event_decodes_in_bounded_time():
    text = b'{"ph": "X", "args": {"a": ' + _nested(100_000).encode() + b"}}"
    ev = decode_value(text, "q", 7)
    take_deep("q")
    assert ev["ph"] == "X" and dumps_event(ev) == text.replace(b" ", b"")


def test_invalid_text_below_the_limit_is_an_error():
    text = b'{"a": ' + _nested(20, "1,,2").encode() + b"}"
    with pytest.raises(TraceError, match="deeper than 5"):
        decode_deep(text, "r", 0, decode_value, 5)
