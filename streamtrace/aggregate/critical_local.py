"""One rank's part of the critical path (:mod:`streamtrace.aggregate.critical_path`), run in aggregate's
per-rank worker from the rank's Parquet rows (``ops`` and ``kernels``; no trace is read).

**The graph of one step on one rank** (HolisticTraceAnalysis' model, ``hta/analyzers/
critical_path_analysis.py``; where it differs, see docs/critical-path.md).  Nodes are instants
(int64 ns, aligned), edges say "cannot happen before", weighted by the time the edge stands for:

* **CPU**: every op of the step window (``ProfilerStep#N`` on its thread; ops of every thread
  starting inside it) contributes its start and its end; on each thread consecutive instants are
  chained, the edge weighted by the time between them and named after the innermost op open
  there (``cpu_op``; ``host_gap`` when none but the step is open).  A thread other than the
  step's joins the step's thread at the latest instant before its first op (``host_gap``).
* **launch -> kernel**: the runtime call (same ``correlation``) start -> the GPU event start
  (``launch_delay``); **stream order**: the previous GPU event's end on the stream -> the start
  (``kernel_gap``); **cross-stream wait**, read where the trace links it: newer Kineto writes a
  ``cuda_sync`` ``Stream Wait Event`` on the waiting stream with the ``cudaEventRecord``'s
  correlation id (``wait_on_cuda_event_record_corr_id``) and its stream (``wait_on_stream``),
  kept by analyze in ``cuda_sync/`` (:mod:`streamtrace.analyze.cuda_sync`); the edge runs from the
  last event on the recording stream launched before the record (the largest correlation id below
  the record's: ids are given in call order) to the first event on the waiting stream starting at
  or after the sync event (:func:`~streamtrace.aggregate.cuda_links.linked_waits`), and a rank with such links gets no other cross-stream
  edge.  A trace without links (every real trace here: their ``cudaStreamWaitEvent`` /
  ``cudaEventRecord`` carry a correlation id only and their ``ac2g`` flows end nowhere) gets the
  inference (:func:`_inferred`): the latest end on another stream of the device before the start,
  only for the first event launched on its stream after a ``cudaStreamWaitEvent`` call of the rank
  (between the previous launch on that stream and its own: the wait is enqueued on the stream and
  holds its next event; a trace with no wait calls at all: every event).  Of these the latest to
  happen is the one the event waited for: its edge carries the time up to the start, the others
  weigh 0 (as HTA adds either the launch delay or the kernel-kernel delay, never both, by queue
  length).
* **queued behind earlier work**: the first event of the step on a stream cannot start before the
  stream's earlier GPU work ends: the latest end of an event on that stream that is not the
  step's own and starts before it (the previous step's events, and events executing in the
  window whose launch the trace does not hold because it came before the profiler started: no
  launch in the step and a correlation id below every launch of the step; such events are
  earlier work, not the step's).  When that end binds (it is later than the launch), the edge
  runs from the step's start to the event's start (``queued``): in a GPU-bound job the CPU
  enqueues the step while the GPU still runs the previous one, and the time up to the event is
  the GPU's, not the launch's (HTA's model charges it as launch delay: the profiler window then
  shows a kernel starting 100+ ms after its launch).
* **GPU event** start -> end (``compute_kernel``, ``memcpy`` for memory kinds).  A communication
  event is cut instead: its start is an *arrival* and its end an *end* anchor, joined across
  ranks by the job level.
* **CPU collectives** (a gloo rank: each ``c10d::`` call paired with its ``gloo:<op>`` run as
  :func:`streamtrace.aggregate.gloo.call_runs` pairs them, the rows :mod:`streamtrace.aggregate.gloo` matches
  across ranks): the run is cut like a communication kernel (its start an *arrival*, its end an
  *end* anchor, ``correlation`` -2 - the call's op row, ``stream`` -1, as in
  ``collectives_ranks.parquet``).  A run on a worker thread (gloo's asynchronous collectives)
  cannot start before its call (``host_gap`` edge named ``queue gloo:<op>``; that thread is not
  joined to the step's thread otherwise), and the calling thread's first instant at or after the
  run's end waits for it (``sync``); a run inline (send / recv) continues its own thread.
* **GPU -> CPU sync**: ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` /
  ``cudaEventSynchronize`` / a synchronous ``cudaMemcpy``: the latest GPU end inside the call
  -> the call's end (``sync``), the call's own time then weighs 0 (the CPU waited).

**The reduction** (so that the job level is small): sources are the step's start and the ends of
the communication events, sinks their arrivals and the rank's step end (the later of the step's
CPU end and its last GPU end).  One longest-path pass (:func:`streamtrace.kernels.critical.longest_path`,
each source at its own time) gives every sink its longest path and the source it starts from;
each sink becomes one job-level edge ``origin -> sink`` weighted by that path.  The segments of
those paths (a tree: every node has one chosen in-edge) are written to a file of the part (Arrow IPC) and only
read back for the ranks the job's path visits.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from ..events.sortedsets import sorted_distinct
from ..kernels.critical import NEG, longest_path, trace_back
from .alignment import column_numpy
from .explain import KERNEL_COLUMNS as EXPLAIN_KERNELS
from .cuda_links import linked_waits, sync_links, SYNC_COLUMNS, sync_target, sync_targets
from .gloo import call_runs, has_runs
from .stats import OPS_COLUMNS as STATS_OPS

CATEGORIES = ("cpu_op", "launch_delay", "compute_kernel", "comm_transfer", "memcpy", "kernel_gap", "sync", "host_gap",
              "wait", "queued")
"""Segment categories (``wait``: a zero-weight edge, the time something waited; never on a
consistent path; ``queued``: the step's first event on a stream waited behind GPU work launched
before the step: the CPU ran ahead and the GPU bounds the step)."""
C = {c: i for i, c in enumerate(CATEGORIES)}
SYNC_CALLS = re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy|"
                        r"hipStreamSynchronize|hipDeviceSynchronize|hipEventSynchronize|hipMemcpy)$")
WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
CUDA_SYNC_CAT = "cuda_sync"    # newer Kineto's GPU sync events: read from ``cuda_sync/``, not as CPU ops
S_, A_, E_, T_ = 0, 1, 2, 3          # anchor kinds: step start, arrival, end, step end
ANCHOR_COLUMNS = ("step", "node", "kind", "t_ns", "correlation", "stream", "name", "lane")
EDGE_COLUMNS = ("step", "src", "dst", "w_ns")
SEGMENT_SCHEMA = pa.schema([("step", pa.int64()), ("src", pa.int64()), ("dst", pa.int64()), ("t0", pa.int64()),
                            ("t1", pa.int64()), ("w", pa.int64()), ("cat", pa.int8()), ("lane", pa.string()),
                            ("name", pa.string()), ("ref", pa.int64())])
KERNEL_COLUMNS = ["device", "stream", "ts_ns", "end_ns", "name", "kind", "correlation", "step"]
OPS_COLUMNS = ["tid", "ts_ns", "dur_ns", "name", "cat", "depth", "parent", "correlation", "external_id"]


class _Graph:
    """Growing node and edge arrays of one step (node ids in creation order)."""

    def __init__(self):
        self.t, self.cls, self.e = [], [], []

    def nodes(self, t, cls=1) -> np.ndarray:
        """New nodes at times ``t``; ``cls`` orders nodes of equal time (a GPU end 0, a CPU instant
        1, a GPU start 2, the step end 3; then creation order), so that every edge runs forward."""
        base = sum(len(x) for x in self.t)
        self.t.append(np.asarray(t, np.int64))
        self.cls.append(np.broadcast_to(np.asarray(cls, np.int8), len(t)))
        return base + np.arange(len(t), dtype=np.int64)

    def edges(self, src, dst, w, cat, lane, name, ref=-1):
        """``lane``, ``name``: object arrays (or scalars) naming each edge's thread/stream and event;
        ``ref``: the event's id in the trace (int64: the GPU event's ``correlation`` for GPU
        categories, the CPU op's ``External id`` for CPU ones; -1 none)."""
        n = len(src)
        if n:
            b = lambda x: np.broadcast_to(np.asarray(x, object), n)  # noqa: E731
            self.e.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64),
                           np.broadcast_to(np.asarray(cat, np.int8), n), b(lane), b(name),
                           np.broadcast_to(np.asarray(ref, np.int64), n)))

    def arrays(self):
        t = np.concatenate(self.t) if self.t else np.zeros(0, np.int64)
        self.order = np.lexsort((np.arange(len(t)), np.concatenate(self.cls) if self.cls else t, t))
        cols = [np.concatenate([e[i] for e in self.e]) if self.e else
                np.zeros(0, object if i in (4, 5) else np.int64) for i in range(7)]
        return t, cols


