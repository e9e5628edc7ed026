"""The one-pass column kernel (``streamtrace.kernels.extract.scan_columns``) against the event
scanner it stands in for (``streamtrace.kernels.scan.scan_events``), call by call as a reader drives
them: the same events found (count, status, position, ranges, separator state), the same times and
time flags (BIG_INT aside, which the column kernel does not look for), for valid events, invalid ones
(the column kernel leaves them to Python: F_PYTHON), escaped keys, duplicate and odd ``ts``/``dur``
values, whitespace, and windows that cut an event anywhere.  The columns themselves are checked
against the decoded events' twin in tests/unit/events/test_columns.py."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import extract
from streamtrace.kernels import scan as K

TIMES = st.one_of(st.integers(-10 ** 6, 10 ** 17), st.floats(-1e6, 1e12, allow_nan=False), st.sampled_from(
    ["12.5", "1e3", "-0.0004", "99999999999999999999", "123456789012345678901234", "null", '"7"', "[1]", "1E+2"]))
ODD = st.sampled_from([
    '{"ph":"X","ts":01}', '{"ph":"X","ts":1,}', '{"ph":"X","name":"a\x01b","ts":3}', '{"t\\u0073":5,"ph":"X"}',
    '{"ph":"X","ts":5,"ts":"x"}', '{"ph":"X","ts":"x","ts":6,"dur":2,"dur":tru}', '{"a":[1,2}', '{"a":{"b":]}}',
    '{"ph":"X","args":{"args":1},"args":{}}', '{"ph":"X","ts":1e999}', '{ "ts" : 4 , "dur" : 5 }', '{}',
    '{"ph":"X","ts":12345678901234567890123,"dur":1}', '{"name":"\\"}"}', '{"ph":"X","ts":-5,"dur":-1}'])


@st.composite
def event_texts(draw):
    if draw(st.booleans()):
        return draw(ODD)
    parts = ['"ph":"X"']
    for key in draw(st.lists(st.sampled_from(["ts", "dur", "name", "pid"]), max_size=5)):
        v = draw(TIMES) if key in ("ts", "dur") else draw(st.sampled_from(['"mm"', "3", '"é"', "[]"]))
        parts.append(f'"{key}":{v if isinstance(v, str) else json.dumps(v)}')
    sep = draw(st.sampled_from([",", ", ", " ,\n "]))
    return "{" + sep.join(parts) + "}"


def drive(kernel, buf: np.ndarray, cuts, cap):
    """Run ``kernel`` over ``buf`` (just past ``[``) as the reader does: the bytes held grow by
    ``cuts`` whenever it asks for more (NEED_MORE with room left); returns every call's results."""
    pos, sep, out = 1, np.zeros(1, np.int64), []
    held = list(cuts) + [len(buf)]
    n = min(held.pop(0), len(buf))
    for _ in range(10 * len(buf) + 10):
        starts, ends = np.full(cap, -7, np.int64), np.full(cap, -7, np.int64)
        if kernel == "scan":
            ts, dur, flags = np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.uint8)
            k, status, pos2 = K.scan_events(buf, pos, n, starts, ends, ts, dur, flags, sep)
            times = (ts[:k].tolist(), dur[:k].tolist(), (flags[:k] & 15).tolist())
        else:
            ph, xf, tf = np.zeros(cap, np.uint8), np.zeros(cap, np.uint8), np.zeros(cap, np.uint8)
            cols = np.zeros((extract.N_COLS, cap), np.int64)
            k, status, pos2 = extract.scan_columns(buf, pos, n, starts, ends, sep, ph, cols, xf, tf)
            times = (cols[extract.TS, :k].tolist(), cols[extract.DUR, :k].tolist(), tf[:k].tolist())
        out.append((k, status, pos2, int(sep[0]), starts[:k].tolist(), ends[:k].tolist(), times))
        pos = pos2
        if status != K.NEED_MORE:
            return out
        if k < cap:
            if n >= len(buf):
                return out
            n = min(held.pop(0), len(buf)) if held else len(buf)
    raise AssertionError("no progress")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event_texts(), max_size=8), st.lists(st.integers(1, 400), max_size=6), st.integers(1, 5),
       st.sampled_from([",", " , ", ",,", "", "\n,"]), st.booleans())
def test_scan_columns_finds_what_scan_events_finds(texts, steps, cap, comma, closed):
    doc = ("[" + comma.join(texts) + ("]" if closed else "")).encode()
    buf = np.frombuffer(doc, np.uint8)
    cuts = np.cumsum(steps).tolist()
    assert drive("columns", buf, cuts, cap) == drive("scan", buf, cuts, cap)


def test_an_event_the_walk_refuses_is_left_to_python_with_scan_events_times():
    doc = b'[{"ph":"X","ts":1,"dur":2},{"ph":"X","ts":3,"dur":4,"bad":tru},{"t\\u0073":5,"dur":6}]'
    buf = np.frombuffer(doc, np.uint8)
    cap = 4
    starts, ends = np.zeros(cap, np.int64), np.zeros(cap, np.int64)
    ph, xf, tf = np.zeros(cap, np.uint8), np.zeros(cap, np.uint8), np.zeros(cap, np.uint8)
    cols = np.zeros((extract.N_COLS, cap), np.int64)
    k, status, _ = extract.scan_columns(buf, 1, len(buf), starts, ends, np.zeros(1, np.int64), ph, cols, xf, tf)
    assert (k, status) == (3, K.DONE)
    assert [doc[s:e] for s, e in zip(starts[:k], ends[:k])] == [
        b'{"ph":"X","ts":1,"dur":2}', b'{"ph":"X","ts":3,"dur":4,"bad":tru}', b'{"t\\u0073":5,"dur":6}']
    assert (xf[:k] & extract.F_PYTHON).tolist() == [0, extract.F_PYTHON, extract.F_PYTHON]
    assert cols[extract.TS, :k].tolist() == [1000, 3000, 0]          # (an escaped key is no "ts" to the scanner)
    assert cols[extract.DUR, :k].tolist() == [2000, 4000, 6000]
    assert ph[:k].tolist() == [ord("X"), 0, 0]
