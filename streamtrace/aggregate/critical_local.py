"""One rank's part of the critical path (``streamtrace.aggregate.critical_path``), run in aggregate's
per-rank worker from the rank's Parquet rows (``ops``, ``kernels`` and, where the trace has them,
``cuda_sync``; no trace is read).

**The graph of one step on one rank** (HolisticTraceAnalysis' model, ``hta/analyzers/
critical_path_analysis.py``; where it differs, see docs/critical-path.md).  Nodes are instants
(int64 ns, aligned), edges say "cannot happen before", weighted by the time the edge stands for
(``streamtrace.aggregate.critical_graph``):

* the CPU (``streamtrace.aggregate.critical_cpu``): every thread's chain of op boundaries in the
  step window (``ProfilerStep#N`` on its thread, or the step pattern's; ops of every thread
  starting inside it), the waits between threads (autograd's backward thread, a DataLoader's
  worker), the CPU collectives' runs;
* the GPU (``streamtrace.aggregate.critical_gpu``): launches, stream order, cross-stream waits,
  work queued behind earlier GPU work, each event's duration, GPU -> CPU syncs; events that overlap
  on one stream (CUDA-graph replays) clipped first;
* the step's end: the later of the step thread's last instant and every GPU end.

A trace with no step window at all (an Nsight Systems export without NVTX step ranges, a Kineto
trace without ``ProfilerStep``) gets the whole capture as one window, step number -1.

**The reduction** (so that the job level is small): sources are the step's start and the ends of
the communication events, sinks their arrivals and the rank's step end.  One longest-path pass
(``streamtrace.kernels.critical.reduce_local``, each source at its own time) gives every sink
its longest path and the source it starts from; each sink becomes one job-level edge ``origin ->
sink`` weighted by that path.  The segments of those paths (a tree: every node has one chosen
in-edge) are written to a spill record of the part (pickled: ``write_segments``) and only read back for the
ranks the job's path visits.
"""
from __future__ import annotations

import pickle
import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analyze.outputs import CUDA_SYNC, KERNELS, OPS
from ..kernels.critical import reduce_local
from ..runtime import spillfile
from .alignment import column_numpy, dictionary_numpy
from .critical_cpu import AUTOGRAD_OP, collective_waits, cpu_chains, cpu_collectives
from .critical_gpu import clip_stream_overlaps, gpu_events, queued_behind, sync_edges, zero_linked_syncs
from .critical_graph import TEXTS, Anchor, Category, StepGraph, Texts, int64s
from .cuda_links import SYNC_COLUMNS, sync_links, sync_targets
from .explain import KERNEL_COLUMNS as EXPLAIN_KERNELS
from .gloo import call_runs, has_runs
from .stats import OPS_COLUMNS as STATS_OPS

SYNC_CALLS = re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy|"
                        r"hipStreamSynchronize|hipDeviceSynchronize|hipEventSynchronize|hipMemcpy)$")
COPY_CALLS = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?Async$")
"""Asynchronous copies: they block when their own copy ends inside the call (pageable memory)."""
WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
CUDA_SYNC_CAT = "cuda_sync"    # newer Kineto's GPU sync events: read from ``cuda_sync/``, not as CPU ops
WHOLE_CAPTURE = -1
"""The step number of a rank's whole capture, taken as one window when it has no step at all."""
ANCHOR_COLUMNS = ("step", "node", "kind", "t_ns", "correlation", "stream", "name", "lane")
EDGE_COLUMNS = ("step", "src", "dst", "w_ns")
SEGMENT_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("t0", pa.int64()),
                            ("t1", pa.int64()), ("w", pa.int64()), ("cat", pa.int8()), ("lane", pa.string()),
                            ("name", pa.string()), ("ref", pa.int64())])
SEGMENT_DTYPES = {f.name: object if pa.types.is_string(f.type) else f.type.to_pandas_dtype() for f in SEGMENT_SCHEMA}
KERNEL_COLUMNS = ["device", "stream", "ts_ns", "end_ns", "name", "kind", "correlation", "step"]
OPS_COLUMNS = ["tid", "ts_ns", "dur_ns", "name", "cat", "depth", "parent", "correlation", "external_id"]


