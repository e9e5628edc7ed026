"""The CPU side of one rank's step graph (``streamtrace.aggregate.critical_local``): each thread's
chain of op boundaries, the waits between threads, and the CPU collectives' runs.

**A thread's chain.**  Every op of the step window contributes its start and its end; consecutive
instants are chained, the edge weighted by the time between them (int64 ns) and named after the
innermost op open over that interval (``cpu_op``; ``host_gap`` when none but the step is open).
Instants of equal time are ordered as the call tree nests them (the tree's depth-first walk:
``kernels.reference.chains.instant_order`` specifies it), so a zero-length op's end comes right after
its own start, inside its parent.  An edge is named after the innermost op whose interval covers
it, so that time is never named after a 0 us call that merely starts at the edge's first instant (a
real 8 x A100 job named 13.8 % of a path after such calls).

**Waits between threads** (``thread_waits``).  PyTorch's autograd engine runs the backward pass
on its own thread(s) while the thread that called ``backward()`` waits (Kineto's ``fwdbwd`` flows
join the forward op to its backward op; the waiting thread shows a host gap, or the self time of an
annotation such as ``## backward ##``); a DataLoader's pin-memory thread works while the main thread
waits for the batch.  A stretch of a thread T with no op of its own open inside it (one chain edge
``a -> b`` of at least ``MIN_WAIT_NS``) waits for another thread W when W is idle at ``a``, runs
work that starts and ends inside ``[a, b]`` and is busy at least half of it (work that is not a CPU
collective's run: ``cpu_collectives`` joins those to their call): T's edge then weighs 0
(``wait``: T waited), an edge hands the work over (T at ``a`` -> W's first instant, ``thread_wait``)
and one hands it back (W's last instant -> T at ``b``, ``thread_wait``), and W's idle edge into its
first instant weighs 0 (W waited for the hand-over).  The path then runs through W's ops, named
after them.  HolisticTraceAnalysis' critical path has no edges between threads (its graph chains
each thread's top-level ops on their own).

**Waits for a CPU collective** (``collective_waits``).  A gloo collective called on one thread runs
on a worker thread (``gloo:*``); the caller goes on and later blocks in ``work.wait()`` (DDP's
reducer, in ``backward``), which shows as a stretch of the caller with no op boundary inside (a
host gap, or an annotation's self time; never a leaf op's run, which is work).  Its wait is the
first such stretch, not taken by a run that ended earlier, that begins after the call and before
the run's end, ends after the run began and at most ``WAKE_SLACK_NS`` before the run's recorded end,
and lasts at least ``MIN_WAIT_NS`` and an eighth of how long before that end it ends (not a short
gap between two ops of a busy caller).  It weighs 0 (``wait``) and the run's end -> the caller's
wake-up is a ``sync`` edge (``cpu_collectives``), so the path and the what-if replay run through
the collective's last arrival.  A caller can wake before the run's record closes (the worker marks
the work done, then the scheduler runs the caller first: on a rank whose threads share one core, up
to a few ms); the run is then taken to end at the caller's wake-up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.chains import thread_chain, thread_waits as _thread_waits
from .critical_graph import Category, StepGraph

MIN_WAIT_NS = 20_000
"""The shortest stretch of a thread considered as waiting for another thread (ns)."""
AUTOGRAD_OP = "autograd::engine::evaluate_function"
"""The top-level op of every backward function PyTorch's autograd engine runs (its thread's lane is
named ``thread <tid> (backward)``)."""
WAKE_SLACK_NS = 4_000_000
"""How long before a CPU collective run's recorded end its caller may wake up from waiting for it
(ns): measured on real gloo DDP ranks pinned to one core each, up to 3.2 ms (tools/whatif_rerun.py)."""
MAX_WAIT_THREADS = 64
"""With more threads than this in a step, only the step's thread is considered as waiting (the
search is quadratic in the number of threads)."""


@dataclass
class Chain:
    """One thread's instants in order: times ``t`` (int64 ns), node ids ``ids``, ``is_start``
    (bool), the op row ``op`` of each instant, and per edge ``i -> i+1`` (one fewer): the weight
    ``w`` (int64 ns), ``Category`` code ``cat``, the naming op row ``inner`` (the innermost op
    covering the edge, the step op for a host gap; -1: none) and
    ``keep`` (False: the edge lies inside a CPU collective's run, joined across ranks instead);
    ``at``: each instant's op as an index into the thread's op rows ``sel``."""
    tid: int
    t: np.ndarray
    ids: np.ndarray
    is_start: np.ndarray
    op: np.ndarray
    w: np.ndarray
    cat: np.ndarray
    inner: np.ndarray
    keep: np.ndarray
    at: np.ndarray

    def busy(self) -> np.ndarray:
        """Per edge: some op of the thread (not the step) is open over it."""
        return self.cat == Category.cpu_op


def chain(g: StepGraph, ops, sel, tid, cut) -> Chain:
    """The chain of thread ``tid``'s op rows ``sel`` (sorted); ``cut``: op rows of CPU collectives'
    runs (sorted, unique), whose inner edges are left out (``Chain.keep``).  The instants' order and
    the edges' naming ops (specified by ``kernels.reference.chains.instant_order`` and ``covering``)
    come from the kernel ``streamtrace.kernels.chains.thread_chain``."""
    cols = (sel, ops["ts_ns"], ops["dur_ns"], ops["parent"])
    t, is_start, op, at, w, cat, inner, keep = thread_chain(
        *(_readonly(x, np.int64) for x in cols), _readonly(ops["depth"], np.int32), _readonly(ops["tid"], np.int64),
        _readonly(ops["is_step"], bool), int(tid), _readonly(cut, np.int64), int(Category.host_gap),
        int(Category.cpu_op))
    return Chain(tid, t, g.nodes(t), is_start, op, w, cat, inner, keep, at)


def _readonly(x, dtype) -> np.ndarray:
    """``x`` as a read-only C-contiguous array of ``dtype`` (a view when it already is one): the
    kernel's one signature (``streamtrace.runtime.compile.UNITS``), whether a column comes from Arrow
    (read-only) or was computed here (writable)."""
    v = np.ascontiguousarray(x, dtype).view()
    v.flags.writeable = False
    return v


@dataclass
class ThreadWait:
    """Thread ``waiter`` waits over its chain edge ``edge`` while thread ``worker`` runs its
    instants ``first`` .. ``last``."""
    waiter: int
    edge: int
    worker: int
    first: int
    last: int


def thread_waits(chains: dict, main_tid: int) -> list:
    """The waits between threads of one step (module docstring): ``chains`` ``{tid: Chain}``.
    Returns a list of ``ThreadWait``, at most one per (waiting edge, worker thread), each pair of
    threads searched by the kernel ``streamtrace.kernels.chains.thread_waits``."""
    out = []
    tids = list(chains) if len(chains) <= MAX_WAIT_THREADS else [main_tid]
    for wt in tids:
        c = chains.get(wt)
        if c is None or len(c.t) < 2:
            continue
        for tid, x in chains.items():
            if tid == wt or len(x.t) < 2:
                continue
            found = _thread_waits(c.t, c.w, c.keep, x.t, x.w, x.cat, x.keep, MIN_WAIT_NS, int(Category.cpu_op))
            out += [ThreadWait(wt, e, tid, f, last) for e, f, last in found.tolist()]
    return out


def apply_waits(g: StepGraph, chains: dict, waits: list, lanes: dict):
    """Re-weigh the chains for ``waits`` (the waiting edge and the worker's idle edge into its
    first instant weigh 0, ``wait``) and add the hand-over and hand-back edges (``thread_wait``);
    ``lanes``: ``{tid: lane name}``."""
    for w in waits:
        c, x = chains[w.waiter], chains[w.worker]
        c.w[w.edge], c.cat[w.edge] = 0, Category.wait
        if w.first > 0 and x.cat[w.first - 1] == Category.host_gap:
            x.w[w.first - 1], x.cat[w.first - 1] = 0, Category.wait
        g.edges([c.ids[w.edge]], [x.ids[w.first]], [x.t[w.first] - c.t[w.edge]], Category.thread_wait,
                lanes[w.worker], f"hand-over to {lanes[w.worker]}", -1)
        g.edges([x.ids[w.last]], [c.ids[w.edge + 1]], [c.t[w.edge + 1] - x.t[w.last]], Category.thread_wait,
                lanes[w.waiter], f"hand-back from {lanes[w.worker]}", -1)


def lane_name(ops, sel, tid, main_tid) -> str:
    """``thread <tid>``, with `` (backward)`` when at least half of the thread's top-level op time
    in ``sel`` (op rows) is autograd's backward functions (``AUTOGRAD_OP``)."""
    if tid == main_tid:
        return f"thread {tid}"
    top = sel[ops["depth"][sel] == 0]
    dur = ops["dur_ns"][top]
    auto = ops["is_autograd"][top] if "is_autograd" in ops else \
        np.asarray([str(x).startswith(AUTOGRAD_OP) for x in ops["name"][top]], bool)
    return f"thread {tid} (backward)" if len(top) and 2 * int(dur[auto].sum()) >= int(dur.sum()) > 0 else \
        f"thread {tid}"


@dataclass
class CollectiveWait:
    """Thread ``tid`` waits over its no-op stretch ``[a, b]`` (int64 ns) for the CPU collective run
    at op row ``run``."""
    tid: int
    a: int
    b: int
    run: int


def _stretches(ops, sel) -> tuple:
    """The stretches of the op rows ``sel`` (one thread's) with no op boundary inside: ``(a, b)``
    int64 ns between consecutive distinct instants, without those that are a leaf op's whole run
    (an op without children works over it; it does not wait)."""
    ts = ops["ts_ns"][sel]
    te = ts + ops["dur_ns"][sel]
    t = np.unique(np.concatenate((ts, te)))
    a, b = t[:-1], t[1:]
    leaf = ~np.isin(sel, ops["parent"][sel])
    i = np.searchsorted(a, ts[leaf])
    i = i[(i < len(a)) & (a[np.minimum(i, len(a) - 1)] == ts[leaf]) & (b[np.minimum(i, len(a) - 1)] == te[leaf])]
    keep = np.ones(len(a), bool)
    keep[i] = False
    return a[keep], b[keep]


def collective_waits(ops, rows, runs) -> tuple:
    """The waits of callers for their CPU collectives (module docstring): ``rows`` the step's op
    rows (sorted), ``runs`` int64[r, 2] ``(call row, run row)``.  Returns ``(ops, waits)``: ``ops``
    itself, or a shallow copy whose ``dur_ns`` ends a run at its caller's earlier wake-up, and a list
    of ``CollectiveWait``."""
    tids = ops["tid"][rows]
    found, ends = [], {}
    stretches: dict = {}
    r1s = ops["ts_ns"][runs[:, 1]] + ops["dur_ns"][runs[:, 1]]
    for call, run in runs[np.argsort(r1s, kind="stable")].tolist():      # earlier ends claim first
        tc = int(ops["tid"][call])
        if tc == int(ops["tid"][run]):
            continue
        if tc not in stretches:
            stretches[tc] = _stretches(ops, rows[tids == tc]) + (set(),)
        a, b, claimed = stretches[tc]
        c0, r0 = int(ops["ts_ns"][call]), int(ops["ts_ns"][run])
        r1 = r0 + int(ops["dur_ns"][run])
        ok = (b - a >= np.maximum(MIN_WAIT_NS, (r1 - b) // 8)) & (a >= c0) & (a < r1) & (b >= r0) & \
            (b >= r1 - WAKE_SLACK_NS)
        ok[list(claimed)] = False
        if not ok.any():
            continue
        i = int(np.flatnonzero(ok)[0])                                  # the first wake-up that can be it
        claimed.add(i)
        found.append(CollectiveWait(tc, int(a[i]), int(b[i]), int(run)))
        if b[i] < r1:
            ends[int(run)] = int(b[i])
    if ends:
        dur = ops["dur_ns"].copy()
        r = np.fromiter(ends, np.int64, len(ends))
        dur[r] = np.fromiter(ends.values(), np.int64, len(ends)) - ops["ts_ns"][r]
        ops = dict(ops, dur_ns=dur)
    return ops, found


def apply_collective_waits(chains: dict, waits: list) -> int:
    """Weigh each ``CollectiveWait``'s stretch 0 (``wait``) in its thread's chain; returns how many
    stretches were found in the chains."""
    n = 0
    for w in waits:
        c = chains.get(w.tid)
        if c is None:
            continue
        i = int(np.searchsorted(c.t, w.b, "left")) - 1
        if 0 <= i < len(c.w) and c.t[i] == w.a and c.keep[i]:
            c.w[i], c.cat[i] = 0, Category.wait
            n += 1
    return n


def cpu_chains(g: StepGraph, ops, rows, main_tid, cut=None, collective=()):
    """The CPU chains of the op rows ``rows`` (window of one step), waits between threads
    included; the chain edges inside the ops ``cut`` (op rows: CPU collectives' runs, joined across
    ranks instead) are left out; ``collective``: the ``CollectiveWait`` list of ``collective_waits``.
    Returns ``(start node, end node)`` int64 arrays indexed like ``rows``, ``{tid: (times, node
    ids)}`` of every thread's chain (the step thread's first) and the number of waits between
    threads modelled (``ThreadWait`` and ``CollectiveWait``)."""
    cut = np.zeros(0, np.int64) if cut is None else np.unique(np.asarray(cut, np.int64))
    nodes = np.full(2 * len(rows), -1, np.int64)     # each op's (start, end) node, interleaved
    tids = ops["tid"][rows]
    chains: dict = {}
    lanes: dict = {}
    heads = tids[np.r_[True, tids[1:] != tids[:-1]]] if len(tids) else tids    # (a thread's run once: fewer to sort)
    for tid in [main_tid] + sorted(set(np.unique(heads).tolist()) - {main_tid}):
        where = np.flatnonzero(tids == tid)
        if not len(where):
            continue
        sel = rows[where]
        c = chains[tid] = chain(g, ops, sel, tid, cut)
        lanes[tid] = lane_name(ops, sel, tid, main_tid)
        nodes[2 * where[c.at] + ~c.is_start] = c.ids              # (``where[c.at]``: each instant's op in ``rows``)
    waits = thread_waits(chains, main_tid)
    apply_waits(g, chains, waits, lanes)
    nwaits = len(waits) + apply_collective_waits(chains, collective)
    main = None
    for tid, c in chains.items():
        k = slice(None) if c.keep.all() else c.keep
        inner = c.inner[k]
        name, ext = ops["name_code"][inner], ops["external_id"][inner]  # (new arrays: -1 set below)
        name[inner < 0], ext[inner < 0] = g.texts.code(""), -1
        g.edges(c.ids[:-1][k], c.ids[1:][k], c.w[k], c.cat[k], lanes[tid], name, ext)
        if main is None:
            main = c
        elif not (c.is_start[0] and (cut == c.op[0]).any()):      # join the step's thread (a CPU
            j = np.searchsorted(main.t, c.t[0], "right") - 1         # collective's run: its call instead)
            if j >= 0:
                g.edges([main.ids[j]], [c.ids[0]], [c.t[0] - main.t[j]], Category.host_gap, lanes[tid],
                        "thread start")
    return nodes[0::2].copy(), nodes[1::2].copy(), {tid: (c.t, c.ids) for tid, c in chains.items()}, nwaits


def cpu_collectives(g: StepGraph, ops, rows, runs, start_node, end_node, lanes):
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
            g.edges([start_node[at(call)]], [u], [r0 - c0], Category.host_gap, f"thread {tr}",
                    f"queue {ops['name'][run]}", int(ops["external_id"][call]))
        t, ids = lanes[tc]
        j = int(np.searchsorted(t, r1, "left"))
        if j < len(t):
            g.edges([v], [ids[j]], [int(t[j]) - r1], Category.sync, f"thread {tc}", str(ops["name"][run]),
                    int(ops["external_id"][call]))
    return a, e