def _steps(ops) -> list:
    """``[(step number, tid, start, end)]`` of the step ops (``ProfilerStep#N``, or the part's step
    names: ``step_no``, :mod:`streamtrace.aggregate.steps`; aligned ns)."""
    out = []
    for i in np.flatnonzero(ops["is_step"]).tolist():
        out.append((int(ops["step_no"][i]), int(ops["tid"][i]), int(ops["ts_ns"][i]),
                    int(ops["ts_ns"][i] + ops["dur_ns"][i])))
    return out


def _cpu(g: _Graph, ops, rows, main_tid, cut=None):
    """The CPU chains of the op rows ``rows`` (window of one step); the chain edges inside the ops
    ``cut`` (op rows: CPU collectives' runs, joined across ranks instead) are left out.  Returns
    ``(start node, end node)`` int64 arrays indexed like ``rows`` and ``{tid: (times, node ids)}``
    of every thread's chain (the step thread's first)."""
    cut = np.zeros(0, np.int64) if cut is None else cut
    lanes = {}
    start_node = np.full(len(rows), -1, np.int64)
    end_node = np.full(len(rows), -1, np.int64)
    tids = ops["tid"][rows]
    order_t = [main_tid] + sorted(set(tids.tolist()) - {main_tid})
    main = None
    for tid in order_t:
        sel = rows[tids == tid]
        if not len(sel):
            continue
        ts, te = ops["ts_ns"][sel], ops["ts_ns"][sel] + ops["dur_ns"][sel]
        n = len(sel)
        depth = np.tile(ops["depth"][sel].astype(np.int64), 2)
        t = np.concatenate([ts, te])
        is_start = np.r_[np.ones(n, bool), np.zeros(n, bool)]
        op = np.r_[sel, sel]
        key2 = np.where(is_start, depth, -depth)
        o = np.lexsort((key2, is_start, t))
        t, is_start, op = t[o], is_start[o], op[o]
        ids = g.nodes(t)
        k = np.searchsorted(rows, op)
        start_node[k[is_start]] = ids[is_start]
        end_node[k[~is_start]] = ids[~is_start]
        par = ops["parent"][op]
        inner = np.where(is_start, op, par)                         # innermost op open after each instant
        ok = (inner >= 0) & (inner < len(ops["tid"]))
        inner = np.where(ok, inner, -1)
        ok &= ops["tid"][np.maximum(inner, 0)] == tid
        inner = np.where(ok, inner, -1)
        name = np.where(inner >= 0, ops["name"][np.maximum(inner, 0)], "")
        gap = (inner < 0) | ops["is_step"][np.maximum(inner, 0)]
        cat = np.where(gap, C["host_gap"], C["cpu_op"]).astype(np.int8)
        ext = np.where(inner >= 0, ops["external_id"][np.maximum(inner, 0)], -1)
        keep = _outside(op, is_start, cut)
        g.edges(ids[:-1][keep], ids[1:][keep], np.diff(t)[keep], cat[:-1][keep], f"thread {tid}", name[:-1][keep],
                ext[:-1][keep])
        lanes[tid] = (t, ids)
        if main is None:
            main = (t, ids)
        elif not (is_start[0] and np.isin(op[0], cut)):            # join the step's thread (a CPU
            j = np.searchsorted(main[0], t[0], "right") - 1         # collective's run: its call instead)
            if j >= 0:
                g.edges([main[1][j]], [ids[0]], [t[0] - main[0][j]], C["host_gap"], f"thread {tid}", "thread start")
    return start_node, end_node, lanes