@dataclass
class PartStats:
    """What one part's graphs needed to be consistent: GPU events clipped to their successor's
    start on a stream (count, ns), edges dropped against time, waits between threads modelled,
    whether the whole capture was one window (no step in the trace)."""
    clipped_events: int = 0
    clipped_ns: int = 0
    dropped_edges: int = 0
    thread_waits: int = 0
    whole_capture: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _steps(ops) -> list:
    """``[(step number, tid, start, end)]`` of the step ops (``ProfilerStep#N``, or the part's step
    names: ``step_no``, ``streamtrace.aggregate.steps``; aligned ns).  With none, the whole
    capture as one window (``WHOLE_CAPTURE``) on the thread with the most launches (else ops)."""
    out = [(int(ops["step_no"][i]), int(ops["tid"][i]), int(ops["ts_ns"][i]), int(ops["ts_ns"][i] + ops["dur_ns"][i]))
           for i in np.flatnonzero(ops["is_step"]).tolist()]
    if out or not len(ops["ts_ns"]):
        return out
    cpu = ~ops["is_gpu_sync"] if "is_gpu_sync" in ops else np.ones(len(ops["ts_ns"]), bool)
    if not cpu.any():
        return out
    tids = ops["tid"][cpu]
    launches = tids[ops["correlation"][cpu] > 0]
    u, n = np.unique(launches if len(launches) else tids, return_counts=True)
    end = ops["ts_ns"][cpu] + ops["dur_ns"][cpu]
    return [(WHOLE_CAPTURE, int(u[np.argmax(n)]), int(ops["ts_ns"][cpu].min()), int(end.max()))]


def step_graph(ops, k, step, main_tid, s0, s1, calls=None, links=None, syncs=None, texts=None):
    """The graph of one step (module docstring): ``(t, cols, anchors, order)`` with node times ``t``
    (int64[n], creation order), edge columns ``[src, dst, w, cat, lane, name, ref, texts]``
    (``StepGraph.arrays``: ``lane`` / ``name`` int32 codes of ``texts``), the anchors'
    ``(node ids, kinds, correlation, stream, name, lane)`` and the nodes in topological order.
    ``ops`` / ``k``: the part's op and GPU event columns (aligned int64 ns; ``ops`` with the flags
    ``part_paths`` adds; their ``name_code`` columns: codes of ``texts``, made here when absent);
    ``calls``: int64[m, 2] ``(c10d call row, gloo run row)`` of the part's
    CPU collectives (``streamtrace.aggregate.gloo.call_runs``), None for none; ``links``:
    ``sync_links`` (None: the waits are inferred); ``syncs``:
    ``sync_targets`` (None: every sync call waits for the latest
    GPU end inside it); ``texts``: the part's ``Texts`` (None: a new one)."""
    return build_step(ops, k, step, main_tid, s0, s1, calls, links, syncs, texts)[:4]


def build_step(ops, k, step, main_tid, s0, s1, calls=None, links=None, syncs=None, texts=None):
    """``step_graph`` and, fifth, the number of waits between threads it modelled."""
    g = StepGraph(texts)
    if texts is None or "name_code" not in ops or "name_code" not in k:      # (codes of another table: made again)
        ops, k = dict(ops, name_code=g.texts.codes(ops["name"])), dict(k, name_code=g.texts.codes(k["name"]))
    rows = (ops["ts_ns"] >= s0) & (ops["ts_ns"] < s1)
    rows = np.flatnonzero(rows & ~ops["is_gpu_sync"] if "is_gpu_sync" in ops else rows)
    runs = calls[np.isin(calls[:, 1], rows) & np.isin(calls[:, 0], rows)] if calls is not None and len(calls) else \
        np.zeros((0, 2), np.int64)
    cops, collective = collective_waits(ops, rows, runs)       # a run ends at its caller's wake-up
    start_node, end_node, lanes, nwaits = cpu_chains(g, cops, rows, main_tid, runs[:, 1], collective)
    main = next(iter(lanes.values()))
    first, s0 = int(main[1][0]), int(main[0][0])                    # the step's start node (its op's start)
    krows, launch_node, launch_t = _launches(ops, k, rows, step, start_node, s0)
    w = np.sort(ops["ts_ns"][rows[ops["is_wait"][rows]]]) if ops["any_wait"] else None
    sn, en, comm = gpu_events(g, k, krows, launch_node, launch_t, first, s0, w, links, queued_behind(k, krows))
    kend = k["end_ns"][krows]
    linked = sync_edges(g, ops, rows, end_node, kend, en, (k["stream"][krows], k["correlation"][krows]), syncs)
    cpu_a, cpu_e = cpu_collectives(g, cops, rows, runs, start_node, end_node, lanes)
    # the rank's step end: the later of the step thread's last instant and every GPU end
    t_end = int(max([s1, int(main[0][-1])] + ([int(kend.max())] if len(kend) else [])))
    tn = g.nodes([t_end], 3)
    tails = np.concatenate(([main[1][-1]], en))                            # the latest of these ends the step
    tail_t = np.concatenate(([main[0][-1]], kend))
    b = int(np.argmax(tail_t))
    wt = np.zeros(len(tails), np.int64)
    wt[b] = t_end - tail_t[b]
    cat = np.full(len(tails), Category.wait, np.int8)
    cat[b] = Category.host_gap if b == 0 else Category.kernel_gap
    g.edges(tails, np.full(len(tails), tn[0]), wt, cat, "step end", "step end")
    t, cols = g.arrays()
    zero_linked_syncs(cols, end_node[linked])
    anchors = _anchors(ops, k, krows, comm, runs, main_tid, _AnchorNodes(first, sn, en, cpu_a, cpu_e, tn))
    return t, cols, anchors, g.order, nwaits


