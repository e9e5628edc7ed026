"""merge's deferred-filter kernel (``streamtrace.kernels.keep.keep_rows``) against its twin
``streamtrace.kernels.reference.keep.keep_rows_py`` (hypothesis property test): random rows fed in
random chunk sizes, the state carried from chunk to chunk, then an empty chunk closing the last run."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import keep as KK
from streamtrace.kernels.reference.keep import keep_rows_py

OTHER = 8                  # C_OTHER_FLOW: the row's flow key is a Python-numbered flow, looked up as -1 - key
TS = st.integers(-50, 400)


@st.composite
def rank_rows(draw):
    """``(rows, lo, hi, kept_keys, shift, chunks)``: int64[n, R_COLS] rows in output order (seq and end
    offsets strictly increasing, each end past the previous end + 1), a window often at a row's ts, sorted
    unique kept keys drawn partly from the rows' flow keys, and the chunk sizes to feed them in."""
    n = draw(st.integers(0, 60))
    plain_keys = draw(st.lists(st.integers(0, 1 << 45) | st.integers(0, 5), min_size=1, max_size=6))
    other_keys = draw(st.lists(st.integers(0, 9), min_size=1, max_size=4))
    rows, seq, end = [], draw(st.integers(0, 3)), draw(st.integers(-1, 30))
    for _ in range(n):
        cls = draw(st.sampled_from([1, 2, 3]))
        bits = cls | draw(st.sampled_from([0, KK.MISSING_OUT, KK.NEGDUR_OUT, KK.MISSING_OUT | KK.NEGDUR_OUT]))
        flow = 0
        if cls == 3:
            if draw(st.booleans()):
                bits |= OTHER
                flow = draw(st.sampled_from(other_keys))
            else:
                flow = draw(st.sampled_from(plain_keys))
        elif draw(st.integers(0, 3)) == 0:
            flow = draw(st.integers(0, 1 << 45))       # a key the kernel must not look at
        t0 = draw(TS)
        t1 = t0 + draw(st.integers(0, 80))
        end += draw(st.integers(2, 200))
        rows.append([(seq << KK.SEQ_SHIFT) | bits, t0, t1, end, flow, draw(st.integers(0, 4))])
        seq += draw(st.integers(1, 4))
    at = [r[1] for r in rows] + [r[2] for r in rows] + [-60, 0, 500]
    lo = draw(st.sampled_from(at) | TS)
    hi = draw(st.sampled_from(at) | TS)
    if draw(st.integers(0, 4)):
        lo, hi = min(lo, hi), max(lo, hi)
    pool = plain_keys + [-1 - k for k in other_keys] + draw(st.lists(st.integers(-20, 1 << 45), max_size=4))
    kept = draw(st.lists(st.sampled_from(pool), max_size=len(pool)))
    kept_keys = np.array(sorted(set(kept)), np.int64)
    shift = draw(st.integers(-10 ** 12, 10 ** 12))
    chunks, left = [], n
    while left:
        c = draw(st.integers(1, max(1, min(left, 17))))
        chunks.append(c)
        left -= c
    return np.array(rows, np.int64).reshape(-1, KK.R_COLS), lo, hi, kept_keys, shift, chunks


def _run_kernel(rows, lo, hi, kept_keys, shift, chunks):
    state = np.zeros(KK.S_COLS, np.int64)
    state[KK.S_OPEN], state[KK.S_PREV_END] = -1, -1
    n_seq = int(rows[-1, KK.R_BITS] >> KK.SEQ_SHIFT) + 1 if len(rows) else 0
    dropped_seq = np.zeros(n_seq, np.uint8)
    runs, pids, at = [], set(), 0
    for c in chunks + [0]:
        chunk = np.ascontiguousarray(rows[at:at + c])
        at += c
        rbuf = np.full((c + 1, 2), -7, np.int64)
        pbuf = np.full(max(c, 1), -7, np.int64)[:c]
        nr, npid = KK.keep_rows(chunk, lo, hi, kept_keys, shift, dropped_seq, rbuf, pbuf, state)
        assert 0 <= nr <= c + 1 and 0 <= npid <= c
        runs += [tuple(r) for r in rbuf[:nr].tolist()]
        pids.update(pbuf[:npid].tolist())
    assert state[KK.S_OPEN] == -1                     # the empty chunk closed the last run
    return runs, dropped_seq, pids, state


@settings(max_examples=300, deadline=None)
@given(rank_rows())
def test_keep_rows_matches_twin(case):
    rows, lo, hi, kept_keys, shift, chunks = case
    runs, dropped_seq, pids, state = _run_kernel(rows, lo, hi, kept_keys, shift, chunks)
    want = keep_rows_py(rows.tolist(), lo, hi, kept_keys.tolist(), shift)
    assert runs == want["runs"]
    assert set(np.flatnonzero(dropped_seq).tolist()) == want["dropped"]
    assert pids == want["pids"]
    assert int(state[KK.S_KEPT]) == want["kept"]
    assert int(state[KK.S_GONE]) == want["gone"]
    assert int(state[KK.S_GONE_MISSING]) == want["gone_missing"]
    assert int(state[KK.S_GONE_NEGDUR]) == want["gone_negdur"]
    assert (int(state[KK.S_FIRST]) if state[KK.S_HAS_FIRST] else None) == want["first"]
    assert want["kept"] + want["gone"] == len(rows)


def test_keep_rows_small_case_by_hand():
    """Three events written at byte offsets [0, 10), [11, 20), [21, 30): the middle one (a window
    event after ``hi``) is dropped, so the runs are the first and the last event."""
    rows = np.array([[(0 << 8) | 1, 5, 5, 10, 0, 1],
                     [(1 << 8) | 2 | KK.MISSING_OUT, 50, 60, 20, 0, 2],
                     [(3 << 8) | 3, 7, 7, 30, 42, 3]], np.int64)
    runs, dropped_seq, pids, state = _run_kernel(rows, 0, 40, np.array([42], np.int64), 100, [3])
    assert runs == [(0, 10), (21, 30)]
    assert np.flatnonzero(dropped_seq).tolist() == [1]
    assert pids == {1, 3}
    assert state[KK.S_KEPT] == 2 and state[KK.S_GONE] == 1 and state[KK.S_GONE_MISSING] == 1
    assert state[KK.S_FIRST] == 107 and state[KK.S_HAS_FIRST] == 1


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(-30, 30), max_size=40), st.integers(-35, 35), st.integers(-5, 50))
def test_lower_bound_from_any_hint_is_searchsorted(values, key, hint):
    """keep_rows' flow-key lookup from the last key's place: numpy's searchsorted, from any hint."""
    a = np.array(sorted(values), np.int64)
    assert KK.lower_bound_from(a, key, hint) == np.searchsorted(a, key)
