"""The deferred time filter of one byte range of a cut rank (``streamtrace.merge.split_filter``),
recording groups of events instead of one row per event.

The whole-rank filter (``DeferredFilter``) appends a 48-byte row
per written event to a file and reads them all back to decide.  A range's filter keeps a summary
per group of up to ``GROUP_EVENTS`` consecutive events
(``streamtrace.kernels.groups.group_batch``: ~2.4 bytes per event) and the flow events' keys in
order.  Under the keep-window almost every group is kept whole or dropped whole
(``group_kinds``), which ``keep_groups`` decides from its
summary.  The rows of the few *mixed* groups (an edge of the window, a flow that leaves it, more
than two pids) are made again by rewriting their byte span once more
(``streamtrace.merge.rederive.rederive_rows``: a byte range of a plain file can be read again
from any event, which a whole ``.json.gz`` rank cannot) and decided by
``keep_rows``, on the same state.  The decision is the one the rows
would give, event for event.  Measured on a 300 MB rank in 4 ranges, its CPU work with every task
inline (``bench/bench_filter_cpu.py``): a window keeping every event 1.05x -> 1.00x the full merge's,
``--steps 3-4`` 1.09x -> 1.05x; its temporary files 91 -> 12 MB.
"""
from __future__ import annotations

import numpy as np

from ..kernels import groups as groups_kernels
from ..kernels import keep as keep_kernels
from ..kernels.keeper import Grouper
from .deferred import Decision, DeferredFilter, flow_extents

GROUP_EVENTS = 63       # events per group (at most kernels.groups.GROUP_MAX)
SPILL_GROUPS = 1 << 13  # summaries gathered before they are written (1.2 MB)


def group_kinds(groups: np.ndarray, fkeys: np.ndarray, lo: int, hi: int, kept_keys: np.ndarray) -> np.ndarray:
    """uint8 per group of ``groups`` (int64[n, G_COLS]): KIND_EMPTY (nothing written), KIND_KEPT (every
    written event meets ``[lo, hi]`` (ns) and every flow event's key, in ``fkeys`` (int64, the groups'
    flow events in order), is in the sorted ``kept_keys``), KIND_DROPPED (no class-1 event, and no
    event meets the window) or KIND_MIXED (any other, and a group with more than two pids): what
    ``streamtrace.kernels.keep.keep_rows`` would find of its rows."""
    timed = groups[:, groups_kernels.G_TIMED] > 0
    meet_all = ~timed | ((groups[:, groups_kernels.G_T1MIN] >= lo) & (groups[:, groups_kernels.G_T0MAX] <= hi))
    meet_none = timed & ((groups[:, groups_kernels.G_T1MAX] < lo) | (groups[:, groups_kernels.G_T0MIN] > hi))
    flows_ok = np.empty(len(groups), np.uint8)
    groups_kernels.flows_kept(np.ascontiguousarray(groups[:, groups_kernels.G_FLOWS]), fkeys, kept_keys, flows_ok)
    flows_ok = flows_ok.view(bool)
    whole = groups[:, groups_kernels.G_MIXED] == 0
    kinds = np.full(len(groups), groups_kernels.KIND_MIXED, np.uint8)
    kinds[whole & meet_all & flows_ok] = groups_kernels.KIND_KEPT
    kinds[whole & meet_none & (groups[:, groups_kernels.G_KEPT1] == 0)] = groups_kernels.KIND_DROPPED
    kinds[groups[:, groups_kernels.G_WRITTEN] == 0] = groups_kernels.KIND_EMPTY
    return kinds


def mixed_spans(kinds: np.ndarray) -> list[tuple[int, int]]:
    """``[(a, b)]``: the maximal runs of consecutive KIND_MIXED groups, in order."""
    m = np.flatnonzero(kinds == groups_kernels.KIND_MIXED)
    if not len(m):
        return []
    cut = np.flatnonzero(np.diff(m) > 1) + 1
    return [(int(s[0]), int(s[-1]) + 1) for s in np.split(m, cut)]


def view_bits(rows: np.ndarray, groups: np.ndarray) -> None:
    """OR into the rows (int64[k, R_COLS]) of ``groups``' written events the MISSING_OUT / NEGDUR_OUT
    bits their summaries hold (a rewrite made again has no validation)."""
    seq = rows[:, keep_kernels.R_BITS] >> keep_kernels.SEQ_SHIFT
    g = np.searchsorted(groups[:, groups_kernels.G_SEQ], seq, side="right") - 1
    k = seq - groups[g, groups_kernels.G_SEQ]
    rows[:, keep_kernels.R_BITS] |= ((groups[g, groups_kernels.G_MISSING] >> k) & 1) * keep_kernels.MISSING_OUT
    rows[:, keep_kernels.R_BITS] |= ((groups[g, groups_kernels.G_NEGDUR] >> k) & 1) * keep_kernels.NEGDUR_OUT


def written_seqs(groups: np.ndarray) -> np.ndarray:
    """int64: the seqs of ``groups``' written events, in order."""
    k = np.arange(groups_kernels.GROUP_MAX, dtype=np.int64)
    bit = ((groups[:, groups_kernels.G_WRITTEN, None] >> k) & 1).astype(bool)
    return (groups[:, groups_kernels.G_SEQ, None] + k)[bit]