def _outside(op, is_start, cut) -> np.ndarray:
    """Mask of a thread's chain edges (between consecutive instants ``op``/``is_start``, sorted)
    that lie outside every op of ``cut``: an edge from a cut op's start up to its end is inside."""
    n = len(op) - 1
    if n <= 0 or not len(cut):
        return np.ones(max(n, 0), bool)
    d = np.zeros(n + 1, np.int64)
    hit = np.isin(op, cut)
    np.add.at(d, np.flatnonzero(hit & is_start), 1)
    np.add.at(d, np.flatnonzero(hit & ~is_start), -1)
    return np.cumsum(d)[:-1] <= 0


def _gpu(g: _Graph, k, rows, launch_node, launch_t, first, s0, waits=None, links=None, prior=None):
    """Nodes and edges of the GPU events ``rows`` (one step).  ``waits``: the sorted start times
    of the rank's stream-wait calls in the step (None: the trace records none, every event may
    wait); ``links``: the rank's explicit cross-stream links (:data:`~streamtrace.aggregate.cuda_links.LINK_COLUMNS` arrays, aligned
    ns; None: the trace has none, the waits are inferred).  Returns (start node, end node, is communication) per row, in ``rows``' order (sorted
    by device, stream, start)."""
    dev, stream, ts, te = (k[c][rows] for c in ("device", "stream", "ts_ns", "end_ns"))
    kind = k["kind"][rows]
    comm = kind == "communication"
    n = len(rows)
    both = g.nodes(np.stack([ts, te], axis=1).reshape(-1), np.tile(np.asarray([2, 0], np.int8), n))
    sn, en = both[0::2], both[1::2]
    en = np.where(te == ts, sn, en)                 # a zero-length event is one instant
    lane = np.asarray([f"device {d} stream {s}" for d, s in zip(dev.tolist(), stream.tolist())], object)
    name = k["name"][rows]
    body = ~comm
    corr = k["correlation"][rows]
    g.edges(sn[body], en[body], (te - ts)[body], np.where(kind[body] == "memory", C["memcpy"], C["compute_kernel"]),
            lane[body], name[body], corr[body])
    same = np.r_[False, (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])]
    prev = np.where(same, np.arange(n) - 1, -1)
    if links is not None:       # Kineto's explicit links: only they make an event wait on another stream
        x = linked_waits(dev, stream, ts, te, corr, links)
    else:
        x = _inferred(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits)
    prior = np.full(n, NEG, np.int64) if prior is None else prior
    cand_t = np.stack([np.where(launch_node >= 0, launch_t, NEG), np.where(prev >= 0, te[np.maximum(prev, 0)], NEG),
                       np.where(x >= 0, te[np.maximum(x, 0)], NEG), prior])
    bind = np.argmax(cand_t, axis=0)
    has = cand_t.max(axis=0) > NEG
    for c, srcs, cat in ((0, launch_node, C["launch_delay"]), (1, np.where(prev >= 0, en[np.maximum(prev, 0)], -1),
                                                              C["kernel_gap"]),
                         (2, np.where(x >= 0, en[np.maximum(x, 0)], -1), C["kernel_gap"])):
        m = srcs >= 0
        w = np.where(bind[m] == c, ts[m] - cand_t[c][m], 0)
        g.edges(srcs[m], sn[m], w, np.where(bind[m] == c, cat, C["wait"]), lane[m], name[m], corr[m])
    m = has & (bind == 3)                            # queued behind earlier work: from the step's start
    g.edges(np.full(int(m.sum()), first), sn[m], ts[m] - s0, C["queued"], lane[m], name[m], corr[m])
    m = ~has
    g.edges(np.full(int(m.sum()), first), sn[m], ts[m] - s0, C["kernel_gap"], lane[m], name[m], corr[m])
    return sn, en, comm


