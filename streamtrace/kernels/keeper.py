"""The Python face of the deferred time filter's kernels (``streamtrace.kernels.keep``,
``streamtrace.kernels.groups``).

* ``Keeper``: one decision: ``keep_rows`` and
  ``keep_groups`` taking turns on its state (``S_*``), the kept byte
  runs and the merged pids that keep an event gathered, the counts read by name;
* ``Grouper``: ``group_batch`` over a range's batches, its running
  extent (``X_*``) read by name.
"""
from __future__ import annotations

import numpy as np

from .groups import G_COLS, X_END, X_TS_MAX, X_TS_MIN, X_WRITTEN, group_batch, keep_groups
from .keep import (NO_T0, NO_T1, R_COLS, S_COLS, S_FIRST, S_GONE, S_GONE_MISSING, S_GONE_NEGDUR, S_HAS_FIRST, S_KEPT,
                   S_OPEN, S_PREV_END, keep_rows)
from .slots import optional_slot, slot

__all__ = ["Keeper", "Grouper"]

_NO_BITS = np.zeros(0, np.uint8)


class Keeper:
    """One deferred filter's decision under the keep-window ``[lo, hi]`` (ns, rank-local): ``kept_keys``
    (sorted int64 flow keys kept), ``shift_ns`` (the rank's), ``dropped_seq`` (uint8 per event read,
    set to 1 for each dropped).  Feed it the rows (``rows``) or groups (``groups``) in output
    order, then an empty chunk of rows to close the last run."""

    def __init__(self, lo: int, hi: int, kept_keys: np.ndarray, shift_ns: int, dropped_seq: np.ndarray):
        self.lo, self.hi, self.kept_keys, self.shift_ns, self.dropped_seq = lo, hi, kept_keys, shift_ns, dropped_seq
        self.state = np.zeros(S_COLS, np.int64)
        self.state[S_OPEN], self.state[S_PREV_END] = -1, -1
        self.parts = []           # the kept runs, int64[n, 2] each, in order
        self.used = set()         # merged pids with a kept event

    def rows(self, rows: np.ndarray) -> None:
        """One chunk of rows (int64[n, R_COLS], ``streamtrace.kernels.keep``)."""
        runs, pids = np.empty((len(rows) + 1, 2), np.int64), np.empty(len(rows), np.int64)
        nr, npid = keep_rows(rows, self.lo, self.hi, self.kept_keys, self.shift_ns, self.dropped_seq, runs, pids,
                             self.state)
        self.parts.append(runs[:nr])
        self.used.update(pids[:npid].tolist())

    def groups(self, groups: np.ndarray, kinds: np.ndarray, a: int, b: int) -> None:
        """Groups ``a..b-1`` of ``groups`` (none mixed; ``kinds``: KIND_* per group)."""
        runs, pids = np.empty((b - a + 1, 2), np.int64), np.empty(2 * (b - a), np.int64)
        nr, npid = keep_groups(groups, kinds, a, b, self.shift_ns, self.dropped_seq, runs, pids, self.state)
        self.parts.append(runs[:nr])
        self.used.update(pids[:npid].tolist())

    def close(self) -> None:
        """The last kept run closed (an empty chunk of rows)."""
        self.rows(np.zeros((0, R_COLS), np.int64))

    @property
    def runs(self) -> np.ndarray:
        """int64[n, 2]: the kept byte runs ``[start, end)``, in order."""
        return np.concatenate(self.parts) if self.parts else np.zeros((0, 2), np.int64)

    kept = slot("state", S_KEPT, "Events kept.")
    first_out = optional_slot("state", S_FIRST, S_HAS_FIRST, "The earliest shifted ts of a kept event (ns), or None.")

    @property
    def dropped(self) -> dict:
        """``{"events", "missing", "negdur"}``: the events dropped, and those of them the output's check
        counts as a missing field / a missing or negative dur."""
        s = self.state
        return {"events": int(s[S_GONE]), "missing": int(s[S_GONE_MISSING]), "negdur": int(s[S_GONE_NEGDUR])}

    @staticmethod
    def warm() -> None:
        """Load ``keep_rows`` (from numba's cache) into this process."""
        Keeper(0, 0, np.zeros(0, np.int64), 0, np.zeros(1, np.uint8)).close()


class Grouper:
    """``group_batch`` over one range's batches, in groups of ``size``
    events; the range's extent so far by name."""

    def __init__(self, size: int):
        self.size = size
        self.ext = np.array([NO_T0, NO_T1, -1, 0], np.int64)

    def batch(self, rcls, rec, vbits, starts, ends, base: int, seq0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(groups, flow keys, flow ts)`` of one batch (the arguments are group_batch's; ``vbits`` None:
        none): int64[g, G_COLS] summaries and the written flow events' keys and ts, copies."""
        n = len(rcls)
        groups = np.empty((-(-n // self.size), G_COLS), np.int64)
        fkeys, fts = np.empty(n, np.int64), np.empty(n, np.int64)
        ng, nf = group_batch(rcls, rec, _NO_BITS if vbits is None else vbits, starts, ends, base, seq0, self.size,
                             groups, fkeys, fts, self.ext)
        return groups[:ng], fkeys[:nf].copy(), fts[:nf].copy()

    ts_min = slot("ext", X_TS_MIN, "The least ts of the events written so far (ns; NO_T0 when none).")
    ts_max = slot("ext", X_TS_MAX, "The greatest ``min(ts, end)`` of the events written so far (ns; NO_T1 when none).")
    end = slot("ext", X_END, "The output offset just past the last event written (-1: none).")
    written = slot("ext", X_WRITTEN, "Events written so far.")

    @staticmethod
    def warm() -> None:
        """Load group_batch (from numba's cache) into this process."""
        z = np.zeros(0, np.int64)
        Grouper(1).batch(np.zeros(0, np.uint8), np.zeros((0, R_COLS), np.int64), None, z, z, 0, 0)
