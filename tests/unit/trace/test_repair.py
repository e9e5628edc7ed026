"""Kineto's unescaped double quotes (pytorch#146900): the repair of one event, decided by parsing
its bytes again (streamtrace.trace.repair); expected values are the names written."""
from __future__ import annotations

import json

import pytest

from streamtrace import TraceError
from streamtrace.trace.decode import decode_value
from streamtrace.trace.reader import TraceReader
from streamtrace.trace.repair import repair_quotes, take_repairs


def _raw(name: str, after: str = ', "pid": 1, "tid": 2, "ts": 5, "dur": 1}') -> bytes:
    return ('{"ph": "X", "name": "' + name + '"' + after).encode()


@pytest.mark.parametrize("name", ['{"device": "cpu", "dtype": "float32"}(12): run', 'a "b" c',
                                  'f.py(3): "x"y', '{"k": "v"}', 'a" "b'])
def test_one_value_with_quotes_is_repaired_to_the_text_written(name):
    raw = _raw(name)
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    ev = repair_quotes(raw)
    assert ev == {"ph": "X", "name": name, "pid": 1, "tid": 2, "ts": 5, "dur": 1}


def test_last_member_and_nested_args():
    name = 'g "h" i'
    assert repair_quotes(_raw(name, '}'))["name"] == name
    assert repair_quotes(_raw(name, ', "args": {"a": 1}}'))["args"] == {"a": 1}


@pytest.mark.parametrize("raw", [
    b'{"name": "p "q", "r": "s"}',             # name 'p "q' and r 's', or name 'p "q", "r": "s': both parse
    b'{"name": "a"b}',                          # no closing choice
    b'{"name": "a", "x": }',                    # not a quote problem
])
def test_ambiguous_or_other_invalid_json_is_not_repaired(raw):
    assert repair_quotes(raw) is None
    with pytest.raises(TraceError):
        decode_value(raw, "t.json", 0)
    take_repairs("t.json")


def test_a_first_closing_quote_that_looks_like_the_end_is_not_repaired():
    assert repair_quotes(b'{"name": "x "}" y"}') is None


def test_reader_counts_and_reports_the_repairs(tmp_path):
    names = ['a "b" c', '{"d": "e"}(1): f']
    evs = [_raw(n).decode() for n in names] + ['{"ph": "X", "name": "ok", "pid": 1, "tid": 2, "ts": 9, "dur": 1}']
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join(evs) + "]}")
    r = TraceReader(p)
    got = [e["name"] for e in r.events()]
    assert got == names + ["ok"]
    assert r.repaired == 2 and any("2 events repaired" in w for w in r.warnings)