def _launches(ops, k, rows, step, start_node, s0):
    """The step's GPU events (rows of ``k``, sorted by device, stream, start: those of the step but
    the ones launched before the profiler started, and, for the whole capture, those starting before
    its first CPU instant ``s0``) with their launch node and time (-1 / 0 none)."""
    krows = np.flatnonzero((k["step"] == step) & ((step != WHOLE_CAPTURE) | (k["ts_ns"] >= s0)))
    krows = krows[np.lexsort((k["ts_ns"][krows], k["stream"][krows], k["device"][krows]))]
    rt = rows[ops["correlation"][rows] > 0]                        # runtime calls: launches
    rt = rt[np.argsort(ops["correlation"][rt], kind="stable")]
    launch_node = np.full(len(krows), -1, np.int64)
    launch_t = np.zeros(len(krows), np.int64)
    if len(rt):
        j = np.minimum(np.searchsorted(ops["correlation"][rt], k["correlation"][krows]), len(rt) - 1)
        hit = ops["correlation"][rt][j] == k["correlation"][krows]
        launch_node[hit] = start_node[np.searchsorted(rows, rt[j[hit]])]
        launch_t[hit] = ops["ts_ns"][rt[j[hit]]]
        own = (launch_node >= 0) | (k["correlation"][krows] >= ops["correlation"][rt[0]])  # else launched before
        krows, launch_node, launch_t = krows[own], launch_node[own], launch_t[own]
    return krows, launch_node, launch_t


class _AnchorNodes(NamedTuple):
    """The nodes the anchors of one step sit on (node ids of its ``StepGraph``): the step's start
    (int), every GPU event's start and end node (int64[n], rows ``krows``), every CPU collective
    run's arrival and end node (int64[r]), the step's end node (int64[1])."""
    first: int
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    cpu_arrival: np.ndarray
    cpu_end: np.ndarray
    step_end: np.ndarray


def _anchors(ops, k, krows, comm, runs, main_tid, nodes: _AnchorNodes) -> tuple:
    """``(node ids, kinds, correlation, stream, name, lane)`` of the step's anchors: its start (on
    the lane of the step's thread), every communication event's and CPU collective run's arrival and
    end, its end."""
    first, sn, en, cpu_a, cpu_e, tn = nodes
    nc, nr = int(comm.sum()), len(runs)
    kc = krows[comm]
    gcorr, gstream = k["correlation"][kc], k["stream"][kc]
    lanes: dict = {}                         # one str a lane (a rank's anchors are a few hundred)
    glane = np.asarray([lanes.setdefault((d, x), f"device {d} stream {x}")
                        for d, x in zip(k["device"][kc].tolist(), gstream.tolist())], object)
    rcorr, rname = -2 - runs[:, 0], ops["name"][runs[:, 1]].astype(object)
    rlane = np.asarray([lanes.setdefault(x, f"thread {x}") for x in ops["tid"][runs[:, 1]].tolist()], object)
    none = np.full(1, -1, np.int64)
    gname = k["name"][kc].astype(object)
    blank = np.full(1, "", object)
    cat = np.concatenate
    return (cat([np.full(1, first, np.int64), sn[comm], cpu_a, en[comm], cpu_e, tn]).astype(np.int64, copy=False),
            cat([np.full(1, Anchor.step_start, np.int64), np.full(nc + nr, Anchor.arrival, np.int64),
                 np.full(nc + nr, Anchor.end, np.int64), np.full(1, Anchor.step_end, np.int64)]),
            cat([none, gcorr, rcorr, gcorr, rcorr, none]).astype(np.int64, copy=False),
            cat([none, gstream, np.full(nr, -1, np.int64), gstream, np.full(nr, -1, np.int64), none]).astype(
                np.int64, copy=False),
            cat([blank, gname, rname, gname, rname, blank]),
            cat([np.full(1, f"thread {main_tid}", object), glane, rlane, glane, rlane, blank]))


