"""One file, many cores: byte ranges on event boundaries give exactly what the
single-process reader gives."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import TraceError
from streamtrace.kernels import scan as K
from streamtrace.trace.reader import TraceReader
from streamtrace.events.dataset import partition_files, read_partition
from streamtrace.trace.ranges import guess_ranges, range_events, split_ranges
from streamtrace.trace.source import plain_copy

from support import events_of, need_shared, proven, real_traces, tricky


def split_events(path, parts):
    ranges, meta, _ = split_ranges(path, parts)
    evs = []
    for r in ranges:
        evs += events_of(range_events(path, r))
    return evs, meta, ranges


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name)
def test_real_traces_split_equal_single(tmp_path, path):
    need_shared()
    plain = plain_copy(path, tmp_path)
    whole = TraceReader(plain)
    ref = events_of(whole)
    for parts in (1, 3, 7):
        evs, meta, ranges = split_events(plain, parts)
        assert evs == ref
        assert meta == whole.metadata
        assert all(a < b for a, b in ranges) and len(ranges) <= parts + 1
        ranges, meta, head_keys = guess_ranges(plain, parts)      # analyze -j: guessed, then proven
        assert proven(plain, ranges) == ref          # real traces: the guess is right, never wasted
        assert meta == whole.metadata and head_keys == whole.head_keys
        assert all(a <= b for a, b in ranges) and len(ranges) <= parts
        if parts > 1 and len(ref) > 1000:
            assert len(ranges) > 1




@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"ph": st.just("X"), "name": tricky, "ts": st.integers(0, 10 ** 12),
                                       "args": st.dictionaries(tricky, tricky | st.lists(tricky, max_size=2),
                                                               max_size=3)}), min_size=0, max_size=12),
       st.integers(1, 6), st.dictionaries(tricky.filter(lambda k: k != "traceEvents"), tricky, max_size=2),
       st.sampled_from([None, 1]), st.booleans())
def test_random_documents_split_equal_single(tmp_path_factory, events, parts, after, indent, ascii_only):
    """Strings with braces, brackets, escaped quotes and backslashes, and (with
    ensure_ascii) unicode escapes such as \\u00e9 and surrogate pairs."""
    p = tmp_path_factory.mktemp("s") / "t.json"
    doc = {"schemaVersion": 1, "traceEvents": events, **after}
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
    whole = TraceReader(p)
    ref = events_of(whole)
    assert ref == events
    evs, meta, _ = split_events(p, parts)
    assert evs == ref and meta == whole.metadata


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=0, max_size=200).map(lambda b: b.replace(b"]", b"")), st.integers(1, 50))
def test_split_points_block_independent(data, block):
    """The scanner's state carries across blocks: any block size gives the same boundaries."""
    doc = b'{"a":"' + data.replace(b'"', b"").replace(b"\\", b"") + b'"},{"b":[1,{"c":"}"}]},{}]'
    out = np.empty(100, np.int64)
    whole_state = np.zeros(5, np.int64)
    k, end = K.split_points(np.frombuffer(doc, np.uint8), len(doc), 0, 1, out, whole_state)
    want = out[:k].tolist()
    got, state, end2, pos = [], np.zeros(5, np.int64), -1, 0
    while end2 < 0 and pos < len(doc):
        chunk = np.frombuffer(doc[pos:pos + block], np.uint8)
        k2, end2 = K.split_points(chunk, len(chunk), pos, 1, out, state)
        got += out[:k2].tolist()
        pos += block
    assert got == want and end2 == end == len(doc) - 1


def test_analyze_split_equals_single(tmp_path):
    need_shared()
    src = [p for p in real_traces() if p.name.startswith("a100_resnet")][0]
    for chunked in (False, True):
        a = analyze([src], tmp_path / f"a{chunked}", AnalyzeOptions(jobs=1, chunked=chunked))
        b = analyze([src], tmp_path / f"b{chunked}", AnalyzeOptions(jobs=2, split_threshold=1, chunked=chunked,
                                                                     chunk_events=3000))
        strip = lambda s: [{k: v for k, v in r.items()} for r in s["ranks"]]  # noqa: E731
        assert strip(a) == strip(b)
        for name in ("kernels", "ops"):                  # no iteration in the path: iteration=-1
            fa = partition_files(tmp_path / f"a{chunked}", name, 0, None)
            fb = partition_files(tmp_path / f"b{chunked}", name, 0, None)
            assert len(fa) == 1 and len(fb) == (2 if name == "ops" else 1)   # -j 2: the ops in 2 files
            assert read_partition(fa).equals(read_partition(fb))
