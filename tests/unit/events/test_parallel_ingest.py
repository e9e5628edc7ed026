"""Guessed byte ranges (``analyze --jobs``): cut where the text looks like an event
boundary, then prove each cut by parsing.  Whatever the guess, the result must be
what the single-process reader gives; a wrong guess must be caught, never used.
(Real traces: tests/unit/trace/test_trace_ranges.py checks the guess on each of them.)"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.ingest import ingest
from streamtrace.runtime.errors import StreamtraceError, TraceError
from streamtrace.events.dataset import partition_files, read_partition
from streamtrace.analyze.patterns import Patterns
from streamtrace.events.parallel_ingest import IngestSettings, RangeTask, ingest_parallel, ingest_range
from streamtrace.trace.metadata import find_trailer
from streamtrace.trace.ranges import guess_ranges
from streamtrace.trace.reader import TraceReader
from streamtrace.events.store import MemoryStore

SETTINGS = IngestSettings(Patterns.load().gpu_cats, chunk_events=256)

from support import events_of, proven, tricky

# args that look like events: lists of objects with a "ph" key, i.e. "}, {"ph": ..." inside an event
lookalike = st.lists(st.fixed_dictionaries({"ph": tricky}), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"ph": st.just("X"), "name": tricky, "ts": st.integers(0, 10 ** 12),
                                       "args": st.dictionaries(tricky, tricky | lookalike, max_size=3)}),
                min_size=0, max_size=14),
       st.integers(1, 6), st.dictionaries(tricky.filter(lambda k: k != "traceEvents"), tricky, max_size=2),
       st.sampled_from([None, 1]), st.booleans(), st.booleans())
def test_guess_is_right_or_caught(tmp_path_factory, events, parts, after, indent, ascii_only, bare):
    """Either every guessed range parses exactly and together they are the file's
    events, or the proof fails (and ingest_parallel falls back to the scanner): a
    wrong cut is never taken for a right one."""
    p = tmp_path_factory.mktemp("g") / "t.json"
    doc = events if bare else {"schemaVersion": 1, "traceEvents": events, **after}
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
    whole = TraceReader(p)
    ref = events_of(whole)
    plan = guess_ranges(p, parts)
    assert plan is not None
    got = proven(p, plan[0])
    assert got is None or got == ref
    if not any(isinstance(v, list) for e in events for v in e["args"].values()):
        assert got == ref                        # nothing looks like an event but events
    assert plan[1] == whole.metadata


def _lookalike_trace(path, n=400):
    """Events whose args hold lists of objects with a "ph" key, most of the bytes: an
    equal-share cut lands inside one, where '}, {"ph": ...' is not an event boundary."""
    evs = []
    for i in range(n):
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1 + i % 2,
                    "ts": 10 * i, "dur": 5, "args": {"steps": [{"ph": "i", "k": j} for j in range(40)]}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs, "traceName": "x"}))


def test_wrong_guess_falls_back_to_scanner(tmp_path):
    p = tmp_path / "t.json"
    _lookalike_trace(p)
    plan = guess_ranges(p, 8)
    assert len(plan[0]) > 1 and proven(p, plan[0]) is None       # the guess is wrong here
    res = ingest_parallel(p, tmp_path, 2, SETTINGS)
    assert res.how == "scanned"
    single = TraceReader(p)
    assert res.metadata == {**{"schemaVersion": 1}, "traceName": "x"} == single.read_metadata()
    store = MemoryStore(256)
    table, _, _ = ingest(p, store, Patterns.load(None).gpu_cats)
    assert sorted(res.store.keys()) == sorted(store.keys())
    for k in store.keys():
        a, b = store.get(k), res.store.get(k)
        assert a.dtype == b.dtype and len(a) == len(b)
        for name in a.dtype.names:
            x, y = a[name], b[name]
            if name in ("name", "cat"):
                x = [table.strings[i] if i >= 0 else None for i in x]
                y = [res.table.strings[i] if i >= 0 else None for i in y]
            else:
                x, y = x.tolist(), y.tolist()
            assert x == y, name


def test_right_guess_is_used(tmp_path):
    p = tmp_path / "t.json"
    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
            "args": {"s": "}, {\"ph\": 1}"}} for i in range(3000)]
    p.write_text(json.dumps({"traceEvents": evs}, indent=1))
    res = ingest_parallel(p, tmp_path, 2, SETTINGS)
    assert res.how == "guessed" and res.store.rows(("cpu", -1, 1, 1)) == 3000


def test_too_few_likely_cuts_are_scanned(tmp_path):
    """Events without a "ph" key give no likely cut: the scanner finds the ranges."""
    p = tmp_path / "t.json"
    evs = [{"name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(3000)]
    p.write_text(json.dumps({"traceEvents": evs}))
    assert len(guess_ranges(p, 8)[0]) == 1
    res = ingest_parallel(p, tmp_path, 2, SETTINGS)
    assert res.how == "scanned" and res.store.keys() == []


@pytest.mark.parametrize("cut", ["mid_event", "in_string", "in_args", "after_comma"])
def test_exact_range_check(tmp_path, cut):
    """A byte range that does not end on an event boundary is refused, wherever it ends."""
    p = tmp_path / "t.json"
    evs = [{"ph": "X", "name": "a}, {b", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"l": [{"ph": 1}, {"x": 2}]}}
           for i in range(4)]
    text = json.dumps({"traceEvents": evs})
    p.write_text(text)
    start = text.index("[") + 1
    second = text.index('{"ph": "X"', start + 1)
    end = {"mid_event": second + 12, "in_string": text.index("}, {b", second) + 1,
           "in_args": text.index('{"ph": 1}', second) + len('{"ph": 1}'), "after_comma": second - 1}[cut]
    with pytest.raises(TraceError):
        ingest_range(RangeTask(str(p), (start, end), SETTINGS, exact=True))
    good = second - 2                          # just past the first event's '}'
    assert text[good - 2:good + 2] == "}}, "
    ingest_range(RangeTask(str(p), (start, good), SETTINGS, exact=True))


@pytest.mark.parametrize("case", ["truncated", "after_document", "bad_json", "bare_array"])
@pytest.mark.parametrize("salvage", [False, True])
def test_unsplittable_files_analyse_like_one_process(tmp_path, case, salvage):
    """-j 2 on a file that cannot be split gives what -j 1 gives: the same error, or
    with --salvage the same kept events and warning."""
    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 5}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
           for i in range(2000)]
    body = json.dumps({"traceEvents": evs, "traceName": "t"})
    data = {"truncated": body[: len(body) * 2 // 3], "after_document": body + '{"x": 1}',
            "bad_json": body.replace('"op3"', '"op3" "oops"', 1), "bare_array": json.dumps(evs)}[case]
    src = tmp_path / "rank_0.json"
    src.write_text(data)
    out = []
    for jobs in (1, 2):
        try:
            r = analyze([src], tmp_path / f"o{jobs}", AnalyzeOptions(jobs=jobs, split_threshold=1, salvage=salvage,
                                                                     progress=False))
            rk = {k: v for k, v in r["ranks"][0].items() if k != "seconds"}
            out.append((rk, read_partition(partition_files(
                tmp_path / f"o{jobs}", "ops", 0, None)).to_pylist()))
        except StreamtraceError as e:
            out.append(str(e))
    assert out[0] == out[1]
    if case == "bare_array" or (case == "truncated" and salvage):
        assert not isinstance(out[0], str)


_A = b'{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":7,"ts":1,"dur":1}'
_B = b'{"ph":"X","cat":"kernel","name":"b","pid":0,"tid":7,"ts":5,"dur":1}'
_L = b'{"ph":"X","cat":"kernel","name":"' + b"l" * 200 + b'","pid":0,"tid":7,"ts":9,"dur":1}'


@pytest.mark.parametrize("data", [
    b'{"traceEvents":[' + _A + b"," + _B + b"],}",                          # empty trailer after a comma
    b'{"traceEvents":[' + _A + b"," + _B + b"]}\x0c",                        # \x0c is not JSON whitespace
    b'{"traceEvents":[' + _A + b"," + _B + b"]\x0b}",
    b'{"traceEvents":[' + _A + b"," + _B + b"}]}",                           # '}' where ']' closes the array
    b'{"traceEvents":[' + _A + b"," + _B + b"]]}",
    b'{"traceEvents":[' + _A + b'],"traceEvents":[' + _B + b"]}",            # a second traceEvents key
    b'{"traceEvents":[' + _A + b"," + _L + b",]}",                           # trailing comma
    b'{"traceEvents":[' + _L + b" " + _A + b"]}",                            # missing comma
], ids=["comma_close", "ff", "vt", "brace_close", "double_close", "two_arrays", "trailing_comma",
        "missing_comma"])
def test_malformed_files_analyse_like_one_process(tmp_path, data):
    """Found in review: files that -j 1 rejects (or reads in full) must not be read
    differently by -j 2, whether the guess or the scanner handles them."""
    src = tmp_path / "rank_0.json"
    src.write_bytes(data)
    out = []
    for jobs in (1, 2):
        try:
            r = analyze([src], tmp_path / f"o{jobs}", AnalyzeOptions(jobs=jobs, split_threshold=1, progress=False))
            out.append(({k: v for k, v in r["ranks"][0].items() if k != "seconds"},
                        read_partition(partition_files(tmp_path / f"o{jobs}", "kernels", 0, None)).to_pylist()))
        except StreamtraceError as e:
            out.append(str(e))
    assert out[0] == out[1]


def test_guess_cut_work_is_bounded(tmp_path):
    """Only the first GUESS_TRIES places that look like '}, {' are tried per share."""
    from streamtrace.trace import ranges as split
    bad = b'{"x": [' + b"{}, " * (split.GUESS_TRIES + 5) + b"{}]}"
    p = tmp_path / "t.json"
    p.write_bytes(_A + b", " + _B + b", " + bad)
    with open(p, "rb") as f:
        assert split.guess_cut(f, 0, p.stat().st_size) == len(_A)
    p.write_bytes(bad + b", " + _B + b", " + _A)              # an event boundary, but past the tries
    with open(p, "rb") as f:
        assert split.guess_cut(f, 0, p.stat().st_size) is None
    p.write_bytes(b'{"x": [' + b"{}, " * (split.GUESS_TRIES - 5) + b"{}]}" + b", " + _B)
    with open(p, "rb") as f:
        assert split.guess_cut(f, 0, p.stat().st_size) is not None


def test_find_trailer_offsets(tmp_path):
    p = tmp_path / "t.json"
    text = '{"traceEvents": [{"ph": "X"}, {"ph": "i"}], "deviceProperties": [{"id": 0}], "traceName": "a]b"}\n'
    p.write_text(text)
    meta, end = find_trailer(p)
    assert text[end] == "]" and text[end + 1:].startswith(', "deviceProperties"')
    assert meta == {"deviceProperties": [{"id": 0}], "traceName": "a]b"}
    p.write_text('[{"ph": "X"}]  \n')
    assert find_trailer(p, bare=True) == ({}, 12)
    p.write_text('[{"ph": "X"}] x')
    assert find_trailer(p, bare=True) is None
    p.write_text('{"traceEvents": [{"ph": "X"}],}')
    assert find_trailer(p) is None
    p.write_text('{"traceEvents": [{"ph": "X"}]}\x0c')
    assert find_trailer(p) is None