def queued_behind(k, rows) -> np.ndarray:
    """Per row of ``rows`` (one step's GPU events, sorted by device, stream, start): for the first
    event of its stream, the latest end of an event of ``k`` on the same device and stream that
    starts before it (none of the step's own: the first of the stream starts before them); NEG for
    every other row and where there is none.  int64 ns (the times of ``k``).  The index (events by
    stream and start, a running maximum of their ends) is built once per ``k`` and kept in it."""
    out = np.full(len(rows), NEG, np.int64)
    if not len(rows):
        return out
    if "queue_index" not in k:
        key = k["device"].astype(np.int64) * (1 << 32) + k["stream"].astype(np.int64)
        o = np.lexsort((k["ts_ns"], key))
        key, ts, end = key[o], k["ts_ns"][o], k["end_ns"][o]
        run = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1]      # each stream's first position
        mx = end.copy()
        for a, b in zip(run.tolist(), run[1:].tolist() + [len(end)]):
            mx[a:b] = np.maximum.accumulate(end[a:b])
        k["queue_index"] = (key, ts, mx)
    key, ts, mx = k["queue_index"]
    dev, st, t0 = k["device"][rows], k["stream"][rows], k["ts_ns"][rows]
    first = np.flatnonzero(np.r_[True, (dev[1:] != dev[:-1]) | (st[1:] != st[:-1])])
    q = dev[first].astype(np.int64) * (1 << 32) + st[first].astype(np.int64)
    lo = np.searchsorted(key, q, "left")
    hi = np.searchsorted(key, q, "right")
    # the last event of the stream starting strictly before the row: its position in ts[lo:hi]
    pos = np.asarray([lo_ + int(np.searchsorted(ts[lo_:hi_], t_, "left")) - 1
                      for lo_, hi_, t_ in zip(lo.tolist(), hi.tolist(), t0[first].tolist())], np.int64)
    ok = pos >= lo
    out[first[ok]] = mx[pos[ok]]
    return out


