"""What bounds each step: the critical path across ranks, with each rank's slack and what bounds the
step next (``critical_path.parquet``, ``critical_path_summary.parquet``, ``critical_path_ranks.parquet``
of ``streamtrace aggregate``).

Each rank's step is first reduced in aggregate's per-rank worker
(:mod:`streamtrace.aggregate.critical_local`) to its longest local paths between *anchors*: the step's
start, the arrival (start) and end of each communication kernel, the step's end.  The job level is
then a small graph per (iteration, step) whose nodes are those anchors (times on aggregate's
aligned axis, clock offsets of ``--clock-sync collectives`` included):

* every rank's reduced edges ``origin -> sink`` (weight: the local path's length);
* every matched collective instance (``collectives_ranks.parquet``, written by aggregate before
  its workers run: NCCL kernels matched by sequence number or order, all-to-alls included, gloo
  collectives and send / recv from the CPU ops; keyed by ``(part, correlation, stream)``,
  point-to-point transfers included): a barrier node at the last member's arrival, an edge of
  weight 0 from each member's arrival to it (a member cannot finish before the last one arrives: a
  receive not before its send started) and from it to each member's end, weighted by that member's
  transfer time (end - last arrival); a member that ended before the last arrival (a send that did
  not wait for its receive: gloo, NCCL's eager protocol) keeps its own transfer (arrival -> end);
* a communication kernel matched to no instance: arrival -> end, its duration.

The forward pass (:func:`streamtrace.kernels.critical.longest_path`, every rank's step start at
its own time) gives each anchor the longest path reaching it; the **critical path** is the one
reaching the latest step end (the last rank's), expanded back into the local segments it crosses.
The backward pass (:func:`streamtrace.kernels.critical.latest_times`, every rank's step end due by
the path's end) gives each anchor its latest time (Kelley & Walker's critical-path method, 1959).
The per-rank figures (:mod:`streamtrace.aggregate.critical_ranks`): a rank's **slack** is the CPM
total float of its work, the least over its anchors of latest - earliest: how much later its work
could finish without lengthening the step, 0 for every rank the path crosses; its **wait** the
time it spent in collectives waiting for the last member; its **lead** the time it alone held a
collective when it arrived last (over the next-latest arrival).  **What bounds next**: the graph
solved again with the rank holding most of the path as fast as the median of its peers between
collectives.

Every path is checked where it is built: its segments are contiguous and their weights sum to its
own span (first segment's start to last segment's end); a path that does not gets a warning in
``aggregate.json``.  Edges dropped because they run against time, and GPU events clipped to their
successor on a stream (CUDA-graph replays), are counted there too (``critical_path``).

``critical_path.parquet``: one row per segment, in path order: ``iteration``, ``step``, ``order``,
``rank``, ``lane`` (``thread <tid>`` or ``device <d> stream <s>``), ``start_ns``, ``end_ns``,
``dur_ns``, ``weight_ns`` (the time the path counts: ``dur_ns`` but for a ``wait``),
``category`` (:data:`~streamtrace.aggregate.critical_graph.CATEGORIES`), ``name``, and the event's id in
its rank's trace: ``correlation`` (GPU categories: the GPU event, whose launch shares it) or
``external_id`` (CPU categories: the innermost CPU op's ``External id``), -1 none.
``critical_path_summary.parquet`` and ``critical_path_ranks.parquet``:
:mod:`streamtrace.aggregate.critical_ranks`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.feather as feather
import pyarrow.parquet as pq

from .folder import COLLECTIVES_RANKS, CRITICAL_PATH, CRITICAL_PATH_RANKS, CRITICAL_PATH_SUMMARY, table_path
from ..events.dataset import arrow_file, write_table
from ..kernels.critical import NEG, POS, latest_times, longest_path, trace_back
from .critical_graph import BARRIER, CATEGORIES, Anchor, Edge
from .critical_ranks import RANK_COLUMNS, SUMMARY_COLUMNS, rank_rows, summary_rows

SEGMENT_COLUMNS = ("iteration", "step", "order", "rank", "lane", "start_ns", "end_ns", "dur_ns", "weight_ns",
                   "category", "name", "correlation", "external_id")
GPU_CATEGORIES = ("launch_delay", "compute_kernel", "comm_transfer", "memcpy", "kernel_gap", "queued")
LOCAL, WAIT, TRANSFER = Edge.local, Edge.wait, Edge.transfer
SUM_TOLERANCE = 0.001
"""A path whose weights differ from its own span by more than this share gets a warning."""


def _members(outdir) -> dict:
    """``{(part, correlation, stream): instance}`` of the matched collectives (complete instances
    of two or more ranks)."""
    p = table_path(outdir, COLLECTIVES_RANKS)
    if not p.is_file():
        return {}
    t = pq.read_table(arrow_file(p), columns=["instance", "part", "correlation", "stream"])
    inst, part, corr, stream = (t[c].to_numpy() for c in ("instance", "part", "correlation", "stream"))
    n = np.bincount(inst) if len(inst) else np.zeros(0, np.int64)
    keep = n[inst] >= 2 if len(inst) else np.zeros(0, bool)
    return {(int(a), int(b), int(c)): int(i) for a, b, c, i in zip(part[keep], corr[keep], stream[keep], inst[keep])}


P2P = ("send", "recv", "sendrecv")
"""Point-to-point collectives (``collectives_ranks.parquet``'s ``collective``, lower case): a receive
posts early by design, so their waits are not a rank's lateness (:mod:`streamtrace.aggregate.critical_ranks`)."""


def _p2p_instances(outdir) -> set:
    """The matched instances that are point-to-point transfers (:data:`P2P`)."""
    p = table_path(outdir, COLLECTIVES_RANKS)
    if not p.is_file():
        return set()
    t = pq.read_table(arrow_file(p), columns=["instance", "collective"])
    kind = np.char.lower(np.asarray(t["collective"].to_pylist(), dtype=str)) if t.num_rows else np.zeros(0, str)
    return set(t["instance"].to_numpy()[np.isin(kind, P2P)].tolist())


class JobGraph:
    """The job-level graph of one (iteration, step), built from the parts' reduced results:
    nodes (``t`` int64 ns, ``kind`` an :class:`Anchor` or :data:`BARRIER`, ``part``, ``local``
    node id in the part's graph, ``name``, ``lane``, ``stream``, ``corr``), edges (``src``, ``dst``,
    ``w`` int64 ns, ``etype`` LOCAL / WAIT / TRANSFER) and the ``barriers``:
    ``[(barrier node, [(arrival node, end node), ...])]``, ``p2p`` the barrier nodes of point-to-point
    transfers."""

    def __init__(self):
        self.t, self.kind, self.part, self.local, self.name, self.stream = [], [], [], [], [], []
        self.lane, self.corr = [], []
        self.src, self.dst, self.w, self.etype = [], [], [], []
        self.barriers: list = []
        self.p2p: set = set()

    def add_part(self, p, a, e):
        """Part ``p``'s anchors ``a`` and reduced edges ``e`` (:func:`~streamtrace.aggregate.critical_local.part_paths`
        columns, one step); returns the id of its first node."""
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

    def add_collectives(self, arrivals: dict, ends: dict, members: dict, p2p=frozenset()):
        """``arrivals``/``ends``: ``{(part, correlation, stream): node}``; ``members``: see
        :func:`_members`; ``p2p``: the point-to-point instances (:func:`_p2p_instances`).  Edges appended in one batch (unmatched transfers first, then each
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
        for inst, pairs in by_inst.items():
            last = max(t[a] for a, _ in pairs)
            b = len(t)
            if inst in p2p:
                self.p2p.add(b)
            t.append(last)
            self.kind.append(BARRIER)
            self.part.append(-1)
            self.local.append(-1)
            self.name.append(self.name[pairs[0][0]])
            self.lane.append("")
            self.stream.append(-1)
            self.corr.append(-1)
            self.barriers.append((b, pairs))
            for a, e in pairs:
                if t[e] < last:                            # it finished before the last arrival (a send
                    src += (a, a)                          # that did not wait for its receive): its own
                    dst += (b, e)                          # transfer, and nobody finishes before it arrived
                    w += (0, int(t[e] - t[a]))
                else:
                    src += (a, b)
                    dst += (b, e)
                    w += (0, int(t[e] - last))
                typ += (WAIT, TRANSFER)
        self.src += src
        self.dst += dst
        self.w += w
        self.etype += typ


def _order(g: JobGraph, barrier_of_end: dict) -> np.ndarray:
    """Topological positions: by time (an end after its barrier), then end < start < arrival <
    barrier < step end at equal times."""
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind, np.int64)
    key = t.copy()
    for e, b in barrier_of_end.items():
        if key[e] <= t[b]:
            key[e] = t[b]
    cls = np.select([kind == Anchor.end, kind == Anchor.step_start, kind == Anchor.arrival, kind == BARRIER,
                     kind == Anchor.step_end], [0, 1, 2, 3, 4], 5)
    for e, b in barrier_of_end.items():
        if key[e] == t[b]:
            cls[e] = 4
    order = np.lexsort((np.arange(len(t)), cls, key))
    pos = np.empty(len(t), np.int64)
    pos[order] = np.arange(len(t))
    return pos


@dataclass
class Solved:
    """One step's forward and backward pass: ``path`` the path's edge indices (first to last),
    ``dist`` / ``late`` earliest and latest times by topological position, ``pos`` the node
    positions, ``keep`` the edges kept (one against the topological order is dropped), ``dropped``
    their count, ``end`` the node the path ends at."""
    path: np.ndarray
    dist: np.ndarray
    late: np.ndarray
    pos: np.ndarray
    keep: np.ndarray
    dropped: int
    end: int


def solve_step(g: JobGraph, w=None) -> Solved | None:
    """Forward and backward pass over one step's graph, with the edge weights ``w`` (int64 ns per
    edge of ``g``; None: ``g.w``).  None when the step has no step end."""
    barrier_of_end = {v: u for u, v, typ in zip(g.src, g.dst, g.etype) if typ == TRANSFER and g.kind[u] == BARRIER}
    pos = _order(g, barrier_of_end)
    src, dst = (np.asarray(x, np.int64) for x in (g.src, g.dst))
    w = np.asarray(g.w if w is None else w, np.int64)
    keep = np.flatnonzero(pos[src] < pos[dst]) if len(src) else np.zeros(0, np.int64)
    ps, pd, pw = pos[src[keep]], pos[dst[keep]], w[keep]
    n = len(g.t)
    t = np.asarray(g.t, np.int64)
    kind = np.asarray(g.kind, np.int64)
    init = np.full(n, NEG, np.int64)
    init[pos[kind == Anchor.step_start]] = t[kind == Anchor.step_start]
    dist, pred, _ = longest_path(n, ps, pd, pw, init)
    ends = np.flatnonzero(kind == Anchor.step_end)
    if not len(ends):
        return None
    last = ends[np.lexsort((dist[pos[ends]], t[ends]))[-1]]
    path = trace_back(pred, ps, int(pos[last]))
    deadline = np.full(n, POS, np.int64)
    deadline[pos[ends]] = dist[pos[last]]
    late = latest_times(n, ps, pd, pw, deadline)
    return Solved(keep[path], dist, late, pos, keep, int(len(src) - len(keep)), int(last))


def _segments(g: JobGraph, path, spills: dict, rank_of: dict) -> list:
    """The path's job edges expanded into segment rows ``(rank, lane, t0, t1, weight, category, name, ref)``."""
    rows = []
    cache: dict = {}
    for e in path.tolist():
        u, v, typ = g.src[e], g.dst[e], g.etype[e]
        if typ == LOCAL:
            p = g.part[u]
            if p not in cache:
                s = feather.read_table(arrow_file(spills[p])).to_pydict()
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


