"""The critical path's per-step figures (``streamtrace.aggregate.critical_path``): each rank's share,
slack, waits and lead (``critical_path_ranks.parquet``), the summary rows
(``critical_path_summary.parquet``) and what bounds the step next.

**Slack** is the critical-path method's total float (Kelley & Walker, 1959) of a rank's work, the
least over its anchors (step start, arrivals at and ends of its collectives, step end) of latest -
earliest time: how much later the rank's work could finish without lengthening the step.  It is 0
for every rank the path crosses.  In a job whose ranks meet in collectives to the end (data
parallelism), every rank's slack is at most its finishing stretch's difference to the last rank's:
the ranks are coupled; what they *wait* for says more.

**Wait** (``wait_ns``): the time the rank's communication events waited for the collective's last
member (barrier - its arrival, summed over the step's matched group collectives; point-to-point
transfers left out: a receive posts early by design, its wait is the pipeline's bubble, the report's
pipeline section); **lead** (``lead_ns``,
``last_count``): when the rank arrived last, the time it alone held the collective (its arrival -
the next-latest arrival), summed, and how often.  The per-collective straggler counts over the
whole job are in ``stragglers.parquet`` (``streamtrace.aggregate.collectives.straggler_table``).

**What bounds next** (summary rows ``what == "next"``): the job graph solved again with every
stretch of local work of the rank holding most of the path (a reduced edge between two of its
anchors) no longer than the median of the same stretch on its peers (the edges between the same
collectives, or the step's start / end, on the other ranks); the ranks holding the new path and
its length.  The answer to "fix rank 0, then what": a first-order estimate, the replay of
``streamtrace whatif`` is the full one.

``critical_path_ranks.parquet``: per (iteration, step, rank): ``thread`` (the step's thread id),
``on_path``, ``path_ns`` (the path's
time on the rank), ``path_pct``, ``slack_ns``, ``wait_ns``, ``collectives`` (matched group
collectives it is a member of), ``last_count``, ``lead_ns``, ``start_ns`` / ``end_ns`` (its step start and end,
aligned int64 ns).  ``critical_path_summary.parquet``: per (iteration, step) rows of ``what`` =
``total`` (``ns`` the path's length, ``span_ns`` the step's span: last rank's end - first rank's
start, ``path_ns`` the path's length), ``category``, ``rank``, ``kernel``, ``cpu_op`` (the share
of the path, top 10 names), ``slack`` (one row per rank: ``ns`` its slack as above, ``min_ns`` its
wait, ``on_path``), ``next`` (``key`` the change, ``rank``, ``ns`` its time on the new path,
``pct`` its share, ``path_ns`` the new path's length), with ``key``, ``rank``, ``ns``, ``pct`` (of
the path; -1 / False where a column does not apply).
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..kernels.sentinels import NEG, POS
from ..runtime.tuning import trim
from .critical_graph import CATEGORIES, Anchor, Category, Edge
from .folder import CRITICAL_PATH_RANKS_COLUMNS, CRITICAL_PATH_SUMMARY_COLUMNS, NEXT_MIN_GAIN

SUMMARY_COLUMNS = CRITICAL_PATH_SUMMARY_COLUMNS
RANK_COLUMNS = CRITICAL_PATH_RANKS_COLUMNS
TOP = 10
LOCAL, TRANSFER = Edge.local, Edge.transfer
KERNEL_CATEGORIES = (Category.compute_kernel, Category.memcpy, Category.comm_transfer)
"""The path's categories whose names are GPU events (the summary's ``kernel`` rows)."""


def _sums(keys, weights) -> dict:
    """``{key: summed weight}`` (Python ints), the keys (int64, or objects) in the order they first appear."""
    if keys.dtype != object:
        n = len(keys)
        if not n:
            return {}
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo <= 4 * n + 64:                   # (ranks, categories: a small range, no sort)
            code = keys.astype(np.int64) - lo
            total = np.zeros(hi - lo + 1, np.int64)
            np.add.at(total, code, np.asarray(weights, np.int64))
            first = np.full(hi - lo + 1, n, np.int64)
            np.minimum.at(first, code, np.arange(n))
            o = np.argsort(first, kind="stable")
            o = o[first[o] < n]
            return dict(zip((o + lo).tolist(), total[o].tolist()))
        u, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        total = np.zeros(len(u), np.int64)
        np.add.at(total, inv.reshape(-1), weights)
        o = np.argsort(first)
        return dict(zip(u[o].tolist(), total[o].tolist()))
    try:                                            # names (str, None): coded by pyarrow, in first-seen order
        d = pc.dictionary_encode(pa.array(keys, pa.string()))
    except (pa.ArrowException, TypeError):
        acc: dict = {}
        for k, w in zip(keys.tolist(), weights.tolist()):
            acc[k] = acc.get(k, 0) + w
        return acc
    values = d.dictionary.to_pylist() + [None]
    code = d.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False).astype(np.int64)
    total = np.zeros(len(values), np.int64)
    np.add.at(total, code, np.asarray(weights, np.int64))
    first = np.full(len(values), len(code), np.int64)
    np.minimum.at(first, code, np.arange(len(code)))
    o = np.argsort(first, kind="stable")
    o = o[first[o] < len(code)]
    return {values[i]: int(total[i]) for i in o.tolist()}


def _path_by_rank(segs) -> dict:
    """``{rank: ns}`` of the path's segments (``critical_segments.segments``' columns), in path order."""
    return _sums(segs["rank"], segs["w"])


def _by_part(part, values, n) -> np.ndarray:
    """int64[n]: ``values`` summed by ``part`` (int64 indices < n)."""
    out = np.zeros(n, np.int64)
    np.add.at(out, part, values)
    return out


def _collective_figures(g, n) -> tuple:
    """Per part (int64[n] each): wait, collectives, lead and last count over the step's matched group
    collectives (point-to-point ones left out: a receive posts early by design, not lateness)."""
    t, part = g.t, g.part                            # (the members' temporaries let go as soon as read:
    keep = ~g.b_p2p[g.m_bar]                         # this runs at the critical path's peak, 650 k members
    pick = (lambda x: x) if keep.all() else (lambda x: x[keep])  # noqa: E731   at 4,096 synthetic ranks)
    bi, a = pick(g.m_bar), pick(g.m_arr)
    tb = t[g.b_node[bi]]                             # the barrier's time: the last member's arrival
    ta = t[a]
    p = part[a]
    late = tb - ta
    late[t[pick(g.m_end)] < tb] = 0                  # a member that ended before the last arrival did not wait
    del a, tb, keep
    wait = _by_part(p, late, n)
    del late
    count = _by_part(p, np.ones(len(p), np.int64), n)
    o = np.lexsort((p, ta, bi))                      # each barrier's members by (arrival, part)
    bi, ta, p = bi[o], ta[o], p[o]
    del o
    end = np.flatnonzero(np.r_[bi[1:] != bi[:-1], True]) if len(bi) else np.zeros(0, np.int64)
    end = end[(end >= 1) & (bi[np.maximum(end - 1, 0)] == bi[end])]   # groups of two or more
    lead = _by_part(p[end], ta[end] - ta[end - 1], n)
    last = _by_part(p[end], np.ones(len(end), np.int64), n)
    return wait, count, lead, last


def collective_figures(g) -> tuple:
    """``rank_rows``' per-part collective figures of the ``JobGraph`` ``g`` (wait, collectives, lead, last:
    int64 each, by part index), computed from the graph alone: the critical path's job level computes
    them before the solve, so that their temporaries (~30 MB over 650 k members at 4,096 synthetic ranks)
    never sit beside the solve's earliest and latest times."""
    return _collective_figures(g, int(g.part.max()) + 1 if len(g.part) else 0)


