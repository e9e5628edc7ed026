"""The cut rank's deferred filter in groups (``streamtrace.kernels.groups``,
``streamtrace.merge.grouped.GroupedFilter``): each kernel against its plain-Python twin, and the
decision from groups (whole groups from their summaries, the mixed ones from their rows) against the
twin of ``keep_rows`` deciding every row (hypothesis property tests)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import groups as KG
from streamtrace.kernels import keep as KK
from streamtrace.kernels.reference.groups import flows_kept_py, group_batch_py, keep_groups_py
from streamtrace.kernels.reference.keep import keep_rows_py
from streamtrace.merge.grouped import GroupedFilter, group_kinds

TS = st.integers(-50, 400)
VIEW = [0, KK.MISSING_OUT, KK.NEGDUR_OUT, KK.MISSING_OUT | KK.NEGDUR_OUT]


@st.composite
def batches(draw):
    """``(rcls, rec, vbits, starts, ends, sizes, lo, hi, kept_keys)``: the events of a byte range as the
    rewrite kernel leaves them (``rec`` rows of the written events, without the validation bits, which
    ``vbits`` holds; output end offsets growing), the batch sizes to feed them in, a window often at an
    event's ts and kept flow keys drawn partly from the events' keys."""
    n = draw(st.integers(0, 80))
    keys = draw(st.lists(st.integers(0, 1 << 45) | st.integers(0, 5), min_size=1, max_size=5))
    pids = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4))
    rcls = np.zeros(n, np.uint8)
    rec = np.full((n, KK.R_COLS), -99, np.int64)
    vbits = np.zeros(n, np.uint8)
    end, starts, ends, at = draw(st.integers(-1, 20)), [], [], draw(st.integers(0, 50))
    for j in range(n):
        starts.append(at)
        at += draw(st.integers(2, 90))
        ends.append(at)
        at += draw(st.integers(1, 3))
        cls = draw(st.sampled_from([0, 1, 2, 2, 3, 3]))
        if cls == 0:
            continue
        rcls[j] = cls
        bits, flow = cls, draw(st.integers(0, 1 << 45))
        if cls == 3:
            flow = draw(st.sampled_from(keys))
            if draw(st.booleans()):
                bits |= KK.C_OTHER_FLOW
                flow = draw(st.integers(0, 4))
        t0 = draw(TS)
        t0, t1 = (KK.NO_T0, KK.NO_T1) if cls == 1 else (t0, t0 + draw(st.integers(-5, 80)))
        end += draw(st.integers(2, 150))
        rec[j] = [bits, t0, t1, end, flow, draw(st.sampled_from(pids))]
        vbits[j] = draw(st.sampled_from(VIEW))
    sizes, left = [], n
    while left:
        sizes.append(draw(st.integers(1, left)))
        left -= sizes[-1]
    at = [int(x) for x in rec[:, 1:3].ravel() if -100 < x < 1000] + [-60, 0, 500]
    lo, hi = sorted([draw(st.sampled_from(at) | TS), draw(st.sampled_from(at) | TS)])
    pool = keys + [-1 - k for k in range(5)]
    kept = np.array(sorted(set(draw(st.lists(st.sampled_from(pool), max_size=len(pool))))), np.int64)
    return rcls, rec, vbits, np.array(starts, np.int64), np.array(ends, np.int64), sizes, lo, hi, kept


def _seq_rows(rcls, rec, vbits) -> np.ndarray:
    """Every written event's row as the whole-rank filter records it: seq and validation bits in."""
    w = np.flatnonzero(rcls)
    rows = rec[w].copy()
    rows[:, KK.R_BITS] |= (w << KK.SEQ_SHIFT) | vbits[w]
    return rows