def _inferred(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits):
    """Cross-stream waits where the trace does not link them (module docstring): per event (sorted
    by device, stream, start) the row of the latest end on another stream of the device before its
    start, -1 none; with ``waits`` (the stream-wait calls' start times) only for the first event
    launched on its stream after such a call."""
    n = len(ts)
    x = np.full(n, -1, np.int64)
    for d in np.unique(dev).tolist():
        on = np.flatnonzero(dev == d)
        oe = on[np.argsort(te[on], kind="stable")]
        j = np.searchsorted(te[oe], ts[on], "right") - 1
        cand = np.where(j >= 0, oe[np.maximum(j, 0)], -1)
        x[on] = np.where((cand >= 0) & (stream[np.maximum(cand, 0)] != stream[on]), cand, -1)
    if waits is not None:       # only the first event launched on its stream after a wait call waits
        lo = np.where(prev >= 0, launch_t[np.maximum(prev, 0)], s0)
        after = np.searchsorted(waits, launch_t, "left") - np.searchsorted(waits, lo, "right") > 0
        x = np.where(after | (launch_node < 0), x, -1)
    return x



def _syncs(g: _Graph, ops, rows, end_node, kend, kend_node, kk=None, syncs=None):
    """GPU -> CPU edges of the sync calls among ``rows``; returns the rows' mask of linked calls.
    A call that Kineto links (``syncs``: :func:`~streamtrace.aggregate.cuda_links.sync_targets`; ``kk``: the step's GPU events'
    ``(stream, correlation)``, the order of ``kend``) waits for the GPU event it names
    (:func:`~streamtrace.aggregate.cuda_links.sync_target`), and only when that event ends inside the call; any other call for the
    latest GPU end inside it."""
    linked = np.zeros(len(rows), bool)
    if not len(kend):
        return linked
    o = np.argsort(kend, kind="stable")
    se, sn = kend[o], kend_node[o]
    for i in np.flatnonzero(ops["is_sync"][rows]).tolist():
        r = rows[i]
        lo, hi = ops["ts_ns"][r], ops["ts_ns"][r] + ops["dur_ns"][r]
        tgt = syncs.get(int(ops["correlation"][r])) if syncs and kk is not None else None
        if tgt is not None:                     # linked: the event it waited for, or no GPU edge at all
            j = sync_target(tgt, kk, int(ops["correlation"][r]), kend)
            src, t = (kend_node[j], kend[j]) if j >= 0 and lo <= kend[j] <= hi else (-1, -1)
        else:
            j = np.searchsorted(se, hi, "right") - 1
            src, t = (sn[j], se[j]) if j >= 0 and se[j] >= lo else (-1, -1)
        if src >= 0 and end_node[i] >= 0:
            g.edges([src], [end_node[i]], [hi - t], C["sync"], f"thread {int(ops['tid'][r])}",
                    str(ops["name"][r]), int(ops["external_id"][r]))
            linked[i] = True
    return linked



