"""What bounds each step: the critical path across ranks, with slack (``critical_path.parquet``,
``critical_path_summary.parquet`` of ``streamtrace aggregate``).

Each rank's step is first reduced in aggregate's per-rank worker
(:mod:`streamtrace.aggregate.critical_local`) to its longest local paths between *anchors*: the step's
start, the arrival (start) and end of each communication kernel, the step's end.  The job level is
then a small graph per (iteration, step) whose nodes are those anchors (times on aggregate's
aligned axis, clock offsets of ``--clock-sync collectives`` included):

* every rank's reduced edges ``origin -> sink`` (weight: the local path's length);
* every matched collective instance (``collectives_ranks.parquet``, written by aggregate before
  its workers run: NCCL kernels matched by sequence number or order, all-to-alls included, gloo
  collectives and send / recv from the CPU ops; keyed by ``(part, correlation, stream)``,
  point-to-point transfers included): a barrier node at the last member's arrival, an edge of weight 0 from each member's
  arrival to it (a member cannot finish before the last one arrives: a receive not before its
  send started) and from it to each member's end, weighted by that member's transfer time
  (end - last arrival);
* a communication kernel matched to no instance: arrival -> end, its duration.

The forward pass (:func:`streamtrace.kernels.critical.longest_path`, every rank's step start at
its own time) gives each anchor the longest path reaching it; the **critical path** is the one
reaching the latest step end (the last rank's), expanded back into the local segments it crosses.
The backward pass (:func:`streamtrace.kernels.critical.latest_times`, every rank's step end due by
the path's end) gives each anchor its latest time; an edge's slack is latest(dst) - earliest(src)
- weight.  A rank's slack is the largest slack of its stretches of local work (the most that one
stretch could grow without lengthening the step); a rank whose smallest is 0 is on the path.

``critical_path.parquet``: one row per segment, in path order: ``iteration``, ``step``, ``order``,
``rank``, ``lane`` (``thread <tid>`` or ``device <d> stream <s>``), ``start_ns``, ``end_ns``,
``dur_ns``, ``weight_ns`` (the time the path counts: ``dur_ns`` but for a ``wait``),
``category`` (:data:`~streamtrace.aggregate.critical_local.CATEGORIES`), ``name``, and the event's id in
its rank's trace: ``correlation`` (GPU categories: the GPU event, whose launch shares it) or
``external_id`` (CPU categories: the innermost CPU op's ``External id``), -1 none.
``critical_path_summary.parquet``: per (iteration, step) rows of ``what`` = ``total`` (``ns`` the
path's length, ``span_ns`` the step's span: last rank's end - first rank's start), ``category``,
``rank``, ``kernel``, ``cpu_op`` (the share of the path, top 10 names), ``slack`` (one row per
rank: ``ns`` its slack, the largest over its stretches of work, ``min_ns`` the smallest, 0 when
the path crosses the rank's work, ``on_path``: the path spends time on the rank), with ``key``,
``rank``, ``ns``, ``pct`` (of the path; -1 / False where a column does not apply).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.feather as feather
import pyarrow.parquet as pq

from ..events.dataset import write_table
from ..kernels.critical import NEG, POS, latest_times, longest_path, trace_back
from .critical_local import A_, CATEGORIES, E_, S_, T_

SEGMENT_COLUMNS = ("iteration", "step", "order", "rank", "lane", "start_ns", "end_ns", "dur_ns", "weight_ns",
                   "category", "name", "correlation", "external_id")
GPU_CATEGORIES = ("launch_delay", "compute_kernel", "comm_transfer", "memcpy", "kernel_gap", "queued")
SUMMARY_COLUMNS = ("iteration", "step", "what", "key", "rank", "ns", "min_ns", "pct", "on_path", "span_ns",
                   "path_ns")
LOCAL, WAIT, TRANSFER = 0, 1, 2
TOP = 10


def _members(outdir) -> dict:
    """``{(part, correlation, stream): instance}`` of the matched collectives (complete instances
    of two or more ranks)."""
    p = Path(outdir) / "collectives_ranks.parquet"
    if not p.is_file():
        return {}
    t = pq.read_table(p, columns=["instance", "part", "correlation", "stream"])
    inst, part, corr, stream = (t[c].to_numpy() for c in ("instance", "part", "correlation", "stream"))
    n = np.bincount(inst) if len(inst) else np.zeros(0, np.int64)
    keep = n[inst] >= 2 if len(inst) else np.zeros(0, bool)
    return {(int(a), int(b), int(c)): int(i) for a, b, c, i in zip(part[keep], corr[keep], stream[keep], inst[keep])}


class _StepGraph:
    """The job-level graph of one (iteration, step), built from the parts' reduced results."""

    def __init__(self):
        self.t, self.kind, self.part, self.local, self.name, self.stream = [], [], [], [], [], []
        self.lane = []
        self.corr = []
        self.src, self.dst, self.w, self.etype = [], [], [], []

    def add_part(self, p, a, e):
        base = len(self.t)
        self.t += a["t_ns"].tolist()
        self.kind += a["kind"].tolist()
        self.part += [p] * len(a["t_ns"])
        self.local += a["node"].tolist()
        self.name += list(a["name"])
        self.lane += list(a["lane"])
        self.stream += a["stream"].tolist()
        self.corr += a["correlation"].tolist()
        o = np.argsort(a["node"])
        gid = lambda x: base + o[np.searchsorted(a["node"][o], x)]  # noqa: E731
        self.src += gid(e["src"]).tolist()
        self.dst += gid(e["dst"]).tolist()
        self.w += e["w_ns"].tolist()
        self.etype += [LOCAL] * len(e["src"])
        return base

    def add_collectives(self, arrivals: dict, ends: dict, members: dict):
        """``arrivals``/``ends``: ``{(part, correlation, stream): node}``; ``members``: see
        :func:`_members`.  Edges appended in one batch (unmatched transfers first, then each
        instance's waits and transfers), as lists: a per-edge call cost ~0.1 s at 1,024 ranks."""
        by_inst: dict = {}
        t = self.t
        src, dst, w, typ = [], [], [], []
        for key, a in arrivals.items():
            e = ends.get(key)
            if e is None:
                continue
            i = members.get(key)
            if i is None:                                  # unmatched: its own transfer
                src.append(a)
                dst.append(e)
                w.append(int(t[e] - t[a]))
                typ.append(TRANSFER)
            else:
                by_inst.setdefault(i, []).append((a, e))
        for pairs in by_inst.values():
            last = max(t[a] for a, _ in pairs)
            b = len(t)
            t.append(last)
            self.kind.append(-1)
            self.part.append(-1)
            self.local.append(-1)
            self.name.append(self.name[pairs[0][0]])
            self.lane.append("")
            self.stream.append(-1)
            self.corr.append(-1)
            for a, e in pairs:
                src += (a, b)
                dst += (b, e)
                w += (0, int(t[e] - last))
                typ += (WAIT, TRANSFER)
        self.src += src
        self.dst += dst
        self.w += w
        self.etype += typ



