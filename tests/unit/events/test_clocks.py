"""The clock-offset estimator shared by ``aggregate --clock-sync collectives`` and ``merge --align
collectives``: against a dense least-squares solve of the same definition written here, known offsets
recovered, bridges joining sets of ranks, residuals by hand."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrace.events.clocks import estimate_clock_offsets, fit_clock_offsets


def make(groups, offsets, noise=0, seed=0, bridge=()):
    """Members/instances: each group in ``groups`` (rank lists) is one instance ending at a common
    true time + each member's offset (+ integer noise up to ``noise``); instances listed in
    ``bridge`` (indices) are bridges."""
    rng = np.random.default_rng(seed)
    inst, part, end = [], [], []
    for i, g in enumerate(groups):
        t = 1_000_000 * (i + 1)
        for r in g:
            inst.append(i)
            part.append(r)
            end.append(t + offsets[r] + (int(rng.integers(0, noise + 1)) if noise else 0))
    m = {"instance": np.asarray(inst), "part": np.asarray(part), "rank": np.asarray(part), "end_ns": np.asarray(end)}
    n = np.asarray([len(g) for g in groups])
    b = np.zeros(len(groups), bool)
    b[list(bridge)] = True
    return m, {"complete": np.ones(len(groups), bool), "consistent": np.ones(len(groups), bool), "n_ranks": n,
               "bridge": b}


def dense_reference(m, inst_ok):
    """The module's definition, solved densely: per instance pairs (member, lowest rank), per pair the
    median difference and the count as weight; least squares with the lowest rank at 0."""
    pairs = {}
    for i in sorted(set(m["instance"].tolist()) & set(np.flatnonzero(inst_ok).tolist())):
        sel = m["instance"] == i
        ranks, ends = m["part"][sel], m["end_ns"][sel]
        ref = int(np.argmin(ranks))
        for r, e in zip(ranks.tolist(), ends.tolist()):
            if r != ranks[ref]:
                pairs.setdefault((r, int(ranks[ref])), []).append(e - int(ends[ref]))
    parts = sorted({p for k in pairs for p in k})
    idx = {p: k for k, p in enumerate(parts)}
    rows, rhs = [], []
    for (a, b), v in pairs.items():
        w = np.sqrt(len(v))
        row = np.zeros(len(parts))
        row[idx[a]], row[idx[b]] = w, -w
        rows.append(row)
        rhs.append(w * np.median(v))
    row = np.zeros(len(parts))
    row[0] = 1e6
    rows.append(row)
    rhs.append(0.0)
    sol = np.linalg.lstsq(np.asarray(rows), np.asarray(rhs), rcond=None)[0]
    return {p: sol[idx[p]] - sol[0] for p in parts}


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_dense_solve_and_recovers_offsets(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    offsets = {r: int(rng.integers(-10**9, 10**9)) if r else 0 for r in range(n)}
    groups = [sorted(rng.choice(n, size=int(rng.integers(2, min(n, 8) + 1)), replace=False).tolist())
              for _ in range(6 * n)]
    groups += [[r, r + 1] for r in range(n - 1)]                       # connected
    m, inst = make(groups, offsets, noise=2_000, seed=seed)
    est = fit_clock_offsets(m, inst)
    ref = dense_reference(m, np.ones(len(groups), bool))
    assert set(est.offsets) == set(range(n)) and set(est.components.values()) == {0}
    for r in range(n):
        assert abs(est.offsets[r] - ref[r]) <= 1
        assert abs(est.offsets[r] - offsets[r]) <= 2_000
    assert est.references == {0: 0}
    assert estimate_clock_offsets(m, inst) == (est.offsets, est.components)


def test_bridges_join_sets_without_moving_offsets_inside_them():
    """Ranks {0,1,2} and {3,4,5} share no group instance (two pipeline stages); point-to-point
    bridges 0-3 and 1-4 (biased by +500 ns: a send ends before its receive) join them; the offsets
    inside each set are those found without bridges."""
    offsets = {0: 0, 1: 70_000, 2: -30_000, 3: 400_000, 4: 410_000, 5: 390_000}
    groups = [[0, 1, 2]] * 10 + [[3, 4, 5]] * 10 + [[0, 3], [1, 4]] * 6
    m, inst = make(groups, offsets, bridge=range(20, 32))
    for i in range(20, 32):                                          # the receiver ends 500 ns later
        m["end_ns"][(m["instance"] == i) & (m["part"] >= 3)] += 500
    no_bridge = {k: v[:20] if len(v) == 32 else v for k, v in inst.items()}
    alone = fit_clock_offsets({k: v[m["instance"] < 20] for k, v in m.items()}, no_bridge)
    assert alone.components == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1} and alone.references == {0: 0, 1: 3}
    est = fit_clock_offsets(m, inst)
    assert set(est.components.values()) == {0} and est.references == {0: 0}
    for r in range(3):
        assert est.offsets[r] == offsets[r]
    for r in range(3, 6):
        assert est.offsets[r] == offsets[r] + 500
        assert est.offsets[r] - est.offsets[3] == alone.offsets[r]
    assert est.instances[0] == 10 + 6 and est.instances[5] == 10


def test_residuals_by_hand():
    # two ranks, three instances: end differences 10, 20, 60 -> offset = median 20; corrected ends of
    # each instance differ by -10, 0, +40: each member is half of that from the instance's median
    m = {"instance": np.asarray([0, 0, 1, 1, 2, 2]), "part": np.asarray([0, 1] * 3), "rank": np.asarray([0, 1] * 3),
         "end_ns": np.asarray([100, 110, 200, 220, 300, 360])}
    inst = {"complete": np.ones(3, bool), "consistent": np.ones(3, bool), "n_ranks": np.full(3, 2)}
    est = fit_clock_offsets(m, inst)
    assert est.offsets == {0: 0, 1: 20}
    # per rank |residuals| 5, 0, 20: p95 by linear interpolation 5 + 0.9 * 15 = 18.5, truncated to int ns
    assert est.residual_ns[0] == est.residual_ns[1] == {"p50": 5, "p95": 18, "max": 20}
    assert est.instances == {0: 3, 1: 3}
    none = fit_clock_offsets(m, {**inst, "complete": np.zeros(3, bool)})
    assert none.offsets == {} and none.residual_ns == {}
