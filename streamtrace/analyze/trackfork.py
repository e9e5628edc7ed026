"""One rank's CPU tracks analysed by forked worker processes (``--jobs N`` on one big trace).

``streamtrace.analyze.rank.analyze_rank`` walks a rank's CPU tracks one after
another (link launches, sort, call tree, ops rows).  When one big trace is analysed with
``--jobs N`` the parse already ran on N cores and this walk would be the serial tail, so
here the tracks are cut into at most N contiguous groups of about equal event count and
each group is analysed by a child process forked from the parent, which shares the
parsed store copy-on-write.  Group ``g`` writes its ops rows to
``ops/.../part-<g>.parquet`` (``streamtrace.events.dataset.partition_path``), so the files
in order hold the rows in the serial order, and the ``parent`` column (a global row
index) keeps its meaning.  A child sends back only what the rest of the analysis needs:
the GPU rows it linked and their launch context, its phase/step windows and counters.

Linking is the one step that depends on the tracks before: a launch claims the GPU
events of its correlation id that no earlier track claimed.  A child cannot see the
other groups' claims, so it claims as if it came first; the parent applies the groups in
order and checks that no row of a group was already claimed by an earlier one.  When a
row was (a correlation id launched from threads in two groups, which Kineto traces do
not have in practice), or when a child fails, the parent analyses that group again
itself from the exact serial state.  The result is always what the serial walk gives
(tests/unit/analyze/test_trackfork.py).  Needs ``os.fork`` (Linux, macOS); elsewhere the walk is
serial.

(``streamtrace.runtime.fork.run_forked`` is the plain form used for the kernels rows: functions
run at once, one here and the others in forked children, a failed child's function run again
here.)  Children end with ``os._exit`` (no ``atexit`` handlers, no temporary folder of the
parent removed); a child the parent gives up on gets SIGTERM, which it turns into
``SystemExit`` so that its half-written output file is deleted.
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, replace

import numpy as np

from ..runtime.fork import child_signals, reap
from ..runtime.lifecycle import forking
from .phases import Windows
from .tracks import TrackContext, TrackTotals

#: the per-GPU-row launch context a track's call tree writes for the rows it owns
CTX_KEYS = ("t_launch", "launch_op", "launching", "annot", "top", "dim", "comm_row")


def track_groups(sizes, parts: int) -> list[tuple[int, int]]:
    """Cut tracks of ``sizes`` events (in order) into at most ``parts`` contiguous, non-empty
    groups ``[(lo, hi), ...]`` whose largest event sum is as small as possible (binary
    search on that sum; ``len(sizes)`` is small)."""
    sizes = [max(1, int(s)) for s in sizes]
    n = len(sizes)
    parts = max(1, min(int(parts), n))
    if n == 0:
        return []

    def cut(cap):
        out, lo, acc = [], 0, 0
        for i, s in enumerate(sizes):
            if acc and acc + s > cap:
                out.append((lo, i))
                lo, acc = i, 0
            acc += s
        out.append((lo, n))
        return out
    lo_cap, hi_cap = max(sizes), sum(sizes)
    while lo_cap < hi_cap:
        mid = (lo_cap + hi_cap) // 2
        if len(cut(mid)) <= parts:
            hi_cap = mid
        else:
            lo_cap = mid + 1
    return cut(lo_cap)


_I64 = np.iinfo(np.int64)


def piece_cuts(ts, end, before_end, after_start) -> np.ndarray:
    """Positions ``h`` (0 <= h <= n) inside one block of a track (``ts``/``end``: int64 ns,
    file order) where the track can be cut: every event before ``h`` (and every earlier
    block, whose largest end is ``before_end``) ends strictly before every event from
    ``h`` on (and every later block, whose smallest start is ``after_start``) starts.
    No call tree crosses such a cut: the later events are neither inside an earlier one
    nor around it, whatever the ties (a zero-length event at a parent's start is inside
    it, so equal times are not a cut)."""
    end_before = np.maximum.accumulate(np.concatenate([[before_end], end]))
    start_after = np.minimum.accumulate(np.concatenate([ts, [after_start]])[::-1])[::-1]
    return np.flatnonzero(end_before < start_after)


def nearest_cut(store, key, target, reach=8):
    """The valid cut (``piece_cuts``) of track ``key`` nearest to row ``target``,
    looking in the block holding ``target`` and up to ``reach`` blocks on either side
    (each one decompressed only when the blocks' spans do not already rule it out), or
    None.  Uses the store's per-block spans (``block_spans``) for everything else."""
    rows, first, last = store.block_spans(key)
    n = int(rows.sum())
    if n < 2:
        return None
    starts = np.concatenate([[0], np.cumsum(rows)])
    before = np.concatenate([[_I64.min], np.maximum.accumulate(last)])[:-1]    # max end of blocks < j
    after = np.concatenate([np.minimum.accumulate(first[::-1])[::-1][1:], [_I64.max]])   # min start of blocks > j
    j0 = int(np.searchsorted(starts, target, "right") - 1)
    for d in range(reach + 1):                             # blocks by distance from target's
        found = []
        for j in sorted({j0 - d, j0 + d}):
            if not 0 <= j < len(rows) or before[j] >= after[j]:
                continue                                   # no cut can be inside block j
            b = store.block(key, j)
            h = piece_cuts(b["ts"], b["ts"] + b["dur"], before[j], after[j]) + starts[j]
            found += [int(x) for x in h if 0 < x < n]
        if found:
            return min(found, key=lambda x: (abs(x - target), x))
    return None


def plan_pieces(store, keys, jobs) -> list[tuple]:
    """``[(key, span)]``: the tracks in order, each whole (``span`` None) or cut into pieces
    (``span`` = ``(lo, hi)`` rows) at the valid cut (``nearest_cut``) nearest to where
    one of ``jobs`` equal shares of all events ends, when that point lies at least 1/8 of a
    share inside the track (nearer to its ends, ``track_groups`` balances as well with
    the track whole).  With one dominant track (the main thread: ~70 % of the CPU events of
    the 1 GB benchmark rank) the groups can then be balanced."""
    sizes = [store.rows(k) for k in keys]
    total = sum(sizes)
    margin = max(1.0, total / (8 * jobs))
    targets = [total * k // jobs for k in range(1, jobs)]
    pieces, before = [], 0
    for key, n in zip(keys, sizes):
        cuts = set()
        for t in targets:
            p = t - before
            if min(p, n - p) >= margin and (h := nearest_cut(store, key, p)) is not None:
                cuts.add(h)
        if cuts:
            b = [0, *sorted(cuts), n]
            pieces += [(key, (b[i], b[i + 1])) for i in range(len(b) - 1)]
        else:
            pieces.append((key, None))
        before += n
    return pieces


def _piece_duplicates(tot: TrackTotals) -> int:
    """Launches whose correlation id a launch in an earlier piece of the same track had
    (``tot.piece_ids``: ``(key, distinct ids)`` per piece); clears ``tot.piece_ids``."""
    by_key: dict = {}
    for key, ids in tot.piece_ids or ():
        by_key.setdefault(key, []).append(ids)
    tot.piece_ids = None
    dup = 0
    for parts in by_key.values():
        ids = np.sort(np.concatenate(parts))     # (np.unique: ~1 s per million distinct ids in numpy 2.4)
        dup += int(np.count_nonzero(ids[1:] == ids[:-1]))
    return dup


@dataclass
class _GroupResult:
    """What a child sends back: the GPU rows it linked, their launch context, its windows and
    counters; or ``error`` (one line) when it failed."""
    rows: np.ndarray | None = None
    ctx: dict | None = None
    windows: Windows | None = None
    totals: TrackTotals | None = None
    error: str | None = None


def analyze_tracks(track, ctx: TrackContext, keys, jobs, open_ops):
    """Run ``track(ctx, key, ops_writer, span=span)`` for every CPU track in ``keys`` with the
    same results as calling ``track(ctx, key, ops_writer)`` for each key in order with the
    ``open_ops(0)`` writer, using up to ``jobs`` forked processes.  ``span`` is None (the whole
    track) or ``(lo, hi)``: a piece of it (``plan_pieces``); ``track`` must then append the
    piece's distinct launch correlation ids to ``ctx.totals.piece_ids`` (see
    ``streamtrace.analyze.tracks.analyze_track``).

    ``ctx.gpu``: the rank's GPU events with nothing linked yet (``gpu.free`` all True);
    ``ctx.windows``/``ctx.totals``: what the calls extend;
    ``open_ops(part)``: a context manager giving the ops writer of ``part-<part>.parquet``.
    Returns ``{"parts": ops part files written (1 when the walk was serial), "redone":
    groups the parent analysed again (claim overlap or failed child), "pieces": tracks and
    pieces of tracks walked}``."""
    store, gpu = ctx.store, ctx.gpu
    serial = jobs < 2 or not keys or not hasattr(os, "fork") or not bool(gpu.free.all())
    pieces = [(k, None) for k in keys] if serial else plan_pieces(store, keys, jobs)
    sizes = [store.rows(k) if span is None else span[1] - span[0] for k, span in pieces]
    groups = track_groups(sizes, jobs)
    if serial or len(groups) < 2:
        _walk(track, ctx, [(k, None) for k in keys], open_ops, 0)
        return {"parts": 1, "redone": 0, "pieces": len(keys)}
    ctx.totals.piece_ids = []
    bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64) + ctx.totals.n_cpu
    pids, pipes = [], []
    redone = 0
    parent = os.getpid()
    try:
        for g, (lo, hi) in enumerate(groups):
            r, w = os.pipe()
            with forking():                                  # no signal lost in the fork (issue 49)
                pid = os.fork()
            if pid == 0:                                     # the child: never returns
                os.close(r)
                _child(w, track, ctx, pieces[lo:hi], int(bases[lo]), open_ops, g, parent)
            os.close(w)
            pids.append(pid)
            pipes.append(os.fdopen(r, "rb"))
        for g, (lo, hi) in enumerate(groups):
            data = pipes[g].read()
            os.waitpid(pids[g], 0)
            pids[g] = None
            res = pickle.loads(data) if data else None
            if res is None or res.error or not bool(gpu.free[res.rows].all()):
                _walk(track, ctx, pieces[lo:hi], open_ops, g)   # from the exact serial state
                redone += 1
                continue
            gpu.free[res.rows] = False
            for k in CTX_KEYS:
                gpu.ctx[k][res.rows] = res.ctx[k]
            ctx.windows.extend(res.windows)
            ctx.totals.add(res.totals)
    finally:
        for f in pipes:
            f.close()
        reap(pids)
    ctx.totals.dup += _piece_duplicates(ctx.totals)
    return {"parts": len(groups), "redone": redone, "pieces": len(pieces)}


def _walk(track, ctx, pieces, open_ops, part):
    """The serial walk of ``pieces`` (``(key, span)``), ops rows to ``part-<part>.parquet``."""
    with open_ops(part) as ops:
        for key, span in pieces:
            track(ctx, key, ops, span=span)


def _child(w, track, ctx, pieces, base, open_ops, g, parent):
    """Analyse ``pieces`` as group ``g`` and write the results to pipe ``w``; exits the process
    (and dies with ``parent``, the analysing process)."""
    try:
        child_signals(parent)
        mine = replace(ctx, windows=Windows(), totals=TrackTotals(n_cpu=base, piece_ids=[]))
        _walk(track, mine, pieces, open_ops, g)
        rows = np.flatnonzero(~ctx.gpu.free)
        mine.totals.n_cpu -= base
        payload = _GroupResult(rows, {k: ctx.gpu.ctx[k][rows] for k in CTX_KEYS}, mine.windows, mine.totals)
    except BaseException as e:                              # noqa: BLE001 - reported; the parent redoes it
        payload = _GroupResult(error=f"{type(e).__name__}: {e}")
    try:
        with os.fdopen(w, "wb") as f:
            f.write(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        os._exit(0)
