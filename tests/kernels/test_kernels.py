"""Numba kernels against their plain-Python twins (hypothesis property tests)."""
from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import scan as K
from streamtrace.kernels.jsoncheck import is_valid_json
from streamtrace.kernels.nesting import count_bad_nesting, sort_track
from streamtrace.kernels.reference import count_bad_nesting_py
from streamtrace.merge import rank as rank_module
from streamtrace.merge.pids import hashable
from streamtrace.merge.rank import RankContext, RankPlan, merge_rank, rewrite_dict
from streamtrace.trace.writer import dumps_event, fmt_us

FAST = settings(max_examples=200, deadline=None)


def arr(b: bytes):
    return np.frombuffer(b, np.uint8)


# -- parse_ns: decimal microseconds text -> exact int ns --------------------------------

def ref_ns(text: str):
    d = Decimal(text) * 1000
    v = int(d.copy_abs().quantize(Decimal(1), rounding=ROUND_HALF_UP))
    v = -v if d < 0 else v
    return v if -2 ** 63 <= v < 2 ** 63 else None


numbers = st.one_of(
    st.integers(-10 ** 15, 10 ** 16).map(str),
    st.tuples(st.integers(0, 10 ** 15), st.integers(0, 10 ** 9), st.integers(1, 9)).map(
        lambda t: f"{t[0]}.{str(t[1]).zfill(t[2])[:t[2]]}"),
    st.tuples(st.integers(-99999, 99999), st.integers(-8, 8)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.tuples(st.integers(0, 999), st.integers(0, 999), st.integers(-3, 9)).map(lambda t: f"{t[0]}.{t[1]}E+{t[2]}"
                                                                                 .replace("+-", "-")),
    st.just("9223372036854775.807"), st.just("9223372036854775.808"), st.just("1712195495519689.047"),
    # more digits than the int64 mantissa holds, the first dropped one >= 5 (rounded once, not twice)
    st.just("92233720368548.3374500"), st.just("-92233720368548.33745"),
    st.tuples(st.integers(10 ** 13, 10 ** 15), st.integers(0, 10 ** 12)).map(lambda t: f"{t[0]}.{str(t[1]).zfill(12)}"),
)


@FAST
@given(numbers)
def test_parse_ns_matches_decimal(text):
    buf = arr(text.encode() + b",")
    ok, v, end = K.parse_ns(buf, 0, len(buf))
    want = ref_ns(text)
    assert end == len(text)
    if want is None:
        assert not ok
    else:
        assert ok and v == want


@FAST
@given(st.integers(-2 ** 62, 2 ** 62))
def test_fmt_us_roundtrip(ns):
    text = fmt_us(ns)
    assert ref_ns(text.decode()) == ns
    buf = arr(text + b"}")
    assert K.parse_ns(buf, 0, len(buf))[1] == ns


# -- skip_value vs json ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) |
    st.text(alphabet=st.sampled_from('ab{}[]",:\\\u00e9\U0001F600 '), max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=10)


@FAST
@given(json_values, st.sampled_from(["", " ", "\n  "]))
def test_skip_value_finds_the_end(v, ws):
    text = json.dumps(v).encode()
    buf = arr(text + ws.encode() + b",")
    status, end = K.skip_value(buf, 0, len(buf))
    assert status == K.DONE and end == len(text)
    if len(text) > 1 and not isinstance(v, (int, float, bool)) and v is not None:
        assert K.skip_value(arr(text[:-1]), 0, len(text) - 1)[0] == K.NEED_MORE


# -- strict JSON check vs json.loads ---------------------------------------------------------

def ref_valid(data: bytes) -> bool:
    def no_const(x):
        raise ValueError(x)
    try:
        json.loads(data.decode("utf-8"), parse_constant=no_const)
        return True
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False


fragments = st.sampled_from([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u00e9", b"\\x", b"1", b"-",
                             b"0", b"01", b".5", b"e3", b"true", b"nul", b" ", b"\xc3\xa9", b"\xff", b"\xed\xa0\x80",
                             b"\x01", b"NaN", b'"k"', b'"\\"'])


@settings(max_examples=600, deadline=None)
@given(st.one_of(json_values.map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
                 st.lists(fragments, max_size=10).map(b"".join),
                 json_values.map(lambda v: json.dumps(v).encode()).flatmap(
                     lambda b: st.tuples(st.just(b), st.integers(0, max(0, len(b) - 1)), fragments)).map(
                     lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + 1:])))
