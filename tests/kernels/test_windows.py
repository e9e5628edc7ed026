"""Property tests: the exact innermost-window kernel against its brute-force twin, on
adversarial windows (thousands of siblings in one long window, deep nesting, equal
starts and ends, zero-length windows, partial overlaps from several threads, unsorted
queries), and against the 8-positions-back guess it replaced (``classify.containing`` until
issue 15, copied below as ``old_containing``) where that one was right."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import reference as ref
from streamtrace.kernels import windows as nb

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BIG_SETTINGS = settings(max_examples=15, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
I64 = np.int64
I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1


def old_containing(ws, we, t):
    """The guess analyze used before issue 15 (windows sorted by start; looks back at most 8
    positions from the query), kept here to show what the exact kernel changes."""
    out = np.full(len(t), -1, np.int64)
    if len(ws) == 0 or len(t) == 0:
        return out
    pos = np.searchsorted(ws, t, side="right") - 1
    for back in range(8):
        p = pos - back
        ok = (out < 0) & (p >= 0)
        pp = np.where(ok, p, 0)
        hit = ok & (we[pp] > t) & (ws[pp] <= t)
        out[hit] = p[hit]
        if not (out < 0).any():
            break
    return out


def arr(xs):
    return np.array(xs, dtype=I64)


def check(s, e, t):
    got = nb.innermost(s, e, t)
    want = ref.innermost_window_ref(s, e, t)
    assert got.dtype == np.int64 and got.shape == (len(t),)
    np.testing.assert_array_equal(got, want)
    return got


def dense_brute_force(s, e, t, rows=512):
    """Brute force in numpy (a Q x N mask per batch of queries), for the big cases where
    the Python twin would be slow: the largest (start, -end, position) key among the
    windows containing each query."""
    n = len(s)
    out = np.full(len(t), -1, I64)
    if n == 0:
        return out
    rank = np.empty(n, I64)
    rank[np.lexsort((np.arange(n), -e, s))] = np.arange(n)        # key order (no int64 min here)
    for a in range(0, len(t), rows):
        q = t[a:a + rows, None]
        m = (s[None, :] <= q) & (q < e[None, :])
        r = np.where(m, rank[None, :], -1).max(axis=1)
        inv = np.empty(n, I64)
        inv[rank] = np.arange(n)
        out[a:a + rows] = np.where(r >= 0, inv[np.maximum(r, 0)], -1)
    return out


def queries_for(draw, s, e, base, spread, n_random=30):
    """Every boundary and its neighbours, plus random times, shuffled (unsorted)."""
    pts = set()
    for a, b in zip(s.tolist(), e.tolist()):
        for x in (a - 1, a, a + 1, b - 1, b, b + 1):
            if I64_MIN <= x <= I64_MAX:
                pts.add(x)
    pts |= set(draw(st.lists(st.integers(base - 5, base + spread + 5), max_size=n_random)))
    q = sorted(pts)
    if draw(st.booleans()):
        q = draw(st.permutations(q))
    if q and draw(st.booleans()):
        q = q + draw(st.lists(st.sampled_from(q), max_size=10))      # repeated query times
    return arr(q)


# --------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------

@st.composite
def any_windows(draw, max_size=40):
    """Unrelated windows: partial overlaps, equal starts/ends, zero-length, duplicates,
    any input order; values small, near 2**62 or spread over int64."""
    mode = draw(st.sampled_from(["dense", "dense", "sparse", "huge", "edges"]))
    n = draw(st.integers(0, max_size))
    if mode == "edges":
        cands = [I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX]
        pairs = [tuple(sorted(draw(st.lists(st.sampled_from(cands), min_size=2, max_size=2))))
                 for _ in range(n)]
        base, spread = -10, 20
    else:
        base, spread, maxlen = {"dense": (draw(st.sampled_from([0, -40, 10 ** 6])), 40, 20),
                                "sparse": (0, 10 ** 6, 10 ** 5),
                                "huge": (2 ** 62, 200, 60)}[mode]
        starts = draw(st.lists(st.integers(base, base + spread), min_size=n, max_size=n))
        lens = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 5, 8, maxlen]) | st.integers(0, maxlen),
                             min_size=n, max_size=n))
        pairs = [(a, a + d) for a, d in zip(starts, lens)]
    if pairs:
        pairs += draw(st.lists(st.sampled_from(pairs), max_size=5))     # exact duplicates
        if draw(st.booleans()):
            pairs = sorted(pairs, key=lambda p: p[0])                   # sorted by start (the callers' case)
        else:
            pairs = draw(st.permutations(pairs))
    s, e = arr([p[0] for p in pairs]), arr([p[1] for p in pairs])
    return s, e, queries_for(draw, s, e, base, spread)


@st.composite
def thread_windows(draw, max_size=60):
    """Windows of a few threads; on each thread they nest (each inside a random open
    earlier window of its thread, or a new root), with siblings, equal starts (a child
    starting with its parent), equal ends, zero-length children; threads overlap each
    other partially.  Sorted by start, stable (as ``_cat_windows`` gives them)."""
    n_threads = draw(st.integers(1, 3))
    pairs = []
    for _ in range(n_threads):
        base = draw(st.integers(0, 100))
        mine = []
        for _ in range(draw(st.integers(0, max_size // n_threads))):
            if mine and draw(st.integers(0, 4)):
                ps, pe = mine[draw(st.integers(0, len(mine) - 1))]
                a = draw(st.sampled_from([ps, ps, pe]) | st.integers(ps, pe))
                b = draw(st.sampled_from([a, pe, pe]) | st.integers(a, pe))
            else:
                a = base + draw(st.integers(0, 300))
                b = a + draw(st.integers(0, 120))
            mine.append((a, b))
        pairs += mine
    pairs = draw(st.permutations(pairs)) if pairs else pairs
    pairs = sorted(pairs, key=lambda p: p[0])
    s, e = arr([p[0] for p in pairs]), arr([p[1] for p in pairs])
    return s, e, queries_for(draw, s, e, 0, 550)


# --------------------------------------------------------------------------
# twin agreement
# --------------------------------------------------------------------------

@SETTINGS
@given(any_windows())
def test_any_windows_match_brute_force(case):
    check(*case)


@SETTINGS
@given(thread_windows())
def test_nested_threads_match_brute_force(case):
    check(*case)


@BIG_SETTINGS
@given(st.integers(1, 3000), st.integers(0, 3), st.data())
def test_many_siblings_in_one_long_window(n_sib, gap, data):
    """One long window (a recompute window, a backward_step) with thousands of short
    siblings inside; queries in the gaps between them belong to the long window, which
    starts more than 8 positions back."""
    sib_len = data.draw(st.integers(0, 4))
    s = [0] + [10 + k * (sib_len + gap + 1) for k in range(n_sib)]
    e = [s[-1] + sib_len + 50] + [a + sib_len for a in s[1:]]
    if data.draw(st.booleans()):                       # a second thread's window overlapping the tail
        s.append(s[-1] - 3)
        e.append(e[0] + 20)
    o = np.argsort(s, kind="stable")
    s, e = arr(s)[o], arr(e)[o]
    t = np.concatenate([s, e, s + 1 + sib_len, arr(data.draw(st.lists(st.integers(-5, int(e.max()) + 5),
                                                                   max_size=50)))])
    t = t[data.draw(st.permutations(range(len(t))))] if len(t) < 200 else t[::-1].copy()
    sample = np.unique(np.concatenate([t[:150], t[-150:]]))          # the twin is O(N*Q)
    got = nb.innermost(s, e, t)
    np.testing.assert_array_equal(nb.innermost(s, e, sample), ref.innermost_window_ref(s, e, sample))
    np.testing.assert_array_equal(got, dense_brute_force(s, e, t))
    inside = (t >= 0) & (t < e[0])
    assert np.all(got[inside] >= 0)


@BIG_SETTINGS
@given(st.integers(1, 3000), st.data())
def test_deep_nesting(depth, data):
    """A chain of ``depth`` nested windows (each starts later and ends earlier; some share
    a start or an end with their parent), queried at every boundary."""
    s, e = [0], [10 * depth + 10]
    for _ in range(depth - 1):
        a = s[-1] + data.draw(st.sampled_from([0, 1, 2, 3]))
        b = e[-1] - data.draw(st.sampled_from([0, 1, 2, 3]))
        s.append(a)
        e.append(max(a, b))
    s, e = arr(s), arr(e)
    t = np.concatenate([s, e, e - 1, s + 1])
    got = nb.innermost(s, e, t)
    sample = np.unique(np.concatenate([t[:100], t[-100:], t[len(t) // 2:len(t) // 2 + 50]]))
    np.testing.assert_array_equal(nb.innermost(s, e, sample), ref.innermost_window_ref(s, e, sample))
    np.testing.assert_array_equal(got, dense_brute_force(s, e, t))


@SETTINGS
@given(any_windows(max_size=25), st.integers(1, 4))
def test_window_index_batches(case, parts):
    """A prepared WindowIndex queried in batches equals one call on all queries."""
    s, e, t = case
    idx = nb.WindowIndex(s, e)
    got = np.concatenate([idx.innermost(b) for b in np.array_split(t, parts)]) if len(t) else idx.innermost(t)
    np.testing.assert_array_equal(got, ref.innermost_window_ref(s, e, t))


# --------------------------------------------------------------------------
# the tie rule, by hand
# --------------------------------------------------------------------------

def test_tie_rule():
    #          0     1     2    3     4      5
    s = arr([0,    0,    5,   5,    5,     7])
    e = arr([100,  50,   9,   9,    5,     7])     # 4 and 5 are zero-length
    assert check(s, e, arr([5]))[0] == 3            # latest start 5; shortest (9); last of the duplicates
    assert check(s, e, arr([7]))[0] == 3            # zero-length windows contain nothing
    assert check(s, e, arr([9]))[0] == 1            # end is exclusive; equal start 0: the shorter
    assert check(s, e, arr([50, 99, 100, -1]))[:].tolist() == [0, 0, -1, -1]
    # the same windows in another input order: positions follow the input, and of the
    # duplicates (old 2 and 3, now at 5 and 1) the last in input order wins
    p = [5, 3, 1, 4, 0, 2]
    assert check(s[p], e[p], arr([5, 9, 50])).tolist() == [5, 2, 4]


def test_empty_and_errors():
    z = np.zeros(0, I64)
    assert nb.innermost(z, z, arr([1, 2])).tolist() == [-1, -1]
    assert nb.innermost(arr([0]), arr([5]), z).tolist() == []
    for bad, exc in (((arr([0, 1]), arr([5]), z), ValueError),
                     ((arr([3]), arr([2]), z), ValueError),
                     ((np.array([0.5]), arr([2]), z), TypeError),
                     ((arr([0]), arr([2]), np.array([0.5])), TypeError)):
        with pytest.raises(exc) as a:
            nb.innermost(*bad)
        with pytest.raises(exc) as b:
            ref.innermost_window_ref(*bad)
        assert str(a.value) == str(b.value)


# --------------------------------------------------------------------------
# against the old guess (classify.containing before issue 15)
# --------------------------------------------------------------------------

@SETTINGS
@given(thread_windows())
def test_old_containing_is_right_or_minus_one(case):
    """The old guess (8 positions back) either finds the same window or gives
    -1, except between windows sharing a start, where it takes the last in input order
    and the kernel the shortest.  So the exact kernel only adds answers."""
    s, e, t = case
    old = old_containing(s, e, t)
    new = nb.innermost(s, e, t)
    found = old >= 0
    assert np.all(new[found] >= 0)
    assert np.array_equal(s[old[found]], s[new[found]])               # same start always
    same_start_tie = np.array([np.count_nonzero((s == s[i]) & (e > t[j]) & (s <= t[j])) > 1
                               for j, i in zip(np.flatnonzero(found), old[found])], bool)
    assert np.array_equal(old[found][~same_start_tie], new[found][~same_start_tie])


def test_old_containing_misses_siblings():
    """The issue's failure: nine short siblings inside a long window, a launch after
    them (the old guess: -1, the launch got no phase; exact: the long window)."""
    s = arr([0] + [10 + 3 * k for k in range(9)])
    e = arr([1000] + [11 + 3 * k for k in range(9)])
    t = arr([500])
    assert old_containing(s, e, t).tolist() == [-1]
    assert nb.innermost(s, e, t).tolist() == [0]


# --------------------------------------------------------------------------
# shortest overlapping window (GPU annotations around GPU events)
# --------------------------------------------------------------------------

def check_overlap(s, e, qs, qe):
    got = nb.shortest_overlapping(s, e, qs, qe)
    want = ref.shortest_overlapping_ref(s, e, qs, qe)
    assert got.dtype == np.int64 and got.shape == (len(qs),)
    np.testing.assert_array_equal(got, want)
    return got


@st.composite
def overlap_case(draw, max_size=30):
    """Windows of ``any_windows`` or ``thread_windows``; queries either random intervals
    (overlapping each other, zero-length ones, equal to windows) or a CUDA stream's kernels
    (back to back, none overlapping), in any order."""
    s, e, _ = draw(any_windows(max_size) if draw(st.booleans()) else thread_windows(max_size))
    lo = int(s.min()) - 5 if len(s) else 0
    hi = int(e.max()) + 5 if len(s) else 50
    lo, hi = max(lo, I64_MIN + 10), min(hi, I64_MAX - 10)
    hi = max(hi, lo)                       # (windows within 10 ns of int64's bottom: lo was raised past hi)
    if draw(st.booleans()):
        q = []
        for _ in range(draw(st.integers(0, 40))):
            a = draw(st.integers(lo, hi) | st.sampled_from([int(x) for x in np.concatenate([s, e])] or [lo]))
            q.append((a, min(I64_MAX, a + draw(st.sampled_from([0, 0, 1, 3]) | st.integers(0, 50)))))
        if len(s):
            q += [(int(a), int(b)) for a, b in zip(s[:5], e[:5])]
    else:
        t, q = lo, []
        for _ in range(draw(st.integers(0, 40))):
            t += draw(st.integers(0, 6))
            d = draw(st.integers(0, 8))
            if t + d > I64_MAX:                # windows at the top of the int64 range: no room left
                break
            q.append((t, t + d))
            t += d
    q = draw(st.permutations(q)) if q else q
    return s, e, arr([x for x, _ in q]), arr([y for _, y in q])


@SETTINGS
@given(overlap_case())
def test_shortest_overlapping_matches_brute_force(case):
    check_overlap(*case)


@BIG_SETTINGS
@given(st.integers(1, 2000), st.data())
def test_shortest_overlapping_many_kernels_nested_annotations(n, data):
    """One stream: ``n`` back-to-back kernels under a few levels of nested annotations (each
    level cut into pieces), checked against the twin on a sample."""
    qs = np.arange(n, dtype=I64) * 10
    qe = qs + data.draw(st.integers(0, 10))
    s, e = [0], [10 * n]
    for piece in (7, 3, 2):
        cuts = np.linspace(0, 10 * n, piece + 1).astype(np.int64)
        s += cuts[:-1].tolist()
        e += cuts[1:].tolist()
    s, e = arr(s), arr(e)
    got = nb.shortest_overlapping(s, e, qs, qe)
    pick = np.unique(np.concatenate([np.arange(min(n, 100)), np.arange(max(0, n - 100), n)]))
    np.testing.assert_array_equal(got[pick], ref.shortest_overlapping_ref(s, e, qs[pick], qe[pick]))


def test_shortest_overlapping_rule_by_hand():
    #          0    1    2    3    4     5
    s = arr([0,   10,  10,  20,  30,   35])
    e = arr([100, 40,  40,  25,  30,   36])
    qs = arr([22, 11, 30, 36, 45, 24, 100, 30])
    qe = arr([23, 12, 30, 37, 45, 31, 101, 30])
    # 22-23: [20,25) is the shortest; 11-12: two equal [10,40): the later position; 30 (zero
    # length): [30,30) overlaps nothing, [10,40) contains it; 36-37: [35,36) ends at 36 (no
    # overlap; [10,40) does); 45 (zero length): only [0,100); 24-31: [20,25) (the empty [30,30)
    # overlaps nothing); 100-101: none
    assert check_overlap(s, e, qs, qe).tolist() == [3, 2, 2, 2, 0, 3, -1, 2]


def test_shortest_overlapping_errors():
    z = np.zeros(0, I64)
    assert nb.shortest_overlapping(z, z, arr([1]), arr([2])).tolist() == [-1]
    for bad, exc in (((arr([0, 1]), arr([5]), z, z), ValueError),
                     ((arr([0]), arr([5]), arr([3]), arr([2])), ValueError),
                     ((np.array([0.5]), arr([2]), z, z), TypeError)):
        with pytest.raises(exc) as a:
            nb.shortest_overlapping(*bad)
        with pytest.raises(exc) as b:
            ref.shortest_overlapping_ref(*bad)
        assert str(a.value) == str(b.value)