SLACK_CHUNK = 1 << 18
"""Nodes whose slack ``rank_rows`` reads at a time."""


def rank_rows(it, st, g, solved, segs, rank_of, figures=None) -> list:
    """The rows of ``critical_path_ranks`` for one step (module docstring): ``g`` the
    ``JobGraph``, ``solved`` its
    ``Solved``, ``segs`` the path's segment columns (``critical_segments.segments``: ``rank`` and ``w`` read);
    ``figures``: ``collective_figures(g)`` (None: computed here)."""
    t, kind, part = g.t, g.kind, g.part
    on = _path_by_rank(segs)
    path_ns = max(sum(on.values()), 1)
    n = int(part.max()) + 1 if len(part) else 0
    wait, count, lead, last = collective_figures(g) if figures is None else figures
    slack = np.full(n, POS, np.int64)
    for i in range(0, len(part), SLACK_CHUNK):                   # (a chunk of nodes at a time: the earliest and
        j = slice(i, i + SLACK_CHUNK)                            # latest times by node were 24 MB at 1.5 M nodes)
        at = solved.pos[j]
        dist, late = solved.dist[at], solved.late[at]
        mine = (part[j] >= 0) & (kind[j] >= 0) & (dist > NEG) & (late < POS)
        np.subtract(late, dist, out=late)                        # each node's slack (where ``mine``)
        np.minimum.at(slack, part[j][mine], late[mine])
    st0 = np.flatnonzero((part >= 0) & (kind == Anchor.step_start))
    s_first = np.full(n, -1, np.int64)
    s_first[part[st0][::-1]] = st0[::-1]                          # the part's first step start node
    s_min = np.full(n, POS, np.int64)
    np.minimum.at(s_min, part[st0], t[st0])
    en = np.flatnonzero((part >= 0) & (kind == Anchor.step_end))
    e_max = np.full(n, NEG, np.int64)
    np.maximum.at(e_max, part[en], t[en])
    rows = []
    for p in np.unique(part[st0]).tolist():
        r = rank_of[p]
        on_path = on.get(r, 0) > 0
        tid = str(g.texts[g.lane[s_first[p]]]).removeprefix("thread ")
        rows.append({"iteration": it, "step": st, "rank": r, "thread": int(tid) if tid.lstrip("-").isdigit() else -1,
                     "on_path": on_path, "path_ns": on.get(r, 0),
                     "path_pct": round(100.0 * on.get(r, 0) / path_ns, 3),
                     "slack_ns": 0 if on_path or slack[p] == POS else int(max(slack[p], 0)),
                     "wait_ns": int(wait[p]), "collectives": int(count[p]), "last_count": int(last[p]),
                     "lead_ns": int(lead[p]), "start_ns": int(s_min[p]), "end_ns": int(e_max[p])})
    return rows