def test_is_valid_json_matches_json_loads(data):
    assert bool(is_valid_json(arr(data), 0, len(data))) == ref_valid(data)


def ref_members(data: bytes, args_key: str = "args"):
    """Plain-Python twin of event_members: ``(valid, members, args_members)`` from
    json.loads with the pairs kept in order (None when not a plain object)."""
    if not ref_valid(data):
        return False, None, None
    pairs = json.loads(data.decode("utf-8"), object_pairs_hook=lambda p: ("obj", p))
    if not (isinstance(pairs, tuple) and pairs[0] == "obj"):
        return True, None, None
    top = pairs[1]
    args = [v for k, v in top if k == args_key]
    amem = args[0][1] if len(args) == 1 and isinstance(args[0], tuple) and args[0][0] == "obj" else None
    return True, [k for k, _ in top], None if amem is None else [k for k, _ in amem]


event_objects = st.dictionaries(
    st.sampled_from(["ph", "pid", "ts", "args", "name", "k\u00e9", "\u00e9", "a{", "a\"b"]),
    json_values | st.dictionaries(st.text(alphabet="abc\"{", max_size=3), json_values, max_size=4),
    max_size=6)


@settings(max_examples=600, deadline=None)
@given(st.one_of(event_objects.map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
                 event_objects.map(lambda v: json.dumps(v, indent=1).encode()),
                 st.lists(fragments, max_size=10).map(lambda f: b"{" + b"".join(f) + b"}")),
       st.data())
def test_event_members_matches_json_loads(data, draw):
    from streamtrace.kernels.jsoncheck import MAX_DEPTH, MEMBERS_CAP, MEMBERS_INVALID, MEMBERS_UNUSUAL, event_members
    if draw.draw(st.booleans()) and len(data) > 2:             # damage one byte
        i = draw.draw(st.integers(0, len(data) - 1))
        data = data[:i] + draw.draw(fragments) + data[i + 1:]
    buf = arr(b"xx" + data + b"yy")                            # the event is a slice of a bigger buffer
    mem = np.full((MEMBERS_CAP, 4), -7, np.int64)
    amem = np.full((MEMBERS_CAP, 4), -7, np.int64)
    n, na, arow = event_members(buf, 2, 2 + len(data), np.zeros(MAX_DEPTH, np.uint8), mem, amem, arr(b"args"))
    valid, keys, akeys = ref_members(data)
    if not valid:
        assert n == MEMBERS_INVALID
        return
    assert n != MEMBERS_INVALID
    if keys is None or n == MEMBERS_UNUSUAL:
        # not an object, or an escaped key / a second "args": the fast paths hand those to Python
        assert n == MEMBERS_UNUSUAL and (keys is None or b"\\" in data or keys.count("args") > 1)
        return
    text = lambda a, b: bytes(buf[a:b]).decode("utf-8")      # noqa: E731
    assert [text(*mem[r, :2]) for r in range(n)] == keys
    for r in range(n):                                         # each value span is that value's text
        assert json.loads(text(*mem[r, 2:])) == json.loads(data)[keys[r]] or keys.count(keys[r]) > 1
    if akeys is None:
        assert na == -1
    else:
        assert keys[arow] == "args" and na == len(akeys)
        assert [text(*amem[r, :2]) for r in range(na)] == akeys
        args = json.loads(text(*mem[arow, 2:]))
        for r in range(na):
            assert json.loads(text(*amem[r, 2:])) == args[akeys[r]] or akeys.count(akeys[r]) > 1


@pytest.mark.parametrize("key", [b'"\xc3\xa9\\u0072ank"', b'"\xc2\x80\\u001f"', b'"a\\"b"'])
def test_event_members_escaped_key_after_utf8(key):
    """A key holding an escape is 'unusual' (its bytes are not its text), also when
    a multi-byte UTF-8 character comes before the escape (found by hypothesis)."""
    from streamtrace.kernels.jsoncheck import MAX_DEPTH, MEMBERS_CAP, MEMBERS_UNUSUAL, event_members
    for data in (b"{" + key + b": 1}", b'{"args": {' + key + b": null}}"):
        json.loads(data)
        mem = np.empty((MEMBERS_CAP, 4), np.int64)
        n, _, _ = event_members(arr(data), 0, len(data), np.zeros(MAX_DEPTH, np.uint8), mem, mem.copy(),
                                arr(b"args"))
        assert n == MEMBERS_UNUSUAL, data


