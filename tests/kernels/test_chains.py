"""Property tests of the thread-chain kernel (``streamtrace.kernels.chains``) against its plain-Python
twin on small random op tables, adversarial ones included (equal times, zero-length ops, ops that
end with or outside their parent, depths that disagree with the parents, parents on other threads or
out of range, step ops, cut ops), and against the vectorised rules it replaces
(``kernels.reference.chains.instant_order`` and ``covering``)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels.reference.chains import covering, instant_order
from streamtrace.kernels.chains import thread_chain, thread_waits
from streamtrace.kernels.reference import thread_chain_py, thread_waits_py

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOST_GAP, CPU_OP = 7, 0


@st.composite
def tables(draw):
    n = draw(st.integers(1, 12))
    ts = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    dur = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 5]), min_size=n, max_size=n))
    parent = [draw(st.sampled_from([-1, -1, n + 3] + list(range(n)))) for _ in range(n)]
    depth = [0 if p < 0 else draw(st.sampled_from([1, 1, 2, 3, 0, 100])) for p in parent]   # (100: past
    # 4 n + 16, the depths sorted by _sort3 instead of counted)
    tid = draw(st.lists(st.sampled_from([1, 1, 1, 2]), min_size=n, max_size=n))
    is_step = draw(st.lists(st.sampled_from([False, False, False, True]), min_size=n, max_size=n))
    mine = [i for i in range(n) if tid[i] == 1] or [0]
    sel = sorted(draw(st.sets(st.sampled_from(mine), min_size=1)))
    cut = sorted(draw(st.sets(st.sampled_from(list(range(n))), max_size=2)))
    a = lambda x, t=np.int64: np.asarray(x, t).reshape(-1)  # noqa: E731
    return (a(sel), a(ts), a(dur), a(parent), a(depth, np.int32), a(tid), a(is_step, bool), 1, a(cut))


@SETTINGS
@given(tables())
def test_kernel_equals_the_twin(tab):
    got = thread_chain(*tab, HOST_GAP, CPU_OP)
    want = thread_chain_py(*tab, HOST_GAP, CPU_OP)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()


@SETTINGS
@given(tables())
def test_kernel_follows_the_vectorised_rules(tab):
    sel, ts, dur, parent, depth = tab[:5]
    t, is_start, op, at, _, _, inner, _ = thread_chain(*tab, HOST_GAP, CPU_OP)
    par = parent[sel]
    j = np.minimum(np.searchsorted(sel, par), len(sel) - 1)
    local = np.where((par >= 0) & (sel[j] == par), j, -1)
    o = instant_order(ts[sel], ts[sel] + dur[sel], depth[sel], local)
    assert op.tolist() == np.r_[sel, sel][o].tolist() and sel[at].tolist() == op.tolist()
    assert t.tolist() == np.r_[ts[sel], ts[sel] + dur[sel]][o].tolist()
    first = np.where(is_start, op, np.where((par[at] >= 0) & (par[at] < len(ts)), par[at], -1))[:-1]
    first = np.where((first >= 0) & (tab[5][np.maximum(first, 0)] == 1), first, -1)
    assert inner.tolist() == covering({"ts_ns": ts, "dur_ns": dur, "parent": parent}, first, t[:-1], t[1:]).tolist()


def _spread(tab, stride):
    """``tab`` with op row ``i`` moved to row ``i * stride`` (parents and ``sel`` / ``cut`` renumbered),
    the rows between on another thread: the same ops, the same chain (``sel`` becomes sparse)."""
    sel, ts, dur, parent, depth, tid, is_step, this, cut = tab
    n = len(ts)
    big = lambda col, fill: np.full(n * stride, fill, col.dtype)  # noqa: E731
    cols = []
    for col, fill in ((ts, 0), (dur, 0), (parent, -1), (depth, 0), (tid, 2), (is_step, False)):
        b = big(col, fill)
        b[::stride] = col
        cols.append(b)
    par = parent.copy()
    inside = (par >= 0) & (par < n)
    par[inside] *= stride
    par[~inside & (par >= n)] = n * stride + 3                # out of range stays out of range
    cols[2][::stride] = par
    return (sel * stride, *cols, this, cut * stride)


@SETTINGS
@given(tables(), st.sampled_from([1, 3, 5000]))
def test_the_parents_are_found_in_a_sparse_selection(tab, stride):
    """``sel`` spread over many more rows than it holds (the parents found by binary search, not in a
    table indexed by row: ``DENSE_SPAN``) gives the same chain as the twin's."""
    got = thread_chain(*_spread(tab, stride), HOST_GAP, CPU_OP)
    want = thread_chain_py(*tab, HOST_GAP, CPU_OP)
    for i, (g, w) in enumerate(zip(got, want)):
        if i in (2, 6):                                        # op rows, inner rows: renumbered
            w = np.where(w >= 0, w * stride, w)
        assert g.tolist() == w.tolist()


def test_a_zero_length_child_ends_inside_its_parent():
    # op 0 [0, 4] with a zero-length child 1 at 4 (its parent's end): 0 starts, 1 starts, 1 ends, 0 ends
    sel = np.asarray([0, 1], np.int64)
    args = (sel, np.asarray([0, 4], np.int64), np.asarray([4, 0], np.int64), np.asarray([-1, 0], np.int64),
            np.asarray([0, 1], np.int32), np.asarray([1, 1], np.int64), np.zeros(2, bool), 1,
            np.zeros(0, np.int64), HOST_GAP, CPU_OP)
    t, is_start, op, at, w, cat, inner, keep = thread_chain(*args)
    assert op.tolist() == [0, 1, 1, 0] and is_start.tolist() == [True, True, False, False]
    assert w.tolist() == [4, 0, 0] and inner.tolist() == [0, 1, 0] and keep.all()      # the child names its own
    assert cat.tolist() == [CPU_OP] * 3