def _order(g: _StepGraph, barrier_of_end: dict) -> np.ndarray:
    """Topological positions: by time (an end after its barrier), then end < start < arrival <
    barrier < step end at equal times."""
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind, np.int64)
    key = t.copy()
    for e, b in barrier_of_end.items():
        if key[e] <= t[b]:
            key[e] = t[b]
    cls = np.select([kind == E_, kind == S_, kind == A_, kind == -1, kind == T_], [0, 1, 2, 3, 4], 5)
    for e, b in barrier_of_end.items():
        if key[e] == t[b]:
            cls[e] = 4
    order = np.lexsort((np.arange(len(t)), cls, key))
    pos = np.empty(len(t), np.int64)
    pos[order] = np.arange(len(t))
    return pos


def solve_step(g: _StepGraph) -> tuple | None:
    """Forward and backward pass over one step's graph.  Returns ``(path edges, dist, late, pos,
    keep, dropped)``: the path's edge indices, first to last; earliest and latest times by
    topological position; the node positions; the kept edges (one against the topological order
    is dropped) and how many were dropped.  None when the step has no step end."""
    barrier_of_end = {v: u for u, v, typ in zip(g.src, g.dst, g.etype) if typ == TRANSFER and g.kind[u] == -1}
    pos = _order(g, barrier_of_end)
    src, dst, w = (np.asarray(x, np.int64) for x in (g.src, g.dst, g.w))
    keep = np.flatnonzero(pos[src] < pos[dst]) if len(src) else np.zeros(0, np.int64)
    ps, pd, pw = pos[src[keep]], pos[dst[keep]], w[keep]
    n = len(g.t)
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind, np.int64)
    init = np.full(n, NEG, np.int64)
    init[pos[kind == S_]] = t[kind == S_]
    dist, pred, _ = longest_path(n, ps, pd, pw, init)
    ends = np.flatnonzero(kind == T_)
    if not len(ends):
        return None
    last = ends[np.lexsort((dist[pos[ends]], t[ends]))[-1]]
    path = trace_back(pred, ps, int(pos[last]))
    deadline = np.full(n, POS, np.int64)
    deadline[pos[ends]] = dist[pos[last]]
    late = latest_times(n, ps, pd, pw, deadline)
    return keep[path], dist, late, pos, keep, int(len(src) - len(keep))