@settings(max_examples=400, deadline=None)
@given(st.one_of(event_objects.map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
                 event_objects.map(lambda v: json.dumps(v, indent=1).encode()),
                 st.lists(fragments, max_size=10).map(lambda f: b"{" + b"".join(f) + b"}")),
       st.lists(fragments, max_size=4).map(b"".join), st.data())
def test_object_members_finds_the_end(data, after, draw):
    """``whole=False`` (merge's scan_rewrite): an object that starts at ``s`` and is
    followed by anything gets the members ``event_members`` gives it alone, and its end;
    an object cut short is MEMBERS_INVALID."""
    from streamtrace.kernels.jsoncheck import MAX_DEPTH, MEMBERS_CAP, MEMBERS_INVALID, event_members, object_members
    args = (np.zeros(MAX_DEPTH, np.uint8), np.full((MEMBERS_CAP, 4), -7, np.int64),
            np.full((MEMBERS_CAP, 4), -7, np.int64), arr(b"args"))
    buf = arr(b"xx" + data + after)
    whole = event_members(arr(b"xx" + data), 2, 2 + len(data), *args)
    mem, amem = args[1].copy(), args[2].copy()
    n, na, arow, end = object_members(buf, 2, len(buf), *args, False)
    if whole[0] == MEMBERS_INVALID:
        return
    assert (n, na, arow, end) == (*whole, 2 + len(data))
    assert (args[1][:max(n, 0)] == mem[:max(n, 0)]).all() and (args[2][:max(na, 0)] == amem[:max(na, 0)]).all()
    cut = draw.draw(st.integers(3, 1 + len(data)))
    assert object_members(buf, 2, cut, *args, False)[0] == MEMBERS_INVALID


# -- slice nesting -----------------------------------------------------------------------

@FAST
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=40))
def test_nesting_kernel_matches_twin(slices):
    s = np.array([a for a, _ in slices], np.int64)
    e = np.array([a + d for a, d in slices], np.int64)
    s, e = sort_track(s, e)
    assert count_bad_nesting(s, e) == count_bad_nesting_py(s, e)


def test_nesting_hand_checked():
    s, e = sort_track(np.array([0, 1, 5, 8], np.int64), np.array([10, 4, 12, 9], np.int64))
    assert count_bad_nesting(s, e) == 1          # [5, 12) overruns its parent [0, 10)


# -- the merge byte rewrite vs its Python twin ---------------------------------------------

ids = st.integers(0, 2 ** 41) | st.text(alphabet="ab1", max_size=3)
events = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "s", "f", "M", "i", "t"]), "pid": st.sampled_from([0, 3, 41523, "Spans", ""]),
     "tid": st.integers(0, 9)},
    optional={"name": st.sampled_from(["aten::mm", "process_name", "thread_name", "ProfilerStep#3", 'a"{b']),
              "cat": st.sampled_from(["kernel", "cpu_op", "ac2g", "python_function"]),
              "id": ids, "dur": st.integers(-5, 10 ** 6),
              "args": st.dictionaries(st.sampled_from(["correlation", "External id", "external id", "name", "rank",
                                                       "raw correlation", "x"]), ids | st.just({"a": [1, "}"]}),
                                      max_size=4) | st.just(None) | st.just([1])})


def _write_events(d, evs, indent):
    """``d/src.json``: a trace of the drawn events, each with its drawn ``ts`` (us) written last."""
    docs = []
    for ev, ts in evs:
        body = json.dumps(ev, indent=1 if indent else None)
        docs.append(body[:-1].rstrip() + (", " if len(ev) else "") + f'"ts": {fmt_us(ts).decode()}' + "}")
    src = d / "src.json"
    src.write_text('{"traceEvents": [' + ",".join(docs) + "]}")
    return src


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(events, st.integers(0, 10 ** 13)), min_size=1, max_size=8),
       st.integers(0, 7), st.integers(-10 ** 9, 10 ** 9), st.booleans(), st.booleans(),
       st.sampled_from([None, (0, 5 * 10 ** 12)]), st.booleans(), st.sampled_from([1, 61, 1 << 21]))