def summary_rows(it, st, g, solved, segs, rank_of, ranks, solve, lot=None) -> list:
    """The summary rows of one step (module docstring); ``ranks``: ``rank_rows``' rows;
    ``solve(g, w)``: a ``Solved`` with the path of the weights ``w`` (``(ids, ns)`` of the edges whose
    weight changes: ``solve_step``, or
    ``critical_path.solve_path`` over the first solve's order; for what bounds next); ``segs``: as
    ``rank_rows``' (``rank``, ``w``, ``cat`` (int8 ``Category`` codes), ``name`` read); ``lot``: a
    ``runtime.tuning.Parking`` of ``g`` in which the graph's columns ``capped_edges`` does not read wait
    while it runs (``CAPPED_PARKED``; None: held), the columns ``solve`` parks lent to the re-solved path's
    sums as memory maps (``Parking.peek``); what is parked when it returns, the lot's owner brings back."""
    path_ns = int(segs["w"].sum())
    t, kind = g.t, g.kind
    span = int(t[kind == Anchor.step_end].max() - t[kind == Anchor.step_start].min()) \
        if (kind == Anchor.step_start).any() else 0
    base = {"iteration": it, "step": st, "span_ns": span, "path_ns": path_ns, "rank": -1, "on_path": False,
            "min_ns": -1}
    rows = [base | {"what": "total", "key": "", "ns": path_ns, "pct": 100.0}]
    pct = lambda x: round(100.0 * x / path_ns, 3) if path_ns else 0.0  # noqa: E731

    def add(what, acc, top=None, rank_key=False):
        for key, ns in sorted(acc.items(), key=lambda kv: -kv[1])[:top]:
            rows.append(base | {"what": what, "key": str(key), "ns": int(ns), "pct": pct(ns),
                                "rank": int(key) if rank_key else -1, "on_path": True})
    add("category", {CATEGORIES[c]: ns for c, ns in _sums(segs["cat"], segs["w"]).items()})
    add("rank", _path_by_rank(segs), rank_key=True)
    for what, cats in (("kernel", KERNEL_CATEGORIES), ("cpu_op", (Category.cpu_op,))):
        m = np.isin(segs["cat"], cats)
        add(what, _sums(segs["name"][m], segs["w"][m]), TOP)
    for r in ranks:
        rows.append(base | {"what": "slack", "key": str(r["rank"]), "rank": r["rank"], "ns": r["slack_ns"],
                            "min_ns": r["wait_ns"], "pct": pct(r["path_ns"]), "on_path": r["on_path"]})
    return rows + _next_rows(base, g, rank_of, ranks, solve, lot)