def reduce_step(t, cols, anchors, order):
    """The longest local paths of one step's graph (module docstring), in one kernel pass
    (``streamtrace.kernels.critical.reduce_local``).  Returns ``(pos, edges, marked, dropped)``:
    ``pos`` the topological position of each node, the reduced edges ``(origin node, sink node,
    weight)`` (positions; int64 ns), the indices of the edges on those paths and the number of edges
    dropped because they run against the topological order."""
    nodes, kinds = anchors[:2]
    sources = nodes[(kinds == Anchor.step_start) | (kinds == Anchor.end)]
    sinks = nodes[(kinds == Anchor.arrival) | (kinds == Anchor.step_end)]
    pos, origin, sink, w, marked, dropped = reduce_local(int64s(t), int64s(order), *(int64s(c) for c in cols[:3]),
                                                         int64s(sources), int64s(sinks))
    return pos, (origin, sink, w), marked, int(dropped)


def part_reads(part, kernels=(), ops=()) -> dict:
    """The part's ``{"kernels", "ops", "cuda_sync"}`` pyarrow tables (None where it has none) with the
    columns ``part_paths`` and ``streamtrace.aggregate.explain.part_tables`` use, and ``kernels`` /
    ``ops`` more: read once for all of them."""
    kc = list(dict.fromkeys(KERNEL_COLUMNS + EXPLAIN_KERNELS + [c for c in kernels if c != "iteration"]))
    oc = list(dict.fromkeys(OPS_COLUMNS + STATS_OPS + list(ops)))
    return {KERNELS: part.read(KERNELS, kc), OPS: part.read(OPS, oc),
            CUDA_SYNC: part.read(CUDA_SYNC, SYNC_COLUMNS)}


def graph_reads(part) -> dict:
    """The part's tables as ``part_reads`` returns them, with only the columns ``part_graphs`` reads
    (a what-if replay's rebuild of the graphs)."""
    return {KERNELS: part.read(KERNELS, KERNEL_COLUMNS), OPS: part.read(OPS, OPS_COLUMNS),
            CUDA_SYNC: part.read(CUDA_SYNC, SYNC_COLUMNS)}


