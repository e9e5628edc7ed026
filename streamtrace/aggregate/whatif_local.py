"""One rank's part of the what-if replay (``streamtrace.aggregate.whatif``), from the step graphs
of the critical path (``streamtrace.aggregate.critical_local``), in aggregate's per-rank worker or,
for the ranks a change touches, again when the change is replayed.

**Cost and wait.**  In the critical path's graph the dependency a piece of work was waiting on
carries the elapsed time and the others weigh 0 (``wait``).  The replay keeps as *cost* what the
work itself took, and lets the forward pass derive every wait again from the dependencies:

* a CPU op's own time, a host gap, a kernel's / memcpy's duration, a launch's delay and the gap
  before a kernel that its stream or another stream held (when that dependency bound it in the
  trace: a driver's or the GPU's own latency), a GPU -> CPU sync's wake-up, a hand-over between
  threads: cost = the measured time;
* what the trace shows as waiting is a cost of 0 with the dependency beside it: a sync call's own
  time (the GPU end it waited for carries the time), a thread's stretch waiting for another thread,
  and a thread's stretch waiting for a CPU collective run on another thread (gloo's worker: the
  stretch that holds the run's end, unless an ``aten::`` op computes there);
* a dependency that did not bind in the trace (``wait``) costs 0: the replay knows no latency for it.

So the unmodified replay gives every instant its measured time back (fidelity: each wait is
re-derived from a dependency whose own time is measured), and a change re-weighs costs only.
Host gaps with nothing on any thread stay as measured: the replay cannot say what they waited for.

**The reduction** (``streamtrace.kernels.replay.anchor_pairs``): per step, every source anchor
(the step's start, a collective's end) gets an edge to each sink anchor (an arrival, the step's end)
and each other source it reaches, weighted by the longest local path, unless a path through a
collective is at least as long (then the job level derives it); each edge carries its path's CPU
and GPU time and its heaviest segment.  Tables: ``whatif_anchors``, ``whatif_edges``,
``whatif_ranks`` (``ANCHOR_COLUMNS``, ``EDGE_COLUMNS``, ``RANK_COLUMNS``).
"""
from __future__ import annotations

import numpy as np

from ..kernels.replay import anchor_pairs
from .critical_graph import CATEGORIES, TEXTS, Anchor, Category
from .folder import WHATIF_ANCHORS_COLUMNS, WHATIF_EDGES_COLUMNS, WHATIF_RANKS_COLUMNS
from .whatif_changes import EdgeView
from .whatif_graphs import step_graphs

NCAT = len(Category)
HOST = np.asarray([Category.cpu_op, Category.host_gap, Category.launch_delay, Category.sync, Category.thread_wait])
GPU = np.asarray([Category.compute_kernel, Category.memcpy, Category.kernel_gap, Category.queued])
IS_HOST, IS_GPU, IS_CPU_TIME = (np.isin(np.arange(NCAT), x) for x in (HOST, GPU, (Category.cpu_op, Category.host_gap)))
"""Per ``Category`` code: is it one of ``HOST`` / ``GPU`` / a CPU op's or a host gap's time (a table,
not ``np.isin``)."""
CATEGORY_TEXT = np.asarray(CATEGORIES, object)
ANCHOR_COLUMNS = WHATIF_ANCHORS_COLUMNS
EDGE_COLUMNS = WHATIF_EDGES_COLUMNS
RANK_COLUMNS = WHATIF_RANKS_COLUMNS[:-1]
"""A part's rank rows: ``whatif_ranks``' columns but the last, ``replay_end_ns`` (``streamtrace.aggregate.whatif``
adds it after the unmodified replay)."""


