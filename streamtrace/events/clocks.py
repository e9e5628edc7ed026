"""Clock offsets between ranks from collectives that end together (shared by ``aggregate
--clock-sync collectives`` and ``merge --align collectives``).

The members of one collective finish nearly together (the last to arrive releases every member), so
for two members ``a`` and ``b`` of one instance ``end(a) - end(b) ~ o_a - o_b``, ``o`` being each
clock's offset from a common clock.  ``fit_clock_offsets``:

1. uses the instances that are complete (every member present), consistent (the members agree on
   type and size) and have two or more members;
2. per instance, pairs each member with the instance's lowest (rank, part): ``d = end(a) - end(ref)``;
   per pair of parts, the median ``m_ab`` of its ``d`` and a weight ``n_ab`` (how many instances);
3. solves the weighted least squares ``min sum n_ab (o_a - o_b - m_ab)^2`` on each connected set of
   parts with ``o = 0`` at its lowest (rank, part): the grounded graph-Laplacian system, by conjugate
   gradients with a Jacobi preconditioner (sparse: O(pairs) per iteration, at most one iteration
   per part in exact arithmetic);
4. *bridges* (optional, ``instances["bridge"]``: e.g. point-to-point transfers, whose two ends are
   less tightly tied): they take no part in steps 1-3; they only join the connected sets those left
   apart (pipeline stages share no group collective): each set becomes one node whose members' ends
   are corrected by the offsets found inside it, and steps 2-3 run again on the sets, the reference
   set being the one holding the lowest rank; a part with no usable group instance is a set of its own;
5. residuals: per used instance (bridges too), each member's corrected end ``end - o`` minus the
   median of its instance's corrected ends; per part the 50th / 95th percentile and maximum of their
   absolute values.

Times are int64 ns; offsets are rounded to int ns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ClockEstimate:
    """``offsets``: ``{part: ns}`` to subtract from that part's times; ``components``: ``{part: index
    of its connected set}``; ``references``: ``{component: part}`` (offset 0); ``instances``: ``{part:
    used instances it is a member of}``; ``residual_ns``: ``{part: {"p50", "p95", "max"}}`` (int ns)."""
    offsets: dict = field(default_factory=dict)
    components: dict = field(default_factory=dict)
    references: dict = field(default_factory=dict)
    instances: dict = field(default_factory=dict)
    residual_ns: dict = field(default_factory=dict)


def _used(members: dict, instances: dict, bridge: bool):
    """The members of the usable instances (bridges or not), sorted by (instance, rank, part)."""
    ok = np.asarray(instances["complete"], bool) & np.asarray(instances["consistent"], bool) \
        & (np.asarray(instances["n_ranks"]) >= 2)
    is_bridge = np.asarray(instances.get("bridge", np.zeros(len(ok), bool)), bool)
    sel = np.isin(members["instance"], np.flatnonzero(ok & (is_bridge if bridge else ~is_bridge)))
    inst, part, end, rank = (np.asarray(members[k])[sel].astype(np.int64) for k in ("instance", "part", "end_ns", "rank"))
    o = np.lexsort((part, rank, inst))
    return inst[o], part[o], end[o], rank[o]


def _components(parts, pairs) -> list:
    """Connected sets of ``parts`` joined by the ``pairs`` (union-find)."""
    parent = {p: p for p in parts}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for x, y in pairs:
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    comps: dict = {}
    for p in parts:
        comps.setdefault(find(p), []).append(p)
    return list(comps.values())


def _solve(n, a, b, w, m, ref) -> np.ndarray:
    """Weighted least squares on a graph: ``min sum w (o[a] - o[b] - m)^2`` with ``o[ref] = 0``
    (nodes 0..n-1, edges ``a``/``b``), by preconditioned conjugate gradients on the grounded Laplacian."""
    def lap(x):
        y = np.zeros(n)
        d = w * (x[a] - x[b])
        np.add.at(y, a, d)
        np.subtract.at(y, b, d)
        y[ref] = 0.0
        return y
    rhs = np.zeros(n)
    np.add.at(rhs, a, w * m)
    np.subtract.at(rhs, b, w * m)
    rhs[ref] = 0.0
    diag = np.zeros(n)
    np.add.at(diag, a, w)
    np.add.at(diag, b, w)
    diag[ref] = 1.0
    diag[diag == 0] = 1.0
    x = np.zeros(n)
    r = rhs.copy()
    z = r / diag
    p = z.copy()
    rz = float(r @ z)
    tol = 1e-12 * max(1.0, float(np.abs(rhs).max()))
    for _ in range(4 * n + 10):
        if float(np.abs(r).max()) <= tol:
            break
        q = lap(p)
        alpha = rz / float(p @ q)
        x += alpha * p
        r -= alpha * q
        z = r / diag
        rz, rz_old = float(r @ z), rz
        p = z + (rz / rz_old) * p
    return x


def _fit(inst, part, end, rank):
    """Steps 2-3 of the module docstring on sorted members: ``(offsets, components, references,
    rank_of)`` (``{part: ns}``, ``{part: set index}``, ``{set index: part}``, ``{part: rank}``)."""
    offsets, comp_of, refs = {}, {}, {}
    if not len(inst):
        return offsets, comp_of, refs, {}
    first = np.r_[True, inst[1:] != inst[:-1]]
    ref_idx = np.maximum.accumulate(np.where(first, np.arange(len(inst)), 0))
    a, b = part[~first], part[ref_idx][~first]
    d = end[~first] - end[ref_idx][~first]
    pairs: dict = {}
    for x, y, v in zip(a.tolist(), b.tolist(), d.tolist()):
        pairs.setdefault((x, y), []).append(v)
    rank_of = dict(zip(part.tolist(), rank.tolist()))
    comps = sorted(_components(sorted(rank_of), pairs), key=lambda c: min((rank_of[p], p) for p in c))
    for ci, mine in enumerate(comps):
        ref = min(mine, key=lambda p: (rank_of[p], p))
        idx = {p: i for i, p in enumerate(mine)}
        edges = [(idx[x], idx[y], len(v), float(np.median(v))) for (x, y), v in pairs.items() if x in idx]
        ea, eb, ew, em = (np.asarray([e[k] for e in edges], float if k > 1 else np.int64) for k in range(4))
        sol = _solve(len(mine), ea, eb, ew, em, idx[ref]) if edges else np.zeros(len(mine))
        refs[ci] = ref
        for p in mine:
            offsets[p] = int(round(sol[idx[p]] - sol[idx[ref]]))
            comp_of[p] = ci
    return offsets, comp_of, refs, rank_of


def _bridge(offsets, comp_of, rank_of, b_inst, b_part, b_end, b_rank):
    """Step 4: join the sets through the bridge members (sorted by instance); updates ``offsets``,
    ``comp_of`` and ``rank_of`` in place (set labels are renumbered by ``_relabel``)."""
    for p, r in zip(b_part.tolist(), b_rank.tolist()):   # a part seen only in bridges: a set of its own
        if p not in comp_of:
            comp_of[p], offsets[p], rank_of[p] = ("own", p), 0, r
    node_of = {c: k for k, c in enumerate(sorted(set(comp_of.values()), key=repr))}
    low = {}
    for p, c in comp_of.items():
        low[node_of[c]] = min(low.get(node_of[c], rank_of[p]), rank_of[p])
    node = np.asarray([node_of[comp_of[p]] for p in b_part.tolist()], np.int64)
    lowr = np.asarray([low[n] for n in node.tolist()], np.int64)
    corrected = b_end - np.asarray([offsets[p] for p in b_part.tolist()], np.int64)
    o = np.lexsort((node, lowr, b_inst))
    n_off, n_comp, _, _ = _fit(b_inst[o], node[o], corrected[o], lowr[o])
    for p, c in comp_of.items():
        n = node_of[c]
        offsets[p] += n_off.get(n, 0)
        comp_of[p] = ("joined", n_comp[n]) if n in n_comp else ("alone", n)


def _relabel(comp_of, rank_of) -> dict:
    """Set labels -> 0, 1, ... by each set's lowest (rank, part); returns ``{set: reference part}``."""
    sets: dict = {}
    for p, c in comp_of.items():
        sets.setdefault(c, []).append(p)
    refs = {}
    for k, mine in enumerate(sorted(sets.values(), key=lambda m: min((rank_of[p], p) for p in m))):
        refs[k] = min(mine, key=lambda p: (rank_of[p], p))
        for p in mine:
            comp_of[p] = k
    return refs