def _columns(part, tables) -> tuple:
    """The part's op and GPU event columns (numpy, aligned ns) with the flags the graph reads."""
    ops_t, k_t = tables[OPS], tables[KERNELS]
    texts = Texts()                                                    # the step graphs' lanes and names
    values, idx = dictionary_numpy(ops_t["name"])                     # name flags per distinct name
    ops = {c: (values[idx] if len(idx) else np.zeros(0, object)) if c == "name" else column_numpy(ops_t[c])
           for c in OPS_COLUMNS if c != "cat"}
    ops["name_code"] = texts.codes(values)[idx]
    k = {c: column_numpy(k_t[c]) for c in KERNEL_COLUMNS if c != "name"} if k_t is not None else \
        {c: np.zeros(0, object if c in ("name", "kind") else np.int64) for c in KERNEL_COLUMNS}
    if k_t is not None:
        kv, kidx = dictionary_numpy(k_t["name"])
        k["name"], k["name_code"] = (kv[kidx] if len(kidx) else np.zeros(0, object)), texts.codes(kv)[kidx]
    else:
        k["name_code"] = np.zeros(0, np.int32)
    ops["ts_ns"] = part.align(ops["ts_ns"])
    uniq = [x or "" for x in values[:-1].tolist()]
    inv = np.where(idx == len(uniq), 0, idx)                           # (a null name: the first's flags)
    flag = lambda f: np.asarray([bool(f(x)) for x in uniq] or [False], bool)[inv]  # noqa: E731
    ops["is_autograd"] = np.asarray([x is not None and x.startswith(AUTOGRAD_OP) for x in values.tolist()],
                                    bool)[idx]
    ops["step_no"] = part.steps.numbers(uniq)[inv] if uniq else np.full(len(inv), -1, np.int64)
    ops["is_step"] = ops["step_no"] >= 0
    ops["is_sync"] = flag(SYNC_CALLS.match)
    ops["is_copy"] = flag(COPY_CALLS.match)
    ops["is_wait"] = flag(lambda x: x in WAIT_CALLS)
    ops["any_wait"] = bool(ops["is_wait"].any())
    # GPU events the ops table holds too
    ops["is_gpu_sync"] = pc.equal(ops_t["cat"], CUDA_SYNC_CAT).fill_null(False).to_numpy(zero_copy_only=False)
    k["ts_ns"], k["end_ns"] = part.align(k["ts_ns"]), part.align(k["end_ns"])
    k["is_comm"], k["is_memory"] = k["kind"] == "communication", k["kind"] == "memory"
    calls = None
    if has_runs(uniq):                                                 # a CPU-only (gloo) rank's collectives
        calls = np.asarray([cr for cr in call_runs([x or "" for x in ops["name"].tolist()], ops["ts_ns"])
                            if cr[1] >= 0],
                           np.int64).reshape(-1, 2)
    return ops, k, calls, texts


@dataclass
class _Acc:
    anchors: list = field(default_factory=list)
    edges: list = field(default_factory=list)
    segs: list = field(default_factory=list)
    base: int = 0
    texts: object = None

    def add(self, step, t, cols, anc, pos, reduced, marked):
        o, s, w = reduced
        nodes, kinds, corr, stream, name, lane = anc
        b = self.base
        self.anchors.append({"step": np.full(len(nodes), step, np.int64), "node": b + pos[nodes], "kind": kinds,
                             "t_ns": t[nodes], "correlation": corr, "stream": stream, "name": name, "lane": lane})
        self.edges.append({"step": np.full(len(o), step, np.int64), "src": b + o, "dst": b + s, "w_ns": w})
        src, dst, ww, cat, lane, name, ref = (c[marked] for c in cols[:TEXTS])
        self.segs.append({"src": b + pos[src], "dst": b + pos[dst],
                          "t0": t[src], "t1": t[dst], "w": ww, "cat": cat.astype(np.int8, copy=False),
                          "lane": lane, "name": name, "ref": ref})     # (codes of the part's Texts)
        self.texts = cols[TEXTS]                     # (append-only: the last step's decodes every step's)
        self.base += len(t)


@dataclass
class PartGraphs:
    """One part's step graphs, built one step at a time by iterating (``(step, t, cols, anchors,
    order)`` as ``step_graph`` returns them, for every step ``job.steps`` selects): ``ops`` / ``k``
    the part's op and GPU event columns (aligned ns), ``stats`` what the graphs needed
    (``PartStats``, filled while iterating)."""
    job: object
    ops: dict
    k: dict
    calls: object
    links: object
    syncs: object
    stats: PartStats
    texts: Texts

    def __iter__(self):
        for window in self.windows(self.job.steps):
            yield (window[0],) + self.build(*window)

    def windows(self, steps) -> list:
        """``[(step, tid, start, end)]`` of the part's step windows that ``steps`` selects (None: all;
        the whole capture, when the part has no step, always)."""
        return [w for w in _steps(self.ops) if steps is None or w[0] in steps or w[0] == WHOLE_CAPTURE]

    def build(self, step, tid, s0, s1) -> tuple:
        """``(t, cols, anchors, order)`` of one window (``step_graph``), ``stats`` updated."""
        self.stats.whole_capture |= step == WHOLE_CAPTURE
        t, cols, anc, order, nwaits = build_step(self.ops, self.k, step, tid, s0, s1, self.calls, self.links,
                                                 self.syncs, self.texts)
        self.stats.thread_waits += nwaits
        return t, cols, anc, order