def replay_costs(t, cols) -> np.ndarray:
    """Per edge of one step graph (``t`` node times, ``cols`` ``[src, dst, w, cat, lane, name, ref,
    texts]``: ``StepGraph.arrays``) its cost in the replay (module docstring), int64 ns."""
    src, dst, w, cat, _, name = cols[:6]
    cost = np.asarray(w, np.int64).copy()
    sync = np.flatnonzero(cat == Category.sync)
    if len(sync):
        into = np.zeros(len(t), bool)
        into[dst[sync]] = True
        waited = np.flatnonzero(into[dst] & IS_CPU_TIME[cat])
        texts = cols[TEXTS][name[waited]]
        cost[[i for i, x in zip(waited.tolist(), texts.tolist()) if not str(x).startswith("aten::")]] = 0
    return cost


def edge_view(t, cols, rank, ops, medians=None, memo=None) -> EdgeView:
    """One step graph as the changes see it (``EdgeView``; ``memo``: the part's, kept across its steps)."""
    src, dst, _, cat, lane, name = cols[:6]
    return EdgeView(cat, lane, name, cols[TEXTS], t[src], t[dst], rank, ops, medians or {},
                    {} if memo is None else memo)


def apply_changes(cost, view, changes) -> np.ndarray:
    """``cost`` (int64 ns per edge) times every change's factor for this rank (rounded)."""
    f = np.ones(len(cost))
    for c in changes:
        if c.touches(view.rank):
            x = c.edge_factor(view)
            if x is not None:
                f *= x
    return cost if (f == 1).all() else np.rint(cost * f).astype(np.int64)