def test_rewrite_kernel_matches_twin(tmp_path_factory, evs, rank, shift, gpu_only, drop, keep, indent, block):
    """merge's byte rewrite (read in blocks of ``block`` bytes: events cut by the reader's
    window) against the Python twin on each decoded event."""
    d = tmp_path_factory.mktemp("rw")
    src = _write_events(d, evs, indent)
    drop_cat = frozenset({"python_function"}) if drop else frozenset()
    # kept flows: the keys of every other event (flow or not, so that some flows are kept, some not)
    kept = {(ev.get("cat"), hashable(ev.get("id"))) for ev, _ in evs[::2]} if keep else None
    plan = RankPlan(str(src), rank, shift, str(d / "seg"), False, 1, drop_cat, gpu_only, keep, kept, False)
    with mock.patch.object(rank_module, "READ_BLOCK", block):
        res = merge_rank(plan)
    got = orjson.loads(b"[" + (d / "seg").read_bytes() + b"]")
    # the twin, event by event on decoded dicts
    from streamtrace.trace.reader import TraceReader
    ctx = RankContext(plan)
    want = []
    for b in TraceReader(src).raw_batches():
        for i, ev in enumerate(b.events):
            r = rewrite_dict(ev, int(b.ts_ns[i]), int(b.dur_ns[i]), int(b.flags[i]), ctx)
            if r is not None:
                want.append(orjson.loads(dumps_event(r)))
    assert got[:len(got) - 3 * len(res.process_map)] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(events, st.integers(0, 10 ** 13)), min_size=1, max_size=8),
       st.integers(0, 7), st.booleans(), st.sampled_from([1, 61, 1 << 21]))
def test_deferred_records_match_twin(tmp_path_factory, evs, rank, indent, block):
    """With a deferred time filter (merge --steps in one pass) the byte kernel writes every event
    and records what the filter decides it by; the Python twin records the same (class, ts, end,
    flow key, merged pid) for each event it writes, and the ProfilerStep windows found are the
    survey's (computed here from the events themselves).  Each row's output offset ends its event
    in the segment."""
    from streamtrace.kernels import keep as KK
    from streamtrace.merge.deferred import DeferredFilter
    from streamtrace.merge.pids import GPU_CATS
    from streamtrace.merge.rank import rewrite_stream
    from streamtrace.trace.reader import TraceReader
    d = tmp_path_factory.mktemp("df")
    src = _write_events(d, evs, indent)
    plan = RankPlan(str(src), rank, 0, str(d / "seg"), False, 1, frozenset(), False, None, None, False)

    def key_of(f, bits, key):
        if bits & 3 != 3:
            return None
        return f.other[key] if bits & 8 else (f.cats[key >> 40], key & ((1 << 40) - 1))

    ctx = RankContext(plan)
    ctx.defer = DeferredFilter((0, 0), str(d / "rec"))
    with open(d / "seg", "wb") as seg:
        rewrite_stream(TraceReader(src, block=block), plan, ctx, seg, None)
    ctx.defer.spill.close()
    rows = np.fromfile(d / "rec", np.int64).reshape(-1, KK.R_COLS)
    got = [(int(r[0]) >> 8, int(r[0]) & 3, int(r[1]), int(r[2]), key_of(ctx.defer, int(r[0]), int(r[4])), int(r[5]))
           for r in rows]
    twin = RankContext(plan)
    twin.defer = DeferredFilter((0, 0), str(d / "rec2"))
    want, written, steps, seq = [], [], {}, 0
    for b in TraceReader(src).raw_batches():
        for i, ev in enumerate(b.events):
            t, du, fl = int(b.ts_ns[i]), int(b.dur_ns[i]), int(b.flags[i])
            if isinstance(ev, dict) and ev.get("ph") == "X" and isinstance(ev.get("name"), str) and fl & 1 \
                    and ev["name"].startswith("ProfilerStep#") and ev.get("cat") not in GPU_CATS:
                try:
                    n = int(ev["name"][13:])
                except ValueError:
                    n = None
                if n is not None:
                    lo, hi = steps.get(n, (t, t + du))
                    steps[n] = (min(lo, t), max(hi, t + du))
            r = rewrite_dict(ev, t, du, fl, twin)
            if r is not None:
                c, t0, t1, key, other = twin.last
                k = None if c != 3 else (twin.defer.other[key] if other else (twin.defer.cats[key >> 40],
                                                                             key & ((1 << 40) - 1)))
                want.append((seq, c, t0 if c > 1 else 0, t1 if c > 1 else 0, k, r["pid"]))
                written.append(orjson.loads(dumps_event(r)))
            seq += 1
    twin.defer.close()
    assert [(a, c, t0 if c > 1 else 0, t1 if c > 1 else 0, k, p) for a, c, t0, t1, k, p in got] == want
    assert ctx.defer.tally.steps == steps
    data, start = (d / "seg").read_bytes(), 0
    for r, w in zip(rows.tolist(), written):
        end = r[KK.R_END]
        assert end == len(data) or data[end:end + 1] == b","
        assert orjson.loads(data[start:end]) == w
        start = end + 1
    ctx.defer.close()


