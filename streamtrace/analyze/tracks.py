"""One CPU track of one rank, in bounded memory (``analyze_track``).

The rank's GPU events are held as compact columns (``GpuEvents``);
each CPU track is streamed block by block from the store, in three passes:

1. file order: launch -> GPU links by correlation (a launch claims the still-free GPU
   events of its correlation id; in a track, the lowest index wins), phase / step
   windows (``add_windows``), and one sort record per event
   (``REC_DTYPE``) into an
   ``ExternalSorter``;
2. time order (start asc, end desc, index asc): the records, in chunks, through
   ``TreeStream`` (call tree, GPU roll-up, launch
   context with the open-ancestor stack carried across chunks); the per-event results
   go into a second sorter, by index;
3. file order again: the ops rows (stored columns + results) to the Parquet writer.

Nothing is held per CPU event beyond one block, so the largest track (millions of
events on one thread) costs the same memory as a small one.  The results equal
``build_call_tree`` + ``link_by_correlation`` + ``propagate`` + ``nearest_marked`` on
the whole track (tests/kernels/test_treestream.py; chunked == in-memory in
tests/unit/analyze/test_analyze.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..events.sort import ExternalSorter
from ..events.store import EventStore
from ..kernels.treestream import REC_DTYPE, RES_DTYPE, TreeStream
from ..runtime.tuning import trim
from .gpu import GpuEvents, Names
from .phases import Windows, add_windows

# the sorters' blocks live only while one rank is analysed: LZ4 (events.codec) packs and unpacks them 2-3x
# faster than zstd, in ~40 % more bytes
SORT_CODEC = "lz4"


@dataclass
class TrackTotals:
    """Counters a rank's tracks add to: CPU events (``n_cpu``: also the row index of the next
    ops row), call-tree children clamped into their parent (overrun < 1 us) and overruns
    counted, launches sharing a correlation id with an earlier launch (``dup``), and, when
    tracks are cut into pieces, each piece's distinct launch ids (``piece_ids``: ``(key, ids)``)."""
    n_cpu: int = 0
    clamped: int = 0
    overrun: int = 0
    dup: int = 0
    piece_ids: list | None = None

    def add(self, other: "TrackTotals"):
        """Add a later group's counters (``n_cpu`` included)."""
        self.n_cpu += other.n_cpu
        self.clamped += other.clamped
        self.overrun += other.overrun
        self.dup += other.dup
        if other.piece_ids:
            self.piece_ids = (self.piece_ids or []) + other.piece_ids


@dataclass
class TrackContext:
    """What every track of one rank shares: the store, the rank's GPU events (linked in track
    order), the name lookups, the windows and counters the tracks extend, and the sorts'
    block size and spill folder (None: compressed in memory)."""
    store: EventStore
    gpu: GpuEvents
    names: Names
    windows: Windows = field(default_factory=Windows)
    totals: TrackTotals = field(default_factory=TrackTotals)
    block_rows: int = 65536
    spill_dir: str | None = None


_CORR_DTYPE = np.dtype([("c", "i8")])


def _corr_key(r):
    return [r["c"]]


def _rec_key(r):
    return [r["s"], -r["e"], r["idx"]]


def _res_key(r):
    return [r["idx"]]


def piece_blocks(store, key, span=None):
    """The key's blocks in order, or only its rows ``[lo, hi)`` when ``span`` is given
    (blocks outside it are not read: their row counts come from ``store.block_spans``)."""
    if span is None:
        yield from store.blocks(key)
        return
    lo, hi = span
    rows = store.block_spans(key)[0]
    starts = np.concatenate([[0], np.cumsum(rows)])
    for j in range(max(0, int(np.searchsorted(starts, lo, "right")) - 1), len(rows)):
        pos, n = int(starts[j]), int(rows[j])
        if pos >= hi:
            break
        a, z = max(lo - pos, 0), min(hi - pos, n)
        if a < z:
            b = store.block(key, j)
            yield b if (a, z) == (0, n) else b[a:z]
            del b                              # only the consumer holds the block while it works


