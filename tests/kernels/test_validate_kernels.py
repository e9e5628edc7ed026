"""The validate kernels against their plain-Python twins (hypothesis property tests):
event_fields vs fields_from_dict on generated event bytes, nesting_chunk / flow_chunk over sorted
chunks (any cut, a stack that must grow) vs the dict-based twins."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import scan as K
from streamtrace.kernels import validate as KV
from streamtrace.kernels.reference import batch_records_py, flows_py, nesting_py
from streamtrace.validate.check import fields_from_dict

FAST = settings(max_examples=300, deadline=None)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(allow_nan=False, width=64), st.sampled_from([1.0, -0.0, 2.5, 1e300, 1e20]),
                    st.text(max_size=4), st.sampled_from(["X", "s", "f", "i", "M", "Spans", "é", "\\", '"']))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=2),
                                                   st.dictionaries(st.text(max_size=3), c, max_size=2)), max_leaves=4)
simple = st.one_of(st.integers(-5, 2 ** 63 - 1), st.text(alphabet="abXsf é", max_size=3), st.booleans(), st.none(),
                   st.sampled_from(["X", "s", "f", 0, 1, 2.5]))
values = st.one_of(simple, simple, values)
keys = st.sampled_from(["ph", "pid", "tid", "ts", "dur", "cat", "id", "name", "args", "tss", "p"])
class Pairs(list):
    """An object's members as (key, value) pairs: keys may repeat."""


args = st.lists(st.tuples(st.sampled_from(["rank", "correlation", "x", "Rank"]), values), max_size=3).map(Pairs)
members = st.lists(st.one_of(st.tuples(keys, values), st.tuples(st.just("args"), args)), max_size=9)


def text(pairs, ascii_):
    def one(k, v):
        if isinstance(v, Pairs):
            v = "{" + ",".join(json.dumps(a) + ":" + json.dumps(b, ensure_ascii=ascii_) for a, b in v) + "}"
        else:
            v = json.dumps(v, ensure_ascii=ascii_)
        return json.dumps(k) + ": " + v
    return ("{" + ", ".join(one(k, v) for k, v in pairs) + "}").encode()


@FAST
@given(members, st.booleans())
def test_event_fields_matches_twin(pairs, ascii_):
    raw = text(pairs, ascii_)
    buf = np.frombuffer(b"  " + raw + b" ", np.uint8)
    out = np.full((1, KV.NF), 7, np.int64)
    KV.event_fields(buf, np.array([2]), np.array([2 + len(raw)]), out)
    if out[0, KV.C_PY]:
        return          # left to Python: the trace-level tests check that path
    one = [np.zeros(1, np.int64) for _ in range(4)]
    flags = np.zeros(1, np.uint8)
    K.scan_events(buf, 2, len(buf), *one, flags, np.zeros(1, np.int64))
    want = fields_from_dict(json.loads(raw), int(one[2][0]), int(one[3][0]), int(flags[0]))
    assert out[0].tolist() == want.tolist()


def test_event_fields_reads_the_common_shapes():
    raw = b'{"ph":"X","pid":7,"tid":"Spans","ts":1.5,"dur":2,"cat":"kernel","args":{"rank":3}}'
    out = np.zeros((1, KV.NF), np.int64)
    KV.event_fields(np.frombuffer(raw, np.uint8), np.array([0]), np.array([len(raw)]), out)
    r = out[0]
    assert r[KV.C_PY] == 0 and r[KV.C_PH] == KV.PH_X and (r[KV.C_PIDK], r[KV.C_PIDV]) == (KV.INT, 7)
    assert r[KV.C_TIDK] == KV.STR and (r[KV.C_TS], r[KV.C_DUR]) == (1500, 2000)
    assert (r[KV.C_RANKK], r[KV.C_RANKV]) == (KV.INT, 3) and r[KV.C_IDK] == KV.ABSENT
    for odd in (b'{"ph":"X","ph":"X"}', b'{"pid":1.5}', b'{"ph":"\\u0058"}', b'{"a":NaN}', b'{"ts":1,"ts":2}'):
        KV.event_fields(np.frombuffer(odd, np.uint8), np.array([0]), np.array([len(odd)]), out)
        assert out[0, KV.C_PY] == 1, odd


