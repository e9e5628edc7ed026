"""The GPU side of one rank's step graph (``streamtrace.aggregate.critical_local``): GPU events,
what each waited for (its launch, the previous event on its stream, another stream, earlier GPU
work), and the GPU -> CPU syncs.

* **launch -> event**: the runtime call (same ``correlation``) start -> the GPU event start
  (``launch_delay``); **stream order**: the previous GPU event's end on the stream -> the start
  (``kernel_gap``); **cross-stream wait**, read where the trace links it
  (``linked_waits``; a rank with such links gets no other cross-stream edge), else inferred
  (``streamtrace.kernels.stepgpu.inferred_waits``): the latest end on another stream of the device
  before the start, only for the first event launched on its stream after a ``cudaStreamWaitEvent``
  call (between the previous launch on that stream and its own; a trace with no wait calls at all:
  every event).  Of these the latest to happen is the one the event waited
  for: its edge carries the time up to the start, the others weigh 0 (as HolisticTraceAnalysis adds
  either the launch delay or the kernel-kernel delay, never both).  A candidate later than the
  event's start (a launch whose CPU clock runs ahead of the GPU's) is not what it waited for.
* **queued behind earlier work** (``queued_behind``): the first event of the step on a stream
  cannot start before the stream's earlier GPU work ends (the previous step's events, and events
  executing in the window whose launch came before the profiler started); when that end binds, the
  edge runs from the step's start to the event's start (``queued``).
* **GPU event** start -> end (``compute_kernel``, ``memcpy`` for memory kinds); a communication
  event is cut instead (its start an *arrival*, its end an *end* anchor, joined across ranks).
* **Overlapping events on one stream** (``clip_stream_overlaps``): kernels replayed from a CUDA
  graph can start 1-15 us before their predecessor on the same stream ends (CUPTI's timestamps of a
  graph's nodes); each event's end is clipped to the next event's start on its stream, so that the
  stream stays a chain in time (an edge against time would be dropped and the time lost).
* **GPU -> CPU sync** (``sync_edges``): ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` /
  ``cudaEventSynchronize`` / a synchronous ``cudaMemcpy``: the event it waited for (Kineto's link)
  or the latest GPU end inside the call -> the call's end (``sync``); a ``cudaMemcpyAsync`` whose own
  copy ends inside the call (a copy to pageable memory blocks, CUDA runtime API, "API
  synchronization behavior"; HTA counts ``cudaMemcpyAsync`` among its blocking calls) waits for that
  copy.  The call's own time then weighs 0 (``zero_linked_syncs``: the CPU waited).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.critical import NEG
from ..kernels.stepgpu import CATS, gpu_step
from .critical_graph import Category, StepGraph, int64s
from .cuda_links import linked_waits, sync_target

_CATS = np.asarray([Category[c] for c in CATS], np.int8)


@dataclass(frozen=True)
class Clipped:
    """What ``clip_stream_overlaps`` changed: ``events`` clipped, their ``ns`` clipped off
    (int64 ns, summed)."""
    events: int = 0
    ns: int = 0


def clip_stream_overlaps(k) -> Clipped:
    """Clip, in place, each GPU event's ``end_ns`` in ``k`` (column arrays: ``device``, ``stream``,
    ``ts_ns``, ``end_ns``) to the start of the next event on its device and stream when it ends
    after it (module docstring).  Returns the count and the time clipped."""
    n = len(k["ts_ns"])
    if n < 2:
        return Clipped()
    key = k["device"].astype(np.int64) * (1 << 32) + k["stream"].astype(np.int64)
    o = np.lexsort((k["ts_ns"], key))
    ts, te = k["ts_ns"][o], k["end_ns"][o]
    nxt = np.r_[ts[1:], np.iinfo(np.int64).max]
    same = np.r_[key[o][1:] == key[o][:-1], False]
    over = same & (te > nxt)
    if not over.any():
        return Clipped()
    cut = np.where(over, nxt, te)
    end = k["end_ns"].copy()
    end[o] = cut
    k["end_ns"] = end
    return Clipped(int(over.sum()), int((te - cut).sum()))


def gpu_events(g: StepGraph, k, rows, launch_node, launch_t, first, s0, waits=None, links=None, prior=None):
    """Nodes and edges of the GPU events ``rows`` (one step, sorted by device, stream, start).
    ``launch_node`` / ``launch_t``: each row's launch (node id, -1 none; call start, int64 ns);
    ``first``: the step's start node, ``s0`` its time; ``waits``: the sorted start times of the
    rank's stream-wait calls in the step (None: the trace records none, every event may wait);
    ``links``: the rank's explicit cross-stream links (``LINK_COLUMNS``
    arrays, aligned ns; None: the waits are inferred); ``prior``: ``queued_behind``; ``k["is_comm"]`` /
    ``k["is_memory"]`` (optional: else read from ``k["kind"]``) flag the communication and memory events.  Returns
    (start node, end node, is communication) per row."""
    dev, stream, ts, te = (int64s(k[c][rows]) for c in ("device", "stream", "ts_ns", "end_ns"))
    comm = k["is_comm"][rows] if "is_comm" in k else k["kind"][rows] == "communication"
    memory = k["is_memory"][rows] if "is_memory" in k else k["kind"][rows] == "memory"
    n = len(rows)
    both = g.nodes(np.stack([ts, te], axis=1).reshape(-1), np.tile(np.asarray([2, 0], np.int8), n))
    sn = both[0::2].copy()
    en = np.where(te == ts, sn, both[1::2])         # a zero-length event is one instant
    new = np.concatenate(([True], (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])))[:n]     # a stream's run of rows
    lane = np.asarray([g.texts.code(f"device {d} stream {s}") for d, s in zip(dev[new].tolist(), stream[new].tolist())]
                      + [0], np.int32)[np.cumsum(new) - 1]
    corr = k["correlation"][rows]
    prior = np.full(n, NEG, np.int64) if prior is None else int64s(prior)
    x = int64s(linked_waits(dev, stream, ts, te, corr, links)) if links is not None else np.zeros(0, np.int64)
    src, dst, w, cat, row = gpu_step(dev, stream, ts, te, np.ascontiguousarray(comm, bool),
                                     np.ascontiguousarray(memory, bool), sn, int64s(en), int64s(launch_node),
                                     int64s(launch_t), x, links is not None,
                                     int64s(waits if waits is not None else ()), waits is not None,
                                     prior, int(first), int(s0), _CATS)
    g.edges(src, dst, w, cat, lane[row], k["name_code"][rows][row], corr[row])
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
    first = np.flatnonzero(np.concatenate(([True], (dev[1:] != dev[:-1]) | (st[1:] != st[:-1]))))
    q = dev[first].astype(np.int64) * (1 << 32) + st[first].astype(np.int64)
    lo = np.searchsorted(key, q, "left")
    hi = np.searchsorted(key, q, "right")
    # the last event of the stream starting strictly before the row: its position in ts[lo:hi]
    pos = np.asarray([lo_ + int(np.searchsorted(ts[lo_:hi_], t_, "left")) - 1
                      for lo_, hi_, t_ in zip(lo.tolist(), hi.tolist(), t0[first].tolist())], np.int64)
    ok = pos >= lo
    out[first[ok]] = mx[pos[ok]]
    return out


def sync_edges(g: StepGraph, ops, rows, end_node, kend, kend_node, kk=None, syncs=None):
    """GPU -> CPU edges of the sync calls among ``rows`` (module docstring); returns the rows' mask
    of linked calls.  ``kend`` / ``kend_node``: the step's GPU events' ends (int64 ns) and end nodes;
    ``kk``: their ``(stream, correlation)`` arrays; ``syncs``:
    ``sync_targets`` (a call Kineto links waits for the event
    it names, and only when that event ends inside the call).  ``ops["is_copy"]`` (optional) marks
    the asynchronous copy calls, which wait for their own copy when it ends inside them."""
    linked = np.zeros(len(rows), bool)
    copy = ops["is_copy"][rows] if "is_copy" in ops and kk is not None else np.zeros(len(rows), bool)
    idx = np.flatnonzero(ops["is_sync"][rows] | copy)
    if not len(kend) or not len(idx):
        return linked
    r = rows[idx]
    lo = ops["ts_ns"][r]
    hi = lo + ops["dur_ns"][r]
    corr = ops["correlation"][r]
    j = np.full(len(idx), -1, np.int64)             # per call: the GPU event (index into ``kend``) it waited for
    asy = ~ops["is_sync"][r]                        # asynchronous copies: their own copy
    if asy.any():
        co = np.argsort(kk[1], kind="stable")
        ccorr = kk[1][co]
        at = np.minimum(np.searchsorted(ccorr, corr[asy]), len(ccorr) - 1)
        j[asy] = np.where(ccorr[at] == corr[asy], co[at], -1)
    rest = np.flatnonzero(~asy)
    if syncs and kk is not None:                    # the calls Kineto links: the event each names
        named = [i for i, c in zip(rest.tolist(), corr[rest].tolist()) if syncs.get(c) is not None]
        for i in named:
            j[i] = sync_target(syncs.get(int(corr[i])), kk, int(corr[i]), kend)
        rest = np.setdiff1d(rest, np.asarray(named, np.int64), assume_unique=True)
    o = np.argsort(kend, kind="stable")             # the others: the latest GPU end inside the call
    last = np.searchsorted(kend[o], hi[rest], "right") - 1
    j[rest] = np.where(last >= 0, o[np.maximum(last, 0)], -1)
    jj = np.maximum(j, 0)
    t = kend[jj]
    ok = (j >= 0) & (t <= hi) & (t >= lo) & (end_node[idx] >= 0)
    lanes, names = [], []
    tids, nm = ops["tid"][r[ok]].tolist(), ops["name"][r[ok]].tolist()
    for tid, name in zip(tids, nm):                 # (the texts coded in the order met, as one call an edge did)
        lanes.append(g.texts.code(f"thread {int(tid)}"))
        names.append(g.texts.code(str(name)))
    g.edges(kend_node[jj[ok]], end_node[idx[ok]], (hi - t)[ok], Category.sync, np.asarray(lanes, np.int32),
            np.asarray(names, np.int32), ops["external_id"][r[ok]])
    linked[idx[ok]] = True
    return linked


def zero_linked_syncs(cols, nodes):
    """Weigh 0 (``wait``) the CPU chain edges that end at a linked sync call's end node ``nodes``."""
    dst, cat = cols[1], cols[3]
    if not len(nodes) or not len(dst):
        return
    mark = np.zeros(max(int(dst.max()), int(nodes.max())) + 1, bool)     # (np.isin sorts both)
    mark[nodes] = True
    m = mark[dst] & (cat != Category.sync)
    cols[2][m] = 0
    cat = cat.copy()
    cat[m] = Category.wait
    cols[3] = cat
