"""The critical path's per-step figures (:mod:`streamtrace.aggregate.critical_path`): each rank's share,
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
whole job are in ``stragglers.parquet`` (:func:`streamtrace.aggregate.collectives.straggler_table`).

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

import numpy as np

from ..kernels.critical import NEG, POS
from .critical_graph import Anchor, Edge

SUMMARY_COLUMNS = ("iteration", "step", "what", "key", "rank", "ns", "min_ns", "pct", "on_path", "span_ns",
                   "path_ns")
RANK_COLUMNS = ("iteration", "step", "rank", "thread", "on_path", "path_ns", "path_pct", "slack_ns", "wait_ns",
                "collectives", "last_count", "lead_ns", "start_ns", "end_ns")
TOP = 10
NEXT_MIN_GAIN = 0.005
"""What bounds next is said only when the change shortens the path by more than this share."""
LOCAL, TRANSFER = Edge.local, Edge.transfer


def _path_by_rank(segs) -> dict:
    acc: dict = {}
    for s in segs:
        acc[s[0]] = acc.get(s[0], 0) + int(s[4])
    return acc


def rank_rows(it, st, g, solved, segs, rank_of) -> list:
    """The rows of ``critical_path_ranks`` for one step (module docstring): ``g`` the
    :class:`~streamtrace.aggregate.critical_path.JobGraph`, ``solved`` its
    :class:`~streamtrace.aggregate.critical_path.Solved`, ``segs`` the path's segment rows."""
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind, np.int64)
    part = np.asarray(g.part, np.int64)
    pos = solved.pos
    dist, late = solved.dist[pos], solved.late[pos]              # by node
    on = _path_by_rank(segs)
    path_ns = max(sum(on.values()), 1)
    wait, lead, last, n = {}, {}, {}, {}
    for b, pairs in g.barriers:
        if b in g.p2p:                                  # a receive posts early by design: not lateness
            continue
        arr = sorted((t[a], g.part[a]) for a, _ in pairs)
        for a, e in pairs:                              # a member that ended before the last arrival did not wait
            p = g.part[a]
            wait[p] = wait.get(p, 0) + (int(t[b] - t[a]) if t[e] >= t[b] else 0)
            n[p] = n.get(p, 0) + 1
        if len(arr) >= 2:
            p = arr[-1][1]
            lead[p] = lead.get(p, 0) + int(arr[-1][0] - arr[-2][0])
            last[p] = last.get(p, 0) + 1
    rows = []
    for p in sorted(set(part[kind == Anchor.step_start].tolist())):
        mine = (part == p) & (kind >= 0) & (dist > NEG) & (late < POS)
        fl = late[mine] - dist[mine]
        r = rank_of[p]
        on_path = on.get(r, 0) > 0
        s0 = np.flatnonzero((part == p) & (kind == Anchor.step_start))
        tid = str(g.lane[s0[0]]).removeprefix("thread ") if len(s0) else ""
        rows.append({"iteration": it, "step": st, "rank": r, "thread": int(tid) if tid.lstrip("-").isdigit() else -1,
                     "on_path": on_path, "path_ns": on.get(r, 0),
                     "path_pct": round(100.0 * on.get(r, 0) / path_ns, 3),
                     "slack_ns": 0 if on_path or not len(fl) else int(max(fl.min(), 0)),
                     "wait_ns": wait.get(p, 0), "collectives": n.get(p, 0), "last_count": last.get(p, 0),
                     "lead_ns": lead.get(p, 0), "start_ns": int(t[(part == p) & (kind == Anchor.step_start)].min()),
                     "end_ns": int(t[(part == p) & (kind == Anchor.step_end)].max())})
    return rows


def summary_rows(it, st, g, solved, segs, rank_of, ranks, solve) -> list:
    """The summary rows of one step (module docstring); ``ranks``: :func:`rank_rows`' rows;
    ``solve``: :func:`~streamtrace.aggregate.critical_path.solve_step` (for what bounds next)."""
    path_ns = int(sum(s[4] for s in segs))
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind)
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
    acc: dict = {}
    for s in segs:
        acc[s[5]] = acc.get(s[5], 0) + s[4]
    add("category", acc)
    add("rank", _path_by_rank(segs), rank_key=True)
    for what, cats in (("kernel", ("compute_kernel", "memcpy", "comm_transfer")), ("cpu_op", ("cpu_op",))):
        acc = {}
        for s in segs:
            if s[5] in cats:
                acc[s[6]] = acc.get(s[6], 0) + s[4]
        add(what, acc, TOP)
    for r in ranks:
        rows.append(base | {"what": "slack", "key": str(r["rank"]), "rank": r["rank"], "ns": r["slack_ns"],
                            "min_ns": r["wait_ns"], "pct": pct(r["path_ns"]), "on_path": r["on_path"]})
    return rows + _next_rows(base, g, rank_of, ranks, solve)


def _next_rows(base, g, rank_of, ranks, solve) -> list:
    """What bounds the step next (module docstring): rows ``what == "next"``, none when the top
    rank is no slower than its peers or has none."""
    if len(ranks) < 2:
        return []
    top = max(ranks, key=lambda r: r["path_ns"])
    part = {v: k for k, v in rank_of.items()}.get(top["rank"])
    w = capped_weights(g, part)
    if w is None:
        return []
    solved = solve(g, w)
    if solved is None:
        return []
    acc = _rank_time(g, solved, w)
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


def _stretch_keys(g) -> list:
    """Per edge of ``g``: ``(origin, sink)`` naming a LOCAL edge's stretch the same way on every rank
    (``start`` / ``end`` for the step's, else the collective instance's barrier node and whether it
    is the arrival or the end), None for other edges."""
    inst = {}
    for b, pairs in g.barriers:
        for a, e in pairs:
            inst[a], inst[e] = (b, "arrival"), (b, "end")
    name = {Anchor.step_start: "start", Anchor.step_end: "end"}
    keys = []
    for u, v, typ in zip(g.src, g.dst, g.etype):
        if typ != LOCAL:
            keys.append(None)
            continue
        ku = inst.get(u, name.get(g.kind[u]))
        kv = inst.get(v, name.get(g.kind[v]))
        keys.append(None if ku is None or kv is None else (ku, kv))
    return keys


def capped_weights(g, part) -> np.ndarray | None:
    """The job graph's edge weights with part ``part``'s local stretches capped at the median of the
    same stretch on the other parts (:func:`_stretch_keys`); None when nothing is capped."""
    keys = _stretch_keys(g)
    peers: dict = {}
    for e, k in enumerate(keys):
        if k is not None and g.part[g.src[e]] != part:
            peers.setdefault(k, []).append(g.w[e])
    w = np.asarray(g.w, np.int64).copy()
    changed = False
    for e, k in enumerate(keys):
        if k is not None and g.part[g.src[e]] == part and k in peers:
            m = int(np.median(peers[k]))
            if m < w[e]:
                w[e], changed = m, True
    return w if changed else None


def _rank_time(g, solved, w) -> dict:
    """``{part: ns}`` of the path of ``solved`` (job-level edges: a LOCAL edge is its part's, a
    transfer its member's)."""
    acc: dict = {}
    for e in solved.path.tolist():
        if g.etype[e] == LOCAL:
            p = g.part[g.src[e]]
        elif g.etype[e] == TRANSFER:
            p = g.part[g.dst[e]]
        else:
            continue
        acc[p] = acc.get(p, 0) + int(w[e])
    return acc