RANK_PARKED = ("etype", "m_bar", "m_arr", "m_end", "b_node", "b_p2p")
"""The ``JobGraph`` columns ``rank_rows`` reads none of (the collective figures computed before
the solve): on disk while it runs beside the solve's earliest and latest times (4,096 synthetic ranks: that
phase 269 -> 221 MB)."""


CAPPED_PARKED = ("t", "b_node", "b_p2p")
"""The ``JobGraph`` columns ``capped_edges`` reads none of: on disk while it sorts the peers' stretches
(``summary_rows``' ``lot``; 4,096 synthetic ranks: the critical path's process peaked there, 277 MB)."""


def _next_rows(base, g, rank_of, ranks, solve, lot=None) -> list:
    """What bounds the step next (module docstring): rows ``what == "next"``, none when the top
    rank is no slower than its peers or has none."""
    if len(ranks) < 2:
        return []
    top = max(ranks, key=lambda r: r["path_ns"])
    part = {v: k for k, v in rank_of.items()}.get(top["rank"])
    if lot is not None:
        lot.only(CAPPED_PARKED)
    capped = capped_edges(g, part)
    if capped is None:
        return []
    trim()                                              # (the stretches' keys: before the solve's peak)
    solved = solve(g, capped)
    with lot.peek() if lot is not None else nullcontext():     # (the path's few values)
        acc = None if solved is None else _rank_time(g, solved)
    if acc is None:
        return []
    total = sum(acc.values())
    if total >= (1 - NEXT_MIN_GAIN) * sum(r["path_ns"] for r in ranks):
        return []                                       # no faster: the top rank does not bound it by being slow
    key = f"rank {top['rank']} as fast as the median of its peers between collectives"
    out = []
    for p, ns in sorted(acc.items(), key=lambda kv: -kv[1])[:4]:
        if ns > 0:
            out.append(base | {"what": "next", "key": key, "rank": rank_of[p], "ns": int(ns),
                               "pct": round(100.0 * ns / total, 3) if total else 0.0, "on_path": True,
                               "path_ns": int(total)})
    return out


def _anchor_codes(g) -> np.ndarray:
    """Per node of ``g``: -1 the step's start, -2 its end, ``2 * barrier`` (``g.m_bar``) a collective
    member's arrival, ``2 * barrier + 1`` its end, -10 any other node (int32 while they fit)."""
    code = np.full(len(g.kind), -10, np.int32 if 2 * len(g.m_bar) + 2 < 2 ** 31 else np.int64)
    code[g.kind == Anchor.step_start] = -1
    code[g.kind == Anchor.step_end] = -2
    code[g.m_arr] = 2 * g.m_bar
    code[g.m_end] = 2 * g.m_bar + 1
    return code


def _stretch_keys(code, top: int, src, dst, etype) -> np.ndarray:
    """Per edge ``src -> dst`` (node ids) of type ``etype``: an int64 naming a LOCAL edge's stretch
    ``(origin, sink)`` the same way on every rank (the step's start / end, else the collective instance's
    barrier and whether the anchor is its arrival or its end: ``_anchor_codes`` ``code``, ``top`` its
    largest + 3), -1 for other edges and for a stretch from or to an anchor of neither kind."""
    cu, cv = code[src].astype(np.int64), code[dst].astype(np.int64)
    ok = (etype == LOCAL) & (cu >= -2) & (cv >= -2)
    return np.where(ok, (cu + 2) * top + (cv + 2), -1)