def _segments(g: _StepGraph, path, spills: dict, rank_of: dict) -> list:
    """The path's job edges expanded into segment rows ``(rank, lane, t0, t1, weight, category, name)``."""
    rows = []
    cache: dict = {}
    for e in path.tolist():
        u, v, typ = g.src[e], g.dst[e], g.etype[e]
        if typ == LOCAL:
            p = g.part[u]
            if p not in cache:
                s = feather.read_table(spills[p]).to_pydict()
                cache[p] = {d: j for j, d in enumerate(s["dst"])}, s
            by_dst, s = cache[p]
            chain, x = [], g.local[v]
            while x != g.local[u] and x in by_dst:
                j = by_dst[x]
                chain.append((rank_of[p], s["lane"][j], s["t0"][j], s["t1"][j], s["w"][j], CATEGORIES[s["cat"][j]],
                              s["name"][j], s["ref"][j]))
                x = s["src"][j]
            rows += chain[::-1]
        else:
            end = v if typ == TRANSFER else u
            p = g.part[end]
            lane = g.lane[end]
            cat = "comm_transfer" if typ == TRANSFER else "wait"
            rows.append((rank_of[p], lane, g.t[u], g.t[v], g.w[e] if typ == TRANSFER else 0, cat, g.name[end],
                         g.corr[end]))
    return [r for r in rows if r[3] > r[2] or r[4] != 0]


def critical_paths(job, results: list, outdir) -> list:
    """Write ``critical_path.parquet`` and ``critical_path_summary.parquet`` into ``outdir`` from
    the per-part results ``results`` (:func:`~streamtrace.aggregate.critical_local.part_paths`, in part
    order) and the matched collectives already written there.  Returns the written paths."""
    members = _members(outdir)
    rank_of = {p.index: p.rank for p in job.parts}
    spills = {p.index: r["segments"] for p, r in zip(job.parts, results) if r and r["segments"]}
    steps: dict = {}
    for p, r in zip(job.parts, results):
        if not r:
            continue
        a, e = r["anchors"], r["edges"]
        own = set(a["step"].tolist())
        for st in sorted(own):
            if len(own) == 1:                              # the common case: no copies
                steps.setdefault((job.iteration_of(p), st), []).append((p.index, a, e))
                continue
            ma, me = a["step"] == st, e["step"] == st
            steps.setdefault((job.iteration_of(p), st), []).append(
                (p.index, {c: v[ma] for c, v in a.items()}, {c: v[me] for c, v in e.items()}))
    seg_rows, summ_rows = [], []
    for (it, st), parts in sorted(steps.items()):
        g = _StepGraph()
        arrivals, ends = {}, {}
        for p, a, e in parts:
            base = g.add_part(p, a, e)
            for j in np.flatnonzero(a["kind"] == A_).tolist():
                arrivals[(p, int(a["correlation"][j]), int(a["stream"][j]))] = base + j
            for j in np.flatnonzero(a["kind"] == E_).tolist():
                ends[(p, int(a["correlation"][j]), int(a["stream"][j]))] = base + j
        g.add_collectives(arrivals, ends, members)
        solved = solve_step(g)
        if solved is None:
            continue
        path, dist, late, pos, keep, _ = solved
        segs = _segments(g, path, spills, rank_of)
        seg_rows += [(it, st, k) + s for k, s in enumerate(segs)]
        summ_rows += _summary(it, st, g, segs, dist, late, pos, keep, rank_of)
    files = []
    cols = list(zip(*seg_rows)) if seg_rows else [[] for _ in range(11)]
    seg = {"iteration": np.asarray(cols[0], np.int64), "step": np.asarray(cols[1], np.int64),
           "order": np.asarray(cols[2], np.int64), "rank": np.asarray(cols[3], np.int64),
           "lane": np.asarray(cols[4], object), "start_ns": np.asarray(cols[5], np.int64),
           "end_ns": np.asarray(cols[6], np.int64)}
    seg["dur_ns"] = seg["end_ns"] - seg["start_ns"]
    seg |= {"weight_ns": np.asarray(cols[7], np.int64), "category": np.asarray(cols[8], object),
            "name": np.asarray(cols[9], object)}
    ref, gpu = np.asarray(cols[10], np.int64), np.isin(seg["category"], GPU_CATEGORIES)
    seg["correlation"], seg["external_id"] = np.where(gpu, ref, -1), np.where(gpu, -1, ref)
    files += write_table(outdir, "critical_path", seg, list(SEGMENT_COLUMNS))
    summ = {c: np.asarray([r[c] for r in summ_rows], object if c in ("what", "key") else
                          (bool if c == "on_path" else np.int64 if c != "pct" else np.float64))
            for c in SUMMARY_COLUMNS}
    files += write_table(outdir, "critical_path_summary", summ, list(SUMMARY_COLUMNS))
    return files


