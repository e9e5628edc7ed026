"""The column-extraction kernel against its Python twin (decoded dicts)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamtrace
from streamtrace.events.columns import EVENT_DTYPE, StringTable, column_batches, columns_from_dicts, is_str_id
from streamtrace.trace.reader import TraceReader

from support import need_shared, real_traces


def resolved(cols, table, comm):
    """Rows with string ids replaced by their text, comparable across tables."""
    out = []
    s = table.strings
    for r in cols:
        row = {k: r[k].item() for k in EVENT_DTYPE.names}
        for k in ("cat", "name"):
            row[k] = s[row[k]] if row[k] >= 0 else None
        for k in ("pid", "tid"):
            if is_str_id(row[k]):
                row[k] = ("str", s[row[k] - (-(1 << 62))])
        row["comm"] = comm[row["comm"]] if row["comm"] >= 0 else None
        out.append(row)
    return out


def check(path):
    """The columns of ``column_batches`` (one kernel pass finding and reading the events) against
    ``columns_from_dicts`` of the events the reader decodes, batch by batch; the batches' event
    ranges and times against ``scan_events``' (BIG_INT aside, which the kernel does not look for)."""
    t1, t2 = StringTable(), StringTable()
    n = 0
    decoded = TraceReader(path, batch_events=997).raw_batches()
    for (b, a, ca), want in zip(column_batches(TraceReader(path, batch_events=997), t1, path), decoded, strict=True):
        assert b.starts.tolist() == want.starts.tolist() and b.ends.tolist() == want.ends.tolist()
        assert b.ts_ns.tolist() == want.ts_ns.tolist() and b.dur_ns.tolist() == want.dur_ns.tolist()
        assert b.flags.tolist() == (want.flags & 15).tolist()
        d, cd = columns_from_dicts(want.events, want.ts_ns, want.dur_ns, want.flags, t2)
        assert resolved(a, t1, ca) == resolved(d, t2, cd)
        n += len(a)
    return n


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name)
def test_kernel_equals_twin_on_real_traces(path):
    need_shared()
    assert check(path) > 0


names = st.text(alphabet=st.sampled_from(list('ab{}[]":,\\é ')), max_size=6)
ints = st.integers(-2 ** 63, 2 ** 63 - 1) | st.integers(-5, 5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "s", "M"]), "ts": st.integers(0, 10 ** 12)},
    optional={"name": names | st.sampled_from(["record_param_comms", "nccl:all_to_all", "c10d::allreduce_", "gloo:"]),
              "cat": names, "pid": ints | names, "tid": ints | names, "id": ints | names,
              "args": st.dictionaries(st.sampled_from(["correlation", "External id", "external id", "stream",
                                                       "device", "rank", "Collective name", "In msg nelems",
                                                       "dtype", "x", "Input Dims", "Seq"]),
                                                       ints | names | st.none(), max_size=4)}),
    max_size=10), st.sampled_from([None, 1]))
def test_kernel_equals_twin_on_random_events(tmp_path_factory, events, indent):
    p = tmp_path_factory.mktemp("c") / "t.json"
    p.write_text(json.dumps({"traceEvents": events}, indent=indent))
    assert check(p) == len(events)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["nccl:all_reduce", "record_param_comms", "gloo:broadcast", "c10d::allgather_", "nccl:all_to_all"]),
       st.dictionaries(st.sampled_from(["Seq", "In msg nelems", "dtype", "Input Dims", "External id", "Ev Idx", "séq",
                                        "Group size", "Process Group Ranks", "x"]),
                       st.one_of(st.integers(-5, 5), st.text(max_size=4), st.lists(st.integers(0, 3), max_size=2)),
                       max_size=4),
       st.booleans(), st.booleans())