STRETCH_CHUNK = 1 << 16
"""Edges ``capped_edges`` reads and keys at a time (its temporaries a chunk's, ~6 int64 columns of it:
5.6 M edges at 4,096 synthetic ranks; 2^18 a chunk held ~24 MB over the critical path's level while the
peers' stretches were counted, its peak)."""

STRETCH_BATCH = 1 << 20
"""About the most peers' stretches ``capped_edges`` sorts at once (a pass over the edges a batch), each one
int64 (``_packed_pairs``; a quarter as many when they do not pack).  4,096 synthetic ranks: the top rank's 165
stretches have 4,488 peers' edges, one batch; a job whose ranks share many stretches has millions."""


def capped_edges(g, part) -> tuple | None:
    """Part ``part``'s local stretches of the job graph ``g`` capped at the median of the same stretch
    on the other parts (``_stretch_keys``; the median as ``np.median`` takes it): ``(edges, w)``, the
    ids of the edges whose weight the cap lowers (int64, ascending) and their capped weights (int64
    ns), None when nothing is capped.  The graph's edges are read (``JobGraph.edge_chunks``), not changed.

    Only the peers' stretches that ``part`` has are sorted, in batches of stretches of about
    ``STRETCH_BATCH`` peers' edges (counted in a first pass), the edges read and keyed ``STRETCH_CHUNK``
    at a time: a pass over the edges a batch, instead of every peer's key and weight held and sorted at
    once (~135 MB at 4,096 synthetic ranks).  A batch's pairs are sorted as one int64 each where the
    weights allow (``_packed_pairs``: 8 bytes a pair, sorted in place, where the key and weight columns,
    their sort order and sorted copies took ~56)."""
    if part is None:
        return None
    code = _anchor_codes(g)
    top = int(code.max()) + 3 if len(code) else 1
    own = g.part == part                                # per node: the part's
    mine, mkeys, mw = _own_stretches(g, code, top, own)
    want = np.unique(mkeys)
    mine_k = np.searchsorted(want, mkeys)               # each own edge's stretch, as an index of ``want``
    count = np.zeros(len(want), np.int64)
    w_lo, w_hi = 0, 0
    for w, k in _peer_stretches(g, code, top, own, want):
        count += np.bincount(k, minlength=len(want))
        if len(w):
            w_lo, w_hi = min(w_lo, int(w.min())), max(w_hi, int(w.max()))
    shift = max(w_hi.bit_length(), 1)
    packs = w_lo >= 0 and len(want) < 1 << (62 - shift)
    batch = (np.cumsum(count) - count) // (STRETCH_BATCH if packs else max(STRETCH_BATCH // 4, 1))   # per stretch
    edges, capped = [], []
    for b in np.unique(batch).tolist():
        lo, hi = np.searchsorted(batch, b), np.searchsorted(batch, b, "right")
        size = int(count[lo:hi].sum())
        pairs = _packed_pairs(g, code, top, own, want, lo, hi, size, shift) if packs else \
            _sorted_pairs(g, code, top, own, want, lo, hi)
        at = (mine_k >= lo) & (mine_k < hi)
        e, k, we = mine[at], mine_k[at], mw[at]
        first, last, pick = pairs(k)
        has = last > first
        e, we, first, n = e[has], we[has], first[has], (last - first)[has]
        # the median of the peers' (np.median's): the two middle weights' mean, truncated as ``int``
        m = ((pick(first + (n - 1) // 2).astype(np.float64) + pick(first + n // 2).astype(np.float64)) / 2
             ).astype(np.int64)
        del pairs, pick
        low = m < we
        edges.append(e[low])
        capped.append(m[low])
    edges = np.concatenate(edges) if edges else np.zeros(0, np.int64)
    if not len(edges):
        return None
    o = np.argsort(edges)                               # (the batches go by stretch: edge ids ascending)
    return edges[o], np.concatenate(capped)[o]


def _packed_pairs(g, code, top, own, want, lo: int, hi: int, size: int, shift: int):
    """The peers' pairs of the stretches ``lo`` .. ``hi - 1`` (indices of ``want``; ``size`` of them), each
    packed into one int64 ``(stretch - lo) << shift | weight`` (weights from 0 to below ``2 ** shift``) and
    sorted: by stretch, then weight.  Returns ``lookup(k)`` -> ``(first, last, pick)``: per stretch of ``k``
    its pairs' range and ``pick(i)`` the weights at sorted places ``i``."""
    packed = np.empty(size, np.int64)
    i = 0
    for w, k in _peer_stretches(g, code, top, own, want):
        sel = (k >= lo) & (k < hi)
        m = int(np.count_nonzero(sel))
        np.left_shift(k[sel] - lo, shift, out=packed[i:i + m])
        packed[i:i + m] |= w[sel]
        i += m
    packed.sort()
    mask = (1 << shift) - 1

    def lookup(k):
        base = (np.asarray(k, np.int64) - lo) << shift
        return (np.searchsorted(packed, base), np.searchsorted(packed, base + (1 << shift)),
                lambda j: packed[j] & mask)
    return lookup


def _sorted_pairs(g, code, top, own, want, lo: int, hi: int):
    """``_packed_pairs``' lookup for weights that do not pack (one below 0, or stretches and weights
    together past 62 bits): the pairs' stretches and weights as two int64 columns, sorted by both."""
    ks, ws = [], []
    for w, k in _peer_stretches(g, code, top, own, want):
        sel = (k >= lo) & (k < hi)
        ks.append(k[sel])
        ws.append(w[sel])
    ks, ws = (np.concatenate(x) for x in (ks, ws))
    o = np.lexsort((ws, ks))
    ks, ws = ks[o], ws[o]
    del o
    return lambda k: (np.searchsorted(ks, k), np.searchsorted(ks, k, "right"), lambda j: ws[j])


def _own_stretches(g, code, top, own) -> tuple:
    """``(ids, stretch keys, weights)`` (int64 each, ids ascending) of the edges of ``g`` leaving the nodes
    ``own`` whose stretch is named (``_stretch_keys``)."""
    ids, keys, ws = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for at, src, dst, w, etype in g.edge_chunks(STRETCH_CHUNK):
        sel = np.flatnonzero(own[src])
        k = _stretch_keys(code, top, src[sel], dst[sel], etype[sel])
        ok = k >= 0
        ids.append(at + sel[ok])
        keys.append(k[ok])
        ws.append(np.asarray(w[sel[ok]], np.int64))
    return tuple(np.concatenate(x) for x in (ids, keys, ws))


def _peer_stretches(g, code, top, own, want):
    """``(weights, stretch)`` of the edges of ``g`` leaving the other parts' nodes (``own`` False) whose
    stretch key (``_stretch_keys``) is in ``want`` (sorted), ``STRETCH_CHUNK`` edges at a time: their
    weights (int64 ns) and their keys' indices in ``want`` (int64)."""
    last = len(want) - 1
    for _, src, dst, w, etype in g.edge_chunks(STRETCH_CHUNK):
        peer = np.flatnonzero(~own[src])
        k = _stretch_keys(code, top, src[peer], dst[peer], etype[peer])
        at = np.searchsorted(want, k)                      # (``want`` is sorted: no sort of the chunk's keys)
        hit = np.flatnonzero(want[np.minimum(at, last)] == k) if len(want) else np.zeros(0, np.int64)
        yield np.asarray(w[peer[hit]], np.int64), at[hit]


def _rank_time(g, solved) -> dict:
    """``{part: ns}`` of the path of ``solved`` (job-level edges: a LOCAL edge is its part's, a transfer
    its member's; each edge's weight the one the solve took)."""
    acc: dict = {}
    for e, u, v, w in zip(*(x.tolist() for x in (solved.path, solved.src, solved.dst, solved.w))):
        if g.etype[e] == LOCAL:
            p = int(g.part[u])
        elif g.etype[e] == TRANSFER:
            p = int(g.part[v])
        else:
            continue
        acc[p] = acc.get(p, 0) + w
    return acc
