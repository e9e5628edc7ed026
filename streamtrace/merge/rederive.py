"""The deferred filter's rows of a few events made again: their byte span of a cut rank's plain file
rewritten once more, exactly as the range's pass rewrote it, the output thrown away
(``streamtrace.merge.grouped.GroupedFilter`` needs the rows of its mixed groups only).

The rewrite of an event depends on no other event but through the pid slots and the flow
categories' numbering (``streamtrace.merge.ranges``); the range's own pid registrations (with the
merged pids they settled to, ``RangePids``) and its category tables give both as the pass had
them, and the output offsets continue from the event before the span.
"""
from __future__ import annotations

import numpy as np

from ..kernels import groups as groups_kernels
from ..kernels import keep as keep_kernels
from ..trace.reader import TraceReader
from .deferred import DeferredFilter
from .pids import PidMap, hashable
from .rank import READ_BLOCK, RankContext, RankPlan, rewrite_stream


class _Discard:
    """A segment that keeps nothing."""

    @staticmethod
    def write(data) -> int:
        return len(data)


class RangePids(PidMap):
    """A byte range's pid map as its pass ended: each pid it registered (``records``) to the merged pid
    it gave it (``assigned``, settled), ``info`` the rank's (``PidMap.info``); read only, a pid
    it does not hold is an internal error.  (A NaN pid, which a range registers once, is found by
    value: the records came through pickle, which does not keep the decoder's one NaN.)"""

    def __init__(self, rank: int, records: list, assigned: list, info: dict):
        super().__init__(rank)
        self.info = info
        self.nan = None
        for pid, mp_ in zip(records, assigned):
            key = hashable(pid)
            self.map[key] = mp_
            if isinstance(key, float) and key != key:
                self.nan = mp_

    def get(self, pid):
        key = hashable(pid)
        mp_ = self.map.get(key)
        if mp_ is None and isinstance(key, float) and key != key:
            mp_ = self.nan
        if mp_ is None:
            raise RuntimeError(f"merge: rank {self.rank}: a pid rewritten again was not in its first pass")
        return mp_


class _Rows(DeferredFilter):
    """A deferred filter that keeps its written events' rows in memory, numbering flows with the
    tables of the range's filter ``like`` and its events from ``seq0``."""

    def __init__(self, like: DeferredFilter, seq0: int):
        super().__init__(None, None)
        self.cats, self.index = list(like.cats), dict(like.index)
        self._table()
        self.other, self.other_index = list(like.other), dict(like.other_index)
        self.n_in = seq0
        self.rows = []

    def add_batch(self, rcls, rec, buf, starts, ends, vbits, path, base, times):
        self.rows.append(rec[np.flatnonzero(rcls & keep_kernels.C_CLASS)])
        self.n_in += len(rcls)


def rederive_rows(plan: RankPlan, src: str, pids: RangePids, like: DeferredFilter, groups: np.ndarray) -> np.ndarray:
    """The rows (int64[k, R_COLS], ``streamtrace.kernels.keep``; no validation bits) of the written
    events of ``groups`` (consecutive summaries of ``streamtrace.kernels.groups.group_batch`` of the
    range whose filter is ``like``), made by rewriting their bytes of ``src`` (the plain file the
    ranges were cut from) again with the rank's ``plan`` and the range's ``pids``."""
    ctx = RankContext(plan)
    ctx.pids = pids
    ctx.defer = _Rows(like, int(groups[0, groups_kernels.G_SEQ]))
    span = (int(groups[0, groups_kernels.G_IN0]), int(groups[-1, groups_kernels.G_IN1]))
    reader = TraceReader(src, byte_range=span, block=READ_BLOCK)
    rewrite_stream(reader, plan, ctx, _Discard(), None, after=int(groups[0, groups_kernels.G_OUT0]))
    return np.concatenate(ctx.defer.rows) if ctx.defer.rows else np.zeros((0, keep_kernels.R_COLS), np.int64)