def fit_clock_offsets(members: dict, instances: dict) -> ClockEstimate:
    """The module docstring's estimate.  ``members``: equally long arrays ``instance`` (index into
    ``instances``' arrays), ``part``, ``rank``, ``end_ns`` (int64 ns, one clock per part);
    ``instances``: arrays ``complete``, ``consistent`` (bool), ``n_ranks`` (int) and optionally
    ``bridge`` (bool) per instance."""
    inst, part, end, rank = _used(members, instances, bridge=False)
    offsets, comp_of, refs, rank_of = _fit(inst, part, end, rank)
    b = _used(members, instances, bridge=True)
    if len(b[0]):
        _bridge(offsets, comp_of, rank_of, *b)
        refs = _relabel(comp_of, rank_of)
        inst, part, end = (np.concatenate([x, y]) for x, y in ((inst, b[0]), (part, b[1]), (end, b[2])))
        o = np.argsort(inst, kind="stable")
        inst, part, end = inst[o], part[o], end[o]
    out = ClockEstimate(offsets, comp_of, refs)
    if not len(inst):
        return out
    corrected = end - np.asarray([offsets[p] for p in part.tolist()], np.int64)
    bounds = np.append(np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]]), len(inst))
    res = np.empty(len(inst), np.int64)
    for s, e in zip(bounds[:-1], bounds[1:]):
        res[s:e] = np.abs(corrected[s:e] - int(np.median(corrected[s:e])))
    for p in sorted(offsets):
        r = res[part == p]
        out.instances[p] = int(len(r))
        if len(r):
            out.residual_ns[p] = {"p50": int(np.percentile(r, 50)), "p95": int(np.percentile(r, 95)),
                                  "max": int(r.max())}
    return out


def estimate_clock_offsets(members: dict, instances: dict) -> tuple[dict, dict]:
    """``fit_clock_offsets``' ``(offsets, components)``: ``{part: ns}`` and ``{part: index of its
    connected set}`` (empty when no instance is usable)."""
    est = fit_clock_offsets(members, instances)
    return est.offsets, est.components