def chunked(arrays, cuts):
    """The arrays cut at ``cuts`` (sorted positions), chunk by chunk."""
    edges = [0, *sorted(set(c for c in cuts if 0 < c < len(arrays[0]))), len(arrays[0])]
    for a, b in zip(edges, edges[1:]):
        yield [np.ascontiguousarray(x[a:b]) for x in arrays]


slices = st.lists(st.tuples(st.integers(0, 2) | st.integers(KV.GPU_TRACK, KV.GPU_TRACK + 2), st.integers(0, 1), st.integers(-3, 3), st.integers(0, 30),
                            st.integers(0, 12), st.integers(1, 3)), max_size=80)


@FAST
@given(slices, st.lists(st.integers(0, 80), max_size=6), st.integers(1, 4))
# a record in both views meeting a full stack in the second: nothing of it may count before the stacks grow
@example(recs=[(2, 0, 0, 0, 2, 1), (2, 0, 0, 0, 3, 2), (2, 0, 0, 1, 2, 3)], cuts=[], cap=1)
def test_nesting_chunk_matches_twin(recs, cuts, cap):
    r = np.array(recs, np.int64).reshape(-1, 6)
    tkind, pid, tid, start, end, view = r[:, 0], r[:, 1], r[:, 2], r[:, 3], r[:, 3] + r[:, 4], r[:, 5]
    order = np.lexsort((-end, start, tid, pid, tkind))
    cols = [a[order] for a in (tkind, pid, tid, start, end, view)]
    state = np.zeros(14, np.int64)
    stacks = np.zeros((2, cap), np.int64)
    for ch in chunked(cols, cuts):
        at = 0
        while at < len(ch[0]):
            at += KV.nesting_chunk(*(c[at:] for c in ch), state, stacks)
            if at < len(ch[0]):
                grown = np.zeros((2, 2 * stacks.shape[1]), np.int64)
                grown[:, :stacks.shape[1]] = stacks
                stacks = grown
    want = nesting_py(tkind.tolist(), pid.tolist(), tid.tolist(), start.tolist(), end.tolist(), view.tolist())
    assert [(int(state[6]), int(state[8]), int(state[12])), (int(state[7]), int(state[9]), int(state[13]))] == want


ends = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 4), st.sampled_from([2, 3]),
                          st.integers(0, 3), st.integers(-1, 2), st.integers(1, 3)), max_size=80)


@FAST
@given(ends, st.lists(st.integers(0, 80), max_size=6))
def test_flow_chunk_matches_twin(recs, cuts):
    r = np.array(recs, np.int64).reshape(-1, 7)
    kinds, cat, fid, ph, rankk, rankv, view = (r[:, j] for j in range(7))
    order = np.lexsort((np.arange(len(r)), fid, cat, kinds))       # by key, then file order
    cols = [a[order] for a in (kinds, cat, fid, ph, rankk, rankv, view)]
    state = np.zeros(16, np.int64)
    counts = np.zeros((2, 4), np.int64)
    for ch in chunked(cols, cuts):
        KV.flow_chunk(*ch, state, counts)
    KV.flow_close(state, counts)
    want = flows_py(*(a.tolist() for a in (kinds, cat, fid, ph, rankk, rankv, view)))
    assert counts.tolist() == want


# -- the rewrite kernel's own fields (span_fields / member_fields) vs the twin -----------------

rw_ids = st.integers(-3, 2 ** 41) | st.text(alphabet="ab1", max_size=3) | st.sampled_from([1.0, None, True, 2 ** 70])
rw_events = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "s", "f", "M", "i"])},
    optional={"pid": st.sampled_from([0, 3, 41523, "Spans", "", 1.0, None]), "tid": st.integers(-2, 9) | st.just("t"),
              "name": st.sampled_from(["aten::mm", "process_name", 'a"{b']), "cat": st.sampled_from(["kernel", "ac2g", 1]),
              "id": rw_ids, "dur": st.integers(-5, 10 ** 6) | st.just(2.5),
              "args": st.dictionaries(st.sampled_from(["correlation", "rank", "x"]), rw_ids, max_size=3)})


