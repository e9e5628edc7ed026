"""The streaming reader against plain ``json`` (the independent reference)."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.runtime.errors import TraceError, TruncatedTraceError
from streamtrace.trace.reader import TraceReader

from support import exact_ns, load_json, need_shared, real_traces


def read_all(path, **kw):
    r = TraceReader(path, **kw)
    evs, ts, dur, flags = [], [], [], []
    for b in r.raw_batches():
        evs += b.events
        ts += b.ts_ns.tolist()
        dur += b.dur_ns.tolist()
        flags += b.flags.tolist()
    return r, evs, ts, dur, flags


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name)
def test_real_traces_equal_json_load(path):
    need_shared()
    r, evs, ts, dur, flags = read_all(path, batch_events=1000)
    ref = load_json(path)
    ref_events = ref.pop("traceEvents")
    assert evs == ref_events
    assert r.metadata == ref
    # exact ns from the number text, checked against Decimal arithmetic
    dec = load_json(path, decimal=True)["traceEvents"]
    for e, t, d, f in zip(dec, ts, dur, flags):
        if "ts" in e:
            assert f & 1 and t == exact_ns(e["ts"])
        if "dur" in e:
            assert f & 2 and d == exact_ns(e["dur"])


def test_metadata_before_and_after_events():
    need_shared()
    path = [p for p in real_traces() if p.name.startswith("a100_resnet")][0]
    r = TraceReader(path)
    head = r.read_head()
    assert "distributedInfo" in head and "baseTimeNanoseconds" not in head
    full = TraceReader(path).read_metadata()
    assert full["baseTimeNanoseconds"] == 1711964646000000000
    assert set(head) < set(full)


def test_integer_over_int64_is_read(tmp_path):
    need_shared()
    r, evs, *_ = read_all([p for p in real_traces() if p.name.startswith("bad_integer")][0])
    assert evs[1]["args"]["Comms Id"] == 10159970886766084423
    # beyond 64 bits orjson refuses too: the ijson fallback keeps the exact value
    p = tmp_path / "huge.json"
    p.write_text('{"traceEvents":[{"ph":"X","ts":1,"dur":2,"pid":0,"tid":0,"args":{"v":%d}}]}' % (10 ** 30))
    _, evs, *_ = read_all(p)
    assert evs[0]["args"]["v"] == 10 ** 30


def test_bare_array_and_bom(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b'\xef\xbb\xbf[{"ph":"i","ts":1.5,"pid":1,"tid":1},\n{"ph":"i","ts":2,"pid":1,"tid":1}]')
    r, evs, ts, *_ = read_all(p)
    assert len(evs) == 2 and ts == [1500, 2000] and r.metadata == {}


def test_concatenated_gzip_members(tmp_path):
    doc = b'{"a": 1, "traceEvents": [{"ph":"i","ts":1,"pid":1,"tid":1}, {"ph":"i","ts":2,"pid":1,"tid":1}], "b": [2]}'
    p = tmp_path / "m.json.gz"
    p.write_bytes(b"".join(gzip.compress(doc[i:i + 10]) for i in range(0, len(doc), 10)))
    r, evs, *_ = read_all(p, block=16)
    assert len(evs) == 2 and r.metadata == {"a": 1, "b": [2]}


def test_gzip_detected_by_magic_not_name(tmp_path):
    p = tmp_path / "plain_name.json"
    p.write_bytes(gzip.compress(b'{"traceEvents":[{"ph":"i","ts":1,"pid":1,"tid":1}]}'))
    assert len(read_all(p)[1]) == 1


# -- bad input ------------------------------------------------------------------

DOC = (b'{"schemaVersion": 1, "traceEvents": [' +
       b",".join(b'{"ph":"X","name":"op%d","ts":%d.5,"dur":3,"pid":1,"tid":2}' % (i, i) for i in range(50)) +
       b'], "baseTimeNanoseconds": 7}')


@pytest.mark.parametrize("cut", [40, 200, 777, len(DOC) - 30, len(DOC) - 1])
def test_truncated_file_error_and_salvage(tmp_path, cut):
    p = tmp_path / "t.json"
    p.write_bytes(DOC[:cut])
    with pytest.raises(TruncatedTraceError) as ei:
        read_all(p)
    assert str(p) in str(ei.value) and f"byte {cut:,}" in str(ei.value)
    r, evs, *_ = read_all(p, salvage=True, block=64)
    full = json.loads(DOC)["traceEvents"]
    # every complete event before the cut, and nothing else
    complete = [e for i, e in enumerate(full) if DOC.index(b'"op%d"' % i) + 40 < cut
                and DOC.index(b"}", DOC.index(b'"op%d"' % i)) < cut]
    assert evs == complete
    assert r.truncated and r.warnings


def test_truncated_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(DOC * 1)[:-40])
    with pytest.raises(TraceError) as ei:
        read_all(p)
    assert "truncated" in str(ei.value)
    r, evs, *_ = read_all(p, salvage=True)
    assert 0 < len(evs) <= 50


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(DOC))
    data[30:60] = b"\x00" * 30
    p = tmp_path / "c.json.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceError) as ei:
        read_all(p)
    assert "gzip" in str(ei.value) or "JSON" in str(ei.value)


def test_invalid_utf8(tmp_path):
    p = tmp_path / "u.json"
    doc = b'{"traceEvents":[{"ph":"X","name":"a\xff\xfeb","ts":1,"dur":1,"pid":1,"tid":1}]}'
    p.write_bytes(doc)
    with pytest.raises(TraceError) as ei:
        read_all(p)
    bad_at = doc.index(b"\xff")
    assert "UTF-8" in str(ei.value) and f"byte {bad_at}" in str(ei.value)


@pytest.mark.parametrize("doc", [b"", b"hello", b'{"traceEvents": [{"ph": "X",}]}', b'{"traceEvents": [1 2]}',
                                 b'{"a" 1}', b'{"traceEvents": []} trailing'])
def test_not_json(tmp_path, doc):
    p = tmp_path / "x.json"
    p.write_bytes(doc)
    with pytest.raises(TraceError):
        read_all(p)


# -- property tests: random documents, tiny blocks ------------------------------------

json_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | \
    st.sampled_from(['{', '}', '[', ']', '"', '\\', '\\"', '{"ts": 1}', '\u00e9', '\U0001F600', ':', ','])
scalars = st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | json_text | \
    st.floats(allow_nan=False, allow_infinity=False, width=64)
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(json_text, c, max_size=3),
                      max_leaves=8)
us_numbers = st.integers(0, 10 ** 13).map(str) | st.tuples(st.integers(0, 10 ** 13), st.integers(0, 999999)).map(
    lambda t: f"{t[0]}.{t[1]:06d}".rstrip("0").rstrip(".")) | st.sampled_from(["1e3", "1.5E+2", "2500e-3", "-4.25"])


@st.composite
def documents(draw):
    events = []
    for _ in range(draw(st.integers(0, 6))):
        ev = {"ph": draw(st.sampled_from(["X", "i", "s", "f", "M"])), "name": draw(json_text),
              "pid": draw(st.integers(0, 9) | json_text), "tid": draw(st.integers(0, 9)),
              "args": draw(st.dictionaries(json_text, values, max_size=3))}
        events.append((ev, draw(us_numbers), draw(st.none() | us_numbers)))
    before = draw(st.dictionaries(json_text.filter(lambda k: k != "traceEvents"), values, max_size=2))
    after = draw(st.dictionaries(json_text.filter(lambda k: k != "traceEvents" and k not in before), values,
                                 max_size=2))
    indent = draw(st.sampled_from([None, 1]))
    parts = []
    for ev, ts, dur in events:
        body = json.dumps(ev, indent=indent)[:-1].rstrip()
        extra = f', "ts": {ts}' + (f', "dur" :  {dur}' if dur is not None else "")
        parts.append(body + extra + "}")
    doc = "{" + ", ".join([json.dumps(k) + ": " + json.dumps(v) for k, v in before.items()] +
                          ['"traceEvents": [\n' + ",\n ".join(parts) + "]"] +
                          [json.dumps(k) + ":" + json.dumps(v, indent=indent) for k, v in after.items()]) + "}"
    return doc.encode("utf-8"), events, before, after


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.sampled_from([1, 3, 17, 4096]), st.booleans())
def test_random_documents_any_block_size(tmp_path_factory, doc, block, gz):
    data, events, before, after = doc
    p = tmp_path_factory.mktemp("h") / "d.json"
    p.write_bytes(gzip.compress(data) if gz else data)
    r, evs, ts, dur, flags = read_all(p, block=block, batch_events=2)
    assert evs == json.loads(data)["traceEvents"]
    assert r.metadata == {**before, **after}
    assert r.head_keys == list(before)
    for (ev, t, d), got_t, got_d, f in zip(events, ts, dur, flags):
        assert got_t == exact_ns(t)
        if d is not None:
            assert f & 2 and got_d == exact_ns(d)
        else:
            assert not f & 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_read_trailer_is_right_or_gives_up(tmp_path_factory, doc):
    """The keys after traceEvents from the file's tail: exactly json's, or None
    (the caller then reads the whole file) -- never a wrong or partial dict."""
    from streamtrace.trace.metadata import read_trailer
    data, events, before, after = doc
    p = tmp_path_factory.mktemp("t") / "d.json"
    p.write_bytes(data)
    got = read_trailer(p)
    assert got is None or got == after
    if not after:
        assert got == {}
    p.write_bytes(gzip.compress(data))
    assert read_trailer(p) is None


def test_read_trailer_with_arrays(tmp_path):
    from streamtrace.trace.metadata import read_trailer
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "args": {"d": [[1], [2]]}}], '
                 '"deviceProperties": [{"id": 0}], "traceName": "a]b", "baseTimeNanoseconds": 5}')
    assert read_trailer(p) == {"deviceProperties": [{"id": 0}], "traceName": "a]b", "baseTimeNanoseconds": 5}


@pytest.mark.parametrize("gz", [False, True])
def test_blocks_start_small_and_grow_to_the_block_size(tmp_path, gz):
    """The first block is FIRST_BLOCK bytes (a head costs ~64 KB of decompression, not 8 MB: identify of
    1,024 gzipped ranks went from 45 to under 1 ms a file), the next ones double up to ``block``, and
    the bytes read are the file's, in order."""
    import os

    from streamtrace.trace.source import FIRST_BLOCK, ByteSource
    raw = os.urandom(3 << 20).hex().encode()             # 6 MB that gzip cannot shrink much
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(raw, 1) if gz else raw)
    src = ByteSource(path, block=1 << 20)
    sizes, out = [], []
    while data := src.read():
        sizes.append(len(data))
        out.append(data)
    assert b"".join(out) == raw
    assert sizes[0] <= 2 * FIRST_BLOCK                   # gzip: decompressed from FIRST_BLOCK / 4 reads
    assert max(sizes) >= (1 << 20) // 2 and max(sizes) <= 2 * (1 << 20)
    assert len(sizes) < 2 + (len(raw) >> 19)             # not stuck at the small size