def _zero_linked_syncs(cols, linked_names_nodes):
    """Weigh 0 (``wait``) the CPU chain edges that end at a linked sync call's end node."""
    dst, cat = cols[1], cols[3]
    m = np.isin(dst, linked_names_nodes) & (cat != C["sync"])
    cols[2][m] = 0
    cat = cat.copy()
    cat[m] = C["wait"]
    cols[3] = cat


def step_graph(ops, k, step, main_tid, s0, s1, calls=None, links=None, syncs=None):
    """The graph of one step (module docstring): ``(t, cols, anchors, order)`` with node times ``t``
    (int64[n], creation order), edge columns ``[src, dst, w, cat, lane, name, ref]``, the anchors'
    ``(node ids, kinds, correlation, stream, name, lane)`` and the nodes in topological order.
    ``calls``: int64[m, 2] ``(c10d call row, gloo run row)`` of the part's CPU collectives
    (:func:`streamtrace.aggregate.gloo.call_runs`), None for none; ``links``: :func:`~streamtrace.aggregate.cuda_links.sync_links` (None:
    the waits are inferred); ``syncs``: :func:`~streamtrace.aggregate.cuda_links.sync_targets` (None: every sync call waits for the
    latest GPU end inside it)."""
    g = _Graph()
    rows = (ops["ts_ns"] >= s0) & (ops["ts_ns"] < s1)
    rows = np.flatnonzero(rows & ~ops["is_gpu_sync"] if "is_gpu_sync" in ops else rows)
    runs = calls[np.isin(calls[:, 1], rows) & np.isin(calls[:, 0], rows)] if calls is not None and len(calls) else \
        np.zeros((0, 2), np.int64)
    start_node, end_node, lanes = _cpu(g, ops, rows, main_tid, runs[:, 1])
    main = next(iter(lanes.values()))
    first = int(main[1][0])
    krows = np.flatnonzero(k["step"] == step)
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
    waits = np.sort(ops["ts_ns"][rows[ops["is_wait"][rows]]]) if ops["any_wait"] else None
    sn, en, comm = _gpu(g, k, krows, launch_node, launch_t, first, s0, waits, links, queued_behind(k, krows))
    kend = k["end_ns"][krows]
    linked = _syncs(g, ops, rows, end_node, kend, en, (k["stream"][krows], k["correlation"][krows]), syncs)
    cpu_a, cpu_e = _cpu_comm(g, ops, rows, runs, start_node, end_node, lanes)
    # the rank's step end: the later of the step thread's last instant and every GPU end
    t_end = int(max([s1, int(main[0][-1])] + ([int(kend.max())] if len(kend) else [])))
    tn = g.nodes([t_end], 3)
    tails = np.r_[[main[1][-1]], en]                                # the latest of these ends the step
    tail_t = np.r_[[main[0][-1]], kend]
    b = int(np.argmax(tail_t))
    w = np.zeros(len(tails), np.int64)
    w[b] = t_end - tail_t[b]
    cat = np.full(len(tails), C["wait"], np.int8)
    cat[b] = C["host_gap"] if b == 0 else C["kernel_gap"]
    g.edges(tails, np.full(len(tails), tn[0]), w, cat, "step end", "step end")
    t, cols = g.arrays()
    order = g.order
    _zero_linked_syncs(cols, end_node[linked])
    nc, nr = int(comm.sum()), len(runs)
    kc = krows[comm]
    gcorr, gstream = k["correlation"][kc], k["stream"][kc]
    glane = np.asarray([f"device {d} stream {x}" for d, x in zip(k["device"][kc].tolist(), gstream.tolist())], object)
    rcorr, rname = -2 - runs[:, 0], ops["name"][runs[:, 1]].astype(object)
    rlane = np.asarray([f"thread {x}" for x in ops["tid"][runs[:, 1]].tolist()], object)
    none = np.full(1, -1, np.int64)
    anchors = (np.r_[[first], sn[comm], cpu_a, en[comm], cpu_e, tn],
               np.r_[[S_], np.full(nc + nr, A_), np.full(nc + nr, E_), [T_]],
               np.r_[none, gcorr, rcorr, gcorr, rcorr, none], np.r_[none, gstream, np.full(nr, -1), gstream,
                                                                   np.full(nr, -1), none],
               np.r_[[""], k["name"][kc].astype(object), rname, k["name"][kc].astype(object), rname, [""]].astype(object),
               np.r_[[""], glane, rlane, glane, rlane, [""]].astype(object))
    return t, cols, anchors, order