@FAST
@given(st.lists(st.tuples(rw_events, st.integers(0, 10 ** 13) | st.none()), min_size=1, max_size=8), st.booleans())
def test_rewrite_fields_match_twin(tmp_path_factory, evs, indent):
    """merge's rewrite reads validate's fields in its own member walk (span_fields, member_fields,
    Python for the rest): every input row equals fields_from_dict of the decoded event."""
    import streamtrace.merge.rank as MR
    from streamtrace.merge.rank import RankPlan, merge_rank
    from streamtrace.trace.reader import TraceReader
    from streamtrace.trace.writer import fmt_us
    d = tmp_path_factory.mktemp("rwf")
    docs = []
    for ev, ts in evs:
        body = json.dumps(ev, indent=1 if indent else None)
        docs.append(body if ts is None else body[:-1].rstrip() + f', "ts": {fmt_us(ts).decode()}' + "}")
    src = d / "src.json"
    src.write_text('{"traceEvents": [' + ",".join(docs) + "]}")
    seen = []
    real = MR.account_batch

    def spy(check, f, kept):
        seen.append(f.copy())
        return real(check, f, kept)
    MR.account_batch = spy
    try:
        merge_rank(RankPlan(str(src), 1, 0, str(d / "seg"), False, 1, frozenset(), False, None, None, False))
    finally:
        MR.account_batch = real
    want = [fields_from_dict(ev, int(b.ts_ns[i]), int(b.dur_ns[i]), int(b.flags[i]))
            for b in TraceReader(src).raw_batches() for i, ev in enumerate(b.events)]
    got = np.concatenate(seen)
    assert got.tolist() == [w.tolist() for w in want]


kinds = st.sampled_from([KV.ABSENT, KV.NULL, KV.INT, KV.STR, KV.FLOAT, KV.OTHER])
big = st.integers(-2 ** 63, 2 ** 63 - 1)
small = st.integers(-3, 3)
field_rows = st.fixed_dictionaries({
    "ph": st.sampled_from([KV.PH_NONE, KV.PH_X, KV.PH_S, KV.PH_F, KV.PH_OTHER]),
    "pidk": kinds, "pidv": small | big, "tidk": kinds, "tidv": small, "ts": small | big, "dur": small | big,
    "tflags": st.integers(0, 31), "catk": kinds, "catv": small | st.sampled_from(KV.GPU_CAT_HASHES.tolist()), "idk": kinds, "idv": small | big,
    "rankk": kinds, "rankv": small, "view": st.integers(0, 3)})


@FAST
@given(st.lists(field_rows, max_size=30), st.booleans(), st.integers(0, 2 ** 40))
def test_batch_records_matches_twin(rows, out_pid, seq0):
    """Records and counts of a batch (any fields: absent kinds, every time flag, int64 extremes whose
    end wraps, either view or both) are the twin's, row for row, in file order."""
    f = np.zeros((len(rows), KV.NF), np.int64)
    cols = {"ph": KV.C_PH, "pidk": KV.C_PIDK, "pidv": KV.C_PIDV, "tidk": KV.C_TIDK, "tidv": KV.C_TIDV,
            "ts": KV.C_TS, "dur": KV.C_DUR, "tflags": KV.C_TFLAGS, "catk": KV.C_CATK, "catv": KV.C_CATV,
            "idk": KV.C_IDK, "idv": KV.C_IDV, "rankk": KV.C_RANKK, "rankv": KV.C_RANKV}
    for i, r in enumerate(rows):
        for k, c in cols.items():
            f[i, c] = r[k]
    view = np.array([r["view"] for r in rows], np.int64)
    nest = np.full((len(rows), KV.NEST_COLS), -7, np.int64)
    flows = np.full((len(rows), KV.FLOW_COLS), -7, np.int64)
    counts = np.zeros((2, 3), np.int64)
    with np.errstate(over="ignore"):
        nn, nf = KV.batch_records(f, view, out_pid, seq0, nest, flows, counts)
    xs, fls, want = batch_records_py(f.tolist(), view.tolist(), out_pid, seq0)
    assert (nest[:nn].tolist(), flows[:nf].tolist(), counts.tolist()) == (xs, fls, want)