def part_graphs(job, part, tables) -> PartGraphs | None:
    """The part's step graphs (``PartGraphs``) from its tables (``part_reads``); None when
    it has no op."""
    if tables[OPS] is None or not tables[OPS].num_rows:
        return None
    ops, k, calls, texts = _columns(part, tables)
    stats = PartStats()
    clipped = clip_stream_overlaps(k)
    stats.clipped_events, stats.clipped_ns = clipped.events, clipped.ns
    return PartGraphs(job, ops, k, calls, sync_links(part, tables.get(CUDA_SYNC)),
                      sync_targets(tables.get(CUDA_SYNC)), stats, texts)


def write_segments(folder, segs, texts) -> tuple:
    """One part's path segments (``SEGMENT_SCHEMA``'s columns as numpy arrays, ``lane`` / ``name``
    int32 codes of ``texts``, the part's ``Texts.values()``; ``segs`` one dict of them, or a list, one a
    step) pickled as a record of the spill folder ``folder`` (``runtime.spillfile``), which
    ``read_segments`` reads back for the ranks the job's path visits; returns its ``(path, offset,
    size)``.  Pickled, not Arrow, and as codes: a rank's few hundred distinct names over ~100 k
    rows are written once each; a step at a time, joined when read: most ranks' are never read (the
    A100 job's path stays on one rank of eight)."""
    steps = [segs] if isinstance(segs, dict) else segs
    cols = [{c: x[c] if c in ("lane", "name") else x[c].astype(SEGMENT_DTYPES[c], copy=False)
             for c in SEGMENT_SCHEMA.names} for x in steps]
    rec = spillfile.Record(folder)
    with rec as f:
        pickle.dump((cols, texts), f, protocol=pickle.HIGHEST_PROTOCOL)
    return rec.rec


def read_segments(rec) -> dict:
    """The columns ``write_segments`` wrote as record ``rec`` (its steps joined, in order), ``lane`` /
    ``name`` decoded (object arrays of str)."""
    with spillfile.opened(rec) as f:
        steps, texts = pickle.load(f)
    cols = {c: np.concatenate([x[c] for x in steps]) if steps else
            np.zeros(0, np.int32 if c in ("lane", "name") else SEGMENT_DTYPES[c]) for c in SEGMENT_SCHEMA.names}
    cols["lane"], cols["name"] = texts[cols["lane"]], texts[cols["name"]]
    return cols


def part_paths(job, part, spill, tables=None, on_step=None) -> dict:
    """One part's anchors and reduced edges for every step (aligned ns), the segments of its local
    paths written as a record of the folder ``spill`` (``write_segments``); ``tables``: ``part_reads`` (None: read
    here); ``on_step``: called with ``(part graphs, step, t, cols, anchors, order)`` for each step's
    graph (the what-if replay's reduction, ``streamtrace.aggregate.whatif_local``).  Returns
    ``{"anchors": {column: array}, "edges": {column: array}, "segments": its record or None, "dropped":
    int, "stats": PartStats.as_dict()}``."""
    tables = tables or graph_reads(part)
    graphs = part_graphs(job, part, tables)
    stats = graphs.stats if graphs is not None else PartStats()
    empty = {"anchors": {c: np.zeros(0, np.int64) for c in ANCHOR_COLUMNS},
             "edges": {c: np.zeros(0, np.int64) for c in EDGE_COLUMNS}, "segments": None, "dropped": 0,
             "stats": stats.as_dict()}
    if graphs is None:
        return empty
    acc = _Acc()
    for step, t, cols, anc, order in graphs:
        if on_step is not None:
            on_step(graphs, step, t, cols, anc, order)
        pos, reduced, marked, bad = reduce_step(t, cols, anc, order)
        stats.dropped_edges += bad
        acc.add(step, t, cols, anc, pos, reduced, marked)
    if not acc.anchors:
        return empty | {"stats": stats.as_dict()}
    cat = lambda xs: {c: np.concatenate([x[c] for x in xs]) for c in xs[0]}  # noqa: E731
    rec = write_segments(spill, acc.segs, acc.texts)
    return {"anchors": cat(acc.anchors), "edges": cat(acc.edges), "segments": rec,
            "dropped": stats.dropped_edges, "stats": stats.as_dict()}
