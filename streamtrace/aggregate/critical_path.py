"""What bounds each step: the critical path across ranks, with each rank's slack and what bounds the
step next (``critical_path.parquet``, ``critical_path_summary.parquet``, ``critical_path_ranks.parquet``
of ``streamtrace aggregate``).

Each rank's step is first reduced in aggregate's per-rank worker
(``streamtrace.aggregate.critical_local``) to its longest local paths between *anchors*: the step's
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

The graph's edges are not held in memory past ``job_edges.MEMORY_EDGES`` (a step of 4,096 synthetic
ranks: 5.1 M edges, ~66 MB as columns): ``streamtrace.aggregate.job_edges.EdgeFile`` writes them in id
order as the graph is built and, for the passes, the ones that run forward in the nodes' topological
order by destination position.  The forward pass (``streamtrace.kernels.critical.longest_path_sorted``
over those chunks, every rank's step start at its own time) gives each anchor the longest path reaching
it; the **critical path** is the one reaching the latest step end (the last rank's), expanded back into
the local segments it crosses.  The backward pass (``streamtrace.kernels.critical.latest_times_sorted``
over the same chunks read last first, every rank's step end due by the path's end) gives each anchor its
latest time (Kelley & Walker's critical-path method, 1959).
The per-rank figures (``streamtrace.aggregate.critical_ranks``): a rank's **slack** is the CPM
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
``category`` (``CATEGORIES``), ``name``, and the event's id in
its rank's trace: ``correlation`` (GPU categories: the GPU event, whose launch shares it) or
``external_id`` (CPU categories: the innermost CPU op's ``External id``), -1 none.
``critical_path_summary.parquet`` and ``critical_path_ranks.parquet``:
``streamtrace.aggregate.critical_ranks``.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa

from ..events.dataset import write_table
from ..kernels.critical import NEG, POS
from ..runtime.tuning import Parking, trim
from .critical_graph import (BARRIER, CATEGORIES, Anchor, Category, Edge, Texts, barrier_edges, joined_ints,
                             matched_members, member_edges, member_types, narrow, tie_classes, time_positions)
from .folder import (CRITICAL_PATH, CRITICAL_PATH_COLUMNS, CRITICAL_PATH_RANKS,
                     CRITICAL_PATH_RANKS_COLUMNS as RANK_COLUMNS, CRITICAL_PATH_SUMMARY,
                     CRITICAL_PATH_SUMMARY_COLUMNS as SUMMARY_COLUMNS)
from .critical_members import PartMembers, p2p_instances
from .critical_ranks import RANK_PARKED, collective_figures, rank_rows, summary_rows
from .critical_segments import DTYPES as _DTYPES, SEGMENTS, segments
from .job_edges import CHUNK_EDGES, EdgeFile, nodes_at
from .job_nodes import NodeColumn

SEGMENT_COLUMNS = CRITICAL_PATH_COLUMNS
GPU_CATEGORIES = ("launch_delay", "compute_kernel", "comm_transfer", "memcpy", "kernel_gap", "queued")
LOCAL, WAIT, TRANSFER = Edge.local, Edge.wait, Edge.transfer
_GPU_CODES = np.asarray([Category[c] for c in GPU_CATEGORIES], np.int8)
SUM_TOLERANCE = 0.001
"""A path whose weights differ from its own span by more than this share gets a warning."""


class JobGraph:
    """The job-level graph of one (iteration, step), built from the parts' reduced results
    (``add_part`` for each, then ``add_collectives`` once): node columns, one row per node: ``t`` int64
    ns, ``kind`` an ``Anchor`` or ``BARRIER`` (int8) and ``part`` (int32) as numpy arrays, and those only
    the output reads on disk (``job_nodes.NodeColumn``, read by index: 21 MB at 4,096 synthetic ranks'
    1.3 M anchors): ``local`` node id in the part's graph (int32), ``name`` / ``lane`` int32 codes of
    ``texts`` (a ``Texts``: ``texts[code]`` decodes), ``corr`` (int64); the anchors' streams are read
    for the collectives' keys only, not kept: 12 MB at 4,096 synthetic ranks), the edges in ``edges`` (an
    ``EdgeFile`` in ``folder``, None: the system's temporary folder; in id order: each part's as added, then
    the collectives'; node ids below 2^31) and their types ``etype`` (int8 LOCAL / WAIT / TRANSFER, by id),
    the barriers (``b_node`` their nodes, ``b_p2p`` whether a point-to-point transfer) and their members
    (``m_bar`` the index of the member's barrier in ``b_node``, ``m_arr`` / ``m_end`` its arrival and
    end nodes, grouped by barrier, each group in its members' order; int32 while they fit: ``joined_ints``)."""

    NODE = ("t", "kind", "part", "local", "name", "lane", "corr")

    def __init__(self, texts: Texts | None = None, folder=None):
        self._parts: list = []
        self._matched: list = []
        self.n = 0
        self.texts = Texts() if texts is None else texts
        self.edges = EdgeFile(folder)
        self.etype = np.zeros(0, np.int8)
        self.local, self.name, self.lane, self.corr = (NodeColumn(d, folder) for d in OUTPUT_DTYPES)

    def add_part(self, p, a, e):
        """Part ``p``'s anchors ``a`` and reduced edges ``e`` (``part_paths`` columns, one step; ``name`` and
        ``lane`` as text, or as int codes of ``texts``); returns the id of its first node.  Its edges go to
        ``edges`` at once, its ``node``, ``name``, ``lane`` and ``correlation`` to the output's node columns
        (``name``, ``lane``, ``node`` taken out of ``a``; ``correlation`` left, int32 where they fit, for the
        caller's collective keys); ``t_ns`` and ``kind`` are taken out when the graph joins the parts
        (``_nodes``), held until then as narrow as the joined ones will be (``NODE_DTYPES``: 4,096 synthetic
        ranks' parts held 170 MB of int64 columns before the join)."""
        base, m = self.n, len(a["t_ns"])
        for c in ("name", "lane"):
            if np.asarray(a[c]).dtype.kind not in "iu":
                a[c] = self.texts.codes(a[c])
        o = np.argsort(a["node"])
        gid = lambda x: base + o[np.searchsorted(a["node"][o], x)]  # noqa: E731
        self.edges.append(gid(e["src"]), gid(e["dst"]), np.asarray(e["w_ns"], np.int64))
        del o, gid
        a["kind"] = np.asarray(a["kind"], np.int8)
        a["correlation"] = narrow(np.asarray(a["correlation"], np.int64))
        for col, c in ((self.local, "node"), (self.name, "name"), (self.lane, "lane")):
            col.append(a.pop(c))
        self.corr.append(a["correlation"])
        self._parts.append((p, m, a))
        self.n += m
        return base

    def _nodes(self):
        """The parts' ``t`` and ``kind`` joined, one column at a time, each part's let go once joined (the
        graph's arrays and the parts' are never all held twice: 4,096 synthetic ranks, 1.3 M anchors)."""
        for c, src in {"t": "t_ns", "kind": "kind"}.items():
            dtype = NODE_DTYPES.get(c, np.int64)
            xs = [np.asarray(a.pop(src), dtype) for _, _, a in self._parts]
            setattr(self, c, np.concatenate(xs) if xs else np.zeros(0, dtype))
            del xs
            trim()               # (each column's parts handed back as it is joined: 4,096 parts' small arrays
            #                      freed at once held ~100 MB of glibc's heap above the live arrays)
        self.part = np.repeat(np.asarray([p for p, _, _ in self._parts], np.int32),
                              [m for _, m, _ in self._parts]) if self._parts else np.zeros(0, np.int32)
        self._parts = []
        self.etype = np.full(self.edges.n, LOCAL, np.int8)

    def add_collectives(self, arrivals: dict, ends: dict, members: dict, p2p=frozenset()):
        """``add_collectives_arrays`` from dicts ``arrivals`` / ``ends`` ``{(part, correlation,
        stream): node}`` and ``members`` ``{(part, correlation, stream): instance}``."""
        k = lambda d: np.asarray(list(d) or np.zeros((0, 3)), np.int64).reshape(-1, 3)  # noqa: E731
        v = lambda d: np.asarray(list(d.values()), np.int64)  # noqa: E731
        self.add_collectives_arrays((k(arrivals), v(arrivals)), (k(ends), v(ends)), (k(members), v(members)), p2p)

    def add_collectives_arrays(self, arrivals, ends, members, p2p=frozenset()):
        """``match`` then ``add_barriers``: the collectives of the whole graph at once."""
        self.match(arrivals, ends, members)
        self.add_barriers(p2p)

    def match(self, arrivals, ends, members):
        """The collectives' members among a batch of parts' anchors (``critical_graph.matched_members``,
        each key once): ``arrivals`` / ``ends`` ``(keys (part, correlation, stream), nodes)``, in the parts'
        order (a key repeated: its first place, its last node, as a dict built in that order);
        ``members`` ``(keys, instance)`` of at least those parts (``PartMembers.of``).  A key's part is
        one of the batch's: batches of whole parts, matched in the parts' order, match as the whole
        graph's keys would."""
        a, e, inst = matched_members(arrivals, ends, members)
        self._matched.append((joined_ints(a), joined_ints(e), joined_ints(inst)))

    def add_barriers(self, p2p=frozenset()):
        """The collectives' barriers and edges (module docstring), after every part and ``match``:
        ``p2p`` the point-to-point instances (``critical_members.p2p_instances``).  Edges appended
        unmatched transfers first (in arrival order), then each instance's (in the order of its first
        arrival) waits and transfers, member by member."""
        self._nodes()
        trim()                                           # (the parts' columns, freed: glibc's heap returned)
        a, e, inst = (joined_ints(*(m[i] for m in self._matched)) for i in range(3))     # (int32 while they fit)
        self._matched = []
        un = inst < 0                                    # unmatched: its own transfer
        c = barrier_edges(self.t, a, e, inst, self.n)
        del c["m_inst"], inst                            # (not read here; the unmatched ends taken out, the
        au, eu = a[un], e[un]                            # rest let go before the joins below: 4,096 synthetic
        del a, e, un                                     # ranks' 650 k members)
        trim()
        self.edges.append(au, eu, self.t[eu] - self.t[au])          # (the edges first, a chunk of members at
        self.etype = np.r_[self.etype, np.full(len(au), TRANSFER, np.int8),   # a time, before the node columns
                           member_types(len(c["m_arr"]))]                       # grow)
        del au, eu
        for src, dst, w in member_edges(c, self.n, CHUNK_EDGES // 2):
            self.edges.append(src, dst, w)
        del c["own"], c["m_w"]
        nb = len(c["bar_t"])
        self.b_node = self.n + np.arange(nb)
        self.b_p2p = np.isin(c.pop("bar_inst"), np.asarray(sorted(p2p), np.int64))
        lead = c["m_arr"][c.pop("lead")]
        self.m_bar, self.m_arr, self.m_end = (joined_ints(c.pop(x)) for x in ("m_bar", "m_arr", "m_end"))
        trim()
        self.t = np.r_[self.t, c.pop("bar_t")]
        self.kind = np.concatenate([self.kind, np.full(nb, BARRIER, self.kind.dtype)])
        self.part = np.concatenate([self.part, np.full(nb, -1, self.part.dtype)])
        self.local.append(np.full(nb, -1, np.int32))
        self.name.append(self.name.take(lead))
        self.lane.append(np.full(nb, self.texts.code(""), np.int32))
        self.corr.append(np.full(nb, -1, np.int64))
        self.n += nb

    def edge_chunks(self, rows: int | None = None):
        """The edges in id order, ``rows`` (``job_edges.CHUNK_EDGES``) at a time: ``(first id, src, dst, w,
        etype)`` (int32 node ids, int64 ns, int8 ``Edge``)."""
        for at, rec in self.edges.raw_chunks(rows):
            yield at, rec["src"], rec["dst"], rec["w"], self.etype[at:at + len(rec)]

    def close(self):
        """Remove the graph's files: its edges' and its output's node columns'."""
        self.edges.close()
        for col in (self.local, self.name, self.lane, self.corr):
            col.close()


NODE_DTYPES = {"kind": np.int8}
"""The job graph's node arrays held narrower than int64 (``JobGraph._nodes``; ``part`` int32 too):
``Anchor`` kinds and ``BARRIER`` fit a byte."""
OUTPUT_DTYPES = (np.int32, np.int32, np.int32, np.int64)
"""The types of the job graph's node columns on disk (``local``, ``name``, ``lane``, ``corr``): a part's
step-graph node ids fit 31 bits, names and lanes are codes of the graph's ``texts``."""


def _order(g: JobGraph) -> np.ndarray:
    """Topological positions: by time (an end after its barrier), then end < start < arrival <
    barrier < step end at equal times."""
    t, kind = g.t, g.kind
    es, bs = [], []
    for _, src, dst, _, etype in g.edge_chunks():             # the transfers out of a barrier
        m = np.flatnonzero(etype == TRANSFER)
        m = m[kind[src[m]] == BARRIER]
        es.append(dst[m])
        bs.append(src[m])
    e = np.concatenate(es)[::-1] if es else np.zeros(0, np.int32)     # an end's barrier: its last transfer's
    b = np.concatenate(bs)[::-1] if bs else np.zeros(0, np.int32)
    del es, bs
    e, first = np.unique(e, return_index=True)
    b = b[first]
    del first
    key = t.copy()
    key[e] = np.maximum(key[e], t[b])
    cls = tie_classes(kind)
    cls[e[key[e] == t[b]]] = 4
    del e, b                                                  # (not beside the sort's order)
    trim()                               # (the edge chunks' and the barriers' temporaries handed back before
    return time_positions(key, cls)      # the sort: 4,096 synthetic ranks, ~25 MB of glibc's heap, the critical
    #                                      path's peak then; equal keys in node order)


@dataclass
class Solved:
    """One step's forward and backward pass: ``path`` the path's edge ids (int64, first to last), ``src`` /
    ``dst`` their nodes and ``w`` the weights the pass took (int64 ns each), ``dist`` / ``late`` earliest
    and latest times by topological position (int64), ``pos`` the node positions, ``dropped`` how many
    edges were dropped (one against the topological order), ``end`` the node the path ends at, ``bounds``
    the step's starts and ends with their times (``Bounds``).  ``dist`` and ``late`` are None from
    ``solve_path`` (and once ``critical_paths`` has read them)."""
    path: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    dist: np.ndarray
    late: np.ndarray
    pos: np.ndarray
    dropped: int
    end: int
    bounds: "Bounds"


@dataclass
class Bounds:
    """The nodes a forward pass starts from and may end at, with their times (int64 node ids, int64 ns):
    every rank's step ``starts`` (``t_starts``) and step ``ends`` (``t_ends``).  Taken from the graph's
    times once (``bounds``): a re-solve over the same order (``solve_path``) needs no time by node (12 MB
    at 4,096 synthetic ranks' 1.5 M nodes, parked while it runs)."""
    starts: np.ndarray
    t_starts: np.ndarray
    ends: np.ndarray
    t_ends: np.ndarray


def bounds(g: JobGraph) -> Bounds:
    """``Bounds`` of ``g``'s step starts and ends (``Anchor.step_start`` / ``Anchor.step_end``)."""
    starts, ends = (np.flatnonzero(g.kind == k) for k in (Anchor.step_start, Anchor.step_end))
    return Bounds(starts, g.t[starts], ends, g.t[ends])


def _over(w):
    """Edge weights as ``EdgeFile.forward_pass`` replaces them: None (the graph's own), ``(ids ascending,
    ns)`` as they are, an array of every edge's weight (by id) as ``(every id, w)``."""
    if w is None or isinstance(w, tuple):
        return w
    w = np.asarray(w, np.int64)
    return np.arange(len(w)), w


def solve_step(g: JobGraph, w=None) -> Solved | None:
    """Forward and backward pass over one step's graph, with the edge weights ``w`` (int64 ns: every edge's,
    by id, or ``(ids ascending, ns)`` those of a few; None: the graph's own).  None when the step has no
    step end.  The edges that run forward in the nodes' topological order (``_order``) are written by
    destination position (``EdgeFile.sort``; the others dropped, counted) and read a chunk at a time by
    both passes; their temporaries are handed back to the OS once freed (``trim``): glibc keeps them in
    its heap otherwise, under the next phase's peak."""
    solved = _solve(g, _over(w))
    trim()
    return solved


def _solve(g: JobGraph, over) -> Solved | None:
    pos = _order(g)
    trim()                               # (each phase's freed temporaries handed back before the next's: glibc
    g.edges.sort(pos)                    # reuses them piecemeal otherwise, its heap's free pages touched one
    trim()                               # by one until they are all resident again: +40-45 MB at the
    b = bounds(g)                        # backward pass, 4,096 synthetic ranks)
    got = _forward(g, pos, over, b)
    trim()
    if got is None:
        return None
    path, dist, last = got
    late = np.full(len(g.kind), POS, np.int64)
    late[pos[b.ends]] = dist[pos[last]]
    g.edges.latest_pass(late, over)
    return Solved(*path, dist, late, pos, g.edges.n - g.edges.n_kept, int(last), b)


def _forward(g: JobGraph, pos, over, b: Bounds):
    """The forward pass over the sorted edges (``EdgeFile.forward_pass``) in the node order ``pos``, from
    the step starts of ``b`` at their times: ``(path, dist, last)`` (the path's ``(ids, src, dst, w)``,
    earliest times by position, the step end of ``b`` it reaches: the latest, then the latest reached), or
    None when the step has none.  Reads ``g.kind``'s length, not its times."""
    n = len(g.kind)
    dist = np.full(n, NEG, np.int64)
    dist[pos[b.starts]] = b.t_starts
    chosen = g.edges.forward_pass(dist, over)
    try:
        ends = b.ends
        if not len(ends):
            return None
        last = ends[np.lexsort((dist[pos[ends]], b.t_ends))[-1]]
        steps = chosen.path(int(pos[last]))
    finally:
        chosen.close()
    at = nodes_at(pos, [u for _, u, _ in steps] + [v for _, _, v in steps])
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    path = (i64([e for e, _, _ in steps]), i64([at[u] for _, u, _ in steps]), i64([at[v] for _, _, v in steps]),
            i64([int(dist[v] - dist[u]) for _, u, v in steps]))
    return path, dist, last


PARKED = ("part", "m_bar", "m_arr", "m_end", "b_node", "b_p2p")
"""The ``JobGraph`` columns its passes (``solve_step``, ``solve_path``) read none of: on disk while they
run (``critical_paths``; ``runtime.tuning.Parking``)."""
PATH_PARKED = PARKED + ("t",)
"""``PARKED`` and the times by node: what ``solve_path`` reads none of (it starts from ``Solved.bounds``)."""


def _parked_path(g: JobGraph, w, base: Solved, lot: Parking) -> Solved | None:
    """``solve_path`` with ``PATH_PARKED`` parked in ``lot`` (``runtime.tuning.Parking`` of ``g``) while it
    runs (left parked after it: the lot's owner brings them back)."""
    lot.only(PATH_PARKED)
    return solve_path(g, w, base)


def solve_path(g: JobGraph, w, base: Solved) -> Solved | None:
    """``solve_step(g, w)``'s path and ``end`` alone (``dist`` / ``late`` None): the forward pass with the
    weights ``w`` (as ``solve_step``'s) over the edges ``base``'s solve sorted (their order and which are
    kept depend on the graph's times, not its weights), no backward pass.  What bounds next re-solves this
    way (``critical_ranks.summary_rows``)."""
    got = _forward(g, base.pos, _over(w), base.bounds)
    trim()
    if got is None:
        return None
    path, _, last = got
    return Solved(*path, None, None, base.pos, base.dropped, int(last), base.bounds)


@dataclass
class CriticalResult:
    """``critical_paths``' result: the files written, the figures for ``aggregate.json``'s
    ``critical_path`` entry and the warnings."""
    files: list
    stats: dict
    warnings: list = field(default_factory=list)


def _step_graphs(job, pieces) -> dict:
    """``{(iteration, step): [(part index, piece, step)]}`` of the parts' pieces (``PieceFile``, None for a
    part without one), in part order: what ``_build`` reads."""
    steps: dict = {}
    for p, piece in zip(job.parts, pieces):
        for st in piece.steps if piece else ():
            steps.setdefault((job.iteration_of(p), st), []).append((p.index, piece, st))
    return steps


MATCH_ROWS = 1 << 18
"""Anchors (arrivals and ends) of a batch of parts matched to the collectives' members at once
(``_build``): the keys' coding and sort held for a batch, not for a step's ~1.3 M anchors."""


def _build(parts, members: PartMembers, p2p=frozenset(), texts: Texts | None = None, folder=None,
           last: bool = False) -> JobGraph:
    """One step's ``JobGraph`` from its parts' ``(part index, piece, step)`` (``_step_graphs``; the list,
    consumed: each part's graph read from its piece as it is added, let go once added) and the matched
    collectives (``PartMembers``, ``critical_members.p2p_instances``), matched a batch of parts at a time
    (``MATCH_ROWS``); ``texts``: the ``Texts`` the anchors' name and lane are coded into; ``folder``: where
    its edges go (``JobGraph``'s); ``last``: the job's last step, ``members`` released once matched
    (``PartMembers.release``)."""
    g = JobGraph(texts, folder)
    batch: list = []                                   # (part, arrivals, ends) of the parts not yet matched
    rows = 0
    parts.reverse()
    while parts:                                       # (each part's graph read, added, let go)
        p, piece, st = parts.pop()
        a, e = piece.graph(st, g.texts)
        base = g.add_part(p, a, e)
        del e
        keys = []
        for kind in (Anchor.arrival, Anchor.end):
            j = np.flatnonzero(a["kind"] == kind)
            keys.append(((np.full(len(j), p, np.int32), a["correlation"][j], a["stream"][j]), base + j))
            rows += len(j)
        batch.append((p, *keys))
        for c in ("stream", "step", "correlation"):    # (read: not held among the columns the graph joins)
            a.pop(c, None)
        del a, keys
        if rows >= MATCH_ROWS or not parts:
            _match(g, batch, members)
            batch, rows = [], 0
    if last:
        members.release()
    trim()                                             # (the parts' edges, turned into node ids: freed)
    g.add_barriers(p2p)
    trim()                                             # (the build's temporaries)
    return g


def _match(g: JobGraph, batch: list, members: PartMembers):
    """``JobGraph.match`` of a batch of parts' ``(part, arrivals, ends)`` (``_build``)."""
    def joined(i):
        return tuple(np.concatenate([b[i][0][c] for b in batch]) for c in range(3)), \
            np.concatenate([b[i][1] for b in batch])
    ps = [b[0] for b in batch]
    g.match(joined(1), joined(2), members.of(min(ps), max(ps)))


def _stats(pieces) -> dict:
    """The parts' ``PartStats`` summed (``PieceFile.info``)."""
    out = {"clipped_events": 0, "clipped_ns": 0, "dropped_edges": 0, "thread_waits": 0, "whole_capture_ranks": 0}
    for r in pieces:
        s = (r.info if r else {}).get("stats") or {}
        for k in ("clipped_events", "clipped_ns", "dropped_edges", "thread_waits"):
            out[k] += int(s.get(k, 0))
        out["whole_capture_ranks"] += int(bool(s.get("whole_capture")))
    return out


def critical_paths(job, pieces: list, outdir, texts: Texts | None = None) -> CriticalResult:
    """Write ``critical_path.parquet``, ``critical_path_summary.parquet`` and
    ``critical_path_ranks.parquet`` into ``outdir`` from the parts' spilled pieces ``pieces``
    (``streamtrace.aggregate.critical_pieces.PieceFile``, None for a part without one, in part order;
    each part's graph read when its step is built, ``_build``) and the matched
    collectives already written there.  ``job``: the ``Job``, or its ``JobParts``; ``texts``: the ``Texts``
    the anchors' ``name`` and ``lane`` are coded into (None: a new one)."""
    members, p2p = PartMembers.read(outdir), p2p_instances(outdir)
    trim()                                             # (the tables' reads: glibc's heap returned)
    texts = Texts() if texts is None else texts
    rank_of = {p.index: p.rank for p in job.parts}
    spills = {p.index: r.info["segments"] for p, r in zip(job.parts, pieces) if r and r.info["segments"]}
    stats = _stats(pieces)
    seg_cols, summ_rows, ranks, warnings = [], [], [], []
    cache: dict = {}                                   # the parts' spilled segments, read once
    steps = _step_graphs(job, pieces)
    order = sorted(steps)
    with tempfile.TemporaryDirectory(prefix=".critical-park.", dir=outdir) as park:   # (the passes' unread columns)
        for i, (it, st) in enumerate(order):
            g = _build(steps.pop((it, st)), members, p2p, texts, park, last=i == len(order) - 1)
            figures = collective_figures(g)                # (before the solve: not beside its times)
            trim()
            with Parking(g, park) as lot:                 # (every column back when the step's passes end)
                lot.only(PARKED)
                solved = solve_step(g)
                if solved is None:
                    continue
                stats["dropped_edges"] += solved.dropped
                with lot.peek():                           # (the path's few values: not the columns read back
                    segs = segments(g, solved, spills, rank_of, cache)      # beside the solve's times)
                lot.only(RANK_PARKED)                      # (two columns back, the edges' types out)
                per_rank = rank_rows(it, st, g, solved, segs, rank_of, figures)
                solved.dist = solved.late = None           # (read: what bounds next needs the order alone)
                trim()                                     # (the per-rank sums' temporaries)
                summ_rows += summary_rows(it, st, g, solved, segs, rank_of, per_rank,
                                          partial(_parked_path, base=solved, lot=lot), lot)
            warnings += _check_sum(it, st, segs)
            n = len(segs["w"])
            seg_cols.append({"iteration": np.full(n, it, np.int64), "step": np.full(n, st, np.int64),
                             "order": np.arange(n, dtype=np.int64)} | segs)
            ranks += per_rank
            g.close()
    trim()                                             # the step graphs' arrays, freed
    stats["paths_not_summing"] = len(warnings)
    files = write_table(outdir, CRITICAL_PATH, _segment_columns(seg_cols), list(SEGMENT_COLUMNS))
    files += write_table(outdir, CRITICAL_PATH_SUMMARY, _typed(summ_rows, SUMMARY_COLUMNS), list(SUMMARY_COLUMNS))
    files += write_table(outdir, CRITICAL_PATH_RANKS, _typed(ranks, RANK_COLUMNS), list(RANK_COLUMNS))
    return CriticalResult(files, stats, warnings)


def _check_sum(it, st, segs) -> list:
    """A warning when the path's segments (``_segments``' columns) are not contiguous or do not sum to its
    span."""
    t0, t1 = segs["t0"], segs["t1"]
    if not len(t0):
        return []
    path = int(segs["w"].sum())
    span = int(t1[-1]) - int(t0[0])
    gaps = int((t0[1:] != t1[:-1]).sum())
    if abs(path - span) <= SUM_TOLERANCE * max(span, 1) and not gaps:
        return []
    return [f"critical path of step {st} (iteration {it}) sums to {path} ns over a span of {span} ns"
            f"{f' with {gaps} gaps' if gaps else ''}: some of the step's time is not explained (report it)"]


def _category_names(codes) -> pa.Array:
    """``Category`` codes (int8) as a string array of their names, decoded by Arrow (no str object a row)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(CATEGORIES, pa.string())).cast(
        pa.string())


def _segment_columns(seg_cols: list) -> dict:
    """``critical_path.parquet``'s columns from the steps' segment columns (``_segments`` with
    ``iteration``, ``step``, ``order``)."""
    names = ("iteration", "step", "order") + SEGMENTS
    cat = {c: np.concatenate([x[c] for x in seg_cols]) if seg_cols else np.zeros(0, _DTYPES.get(c, np.int64))
           for c in names}
    seg = {"iteration": cat["iteration"], "step": cat["step"], "order": cat["order"], "rank": cat["rank"],
           "lane": cat["lane"], "start_ns": cat["t0"], "end_ns": cat["t1"], "dur_ns": cat["t1"] - cat["t0"],
           "weight_ns": cat["w"], "category": _category_names(cat["cat"]), "name": cat["name"]}
    ref, gpu = cat["ref"], np.isin(cat["cat"], _GPU_CODES)
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
