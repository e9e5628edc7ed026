"""A rank's CPU tracks walked in order, the small ones many at a time (``walk_tracks``).

``analyze_track`` streams one track through three passes, two
external sorters and a ``TreeStream``: ~0.5 ms of CPU for a
one-event track, whatever its size (a trace with a million one-event threads: issue 49).  Here
consecutive small tracks (at most ``SMALL_ROWS`` events each) are gathered into a batch of up
to ``block_rows`` events and analysed in one pass of the same kernels, with the same results:

* linking: the batch's rows in track order through ``link_block``
  (a launch claims the GPU events of its correlation id that no earlier launch claimed: the
  earlier track, then the lower index, wins, as one track after another); launches sharing a
  correlation id with an earlier launch of the same track counted per track;
* call trees: each track's times are shifted so that the tracks follow each other with a gap
  (track ``t`` starts at the end of track ``t - 1`` plus one), and the batch is fed to one
  ``TreeStream`` in (start, -end, index) order.  Every open event of a track ends before the next
  track's first start, so it is closed there, and the tree is the track's own: nesting, clamping
  (``end < parent end + clamp``) and GPU roll-ups depend on differences of a track's times only,
  and the launch times the kernel writes for the GPU rows are written back unshifted.  Tracks
  whose times are not all within +-2**60 ns (where the shift could overflow, or the clamp's
  int64 bound matters) are analysed alone;
* ops rows: the batch's rows in track order (``pid``/``tid`` per row), ``parent`` a row index of
  the rank as for one track at a time.

No sorter, no spill file and no ``malloc_trim`` per track; each track's rows are read from the
store once.  ``tests/unit/analyze/test_trackbatch.py``: batched == one at a time.
"""
from __future__ import annotations

import numpy as np

from ..kernels.treestream import REC_DTYPE, TreeStream
from ..runtime.tuning import trim
from .tracks import TrackContext, analyze_track, link_block

#: a track of at most this many events is analysed in a batch with its neighbours
SMALL_ROWS = 1024
_SAFE = 2 ** 60          # times beyond +-this (ns) are not shifted


def walk_tracks(ctx: TrackContext, keys, ops_writer):
    """Every CPU track of ``keys`` in order, each key's rows dropped from ``ctx.store`` once
    analysed: the same results (ops rows, ``ctx.windows``, ``ctx.totals``, GPU links and
    launch context) as ``analyze_track`` on each key in turn
    (``last`` on the final one)."""
    store = ctx.store
    cap = max(1, int(ctx.block_rows))
    batch, rows = [], 0
    for i, key in enumerate(keys):
        n = store.rows(key)
        if n <= SMALL_ROWS:
            if batch and rows + n > cap:
                _flush(ctx, batch, ops_writer)
                batch, rows = [], 0
            batch.append(key)
            rows += n
            continue
        if batch:
            _flush(ctx, batch, ops_writer)
            batch, rows = [], 0
        analyze_track(ctx, key, ops_writer, last=i == len(keys) - 1)
        store.drop(key)
        trim()
    if batch:
        _flush(ctx, batch, ops_writer)
    if keys:
        ctx.gpu.done_linking()


def _flush(ctx, keys, ops_writer):
    """One batch of small tracks, cut where the shifted times would pass 2**61 ns; a track whose
    times are not all within +-2**60 ns (or with a negative duration), alone."""
    store = ctx.store
    parts = [store.get(k) for k in keys]
    ts = np.array([[p["ts"].min(), p["ts"].max(), p["dur"].min(), p["dur"].max()] if len(p) else [0, 0, 0, 0]
                   for p in parts], np.int64).reshape(-1, 4)
    good = (ts[:, 0] > -_SAFE) & (ts[:, 1] < _SAFE) & (ts[:, 2] >= 0) & (ts[:, 3] < _SAFE)
    span = (ts[:, 1] + np.where(good, ts[:, 3], 0) - ts[:, 0] + 1).tolist()       # int64: |each| < 2**62
    at, acc = 0, 0
    for i, k in enumerate(keys):
        if good[i] and acc + span[i] < 2 * _SAFE:
            acc += span[i]
            continue
        if at < i:
            analyze_batch(ctx, keys[at:i], parts[at:i], ops_writer)
        at, acc = i, 0
        if not good[i]:
            analyze_track(ctx, k, ops_writer)
            at = i + 1
        else:
            acc = span[i]
    if at < len(keys):
        analyze_batch(ctx, keys[at:], parts[at:], ops_writer)
    for k in keys:
        store.drop(k)


class _Corrs:
    """Stands for link_block's sorter of launch ids (the batch counts duplicates itself)."""

    def add(self, _):
        pass


def analyze_batch(ctx: TrackContext, keys, parts, ops_writer):
    """Small tracks ``keys`` (their rows ``parts``, STORE_DTYPE, times within +-2**60 ns,
    durations >= 0) analysed together: see the module docstring."""
    gpu, nm, tot = ctx.gpu, ctx.names, ctx.totals
    sizes = np.array([len(p) for p in parts], np.int64)
    n = int(sizes.sum())
    if n == 0:
        return
    b = np.concatenate(parts) if len(parts) > 1 else parts[0]
    track = np.repeat(np.arange(len(parts)), sizes)
    r, own_rows = link_block(b, 0, 0, gpu, nm, ctx.windows, _Corrs())
    launches = np.flatnonzero(b["correlation"] >= 0)
    if gpu.M and len(launches):                     # launches sharing an id with an earlier one, per track
        lc, lt = b["correlation"][launches], track[launches]
        o = np.lexsort((lc, lt))
        lc, lt = lc[o], lt[o]
        tot.dup += int(np.count_nonzero((lc[1:] == lc[:-1]) & (lt[1:] == lt[:-1])))
    s, e = r["s"].copy(), r["e"]
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    nz = sizes > 0
    lo = np.full(len(parts), 0, np.int64)
    hi = np.full(len(parts), 0, np.int64)
    lo[nz] = np.minimum.reduceat(s, first[nz])
    hi[nz] = np.maximum.reduceat(np.maximum(s, e), first[nz])
    shift = np.concatenate([[0], np.cumsum(hi - lo + 1)[:-1]]) - lo      # track t starts at the end of t-1 plus one
    r["s"] += shift[track]
    r["e"] += shift[track]
    order = np.lexsort((r["idx"], -r["e"], r["s"]))
    tree = TreeStream(own_rows, gpu.start, gpu.end, gpu.ctx)
    res = np.concatenate([tree.feed(r[order]), tree.finish()])
    if len(own_rows):                               # the launch times, unshifted
        gpu.ctx["t_launch"][own_rows] = s[np.repeat(np.arange(n), r["own_cnt"])]    # own_rows are by launch
    tot.clamped += tree.n_clamped
    tot.overrun += tree.n_overrun
    del tree, r, order
    res = res[np.argsort(res["idx"], kind="stable")]
    base = tot.n_cpu
    if ops_writer is not None:
        pid = np.array([k[2] for k in keys], np.int64)
        tid = np.array([k[3] for k in keys], np.int64)
        ops_writer.write({
            "pid": pid[track], "tid": tid[track], "ts_ns": b["ts"], "dur_ns": b["dur"], "name": b["name"],
            "cat": b["cat"], "depth": res["depth"], "parent": np.where(res["parent"] >= 0, res["parent"] + base, -1),
            "correlation": b["correlation"], "external_id": b["external_id"], "kernel_count": res["count"],
            "kernel_time_ns": res["total"], "gpu_busy_ns": res["busy"]})
        ops_writer.shrink()
    tot.n_cpu += n