def _cpu_comm(g: _Graph, ops, rows, runs, start_node, end_node, lanes):
    """The CPU collectives' runs ``runs`` (``(call row, run row)``, their bodies already cut from
    the chains): returns their (arrival, end) node ids.  A run on a thread other than its call's
    (gloo's asynchronous collectives run on a worker thread) cannot start before the call
    (``host_gap`` edge call start -> run start, named ``queue <run>``) and the calling thread's first
    instant at or after the run's end waits for it (``sync`` edge, as a GPU -> CPU sync)."""
    at = lambda r: np.searchsorted(rows, r)  # noqa: E731
    a, e = start_node[at(runs[:, 1])], end_node[at(runs[:, 1])]
    for (call, run), u, v in zip(runs.tolist(), a.tolist(), e.tolist()):
        tc, tr = int(ops["tid"][call]), int(ops["tid"][run])
        if tc == tr or tc not in lanes:
            continue
        c0, r0 = int(ops["ts_ns"][call]), int(ops["ts_ns"][run])
        r1 = r0 + int(ops["dur_ns"][run])
        if r0 >= c0:
            g.edges([start_node[at(call)]], [u], [r0 - c0], C["host_gap"], f"thread {tr}", f"queue {ops['name'][run]}",
                    int(ops["external_id"][call]))
        t, ids = lanes[tc]
        j = int(np.searchsorted(t, r1, "left"))
        if j < len(t):
            g.edges([v], [ids[j]], [int(t[j]) - r1], C["sync"], f"thread {tc}", str(ops["name"][run]),
                    int(ops["external_id"][call]))
    return a, e


def reduce_step(t, cols, anchors, order):
    """The longest local paths of one step's graph (module docstring).  Returns ``(pos, edges,
    marked)``: ``pos`` the topological position of each node, the reduced edges
    ``(origin node, sink node, weight)`` and the indices of the edges on those paths."""
    src, dst, w = cols[:3]
    pos = np.empty(len(t), np.int64)
    pos[order] = np.arange(len(t))
    ok = pos[src] < pos[dst]                                      # an edge against time is dropped
    keep = np.flatnonzero(ok)
    ps, pd, pw = pos[src[keep]], pos[dst[keep]], w[keep]
    nodes, kinds = anchors[:2]
    init = np.full(len(t), NEG, np.int64)
    srcs = pos[nodes[(kinds == S_) | (kinds == E_)]]
    init[srcs] = t[order][srcs]
    dist, pred, origin = longest_path(len(t), ps, pd, pw, init)
    sinks = pos[nodes[(kinds == A_) | (kinds == T_)]]
    reached = dist[sinks] > NEG
    sinks = sinks[reached]
    red = (origin[sinks], sinks, dist[sinks] - init[origin[sinks]])
    marked = [trace_back(pred, ps, int(s)) for s in sinks.tolist()]
    marked = sorted_distinct(np.concatenate(marked)) if marked else np.zeros(0, np.int64)
    return pos, red, keep[marked], int((~ok).sum())


def part_reads(part) -> dict:
    """The part's ``{"kernels", "ops", "cuda_sync"}`` pyarrow tables (None where it has none) with the
    columns :func:`part_paths` and :func:`streamtrace.aggregate.explain.part_tables` use: read once for both."""
    kc = list(dict.fromkeys(KERNEL_COLUMNS + EXPLAIN_KERNELS))
    oc = list(dict.fromkeys(OPS_COLUMNS + STATS_OPS))
    return {"kernels": part.read("kernels", kc), "ops": part.read("ops", oc),
            "cuda_sync": part.read("cuda_sync", SYNC_COLUMNS)}