@pytest.mark.parametrize("members", [1, 3])
def test_gzip_blocks_bounded_when_highly_compressed(tmp_path, members):
    """JSON compresses 10-20x: a gzip block holds at most ``block`` decompressed bytes, whatever
    the compressed bytes read (they were decompressed whole: 20+ MB more resident for a gzipped
    rank), across concatenated members; a cut member is still reported as truncated."""
    from streamtrace.trace.source import ByteSource
    raw = b"".join(b'{"ph":"X","name":"op","ts":%d,"dur":3,"pid":1,"tid":2},' % i for i in range(200_000))
    part = -(-len(raw) // members)
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"".join(gzip.compress(raw[i:i + part]) for i in range(0, len(raw), part)))
    assert len(raw) > 20 * path.stat().st_size           # the case that matters: high ratio
    block = 256 << 10
    src = ByteSource(path, block=block)
    sizes, out = [], []
    while data := src.read():
        sizes.append(len(data))
        out.append(data)
    assert b"".join(out) == raw and not src.gzip_truncated
    assert max(sizes) <= block and len(sizes) >= len(raw) // block
    path.write_bytes(path.read_bytes()[:-20])
    src = ByteSource(path, block=block)
    got = b""
    while data := src.read():
        got += data
    assert src.gzip_truncated and raw.startswith(got) and len(got) > len(raw) // 2