@dataclass
class CriticalResult:
    """:func:`critical_paths`' result: the files written, the figures for ``aggregate.json``'s
    ``critical_path`` entry and the warnings."""
    files: list
    stats: dict
    warnings: list = field(default_factory=list)


def _step_graphs(job, results) -> dict:
    """``{(iteration, step): [(part index, anchors, edges)]}`` from the parts' results."""
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
    return steps


def _build(parts, members, p2p=frozenset()) -> JobGraph:
    g = JobGraph()
    arrivals, ends = {}, {}
    for p, a, e in parts:
        base = g.add_part(p, a, e)
        for j in np.flatnonzero(a["kind"] == Anchor.arrival).tolist():
            arrivals[(p, int(a["correlation"][j]), int(a["stream"][j]))] = base + j
        for j in np.flatnonzero(a["kind"] == Anchor.end).tolist():
            ends[(p, int(a["correlation"][j]), int(a["stream"][j]))] = base + j
    g.add_collectives(arrivals, ends, members, p2p)
    return g


def _stats(results) -> dict:
    """The parts' :class:`~streamtrace.aggregate.critical_local.PartStats` summed."""
    out = {"clipped_events": 0, "clipped_ns": 0, "dropped_edges": 0, "thread_waits": 0, "whole_capture_ranks": 0}
    for r in results:
        s = (r or {}).get("stats") or {}
        for k in ("clipped_events", "clipped_ns", "dropped_edges", "thread_waits"):
            out[k] += int(s.get(k, 0))
        out["whole_capture_ranks"] += int(bool(s.get("whole_capture")))
    return out