def analyze_track(ctx: TrackContext, key, ops_writer, last=False, span=None):
    """One CPU track ``key`` of ``ctx.store``: the three passes of the module docstring; its
    ops rows to ``ops_writer`` (None: not written).  ``last``: no track comes after this one
    (the linking columns are dropped after pass 1).  ``span``: only the track's rows ``[lo, hi)``,
    a piece that no call tree crosses (``streamtrace.analyze.trackfork.plan_pieces``); its
    launches' distinct correlation ids (sorted int64) are then appended to
    ``ctx.totals.piece_ids`` as ``(key, ids)``, for the duplicates between pieces
    (``ctx.totals.dup`` counts those within the piece)."""
    store, gpu, nm, tot = ctx.store, ctx.gpu, ctx.names, ctx.totals
    block_rows, folder = ctx.block_rows, ctx.spill_dir
    recs = ExternalSorter(REC_DTYPE, _rec_key, block_rows, folder, delta=("s", "e-s", "idx"), codec=SORT_CODEC)
    corrs = ExternalSorter(_CORR_DTYPE, _corr_key, block_rows, folder, delta=("c",), codec=SORT_CODEC)
    own_parts = []
    i0 = n_own = 0
    trimmer = _Trimmer(block_rows)
    for b in piece_blocks(store, key, span):                      # 1. file order
        r, rows = link_block(b, i0, n_own, gpu, nm, ctx.windows, corrs)
        i0 += len(b)
        trimmer.done(len(b))
        del b                       # before the next block is unpacked
        if len(rows):
            own_parts.append(rows)
            n_own += len(rows)
        recs.add(r)
        del r, rows
    n = i0
    if last:
        gpu.done_linking()
    prev = None                     # launches sharing a correlation id with an earlier one
    ids = None if span is None else []
    for c in corrs.chunks():
        c = c["c"]
        again = np.concatenate([[prev is not None and c[0] == prev], c[1:] == c[:-1]])
        tot.dup += int(np.count_nonzero(again))
        if ids is not None:
            ids.append(c[~again])
        prev = c[-1]
    if ids is not None:
        tot.piece_ids.append((key, np.concatenate(ids) if ids else np.zeros(0, np.int64)))
    own_rows = np.concatenate(own_parts) if own_parts else np.zeros(0, np.int32)
    del own_parts
    if n >= block_rows:             # a small track's temporaries are small (a million tracks: issue 49)
        trim()
    tree = TreeStream(own_rows, gpu.start, gpu.end, gpu.ctx)     # 2. time order
    results = ExternalSorter(RES_DTYPE, _res_key, block_rows, folder, delta=("idx",), codec=SORT_CODEC)
    for chunk in recs.chunks():
        for a in range(0, len(chunk), block_rows):
            results.add(tree.feed(chunk[a:a + block_rows]))
    results.add(tree.finish())
    tot.clamped += tree.n_clamped
    tot.overrun += tree.n_overrun
    del tree, own_rows, recs
    if n >= block_rows:
        trim()
    if ops_writer is not None:                                    # 3. file order: the ops rows
        res = _Aligned(results.chunks())
        base = tot.n_cpu
        for b in piece_blocks(store, key, span):
            rr = res.take(len(b))
            ops_writer.write({
                "pid": key[2], "tid": key[3], "ts_ns": b["ts"], "dur_ns": b["dur"], "name": b["name"],
                "cat": b["cat"], "depth": rr["depth"], "parent": np.where(rr["parent"] >= 0, rr["parent"] + base, -1),
                "correlation": b["correlation"], "external_id": b["external_id"], "kernel_count": rr["count"],
                "kernel_time_ns": rr["total"], "gpu_busy_ns": rr["busy"]})
            trimmer.done(len(b))
            del b, rr                   # before the next block is unpacked (the writer copied the rows)
        ops_writer.shrink()             # its pending rows only, while the next track is sorted
    else:
        for _ in results.chunks():
            pass
    tot.n_cpu += n


def link_block(b, i0, n_own, gpu, nm, win, corrs):
    """Pass 1 on one stored block ``b`` of a track (its first row is the track's row
    ``i0``; ``n_own`` GPU rows are owned by the rows before): windows into ``win``, the
    launches' correlation ids into ``corrs``, links claimed in ``gpu``.  Returns the
    block's sort records (REC_DTYPE) and the GPU rows its launches own, by launch."""
    nb = len(b)
    start, cname = b["ts"], b["name"]
    end = start + b["dur"]
    add_windows(win, nm, cname, start, end)
    r = np.zeros(nb, REC_DTYPE)
    rows = np.zeros(0, np.int32)
    launches = np.flatnonzero(b["correlation"] >= 0)
    if gpu.M and len(launches):
        lc = b["correlation"][launches]
        corrs.add(lc.view(_CORR_DTYPE))
        own, rows = gpu.claim(lc, launches)
        if len(rows):
            cnt = np.bincount(own, minlength=nb)
            r["own_cnt"] = cnt
            r["own_off"] = n_own + np.cumsum(cnt) - cnt
    r["s"], r["e"], r["idx"], r["name"] = start, end, np.arange(i0, i0 + nb), cname
    r["comm"] = np.where(b["comm"] >= 0, b["comm"], -1)
    annot = (b["cat"] == nm.user_annotation) & (nm.step[cname] < 0)
    r["flags"] = annot.astype(np.uint8) | (nm.has_stack_dim[cname].astype(np.uint8) << 1)
    return r, rows


class _Trimmer:
    """``trim`` every ``TRIM_BLOCKS`` blocks' worth of rows of a
    track's pass.  Each stored block's temporary arrays (of varying sizes) land on
    different parts of the heap between the pass's long-lived pieces, so without it the
    resident free heap creeps up by ~20-30 MB over the 1.8 M-event track of the 1.1 GB
    benchmark trace; trimming after every block instead costs ~8 % of the run time."""

    TRIM_BLOCKS = 4

    def __init__(self, block_rows):
        self.every = self.TRIM_BLOCKS * max(1, int(block_rows))
        self.rows = 0

    def done(self, rows):
        self.rows += rows
        if self.TRIM_BLOCKS and self.rows >= self.every:
            self.rows = 0
            trim()


class _Aligned:
    """Records from an iterator of chunks, taken ``n`` at a time."""

    def __init__(self, it):
        self.it = iter(it)
        self.buf = np.zeros(0, RES_DTYPE)

    def take(self, n):
        parts, got = [], 0
        while got < n:
            if not len(self.buf):
                self.buf = next(self.it)
                continue
            k = min(n - got, len(self.buf))
            parts.append(self.buf[:k])
            self.buf = self.buf[k:]
            got += k
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