def check_rows(rows: np.ndarray, groups: np.ndarray) -> None:
    """Raise RuntimeError unless ``rows`` are exactly the written events of ``groups`` as the pass
    wrote them: their seqs the groups' written bits, the last ending where the last group ends."""
    seq = rows[:, keep_kernels.R_BITS] >> keep_kernels.SEQ_SHIFT
    if not np.array_equal(seq, written_seqs(groups)) or \
            (len(rows) and int(rows[-1, keep_kernels.R_END]) != int(groups[-1, groups_kernels.G_OUT1])):
        raise RuntimeError("merge: a byte span rewritten again gave other events than its first rewrite")


def warm_groups() -> None:
    """Load ``group_batch`` (from numba's cache) into this process:
    merge's parent does it before forking its workers, which then share it
    (``streamtrace.merge.rank.warm_kernels``; the decision's kernels are loaded by the one task
    that needs them)."""
    Grouper.warm()


class GroupedFilter(DeferredFilter):
    """One byte range's deferred filter, in groups (see the module).  ``in_base``: added to a batch's
    ``base``, makes its event offsets file offsets (the range's reader numbers its bytes from the
    ``[`` it reads before them)."""

    def __init__(self, steps, spill_path: str, in_base: int):
        super().__init__(steps, spill_path)
        self.in_base = in_base
        self.grouper = Grouper(GROUP_EVENTS)
        self.flow_order = None          # the flow events' keys, in order (after the pass)
        self.pending, self.npending = [], 0     # summaries not yet in the spill file

    def add_batch(self, rcls, rec, buf, starts, ends, vbits, path, base, times):
        """One batch's events summarised in groups (``group_batch``);
        the arguments are ``DeferredFilter.add_batch``'s."""
        self.step_candidates(rcls, buf, starts, ends, path, base, times)
        groups, fkeys, fts = self.grouper.batch(rcls, rec, vbits, starts, ends, base + self.in_base, self.n_in)
        self.pending.append(groups)
        self.npending += len(groups)
        if self.npending >= SPILL_GROUPS:
            self._spill()
        if len(fkeys):
            self.flow_keys.append(fkeys)
            self.flow_ts.append(fts)
        g = self.grouper
        self.ts_min, self.ts_max, self.end, self.written = g.ts_min, g.ts_max, g.end, g.written
        self.n_in += len(rcls)

    def _spill(self) -> None:
        """Append the summaries gathered to the spill file (in blocks: one write per batch cost more
        than the summaries' bytes)."""
        if self.pending:
            np.concatenate(self.pending).tofile(self.spill)
        self.pending, self.npending = [], 0

    def _close_spill(self) -> None:
        if self.spill is not None:
            self._spill()
            self.spill.close()

    def park(self, flows_path: str) -> None:
        """``DeferredFilter.park``, the flow events' keys and ts kept as they are, in order: the
        decision needs the keys in order, and a window holding every event needs no extents."""
        self._close_spill()
        self.spill = None
        with open(flows_path, "wb") as f:
            for a in self._flows():
                np.save(f, a)
        self.flows_path = flows_path

    def flow_events(self) -> tuple[np.ndarray, np.ndarray]:
        """The flow events' keys (int64: ``cat index << 40 | id``, or ``-1 - n`` for the n-th flow
        numbered in Python) and ts (int64, ns), in the range's order (read back once parked); the keys
        are kept for ``finish``."""
        if self.flows_path is None:             # (not parked: the pass's lists, kept once joined)
            keys, ts = self._flows()
            self.flow_keys, self.flow_ts = [keys], [ts]
        else:
            with open(self.flows_path, "rb") as f:
                keys, ts = np.load(f), np.load(f)
        self.flow_order = keys
        return keys, ts

    def flow_extents(self) -> tuple:
        """``DeferredFilter.flow_extents``, reduced from the flow events once asked for."""
        if self.extents is None:
            self.extents = flow_extents(*self.flow_events())
        return self.extents

    def _flow_order(self) -> np.ndarray:
        if self.flow_order is None:
            self.flow_events()
        return self.flow_order

    def finish(self, path, shift_ns: int, keep=None, kept_keys=None, remake=None) -> Decision:
        """``DeferredFilter.finish`` from the groups; ``remake(groups)``: the rows (int64[k, R_COLS],
        as the pass made them, without the validation bits) of the written events of a run of groups
        (``streamtrace.merge.rederive.rederive_rows``)."""
        d, keeper = self._begin(path, shift_ns, keep, kept_keys)
        if keeper is None:
            return d
        groups = np.fromfile(self.spill_path, np.int64).reshape(-1, groups_kernels.G_COLS)
        kinds = group_kinds(groups, self._flow_order(), d.lo, d.hi, keeper.kept_keys)
        at = 0
        for a, b in mixed_spans(kinds) + [(len(groups), len(groups))]:
            keeper.groups(groups, kinds, at, a)
            if b > a:
                if remake is None:
                    raise ValueError("GroupedFilter.finish: mixed groups and no remake to make their rows")
                rows = remake(groups[a:b])
                check_rows(rows, groups[a:b])
                view_bits(rows, groups[a:b])
                keeper.rows(rows)
            at = b
        keeper.close()
        return d.done(keeper)