class ReplayRows:
    """The rows of the ``whatif_*`` tables of one part, step by step (``add``; ``result``)."""

    def __init__(self, iteration: int, part: int, rank: int, changes=(), medians=None):
        self.iteration, self.part, self.rank = iteration, part, rank
        self.changes, self.medians = list(changes), medians
        self.anchors, self.edges, self.ranks = [], [], []
        self.seen: dict = {}                  # text -> its one str object
        self.memo: dict = {}                  # the changes' look-ups in the part's ops (EdgeView.memo)

    def add(self, graphs, step, t, cols, anc, order):
        """One step's graph (the ``on_step`` of ``part_paths``)."""
        cost = replay_costs(t, cols)
        if self.changes:
            cost = apply_changes(cost, edge_view(t, cols, self.rank, graphs.ops, self.medians, self.memo),
                                 self.changes)
        nodes, kinds = anc[0], anc[1]
        pos = np.empty(len(t), np.int64)
        pos[order] = np.arange(len(t))
        src, dst, _, cat, lane, name = cols[:6]
        keep = np.flatnonzero(pos[src] < pos[dst])
        is_src = np.zeros(len(t), np.int8)
        is_sink = np.zeros(len(t), np.int8)
        source = (kinds == Anchor.step_start) | (kinds == Anchor.end)
        is_src[pos[nodes[source]]] = 1
        is_sink[pos[nodes[~source]]] = 1
        vend = np.full(len(t), -1, np.int64)
        arr, end = np.flatnonzero(kinds == Anchor.arrival), np.flatnonzero(kinds == Anchor.end)
        key = lambda i: list(zip(anc[2][i].tolist(), anc[3][i].tolist()))  # noqa: E731
        at_end = dict(zip(key(end), pos[nodes[end]].tolist()))
        for a, k in zip(arr.tolist(), key(arr)):
            if k in at_end:
                vend[pos[nodes[a]]] = at_end[k]
        pairs, cats = anchor_pairs(len(t), pos[src[keep]], pos[dst[keep]], cost[keep], cat[keep].astype(np.int8),
                                   is_src, is_sink, vend, NCAT)
        as_src = np.full(len(t), -1, np.int64)       # node position -> anchor (a source's, else a sink's)
        as_dst = np.full(len(t), -1, np.int64)
        idx = np.arange(len(nodes))
        as_src[pos[nodes[source]]] = idx[source]
        as_dst[pos[nodes[source]]] = idx[source]
        as_dst[pos[nodes[~source]]] = idx[~source]
        top = keep[np.maximum(pairs[:, 3], 0)]
        has = pairs[:, 3] >= 0
        n = len(pairs)
        distinct = np.unique(top, return_inverse=True)
        full = lambda v: np.full(n, v, np.int64)  # noqa: E731
        self.edges.append({"iteration": full(self.iteration), "step": full(step), "part": full(self.part),
                           "src": as_src[pairs[:, 0]], "dst": as_dst[pairs[:, 1]], "w_ns": pairs[:, 2],
                           "host_ns": cats[:, HOST].sum(axis=1), "gpu_ns": cats[:, GPU].sum(axis=1),
                           "top_category": np.where(has, CATEGORY_TEXT[cat[top]], ""),
                           "top_name": self._texts(cols[TEXTS], name, distinct, has),
                           "top_lane": self._texts(cols[TEXTS], lane, distinct, has),
                           "top_ns": np.where(has, cost[top], 0)})
        a = len(nodes)
        self.anchors.append({"iteration": np.full(a, self.iteration, np.int64), "step": np.full(a, step, np.int64),
                             "part": np.full(a, self.part, np.int64), "rank": np.full(a, self.rank, np.int64),
                             "anchor": idx, "kind": kinds.astype(np.int64), "t_ns": t[nodes],
                             "correlation": anc[2].astype(np.int64), "stream": anc[3].astype(np.int64)})
        st, en = t[nodes[kinds == Anchor.step_start]], t[nodes[kinds == Anchor.step_end]]
        self.ranks.append({"iteration": self.iteration, "step": int(step), "part": self.part, "rank": self.rank,
                           "start_ns": int(st.min()) if len(st) else -1, "end_ns": int(en.max()) if len(en) else -1,
                           "host_gap_ns": int(cost[cat == Category.host_gap].sum()),
                           "cpu_ns": int(cost[IS_HOST[cat]].sum()), "gpu_ns": int(cost[IS_GPU[cat]].sum()),
                           "nodes": len(t), "edges": len(src), "pairs": n, "dropped": int(len(src) - len(keep))})

    def _texts(self, table, codes, distinct, has) -> np.ndarray:
        """``table[codes[idx]]`` (object) where ``has``, else "" (``distinct``: ``np.unique(idx,
        return_inverse=True)``): one str object per distinct text over the part's rows (pickled to
        the parent once each, not once a row), looked up once per distinct edge."""
        u, inv = distinct
        texts = np.asarray([self.seen.setdefault(x, x) for x in table[codes[u]].tolist()] + [""], object)
        return texts[np.where(has, inv.reshape(-1), len(u))]

    def result(self) -> dict:
        """``{"anchors": columns, "edges": columns, "ranks": columns}`` (empty columns for none)."""
        def cat(xs, cols):
            if not xs:
                return {c: np.zeros(0, object if c in ("top_category", "top_name", "top_lane") else np.int64)
                        for c in cols}
            return {c: np.concatenate([x[c] for x in xs]) for c in cols}
        ranks = {c: np.asarray([r[c] for r in self.ranks], np.int64) for c in RANK_COLUMNS}
        return {"anchors": cat(self.anchors, ANCHOR_COLUMNS), "edges": cat(self.edges, EDGE_COLUMNS), "ranks": ranks}


def part_replay(job, part, changes, medians=None, spilled=None) -> dict:
    """Part ``part``'s ``whatif_*`` rows with ``changes`` applied (its graphs built again from its
    analysed tables, for the steps ``job.steps`` selects, or taken from those ``kept_graphs`` kept,
    or read from the rank pass's ``spilled`` file: ``whatif_graphs.GraphSpill``); ``medians``: the
    rank's at-median factors.  Returns ``ReplayRows.result``."""
    return part_replays(job, part, [changes], medians, spilled)[0]


def part_replays(job, part, change_sets, medians=None, spilled=None) -> list:
    """``part_replay`` of each of ``change_sets`` (lists of changes), in order, each step's graph
    built (or taken from ``kept_graphs``, or read from ``spilled``) once for all of them."""
    rows = [ReplayRows(job.iteration_of(part), part.index, part.rank, changes, medians) for changes in change_sets]
    for graphs, step, graph in step_graphs(job, part, spilled):
        for r in rows:
            r.add(graphs, step, *graph)
    return [r.result() for r in rows]
