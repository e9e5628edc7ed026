"""The job level of the what-if replay (``streamtrace.aggregate.whatif``): one step's small graph
over every rank's reduced anchors (``streamtrace.aggregate.whatif_local``), joined through the
matched collectives as the critical path joins them (``streamtrace.aggregate.critical_path``: a
barrier at the last member's arrival, each member's end its transfer after it), solved forward with
every rank's step start at its measured time.

The graph's edges live on disk (``streamtrace.aggregate.job_edges.EdgeFile``: in id order as built,
then the kept ones by destination position); a forward pass reads them a chunk at a time
(``streamtrace.kernels.critical.longest_path_sorted``).  The replay of a change: the touched ranks'
reduced edges skipped as read and their re-reduction merged in (a ``PartsView``), the collectives'
transfers scaled as read (``TransferView``), the forward pass again.  Its answer (``Replay``): every rank's
step end, the span (last end - first start), the median rank's step, and the path that now bounds
it with the rank holding most of it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.critical import NEG
from ..runtime.tuning import trim
from .critical_graph import (BARRIER, Anchor, Edge, barrier_edges, joined_ints, matched_members, member_edges, narrow,
                             member_types, search, tie_classes, time_positions)
from .critical_members import PartMembers
from .job_edges import CHUNK_EDGES, Chosen, EdgeFile, nodes_at
from .whatif_members import Members, TransferView

LOCAL, WAIT, TRANSFER = Edge.local, Edge.wait, Edge.transfer
LOCAL_COLUMNS = ("part", "src", "dst", "w_ns", "host_ns", "gpu_ns", "top_category", "top_name", "top_ns")
"""The ``whatif_edges`` columns the job graph reads (``JobStep._local``)."""
SCOPES = ("intra", "inter")


@dataclass
class StepTables:
    """One (iteration, step)'s rows of the ``whatif_anchors`` / ``whatif_edges`` / ``whatif_ranks``
    tables (column dicts; ``streamtrace.aggregate.whatif_local``); ``edges`` may be a function that
    reads them (called once, after the graph's collectives are built: ``JobStep``).  ``JobStep``
    takes the anchors' and edges' columns out of their dicts."""
    anchors: dict
    edges: dict
    ranks: dict


def _kahn(pos, src, dst) -> np.ndarray:
    """Positions of a topological order of the nodes (Kahn's algorithm, the nodes of equal rank by
    ``pos``, the order by time); nodes on a cycle (collectives matched against the order of the
    ranks' own work) keep their place after the rest, and the edges into them that run backwards are
    left for the caller to drop."""
    import heapq
    n = len(pos)
    indeg = np.bincount(dst, minlength=n)
    o = np.argsort(src, kind="stable")
    first = np.searchsorted(src[o], np.arange(n + 1))
    heap = [(int(pos[v]), v) for v in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    out = np.full(n, -1, np.int64)
    k = 0
    while heap:
        _, u = heapq.heappop(heap)
        out[u] = k
        k += 1
        for e in o[first[u]:first[u + 1]].tolist():
            v = int(dst[e])
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (int(pos[v]), v))
    rest = np.flatnonzero(out < 0)
    out[rest[np.argsort(pos[rest])]] = k + np.arange(len(rest))
    return out.astype(pos.dtype)                   # (int32 as ``positions``' while they fit)


@dataclass
class Replay:
    """One replay of one step: ``end`` ``{part: predicted step end}`` (ns, aligned), ``start``
    ``{part: step start}``, ``span_ns`` (last end - first start), ``step_ns`` (median over the ranks
    of end - start), ``by_part`` ``{part: ns}`` of the path that bounds it (local stretches and the
    rank's transfers), ``top`` the path's heaviest segment ``(part, category, name, ns)``, ``host_ns``
    / ``gpu_ns`` / ``comm_ns`` ``{part: ns}`` on the path, ``dropped`` edges against the order."""
    end: dict
    start: dict
    span_ns: int
    step_ns: int
    by_part: dict
    top: tuple
    host_ns: dict
    gpu_ns: dict
    comm_ns: dict
    dropped: int


CHUNK = 1 << 18
"""Edges a step of ``JobStep``'s whole-graph lookups takes at once (its int64 temporaries: three of 8.4 MB
were the replay's peak at 4,096 synthetic ranks with 1 << 20, under the ranks' edges read whole), and the
ranks' edges it writes to its ``EdgeFile`` at once."""
MATCH_ROWS = 1 << 16
"""Anchors (arrivals and ends) of a batch of parts ``JobStep`` matches to the collectives' members at once (the
batch's keys, their codes and sort).  With each batch found by searches in the arrays' own type
(``critical_graph.search``), 2^16 a batch took the replay's matching at 4,096 synthetic ranks from ~28 to ~13 MB
over the build's level (207.8 -> 197.6 MB); 2^16 alone, each batch's search copying the nodes' parts, gained
nothing."""


def sparse_factors(factor) -> tuple:
    """A transfer factor per member (float[m]) as ``(index int64[k], factor float64[k])`` of the members
    whose factor is not 1 (``JobStep.solve``: a change that scales some collectives writes only theirs)."""
    factor = np.asarray(factor, float).reshape(-1)
    idx = np.flatnonzero(factor != 1)
    return idx, factor[idx]


def _in_order(part, anchor) -> bool:
    """Whether the rows ``(part, anchor)`` (two integer arrays) ascend by part, then anchor (equal rows
    allowed: a stable sort would leave them as they are), ``CHUNK`` rows compared at a time."""
    n = len(part)
    for i in range(0, max(n - 1, 0), CHUNK):
        j = min(i + CHUNK, n - 1)
        p0, p1, a0, a1 = part[i:j], part[i + 1:j + 1], anchor[i:j], anchor[i + 1:j + 1]
        if not ((p1 > p0) | ((p1 == p0) & (a1 >= a0))).all():
            return False
    return True


class JobStep:
    """One step's job-level graph from ``StepTables`` and the matched ``Members``: the
    anchors (``kind`` int8, ``part``; barriers appended; their times ``t`` held while the graph's
    collectives are built, then only the step starts' ``start_t`` at ``starts``), the ranks' reduced edges (``LOCAL``)
    then the collectives' (``WAIT``, ``TRANSFER``) in ``edges`` (an ``EdgeFile``: in memory up to
    ``job_edges.MEMORY_EDGES`` edges, else on disk in ``folder``, the system's temporary folder when None),
    the nodes' topological positions ``pos``; the edges kept are those that run forward in them."""

    def __init__(self, tabs: StepTables, members: Members, release_keys: bool = False, folder=None):
        """The graph of ``tabs`` (its edges' ``part``, ``src``, ``dst``, ``w_ns`` columns taken out and
        written to ``edges`` a batch at a time: the caller lets ``tabs`` go after) and ``members``;
        ``release_keys``: the members' keys are emptied in ``members`` once joined, before the ranks' edges
        are read (the last step's graph: 21 MB at 4,096 synthetic ranks, not held under its build)."""
        a = tabs.anchors
        o = slice(None) if _in_order(a["part"], a["anchor"]) else np.lexsort((a["anchor"], a["part"]))  # (in
        #                                                   order as spilled: no copies, no sort, no index array)
        col = lambda c: a.pop(c)[o]  # noqa: E731  (taken out of the table: what the build lets go is freed)
        self.part, anchor, self.kind = col("part"), col("anchor"), col("kind")
        self.t, self.corr, self.stream = col("t_ns"), col("correlation"), col("stream")
        r = tabs.ranks                                   # (a row a rank-step: not a Python int an anchor)
        self.rank_of = dict(zip(r["part"].tolist(), r["rank"].tolist()))
        self._node_index(anchor)
        del anchor
        self.members_ = members.facts()                 # (the facts a replay reads; the keys built in below)
        self.base_ = None
        self._collectives(members, len(self.t))         # (before the ranks' edges are read: not under its peak)
        if release_keys:
            members.key = members.facts().key
        self.starts = np.flatnonzero(self.kind == Anchor.step_start)    # the solve reads the step starts'
        self.start_t = self.t[self.starts]               # times only: the times by node let go (11.8 MB at
        del self.t                                       # 4,096 synthetic ranks, 1.5 M nodes)
        e = tabs.edges() if callable(tabs.edges) else tabs.edges
        self.folder, self.edges = folder, EdgeFile(folder)
        for b in _batches(e):                           # (the ranks' edge ends as node ids, to disk)
            self.edges.append(self._gid(b["part"], b["src"], np.int32), self._gid(b["part"], b["dst"], np.int32),
                              b["w_ns"])
        nl = self.edges.n
        self._collective_edges()
        self._local(nl, tuple(e[c] for c in LOCAL_COLUMNS[4:]))
        trim()                                          # (the tables' columns and the build's temporaries)

    def _node_index(self, anchor):
        """How ``_gid`` finds a node from the anchors (``self.part`` and ``anchor``, sorted by part, then
        anchor): ``first`` (int64, by part: its first node) when each part's anchors are numbered 0 .. m - 1
        as ``whatif_local`` writes them, else ``key`` (int64 ``part << 32 | anchor`` per node, searched;
        10.6 MB at 4,096 synthetic ranks' 1.3 M anchors)."""
        self.key = self.first = None
        n = len(anchor)
        part = self.part[:n]
        if n and part[0] >= 0:                           # (ascending: the anchors are by part)
            first = np.searchsorted(part, np.arange(int(part[-1]) + 2, dtype=part.dtype))
            if all(np.array_equal(np.arange(i, min(i + CHUNK, n)) - first[part[i:i + CHUNK]], anchor[i:i + CHUNK])
                   for i in range(0, n, CHUNK)):        # (a chunk at a time: no int64 column of every node)
                self.first = first
                return
        self.key = np.asarray(part, np.int64) * (1 << 32) + anchor     # (part and anchor may be int32)

    def _gid(self, part, anchor, dtype=np.int64, out=None) -> np.ndarray:
        """The node of each ``(part, anchor)``, as ``dtype`` (or written into ``out``): the part's first
        node plus the anchor, or the anchor's key searched (``_node_index``); ``CHUNK`` rows at a time (the
        temporaries a chunk's, not the edges': 5 M edges at 4,096 synthetic ranks)."""
        out = np.empty(len(part), dtype) if out is None else out
        for i in range(0, len(out), CHUNK):
            j = slice(i, i + CHUNK)
            a = np.asarray(anchor[j], np.int64)
            if self.first is not None:
                out[j] = self.first[np.asarray(part[j], np.int64)] + a
            else:
                out[j] = np.searchsorted(self.key, np.asarray(part[j], np.int64) * (1 << 32) + a)
        return out

    def with_parts(self, parts, edges) -> "JobStep":
        """This graph with parts ``parts``' reduced edges replaced by ``edges`` (their re-reduction:
        the same anchors, whatif_edges columns of this step): a ``PartsView`` (the collectives and
        the other ranks' edges are this graph's, masked, not copied)."""
        return PartsView(self, parts, edges)

    def _local(self, nl: int, local):
        """The graph's edges written (``edges``: the ``nl`` ranks' reduced edges first, then the
        collectives'): their types, the members' edges, the positions (``pos0``, or Kahn's order when an
        edge runs against it) and the kept edges sorted; ``local``: the ranks' edges' ``host_ns``,
        ``gpu_ns``, ``top_category``, ``top_name``, ``top_ns`` columns."""
        self.m_edge = joined_ints(nl + self.c_medge)                # (int32 while the edges fit)
        del self.c_medge
        self.t_first = nl                                        # the first collective edge
        self.nb = self.edges.n                                   # the first edge of a view's re-reduction
        self.local_ = local
        self.pos = self.pos0
        if self.edges.backward(self.pos):                       # times that disagree (clock skew, 0-length
            src, dst, _ = self.edges.load()                     # events): a true topological order
            self.pos = _kahn(self.pos0, src, dst)
            del src, dst
        self.edges.sort(self.pos, self.part, nl)

    def _collectives(self, members: Members, n: int):
        """Barriers and transfers (module docstring): the members in ``m_*`` arrays (the unmatched transfers
        first, in arrival order, then the matched members by barrier; ``barrier_edges``), their edges'
        types ``c_etype`` (indices from 0: ``_collective_edges`` writes the edges themselves after the
        ranks', from ``_cm``, the members' columns held until then), the positions ``pos0``."""
        a, e, inst = self._matched(members.by_part())
        del self.corr, self.stream                        # (the keys' only: 21 MB at 4,096 synthetic ranks, not
        trim()                                            # held under the time order's sort; the keys' temporaries)
        un = inst < 0                                     # unmatched: its own transfer
        c = barrier_edges(self.t, a, e, inst, n)
        for k in ("lead", "bar_inst"):                    # (not read here)
            del c[k]
        del inst
        au, eu = a[un], e[un]
        del a, e, un
        nu, nb, nm = len(au), len(c["bar_t"]), len(c["m_arr"])
        self.t = np.r_[self.t, c.pop("bar_t")]
        self.kind = np.concatenate([self.kind.astype(np.int8), np.full(nb, BARRIER, np.int8)])   # (-1 .. 3)
        self.part = np.concatenate([self.part, np.full(nb, -1, self.part.dtype)])
        self.c_etype = np.r_[np.full(nu, TRANSFER, np.int8), member_types(nm)]
        self.c_medge = np.r_[np.arange(nu), nu + 2 * np.arange(nm) + 1]   # each member's transfer
        self.m_w = joined_ints(self.t[eu] - self.t[au], c.pop("m_w"))     # its measured transfer (``solve``)
        c["m_w"] = self.m_w[nu:]                                            # (the matched members')
        self.m_inst = joined_ints(np.full(nu, -1, np.int64), c.pop("m_inst"))     # (int32 while the ids fit)
        self.m_part = self.part[np.r_[au, c["m_arr"]]]
        self._view = None
        for k in ("m_bar", "m_arr", "m_end"):            # (held until the edges are written: int32 while they fit)
            c[k] = joined_ints(c[k])
        au, eu = joined_ints(au), joined_ints(eu)
        self._transfer_times(np.r_[au, np.where(c["own"], c["m_arr"], n + c["m_bar"])], np.r_[eu, c["m_end"]])
        self._time_order()                               # (the transfers' arrays let go before the sort)
        self._cm = (n, au, eu, c)
        trim()

    def _collective_edges(self):
        """The collectives' edges written after the ranks' (``edges``): the unmatched transfers, then each
        matched member's wait and transfer (``member_edges``), a chunk of members at a time; ``_cm`` let go."""
        n, au, eu, c = self._cm
        del self._cm
        self.edges.append(au, eu, self.m_w[:len(au)])
        for src, dst, w in member_edges(c, n, CHUNK_EDGES // 2):
            self.edges.append(src, dst, w)

    def _matched(self, members: PartMembers) -> tuple:
        """``critical_graph.matched_members`` of the step's arrivals and ends (every arrival, in node
        order) against ``members``, a batch of parts at a time (``MATCH_ROWS`` anchors or so: a key's part
        is its batch's, so each batch matches as the whole step would; the keys' coding and sort held
        for a batch, not for a step's ~1.3 M anchors at 4,096 synthetic ranks).  Returns
        ``(arrival, end, instance)``, int32 while they fit (the nodes' filled into arrays of the arrivals'
        length as each batch is matched, not joined after; the instances' narrowed as made and joined,
        ``joined_ints``: 20 MB less at 4,096 synthetic ranks' 650 k members, the replay's peak then)."""
        arr = narrow(np.flatnonzero(self.kind == Anchor.arrival))
        end = narrow(np.flatnonzero(self.kind == Anchor.end))
        n = len(self.kind)
        part = self.part[:n]                              # (ascending: the nodes are by part; a part's nodes
        top = int(part[-1]) + 1 if n else 0               # found by search, not a part column of the anchors)
        step = max(1, MATCH_ROWS * max(top, 1) // max(len(arr) + len(end), 1))
        keys = lambda j: (self.part[j], self.corr[j], self.stream[j])  # noqa: E731
        ids = np.int32 if n <= np.iinfo(np.int32).max else np.int64
        a_out, e_out = np.empty(len(arr), ids), np.empty(len(arr), ids)   # (at most an arrival each: filled as
        insts, k = [], 0                                                   # matched, not joined after)
        for lo in range(0, top, step):                    # (``search``: no int64 copy of the int32 arrays a batch)
            nodes = search(part, [lo, lo + step])
            ja, je = (slice(*search(x, nodes).tolist()) for x in (arr, end))
            a, e, inst = matched_members((keys(arr[ja]), arr[ja]), (keys(end[je]), end[je]),
                                         members.of(lo, lo + step - 1), first_only=False)
            a_out[k:k + len(a)], e_out[k:k + len(a)] = a, e
            insts.append(narrow(inst))
            k += len(a)
            del a, e, inst
        del arr, end
        return a_out[:k], e_out[:k], joined_ints(*insts)

    def _transfer_times(self, src, dst):
        """Each transfer's end (``dst``) no earlier than its start (``src``: its barrier, or its own arrival)
        in the time order's keys: ``t`` (edited in place: the build reads no time after this but the step
        starts', no transfer's end; 12 MB at 4,096 ranks) and ``tcls`` (``tie_classes``, int8 a node: an end so
        moved after its barrier).  Called with its arrays made in the call, so that they are let go before
        ``_time_order``'s sort (~10 MB at 4,096 synthetic ranks' 650 k members)."""
        key = self.t
        self.tcls = tie_classes(self.kind)
        hit = key[dst] <= self.t[src]
        e, b = dst[hit], src[hit]
        del hit
        key[e] = self.t[b]
        self.tcls[e] = 4

    def _time_order(self):
        """Positions by time (``_transfer_times``' key), then end < start < arrival < barrier < step end at
        equal times (as the critical path's job graph): ``pos0``."""
        trim()                                           # (the collectives' temporaries handed back before the sort)
        self.pos0 = time_positions(self.t, self.tcls)    # (equal keys in node order)
        del self.tcls

    def members(self, members: Members | None = None) -> TransferView:
        """The matched members of the step (their measured transfers) as a ``TransferView``
        (built once: the collectives do not change with the ranks' edges)."""
        if self.base_ is not None:                      # a copy of with_parts: the base's, built once
            return self.base_.members(members)
        if self._view is None:
            m = _matched_rows(self.m_inst)
            parts = self.m_part[m]
            rank = np.full(int(parts.max()) + 1 if len(parts) else 0, -1, np.int64)    # by part (-1: no rank)
            known = [(p, r) for p, r in self.rank_of.items() if 0 <= p < len(rank)]
            rank[[p for p, _ in known]] = [r for _, r in known]
            self._view = TransferView(self.m_inst[m], rank[parts], self.m_w[m], members or self.members_)
        return self._view

    def solve(self, transfer_factor=None) -> Replay:
        """The forward pass with the matched members' transfers times ``transfer_factor``: per member
        of ``members`` (float[m]), or ``(index, factor)`` for those members of ``members`` whose factor
        is not 1 (``sparse_factors``), None: as measured.  The scaled transfers replace the measured ones
        as the edges are read (the edges on disk are not changed); the pass's temporaries are handed back
        to the OS after it (``trim``).  A caller that passes the factors without holding them (``solve(f())``)
        has them let go before the pass: only the scaled transfers are held under it."""
        over = self._over(transfer_factor)
        del transfer_factor
        out = self._solve(over)
        trim()
        return out

    def _over(self, transfer_factor):
        """``solve``'s factors as the weights that replace the members' measured transfers: ``(edge ids
        ascending, ns int64)``, the ids as the members' edges ``m_edge`` are (int32 while they fit; every
        member's at 4,096 synthetic ranks: 3.9 MB, where int64 ids and their sort were 7.8), None: none."""
        if transfer_factor is not None and not isinstance(transfer_factor, tuple):
            transfer_factor = sparse_factors(transfer_factor)
        if transfer_factor is None or not len(transfer_factor[0]):
            return None
        idx, factor = transfer_factor
        sel = np.flatnonzero(self.m_inst >= 0)[np.asarray(idx, np.int64)]    # (only the members that change)
        ids = self.m_edge[sel]
        scaled = np.rint(self.m_w[sel] * np.asarray(factor, float)).astype(np.int64)
        del sel
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():          # (``m_edge`` ascends: so do these, unless
            o = np.argsort(ids, kind="stable")                          # ``idx`` does not)
            ids, scaled = ids[o], scaled[o]
        return ids, scaled

    def _solve(self, over) -> Replay:
        trim()
        n = len(self.kind)
        dist = np.full(n, NEG, np.int64)
        starts = self.starts
        dist[self.pos[starts]] = self.start_t
        chosen = self._forward_pass(dist, over)
        del over
        ends = np.flatnonzero(self.kind == Anchor.step_end)
        de = dist[self.pos[ends]]                            # (by node: the step ends' only)
        ends, de = ends[de > NEG], de[de > NEG]
        end = {int(p): int(x) for p, x in zip(self.part[ends].tolist(), de.tolist())}
        start = {int(p): int(x) for p, x in zip(self.part[starts].tolist(), self.start_t.tolist())}
        for p, x in zip(self.part[ends].tolist(), de.tolist()):
            end[p] = max(end[p], int(x))
        dropped = self.n_edges() - self._n_kept()
        if not end:
            chosen.close()
            return Replay({}, start, 0, 0, {}, (-1, "", "", 0), {}, {}, {}, dropped)
        last = ends[np.argmax(de)]
        path = chosen.path(int(self.pos[last]))
        chosen.close()
        span = int(dist[self.pos[last]] - min(start.values()))
        gaps = [int(dist[v] - dist[u]) for _, u, v in path]    # (the edges' weights in the pass)
        del dist                                             # (the path's rows read the ranks' edges' columns:
        steps = [end[p] - start[p] for p in end if p in start]   # not beside the arrays by node)
        return self._attribute(self._rows(path, gaps), end, start, span, int(np.median(steps)) if steps else 0,
                               dropped)

    def _forward_pass(self, dist, over) -> Chosen:
        """``EdgeFile.forward_pass`` over ``edges`` (by position: ``dist`` in place; the chosen in-edges
        returned, ``job_edges.Chosen``), the weights of ``over`` ``(ids ascending, ns)`` replacing theirs as
        read, the edges of ``_skipped`` parts left out, ``_extra``'s merged in."""
        return self.edges.forward_pass(dist, over, self._skipped(), self._extra())

    def n_edges(self) -> int:
        """How many edges the graph has (kept or not)."""
        return self.edges.n

    def _n_kept(self) -> int:
        """How many of them its forward pass takes (those that run forward)."""
        return self.edges.n_kept

    def edge_type(self, e: int) -> int:
        """Edge ``e``'s type (``Edge``: ``LOCAL`` the ranks' reduced edges, before ``t_first``, and a view's
        re-reduced ones, from ``nb``; the collectives' ``WAIT`` / ``TRANSFER`` between)."""
        return LOCAL if e < self.t_first or e >= self.nb else int(self.c_etype[e - self.t_first])

    def instance_of(self, e: int) -> int:
        """The matched instance of the member whose transfer is edge ``e`` (-1: none, or an unmatched
        transfer): found in the members' edges ``m_edge`` (ascending), not held per collective edge; searched
        as their own type (an int64 edge id made numpy copy int32 ids as int64 for each search: 5 MB at the
        replay's peak, 4,096 synthetic ranks)."""
        e = int(e)
        if e > np.iinfo(self.m_edge.dtype).max:
            return -1
        at = int(np.searchsorted(self.m_edge, self.m_edge.dtype.type(e)))
        return int(self.m_inst[at]) if at < len(self.m_edge) and int(self.m_edge[at]) == e else -1

    def _extra(self) -> tuple:
        """The edges the forward pass merges into the graph's own: ``(ids, u, v)`` int32 (positions) and
        ``w`` int64, by destination position, then id (none here; a ``PartsView``'s re-reduced ones)."""
        none = np.zeros(0, np.int32)
        return none, none, none, np.zeros(0, np.int64)

    def _skipped(self):
        """bool by part (one more: -1, a collective's edge, False) whose own edges the forward pass skips
        (None: none; a ``PartsView``'s touched parts)."""
        return None

    def _rows(self, path, gaps) -> list:
        """Per edge ``(id, source position, destination position)`` of ``path`` (``job_edges.Chosen.path``): ``(type, src
        node, dst node, weight, host_ns, gpu_ns, top_category, top_name, top_ns, edge id)`` (the last five
        of the ranks' local edges, read for these edges only; 0 / "" for the others); an edge's weight is
        the solve's, ``gaps``' (per edge: ``dist[v] - dist[u]``, the chosen edge's value is its destination's
        distance)."""
        ids = np.asarray([e for e, _, _ in path], np.int64)
        local, new = ids[ids < self.t_first], ids[ids >= self.nb]
        cols = zip(*(np.asarray(c.take(local), object).tolist() for c in self.local_)) if len(local) else iter(())
        for c in self.local_:                           # (the files read: not mapped under the next solve)
            getattr(c, "release", lambda: None)()
        xcols = zip(*(np.asarray(c)[new - self.nb].tolist() for c in self.x_local)) if len(new) else iter(())
        nodes = nodes_at(self.pos, [u for _, u, _ in path] + [v for _, _, v in path])
        out = []
        for (e, u, v), w in zip(path, gaps):
            extra = next(cols) if e < self.t_first else next(xcols) if e >= self.nb else (0, 0, "", "", 0)
            out.append((self.edge_type(e), nodes[u], nodes[v], w) + tuple(extra) + (e,))
        return out

    def _attribute(self, rows, end, start, span, step, dropped) -> Replay:
        """The path's time by part and kind, and its heaviest segment (``rows``: ``_rows``)."""
        by, host, gpu, comm = {}, {}, {}, {}
        top = (-1, "", "", 0)
        for et, src, dst, w, hns, gns, cat, name, tns, e in rows:
            if et == LOCAL:
                p = int(self.part[src])
                by[p] = by.get(p, 0) + w
                host[p] = host.get(p, 0) + int(hns)
                gpu[p] = gpu.get(p, 0) + int(gns)
                if int(tns) > top[3]:
                    top = (p, str(cat), str(name), int(tns))
            elif et == TRANSFER:
                p = int(self.part[dst])
                by[p] = by.get(p, 0) + w
                comm[p] = comm.get(p, 0) + w
                if w > top[3]:
                    i = self.instance_of(e)
                    top = (p, "comm_transfer", self.members_.info.get(i, {}).get("name", "collective"), w)
        return Replay(end, start, span, step, by, top, host, gpu, comm, dropped)


def _matched_rows(inst) -> slice | np.ndarray:
    """The rows of the members' ``inst`` (-1 unmatched) that are matched: the slice after the unmatched
    ones where they all come first (as ``JobStep`` orders them: the matched members' columns read as views,
    not copied; 650 k members at 4,096 synthetic ranks), else a mask."""
    nu = int(np.count_nonzero(inst < 0))
    return slice(nu, None) if not nu or (inst[:nu] < 0).all() else inst >= 0


class PartsView(JobStep):
    """``base`` with parts ``parts``' reduced edges replaced by ``edges`` (``JobStep.with_parts``:
    their re-reduction, the same anchors), numbered after the base's edges (from ``nb``).  When the
    base's positions are its times' (``pos0``) and every new edge runs forward in them, its forward
    pass reads the base's edges, skipping the touched parts' own, and merges the new ones in (no copy
    of the graph); else it writes an ``EdgeFile`` of its own over a topological order of the untouched
    and new edges together (Kahn's, as the base's).  Either way the edges are taken in order of
    destination position, then id: the answer of a graph built with the new edges."""

    def __init__(self, base: JobStep, parts, edges):
        self.__dict__.update(base.__dict__)
        self.base_ = base
        new = {c: np.asarray(edges[c]) for c in LOCAL_COLUMNS}
        x_src, x_dst = self._gid(new["part"], new["src"]), self._gid(new["part"], new["dst"])
        x_w = new["w_ns"].astype(np.int64)
        self.x_local = tuple(new[c] for c in LOCAL_COLUMNS[4:])
        touched = np.unique(np.asarray(list(parts), np.int64))
        touched = touched[(touched >= 0) & (touched < len(base.edges.local))]
        self.n_masked = int(base.edges.local[touched].sum())
        self.nx = len(x_w)
        x_u, x_v = self.pos0[x_src], self.pos0[x_dst]
        self.x = None
        if base.pos is base.pos0 and bool((x_u < x_v).all()):
            o = np.argsort(x_v, kind="stable")             # (by destination, then id: ids ascend with x)
            ids = np.arange(self.nb, self.nb + self.nx, dtype=np.int64)[o]
            self.x = (ids.astype(np.int32), x_u[o].astype(np.int32), x_v[o].astype(np.int32), x_w[o])
            self.drop = np.zeros(len(base.edges.local) + 1, bool)
            self.drop[touched] = True
            self.kept_ = base.edges.n_kept - int(base.edges.local_kept[touched].sum()) + self.nx
        else:
            self._own_file(base, touched, x_src, x_dst, x_w)

    def _own_file(self, base: JobStep, touched, x_src, x_dst, x_w):
        """The view's own ``EdgeFile``: the base's edges and the new ones, sorted over ``pos0`` when every
        untouched and new edge runs forward in it, else over Kahn's order of them."""
        src, dst, w = base.edges.load()
        mask = np.ones(len(src), bool)                     # (the touched parts' own edges out)
        inside = np.zeros(len(base.edges.local) + 1, bool)
        inside[touched] = True
        for i in range(0, base.t_first, CHUNK):
            j = slice(i, min(i + CHUNK, base.t_first))
            np.logical_not(inside[self.part[src[j]]], out=mask[j])
        self.pos = self.pos0
        if (mask & (self.pos0[src] >= self.pos0[dst])).any() or not (self.pos0[x_src] < self.pos0[x_dst]).all():
            self.pos = _kahn(self.pos0, np.r_[src[mask], x_src], np.r_[dst[mask], x_dst])
        del mask
        self.edges = EdgeFile(self.folder)
        self.edges.append(src, dst, w)
        del src, dst, w
        self.edges.append(x_src, x_dst, x_w)
        self.edges.sort(self.pos, self.part, base.t_first, drop_parts=touched)
        self.kept_ = self.edges.n_kept

    def n_edges(self) -> int:
        return self.base_.edges.n - self.n_masked + self.nx

    def _n_kept(self) -> int:
        return self.kept_

    def _extra(self) -> tuple:
        return self.x if self.x is not None else JobStep._extra(self)

    def _skipped(self):
        return self.drop if self.x is not None else None


def _batches(e: dict):
    """The ranks' edges of ``StepTables.edges`` a batch at a time (dicts of ``part``, ``src``, ``dst``,
    ``w_ns``): its ``batches`` (``whatif.graph_rows``), else its columns ``CHUNK`` rows at a time, each
    column taken out of ``e`` (let go once read)."""
    if "batches" in e:
        yield from e.pop("batches")
        return
    cols = [e.pop(c) for c in ("part", "src", "dst", "w_ns")]
    for i in range(0, len(cols[3]), CHUNK):
        j = slice(i, i + CHUNK)
        yield dict(zip(("part", "src", "dst", "w_ns"), (c[j] for c in cols)))