def _summary(it, st, g, segs, dist, late, pos, keep, rank_of) -> list:
    """The summary rows of one step (module docstring)."""
    path_ns = int(sum(s[4] for s in segs))
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind)
    span = int(t[kind == T_].max() - t[kind == S_].min()) if (kind == S_).any() else 0
    base = {"iteration": it, "step": st, "span_ns": span, "path_ns": path_ns, "rank": -1, "on_path": False,
            "min_ns": -1}
    rows = [base | {"what": "total", "key": "", "ns": path_ns, "pct": 100.0}]
    pct = lambda x: round(100.0 * x / path_ns, 3) if path_ns else 0.0  # noqa: E731

    def add(what, acc, top=None, rank_key=False):
        items = sorted(acc.items(), key=lambda kv: -kv[1])[:top]
        for key, ns in items:
            rows.append(base | {"what": what, "key": str(key), "ns": int(ns), "pct": pct(ns),
                                "rank": int(key) if rank_key else -1, "on_path": True})
    acc: dict = {}
    for s in segs:
        acc[s[5]] = acc.get(s[5], 0) + s[4]
    add("category", acc)
    acc = {}
    for s in segs:
        acc[s[0]] = acc.get(s[0], 0) + s[4]
    on_path = dict(acc)
    add("rank", acc, rank_key=True)
    for what, cats in (("kernel", ("compute_kernel", "memcpy", "comm_transfer")), ("cpu_op", ("cpu_op",))):
        acc = {}
        for s in segs:
            if s[5] in cats:
                acc[s[6]] = acc.get(s[6], 0) + s[4]
        add(what, acc, TOP)
    src, dst, w = (np.asarray(x, np.int64)[keep] for x in (g.src, g.dst, g.w))
    etype = np.asarray(g.etype)[keep]
    ok = (etype == LOCAL) & (dist[pos[src]] > NEG) & (late[pos[dst]] < POS)
    slack = late[pos[dst[ok]]] - dist[pos[src[ok]]] - w[ok]
    part = np.asarray(g.part)[src[ok]]
    for p in sorted(set(np.asarray(g.part)[np.asarray(g.kind) == S_].tolist())):
        sl = slack[part == p]
        r = rank_of[p]
        rows.append(base | {"what": "slack", "key": str(r), "rank": r, "ns": int(max(sl.max(), 0)) if len(sl) else 0,
                            "min_ns": int(max(sl.min(), 0)) if len(sl) else 0, "pct": pct(on_path.get(r, 0)),
                            "on_path": r in on_path})
    return rows