@st.composite
def sort_inputs(draw):
    """Keys with many ties, and a start permutation that is sorted, almost sorted or random (the
    insertion sort's budget is exceeded from ~40 rows of a random one: the merge sort runs)."""
    n = draw(st.integers(0, 300))
    keys = [np.asarray(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), np.int64) for _ in range(3)]
    exact = np.lexsort((np.arange(n), keys[2], keys[1], keys[0])).astype(np.int64)
    how = draw(st.sampled_from(["identity", "sorted", "almost", "random", "reversed"]))
    if how == "identity":
        a = np.arange(n, dtype=np.int64)
    elif how == "sorted":
        a = exact.copy()
    elif how == "almost":
        a = exact.copy()
        for _ in range(draw(st.integers(0, 5))):
            if n > 1:
                i = draw(st.integers(0, n - 2))
                a[i], a[i + 1] = a[i + 1], a[i]
    elif how == "reversed":
        a = exact[::-1].copy()
    else:
        a = np.asarray(draw(st.permutations(list(range(n)))), np.int64).reshape(-1)
    return a, keys, exact


@SETTINGS
@given(sort_inputs())
def test_sort3_is_lexsort_whatever_the_start(case):
    from streamtrace.kernels.chains import _sort3
    a, keys, exact = case
    start = a.copy()
    got = _sort3(a, *keys)
    assert got.tolist() == exact.tolist()
    assert a.tolist() == start.tolist()            # the start permutation is not changed


@SETTINGS
@given(tables())
def test_post_order_is_the_ends_order_of_nested_ops(tab):
    """On properly nested ops (each op inside its predecessor in pre-order, or after it) the stack
    walk's guess is already the ends' order by end, deeper first on ties."""
    from streamtrace.kernels.chains import _post_order
    sel, ts, dur = tab[0], tab[1], tab[2]
    t0, t1 = ts[sel], ts[sel] + dur[sel]
    pre = np.lexsort((np.arange(len(sel)), -t1, t0)).astype(np.int64)
    got = _post_order(pre, t0, t1)
    assert sorted(got.tolist()) == list(range(len(sel)))             # a permutation, whatever the nesting
    nested = all(t1[pre[j]] <= t1[pre[i]] or t0[pre[j]] >= t1[pre[i]] for i in range(len(pre))
                 for j in range(i + 1, len(pre)))
    if nested:
        assert (np.diff(t1[got]) >= 0).all()


@st.composite
def chain_pairs(draw):
    """Two threads' chains (up to 12 instants each, sorted, with ties): a waiting thread's edges kept or
    cut, a worker's edges busy (``cpu_op``, 1) or not (0 or 7) and kept or cut; a small shortest wait."""
    def chain(cats):
        c = np.asarray(sorted(draw(st.lists(st.integers(0, 60), max_size=12))), np.int64)
        m = max(len(c) - 1, 0)
        return (c, np.diff(c).astype(np.int64), np.asarray(draw(st.lists(st.booleans(), min_size=m, max_size=m)), bool),
                np.asarray(draw(st.lists(st.sampled_from(cats), min_size=m, max_size=m)), np.int8))
    t, w, keep, _ = chain([0])
    xt, xw, xkeep, xcat = chain([0, 1, 1, 7])
    return t, w, keep, xt, xw, xcat, xkeep, draw(st.integers(0, 8)), 1


@SETTINGS
@given(chain_pairs())
def test_thread_waits_equals_the_twin(g):
    """The edges of one thread that wait for another: the kernel against its NumPy twin (the rule as
    critical_cpu ran it before the kernel), and each wait found checked against the rule by hand."""
    got = thread_waits(*g)
    assert got.tolist() == thread_waits_py(*g).tolist()
    t, w, keep, xt, xw, xcat, xkeep, min_wait, busy_code = g
    for e, f, last in got.tolist():
        a, b = t[e], t[e + 1]
        assert keep[e] and b - a >= min_wait
        assert f == sum(xt < a) and last == sum(xt <= b) - 1 and f < last
        edges = range(f, last)
        assert 2 * sum(int(xw[j]) for j in edges if xcat[j] == busy_code) >= b - a and all(xkeep[j] for j in edges)
        assert (f == 0 or xcat[f - 1] != busy_code) and (last == len(xt) - 1 or xcat[last] != busy_code)


def test_thread_waits_by_hand():
    """Waiting edges [0, 100] (the worker runs 10 .. 90, busy 80 of it) and [101, 130] (the worker
    runs 105 .. 125, busy 20): both wait; [100, 101] holds no worker instant.  With the worker's last
    edge cut the second does not; with a shortest wait of 50 only the first is a candidate."""
    t, w, keep = np.asarray([0, 100, 101, 130], np.int64), np.asarray([100, 1, 29], np.int64), np.ones(3, bool)
    xt = np.asarray([10, 40, 70, 90, 105, 125], np.int64)
    xw, xcat, xkeep = np.diff(xt), np.asarray([1, 1, 1, 0, 1], np.int8), np.ones(5, bool)
    assert thread_waits(t, w, keep, xt, xw, xcat, xkeep, 20, 1).tolist() == [[0, 0, 3], [2, 4, 5]]
    assert thread_waits(t, w, keep, xt, xw, xcat, xkeep, 50, 1).tolist() == [[0, 0, 3]]
    xkeep[4] = False
    assert thread_waits(t, w, keep, xt, xw, xcat, xkeep, 20, 1).tolist() == [[0, 0, 3]]