def part_paths(job, part, spill, tables=None) -> dict:
    """One part's anchors and reduced edges for every step (aligned ns), the segments of its local
    paths written to ``spill/critical-<index>.arrow``; ``tables``: :func:`part_reads` (None: read
    here).  Returns ``{"anchors": {column: array}, "edges": {column: array}, "segments": path or
    None, "dropped": int}``."""
    tables = tables or {"kernels": part.read("kernels", KERNEL_COLUMNS), "ops": part.read("ops", OPS_COLUMNS),
                        "cuda_sync": part.read("cuda_sync", SYNC_COLUMNS)}
    ops_t, k_t = tables["ops"], tables["kernels"]
    empty = {"anchors": {c: np.zeros(0, np.int64) for c in ANCHOR_COLUMNS},
             "edges": {c: np.zeros(0, np.int64) for c in EDGE_COLUMNS}, "segments": None, "dropped": 0}
    if ops_t is None or not ops_t.num_rows:
        return empty
    ops = {c: column_numpy(ops_t[c]) for c in OPS_COLUMNS}
    k = {c: column_numpy(k_t[c]) for c in KERNEL_COLUMNS} if k_t is not None else \
        {c: np.zeros(0, object if c in ("name", "kind") else np.int64) for c in KERNEL_COLUMNS}
    ops["ts_ns"] = part.align(ops["ts_ns"])
    enc = pc.dictionary_encode(ops_t["name"]).combine_chunks()        # name flags per distinct name
    uniq = [x or "" for x in enc.dictionary.to_pylist()]
    inv = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
    ops["step_no"] = part.steps.numbers(uniq)[inv] if uniq else np.full(len(inv), -1, np.int64)
    ops["is_step"] = ops["step_no"] >= 0
    ops["is_sync"] = np.asarray([bool(SYNC_CALLS.match(x)) for x in uniq] or [False], bool)[inv]
    ops["is_wait"] = np.asarray([x in WAIT_CALLS for x in uniq] or [False], bool)[inv]
    ops["any_wait"] = bool(ops["is_wait"].any())
    ops["is_gpu_sync"] = np.asarray(ops["cat"] == CUDA_SYNC_CAT, bool)  # GPU events the ops table holds too
    k["ts_ns"], k["end_ns"] = part.align(k["ts_ns"]), part.align(k["end_ns"])
    links = sync_links(part, tables.get("cuda_sync"))
    syncs = sync_targets(tables.get("cuda_sync"))
    calls = None
    if has_runs(uniq):                                                 # a CPU-only (gloo) rank's collectives
        calls = np.asarray([cr for cr in call_runs([x or "" for x in ops["name"].tolist()]) if cr[1] >= 0],
                           np.int64).reshape(-1, 2)
    anchors, edges, segs, dropped, base = [], [], [], 0, 0
    for step, tid, s0, s1 in _steps(ops):
        if job.steps is not None and step not in job.steps:
            continue
        t, cols, anc, order = step_graph(ops, k, step, tid, s0, s1, calls, links, syncs)
        pos, (o, s, w), marked, bad = reduce_step(t, cols, anc, order)
        dropped += bad
        nodes, kinds, corr, stream, name, lane = anc
        anchors.append({"step": np.full(len(nodes), step, np.int64), "node": base + pos[nodes], "kind": kinds,
                        "t_ns": t[nodes], "correlation": corr, "stream": stream, "name": name, "lane": lane})
        edges.append({"step": np.full(len(o), step, np.int64), "src": base + o, "dst": base + s, "w_ns": w})
        src, dst, ww, cat, lane, name, ref = (c[marked] for c in cols)
        segs.append({"step": np.full(len(marked), step, np.int64), "src": base + pos[src], "dst": base + pos[dst],
                     "t0": t[src], "t1": t[dst], "w": ww, "cat": cat.astype(np.int8), "lane": lane.astype(str),
                     "name": name.astype(str), "ref": ref})
        base += len(t)
    if not anchors:
        return empty
    cat = lambda xs: {c: np.concatenate([x[c] for x in xs]) for c in xs[0]}  # noqa: E731
    path = Path(spill) / f"critical-{part.index:06d}.arrow"          # Arrow IPC: a temporary, fast to write
    feather.write_feather(pa.table({c: pa.array(v, SEGMENT_SCHEMA.field(c).type) for c, v in cat(segs).items()}),
                          path, compression="uncompressed")
    return {"anchors": cat(anchors), "edges": cat(edges), "segments": str(path), "dropped": dropped}