def test_an_op_skipped_undecoded_is_one_keep_op_would_not_keep(name, args, ascii_only, nested):
    """``may_keep_op`` (the text test that spares decoding a communication op) is never False for an
    event ``keep_op`` keeps: whatever its args, written with escapes or not, nested or not."""
    from streamtrace.events.columns import keep_op, may_keep_op, texts_may_keep
    ev = {"ph": "X", "name": name, "args": {"outer": args} if nested else args}
    raw = json.dumps(ev, ensure_ascii=ascii_only).encode()
    decoded = json.loads(raw)
    got_args = decoded["args"] if isinstance(decoded.get("args"), dict) else {}
    if keep_op(name, got_args):
        assert may_keep_op(raw, name)
    if not may_keep_op(raw, name):
        assert not keep_op(name, got_args)
    pad = b'"Seq" \\ '                      # (a kept key and a backslash outside the event's text: not read)
    buf = pad + raw + pad + raw
    at = np.array([len(pad), 2 * len(pad) + len(raw)])
    text_alone = may_keep_op(raw, "mm")       # (a name that does not tell)
    assert texts_may_keep(buf, at, at + len(raw)).tolist() == [text_alone, text_alone]


def test_a_kept_key_written_with_escapes_is_decoded():
    from streamtrace.events.columns import keep_op, may_keep_op
    raw = b'{"ph":"X","name":"nccl:all_reduce","args":{"Se\\u0071":7}}'
    assert keep_op("nccl:all_reduce", json.loads(raw)["args"]) and may_keep_op(raw, "nccl:all_reduce")
    assert not may_keep_op(b'{"ph":"X","name":"nccl:all_reduce","args":{"External id":7}}', "nccl:all_reduce")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.sampled_from(["mm", "add", "é", "nccl:x", "", "q\"t"])), max_size=30),
                min_size=1, max_size=3))
def test_intern_spans_gives_ids_as_a_sorted_pass_would(batches):
    """``StringTable.intern_spans`` over batches of JSON string spans: the ids a plain reference gives
    (each batch's new hashes decoded in ascending hash order, known hashes mapped), row by row."""
    table = StringTable()
    by_hash: dict = {}
    strings: list = []
    hash_of = {"mm": 9, "add": 3, "é": 2 ** 63 + 5, "nccl:x": 7, "": 1, "q\"t": 2 ** 40}
    for texts in batches:
        raw, starts, ends, hashes = b"", [], [], []
        for x in texts:
            if x is None:
                starts.append(-1), ends.append(-1), hashes.append(0)
                continue
            enc = json.dumps(x).encode()
            starts.append(len(raw)), ends.append(len(raw) + len(enc)), hashes.append(hash_of[x])
            raw += enc + b","
        h = np.asarray(hashes, np.uint64)
        got = table.intern_spans(h, np.asarray(starts, np.int64), np.asarray(ends, np.int64), raw)
        for hv in sorted({hash_of[x] for x in texts if x is not None} - set(by_hash)):
            text = next(x for x in texts if x is not None and hash_of[x] == hv)
            by_hash[hv] = len(strings)
            strings.append(text)
        want = [-1 if x is None else by_hash[hash_of[x]] for x in texts]
        assert got.tolist() == want and got.dtype == np.int32
    assert table.strings[:len(strings)] == strings


def test_the_columnar_lines_of_docs_api(tmp_path):
    """docs/api.md's columnar loop, as written there: names and times as the file holds them
    (expected values from the events written, in plain Python)."""
    events = [{"ph": "X", "name": f"k{i % 3}", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.5 + i, "dur": 2.25}
              for i in range(5)] + [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}}]
    path = tmp_path / "rank3_trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    want = events
    table = StringTable()
    got = []
    for batch, cols, comm_rows in column_batches(streamtrace.TraceReader(str(path)), table):
        got += [(table.strings[c["name"]], int(c["ts"])) for c in cols]
    assert [n for n, _ in got] == [e["name"] for e in want]
    timed = [e for e in want if "ts" in e]
    assert [g for g, e in zip(got, want) if "ts" in e] == [(e["name"], round(e["ts"] * 1000)) for e in timed]
