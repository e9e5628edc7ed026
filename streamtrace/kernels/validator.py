"""The Python face of validate's order-dependent kernels (``streamtrace.kernels.validate``): each
owns its state arrays under named fields and its loop over the chunks.

* ``BatchRecords``: ``batch_records``' row buffers and its counts
  per view (``BC_EVENTS``, ``BC_MISSING``, ``BC_NEGDUR``);
* ``NestingRun``: ``nesting_chunk`` over sorted chunks of X slices,
  its stacks grown where a chunk fills them; its totals per view (``NS_BAD``, ``NS_TRACKS``,
  ``NS_GPU_OVERLAP`` of the state);
* ``FlowRun``: ``flow_chunk`` over sorted chunks of flow ends, the
  last key closed by ``flow_close``; its counts per view (``FC_*``).
"""
from __future__ import annotations

import numpy as np

from .validate import (FLOW_COLS, FLOW_STATE, NEST_COLS, NEST_STATE, NS_BAD, NS_GPU_OVERLAP, NS_TRACKS, batch_records,
                       flow_chunk, flow_close, nesting_chunk)

__all__ = ["BatchRecords", "NestingRun", "FlowRun"]

STACK_START = 1024      # open slices per view a NestingRun's stacks hold before they grow


class BatchRecords:
    """``batch_records`` with its row buffers, reused from batch to
    batch (grown to the largest batch)."""

    def __init__(self):
        self.nest = np.empty((0, NEST_COLS), np.int64)
        self.flows = np.empty((0, FLOW_COLS), np.int64)

    def records(self, f: np.ndarray, view, out_pid: bool, seq0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X-slice rows, flow-end rows, counts)`` of the events with fields ``f`` (int64[n, NF]):
        views of the reused buffers (the caller copies what it keeps) and int64[2, 3] per view
        (columns BC_EVENTS, BC_MISSING, BC_NEGDUR).  ``view``: an int or int64[n] of V_IN / V_OUT bits;
        ``out_pid`` and ``seq0`` as batch_records takes them."""
        n = len(f)
        views = np.empty(n, np.int64)         # writable and contiguous: the kernel's one compiled signature
        views[:] = view
        if len(self.nest) < n:
            self.nest = np.empty((n, NEST_COLS), np.int64)
            self.flows = np.empty((n, FLOW_COLS), np.int64)
        counts = np.zeros((2, 3), np.int64)
        nn, nf = batch_records(np.ascontiguousarray(f), views, bool(out_pid), seq0, self.nest, self.flows, counts)
        return self.nest[:nn], self.flows[:nf], counts


class NestingRun:
    """The slice-nesting check over chunks of X slices sorted by track, then start, then end descending
    (``nesting_chunk``); ``totals`` per view once every chunk is in."""

    def __init__(self):
        self.state = np.zeros(NEST_STATE, np.int64)
        self.stacks = np.empty((2, STACK_START), np.int64)

    def add(self, tkind, pid, tid, start, end, view) -> None:
        """One chunk (int64 arrays of one length; ``view``: V_IN / V_OUT bits per record)."""
        cols = [np.ascontiguousarray(a) for a in (tkind, pid, tid, start, end, view)]
        at = 0
        while at < len(cols[3]):
            at += nesting_chunk(*(a[at:] for a in cols), self.state, self.stacks)
            if at < len(cols[3]):           # a stack is full: twice as deep, and on
                grown = np.empty((2, 2 * self.stacks.shape[1]), np.int64)
                grown[:, :self.stacks.shape[1]] = self.stacks
                self.stacks = grown

    def totals(self, v: int) -> tuple[int, int, int]:
        """``(bad nesting, tracks, GPU-stream overlaps)`` of view ``v`` (0: V_IN, 1: V_OUT)."""
        s = self.state
        return s[NS_BAD + v], s[NS_TRACKS + v], s[NS_GPU_OVERLAP + v]


class FlowRun:
    """The flow check over chunks of flow ends sorted by key, then file order
    (``flow_chunk``)."""

    def __init__(self):
        self.state = np.zeros(FLOW_STATE, np.int64)
        self.counts = np.zeros((2, 4), np.int64)

    def add(self, kinds, cat, fid, ph, rankk, rank, view) -> None:
        """One chunk (int64 arrays of one length)."""
        flow_chunk(*(np.ascontiguousarray(a) for a in (kinds, cat, fid, ph, rankk, rank, view)), self.state,
                   self.counts)

    def close(self) -> np.ndarray:
        """int64[2, 4] per view (V_IN, V_OUT), columns FC_KEYS, FC_UNMATCHED, FC_DUPLICATE, FC_CROSS_RANK;
        the last key closed."""
        flow_close(self.state, self.counts)
        return self.counts