def critical_paths(job, results: list, outdir) -> CriticalResult:
    """Write ``critical_path.parquet``, ``critical_path_summary.parquet`` and
    ``critical_path_ranks.parquet`` into ``outdir`` from the per-part results ``results``
    (:func:`~streamtrace.aggregate.critical_local.part_paths`, in part order) and the matched
    collectives already written there."""
    members, p2p = _members(outdir), _p2p_instances(outdir)
    rank_of = {p.index: p.rank for p in job.parts}
    spills = {p.index: r["segments"] for p, r in zip(job.parts, results) if r and r["segments"]}
    stats = _stats(results)
    seg_rows, summ_rows, ranks, warnings = [], [], [], []
    for (it, st), parts in sorted(_step_graphs(job, results).items()):
        g = _build(parts, members, p2p)
        solved = solve_step(g)
        if solved is None:
            continue
        stats["dropped_edges"] += solved.dropped
        segs = _segments(g, solved.path, spills, rank_of)
        warnings += _check_sum(it, st, segs)
        seg_rows += [(it, st, k) + s for k, s in enumerate(segs)]
        per_rank = rank_rows(it, st, g, solved, segs, rank_of)
        ranks += per_rank
        summ_rows += summary_rows(it, st, g, solved, segs, rank_of, per_rank, solve_step)
    stats["paths_not_summing"] = len(warnings)
    files = write_table(outdir, CRITICAL_PATH, _segment_columns(seg_rows), list(SEGMENT_COLUMNS))
    files += write_table(outdir, CRITICAL_PATH_SUMMARY, _typed(summ_rows, SUMMARY_COLUMNS), list(SUMMARY_COLUMNS))
    files += write_table(outdir, CRITICAL_PATH_RANKS, _typed(ranks, RANK_COLUMNS), list(RANK_COLUMNS))
    return CriticalResult(files, stats, warnings)


def _check_sum(it, st, segs) -> list:
    """A warning when the path's segments are not contiguous or do not sum to its span."""
    if not segs:
        return []
    path = sum(int(s[4]) for s in segs)
    span = int(segs[-1][3]) - int(segs[0][2])
    gaps = sum(1 for a, b in zip(segs, segs[1:]) if b[2] != a[3])
    if abs(path - span) <= SUM_TOLERANCE * max(span, 1) and not gaps:
        return []
    return [f"critical path of step {st} (iteration {it}) sums to {path} ns over a span of {span} ns"
            f"{f' with {gaps} gaps' if gaps else ''}: some of the step's time is not explained (report it)"]


def _segment_columns(seg_rows) -> dict:
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
    return seg


def _typed(rows, columns) -> dict:
    """Row dicts as typed column arrays (str keys object, ``on_path`` bool, ``pct`` float, else int64)."""
    out = {}
    for c in columns:
        kind = object if c in ("what", "key") else bool if c == "on_path" else np.float64 if c.endswith("pct") \
            else np.int64
        out[c] = np.asarray([r[c] for r in rows], kind) if rows else np.zeros(0, kind)
    return out