def test_typical_events_take_the_byte_path(tmp_path):
    """Guard for the property test above: ordinary Kineto events must go through
    the numba kernel, not the Python twin."""
    evs = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,
            "args": {"External id": 5, "correlation": 9, "stream": 7}},
           {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 1.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
           {"ph": "M", "name": "thread_name", "pid": 41523, "tid": 1, "ts": 0, "args": {"name": "main"}},
           {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
            "ts": 1, "dur": 5}]
    src = tmp_path / "s.json"
    src.write_text(json.dumps({"traceEvents": evs}))
    res = merge_rank(RankPlan(str(src), 3, 0, str(tmp_path / "seg"), False, 1, frozenset(), False, None, None,
                              False))
    assert res.events_fast == 4
    got = orjson.loads(b"[" + (tmp_path / "seg").read_bytes() + b"]")
    assert got[0]["args"] == {"External id": (3 << 40) + 5, "correlation": (3 << 40) + 9, "stream": 7,
                              "raw correlation": 9, "raw External id": 5, "rank": 3}
    assert got[1]["id"] == (3 << 40) + 9 and got[1]["args"] == {"rank": 3}
    # under a time filter, a kept flow (and a dropped one) is decided by the kernel too
    res = merge_rank(RankPlan(str(src), 3, 0, str(tmp_path / "seg"), False, 1, frozenset(), False, (0, 10 ** 9),
                              {("ac2g", 9)}, False))
    assert res.events_fast == 4
    res = merge_rank(RankPlan(str(src), 3, 0, str(tmp_path / "seg"), False, 1, frozenset(), False, (0, 10 ** 9),
                              {("ac2g", 8)}, False))
    assert res.events_fast == 3 and res.events_out == 3 + 3 * len(res.process_map)


# -- inherited ancestry facts -------------------------------------------------------------

@FAST
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), max_size=40), st.data())
def test_ancestry_kernels_match_twins(slices, data):
    from streamtrace.kernels.ancestry import nearest_marked, outermost_marked
    from streamtrace.kernels.reference import nearest_marked_py, outermost_marked_py
    from streamtrace.kernels.tree import build_call_tree
    s = np.array([a for a, _ in slices], np.int64)
    e = np.array([a + d for a, d in slices], np.int64)
    parent, depth, order, _, _ = build_call_tree(np.zeros(len(s), np.int64), s, e)
    mark = np.array(data.draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s))), bool)
    assert nearest_marked(parent, order, mark).tolist() == nearest_marked_py(parent, order, mark).tolist()
    assert outermost_marked(parent, order, mark).tolist() == outermost_marked_py(parent, order, mark).tolist()


_EDGES = [0, 1, 9, 10, 99, 100, 101, 999, 1000, 10**18 - 1, 10**18, 2**63 - 1, -1, -10, -99, -100, -(2**63)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20) | st.just(_EDGES))
def test_put_int_and_put_us_match_python(values):
    """The integer and microsecond writers of merge's kernels (kernels/numtext.py: two digits per
    division, at an offset, in a buffer holding other bytes) against Python's str / the writer's fmt_us."""
    from streamtrace.kernels.numtext import put_int, put_us
    out = np.full(64, 0x7E, np.uint8)
    for v in values:
        end = put_int(out, 3, v)
        assert bytes(out[3:end]) == str(v).encode() and out[end] == 0x7E
        if v > -(2**63):
            end = put_us(out, 3, v)
            assert bytes(out[3:end]) == fmt_us(v)
        out[:] = 0x7E