def test_identified_files_share_their_process_groups(tmp_path):
    """Two ranks' traces that list the same process group (``distributedInfo.pg_config``) hold one shared
    entry after ``identify`` (a group's member list once, not once per member: the 4,096-rank headers took
    755 MB), equal to what each file says, read back with plain ``json``; an entry only one file lists and a
    non-object entry are kept as they are."""
    import copy
    from streamtrace.trace.discover import identify
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(300))}, {"pg_name": "9", "ranks": [299]}]
    paths = []
    for r in (0, 1):
        doc = {"distributedInfo": {"rank": r, "world_size": 300,
                                   "pg_config": groups + [{"pg_name": f"own{r}", "ranks": [r]}, "odd"]},
               "traceEvents": [{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    a, b = (identify(p) for p in paths)
    ga, gb = a.head["distributedInfo"]["pg_config"], b.head["distributedInfo"]["pg_config"]
    assert ga[0] is gb[0]                                        # one object for both ranks
    assert ga[2] is not gb[2] and ga[3] == gb[3] == "odd"
    for tf, p in ((a, paths[0]), (b, paths[1])):
        assert copy.deepcopy(tf.head["distributedInfo"]) == json.loads(p.read_text())["distributedInfo"]


def test_raw_keys_kept_as_their_text(tmp_path):
    head = b'{"kind": "merged", "ranks": [{"rank": 0, "big": 123456789012345678901234567890}], "x": [1.50, "\\u00e9"]}'
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2}],"streamtrace": ' + head
                  + b', "schemaVersion": 1}')
    r = TraceReader(p, raw_keys=("streamtrace",))
    assert sum(len(b.starts) for b in r.raw_batches(decode=False)) == 1
    assert r.metadata["streamtrace"].text == head                   # the bytes as they stand
    assert r.metadata["schemaVersion"] == 1
    assert json.loads(r.metadata["streamtrace"].text) == load_json(p)["streamtrace"]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents":[],"streamtrace": {"ranks": [01, tru]}}')
    with pytest.raises(TraceError):
        TraceReader(bad, raw_keys=("streamtrace",)).read_metadata()