@settings(max_examples=150, deadline=None)
@given(batches(), st.integers(1, KG.GROUP_MAX), st.booleans(), st.integers(0, 10 ** 6))
def test_group_batch_matches_twin(case, size, with_bits, base):
    rcls, rec, vbits, starts, ends, sizes = case[:6]
    ext = np.array([KK.NO_T0, KK.NO_T1, -1, 0], np.int64)
    ext_py = ext.tolist()
    seq = 0
    for n in sizes:
        sl = slice(seq, seq + n)
        groups = np.full((-(-n // size), KG.G_COLS), -7, np.int64)
        fk, ft = np.full(n, -7, np.int64), np.full(n, -7, np.int64)
        vb = vbits[sl] if with_bits else np.zeros(0, np.uint8)
        ng, nf = KG.group_batch(rcls[sl], rec[sl], vb, starts[sl], ends[sl], base, seq, size, groups, fk, ft, ext)
        want, wk, wt = group_batch_py(rcls[sl].tolist(), rec[sl].tolist(), vb.tolist() if with_bits else None,
                                      starts[sl].tolist(), ends[sl].tolist(), base, seq, size, ext_py)
        assert groups[:ng].tolist() == want
        assert fk[:nf].tolist() == wk and ft[:nf].tolist() == wt
        assert ext.tolist() == ext_py
        seq += n


@settings(max_examples=150, deadline=None)
@given(batches(), st.integers(1, 9), st.data())
def test_keep_groups_matches_twin(case, size, data):
    rcls, rec, vbits, starts, ends = case[:5]
    groups = np.zeros((-(-len(rcls) // size), KG.G_COLS), np.int64)
    n = len(rcls)
    ng, _ = KG.group_batch(rcls, rec, vbits, starts, ends, 0, 0, size, groups, np.zeros(n, np.int64),
                           np.zeros(n, np.int64), np.array([KK.NO_T0, KK.NO_T1, -1, 0], np.int64))
    kinds = np.array([data.draw(st.sampled_from([KG.KIND_KEPT, KG.KIND_DROPPED])) if g[KG.G_WRITTEN] else 0
                      for g in groups], np.uint8)
    shift = data.draw(st.integers(-10 ** 9, 10 ** 9))
    state = np.zeros(KK.S_COLS, np.int64)
    state[KK.S_OPEN], state[KK.S_PREV_END] = -1, -1
    dropped = np.zeros(n, np.uint8)
    runs, pids = np.full((ng + 1, 2), -7, np.int64), np.full(2 * ng, -7, np.int64)
    nr, npid = KG.keep_groups(groups, kinds, 0, ng, shift, dropped, runs, pids, state)
    want = keep_groups_py(groups.tolist(), kinds.tolist(), shift, {
        "run": None, "prev_end": -1, "runs": [], "dropped": set(), "pids": set(), "kept": 0, "gone": 0,
        "gone_missing": 0, "gone_negdur": 0, "first": None})
    open_run = (int(state[KK.S_OPEN]), int(state[KK.S_PREV_END])) if state[KK.S_OPEN] >= 0 else None
    assert [tuple(r) for r in runs[:nr].tolist()] == want["runs"]
    assert open_run == (tuple(want["run"]) if want["run"] else None)
    assert set(np.flatnonzero(dropped).tolist()) == want["dropped"]
    assert set(pids[:npid].tolist()) == want["pids"]
    assert (state[KK.S_KEPT], state[KK.S_GONE], state[KK.S_GONE_MISSING], state[KK.S_GONE_NEGDUR]) == \
        (want["kept"], want["gone"], want["gone_missing"], want["gone_negdur"])
    assert (int(state[KK.S_FIRST]) if state[KK.S_HAS_FIRST] else None) == want["first"]


@settings(max_examples=150, deadline=None)
@given(batches(), st.integers(1, 9), st.integers(-10 ** 9, 10 ** 9))
def test_decision_from_groups_is_every_rows_decision(tmp_path_factory, case, size, shift):
    """GroupedFilter.finish (groups kept or dropped whole from their summaries, group_kinds; the rows of
    the mixed ones handed back as a re-rewrite would give them) decides every event as keep_rows'
    twin does from all the rows."""
    import streamtrace.merge.grouped as G
    rcls, rec, vbits, starts, ends, sizes, lo, hi, kept = case
    rows = _seq_rows(rcls, rec, vbits)
    asked = []

    def remake(gs):
        asked.append(len(gs))
        a, b = int(gs[0, KG.G_SEQ]), int(gs[-1, KG.G_SEQ] + gs[-1, KG.G_N])
        seq = rows[:, KK.R_BITS] >> KK.SEQ_SHIFT
        out = rows[(seq >= a) & (seq < b)].copy()
        out[:, KK.R_BITS] &= ~(KK.MISSING_OUT | KK.NEGDUR_OUT)
        return out

    old, G.GROUP_EVENTS = G.GROUP_EVENTS, size
    try:
        f = GroupedFilter(None, str(tmp_path_factory.mktemp("g") / "rec"), 0)
        seq = 0
        for n in sizes:
            sl = slice(seq, seq + n)
            r = rec[sl].copy()
            r[:, KK.R_BITS] |= np.arange(seq, seq + n) << KK.SEQ_SHIFT
            f.add_batch(rcls[sl], r, None, starts[sl], ends[sl], vbits[sl], "t", 0, None)
            seq += n
        d = f.finish("t", shift, (lo, hi), kept, remake)
    finally:
        G.GROUP_EVENTS = old
        f.close()
    want = keep_rows_py(rows.tolist(), lo, hi, kept.tolist(), shift)
    assert [tuple(x) for x in d.runs.tolist()] == want["runs"]
    assert set(np.flatnonzero(d.dropped_seq).tolist()) == want["dropped"]
    assert d.used == want["pids"]
    assert (d.kept, d.dropped["events"], d.dropped["missing"], d.dropped["negdur"]) == \
        (want["kept"], want["gone"], want["gone_missing"], want["gone_negdur"])
    assert d.first_out == want["first"]
    assert sum(asked) <= sum(-(-n // size) for n in sizes)        # (groups never cross batches)


def test_group_kinds_by_hand():
    """Three groups of two written window events ([ts, end]: [0, 5] [6, 9]; [20, 30] [31, 35]; [40, 50]
    [60, 70]) under the window [10, 45]: the first dropped whole, the second kept whole, the third mixed;
    a fourth of one flow event kept only while its key is."""
    rcls = np.array([2, 2, 2, 2, 2, 2, 3], np.uint8)
    rec = np.array([[2, 0, 5, 10, 0, 1], [2, 6, 9, 20, 0, 1], [2, 20, 30, 30, 0, 1], [2, 31, 35, 40, 0, 1],
                    [2, 40, 50, 50, 0, 1], [2, 60, 70, 60, 0, 1], [3, 25, 25, 70, 77, 1]], np.int64)
    groups = np.zeros((4, KG.G_COLS), np.int64)
    fk, ft = np.zeros(7, np.int64), np.zeros(7, np.int64)
    n = np.arange(7, dtype=np.int64)
    ng, nf = KG.group_batch(rcls, rec, np.zeros(0, np.uint8), n, n + 1, 0, 0, 2, groups, fk, ft,
                            np.array([KK.NO_T0, KK.NO_T1, -1, 0], np.int64))
    assert (ng, nf, fk[0]) == (4, 1, 77)
    kinds = group_kinds(groups, fk[:nf], 10, 45, np.array([77], np.int64)).tolist()
    assert kinds == [KG.KIND_DROPPED, KG.KIND_KEPT, KG.KIND_MIXED, KG.KIND_KEPT]
    assert group_kinds(groups, fk[:nf], 10, 45, np.array([76], np.int64)).tolist()[3] == KG.KIND_MIXED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=12), st.data())
def test_flows_kept_matches_twin(nflow, data):
    """Per group, every flow event's key kept (keys growing mostly, as a trace's do, and not)."""
    keys = data.draw(st.lists(st.integers(-6, 30), min_size=sum(nflow), max_size=sum(nflow)))
    if data.draw(st.booleans()):
        keys.sort()
    kept = sorted(set(data.draw(st.lists(st.integers(-6, 30), max_size=20))))
    out = np.full(len(nflow), 9, np.uint8)
    KG.flows_kept(np.array(nflow, np.int64), np.array(keys, np.int64), np.array(kept, np.int64), out)
    assert out.tolist() == flows_kept_py(nflow, keys, kept)
