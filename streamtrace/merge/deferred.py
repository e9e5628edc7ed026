"""``merge --steps`` / ``--window`` in one pass: the time filter decided after the rewrite, not before it.

A filtered merge used to read every rank twice: a survey for the ProfilerStep windows and the
extents of every flow, then the rewrite.  With a deferred filter the rank is rewritten once, as the
full merge rewrites it, into a temporary segment, while the byte kernel
(``streamtrace.kernels.rewrite.scan_rewrite`` with ``defer``) records per written event what the
filter will decide it by (class, ts, end, output offset, flow key, merged pid) and flags the
ProfilerStep candidates, which are decoded here exactly as the survey decodes them
(``streamtrace.merge.prepass.account_event``), and the rank's earliest ts.  After the pass the
keep-window is known (``--steps``: from this rank's steps; ``--window``: by the parent, once every
rank's earliest ts is, ``DeferredFilter.park``);
``DeferredFilter.finish`` keeps the same events the two-pass merge keeps (an event meeting the
window; a flow event only when every event of its flow has its ts in the window) and copies the kept
byte runs into the rank's segment.  The output's validation drops the other events from its view
afterwards (``streamtrace.validate.check.OutFilter``).

The per-event records are appended to a temporary file (48 bytes per written event), so memory
stays that of the full merge; the flows' keys and ts stay in memory (16 bytes per flow event,
what the survey held; a parked rank keeps them reduced to each flow's extent, ``flow_extents``).
When the keep-window holds every written event's ts, ``DeferredFilter.finish`` keeps them all from
the pass's extremes, without reading the rows back.  A byte range of a cut rank records groups of
events instead (``streamtrace.merge.grouped``).  Measured: bench/RESULTS.md, "filtered merge" (a
filter keeping every event: 0.99x the full merge's CPU on whole ranks).
"""
from __future__ import annotations

import os

import numpy as np

from ..kernels import keep as keep_kernels
from ..kernels import rewrite
from ..kernels import validate as validate_kernels
from ..kernels.keeper import Keeper
from ..runtime.errors import StreamtraceError
from ..trace.decode import loads
from ..kernels.texts import text_table
from .flows import plain_id
from .prepass import Tally, account_event, event_times_ns

CHUNK_ROWS = 1 << 16


def out_view_bits(f: np.ndarray) -> np.ndarray:
    """uint8 per event of the validate fields ``f`` (int64[n, NF]): MISSING_OUT / NEGDUR_OUT as
    ``streamtrace.kernels.validate.batch_records`` counts the event in the output's view (where
    every event has a pid)."""
    ph, tfl = f[:, validate_kernels.C_PH], f[:, validate_kernels.C_TFLAGS]
    other = ((ph == validate_kernels.PH_NONE) | (f[:, validate_kernels.C_TIDK] == validate_kernels.ABSENT)
             | ((tfl & 1) == 0) | ((tfl & 4) != 0))
    neg = ~other & (ph == validate_kernels.PH_X) & (((tfl & 2) == 0) | ((tfl & 8) != 0)
                                                   | (f[:, validate_kernels.C_DUR] < 0))
    return (other * keep_kernels.MISSING_OUT + neg * keep_kernels.NEGDUR_OUT).astype(np.uint8)


def flow_extents(keys: np.ndarray, ts: np.ndarray):
    """``(key, first, last)``: each distinct flow key of ``keys`` (int64[n], one per flow event, ``ts``
    its ts in ns), sorted, with the earliest and the latest ts of its events."""
    order, start = key_groups(keys)
    at = np.flatnonzero(start)
    t = ts[order]
    if not len(at):
        return keys[order], t, t
    return keys[order][at], np.minimum.reduceat(t, at), np.maximum.reduceat(t, at)


def key_groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, start)``: the stable sort order of ``keys`` (int64[n]) and, per position of the sorted
    keys, whether a new distinct key starts there (bool[n])."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.empty(len(sk), bool)
    start[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=start[1:])
    return order, start


def missing_steps(path, steps: tuple, have: dict) -> str | None:
    """The two-pass merge's error when ``have`` (``{N: (start, end)}``) lacks a step of ``--steps
    first-last``, else None."""
    a, b = steps
    if a in have and b in have:
        return None
    names = ", ".join(map(str, sorted(have))) or "none"
    return f"{path}: --steps {a}-{b} not in this rank's ProfilerSteps ({names})"


class DeferredFilter:
    """One rank's deferred ``--steps first-last`` filter: the records of its rewrite
    (``add_batch``), then the decision and the rank's segment (``finish``).

    ``cats`` is the flow-category table the byte kernel looks up (``cat_text``/``cat_off``, grown
    through ``add_cat``); flows whose key is not plain (a cat that is not a string, an id that is
    not an integer below 2**40) are numbered in ``other`` by Python."""

    def __init__(self, steps, spill_path: str):
        self.steps = tuple(steps) if steps else None
        self.flows_path = None
        self.extents = None     # (key, first, last) of its flows, once asked for (flow_extents())
        self.tally = Tally(False)
        self.cats, self.index = [], {}
        self._table()
        self.other, self.other_index = [], {}
        self.flow_keys, self.flow_ts = [], []
        self.spill_path = spill_path
        self.spill = open(spill_path, "wb") if spill_path else None
        self.n_in = 0
        self.written = 0        # events written, the least and the greatest ts of those with one (ns), the
        self.ts_min, self.ts_max = int(keep_kernels.NO_T0), int(keep_kernels.NO_T1)
        self.end = -1           # output offset past the last
        self.used = None        # the merged pids that had an event written (set after the pass)
        self.inexact = []       # seqs of written flow ends the output's check cannot derive (see exact())

    # -- the flow categories the kernel knows ------------------------------------------------
    def _table(self):
        texts = [c.encode("utf-8", "surrogatepass") for c in self.cats]
        self.cat_text, self.cat_off = text_table(texts)

    def add_cat(self, text: str) -> int:
        """The index of flow category ``text`` (added when new)."""
        k = self.index.get(text)
        if k is None:
            k = self.index[text] = len(self.cats)
            self.cats.append(text)
            self._table()
        return k

    def flow_key(self, cat, fid) -> tuple[int, bool]:
        """``(key, other)`` of a flow event decoded in Python: ``cat index << 40 | id`` for a plain
        key (as the kernel makes it), else the flow's number in ``other`` with ``other`` True."""
        i = plain_id(fid) if isinstance(cat, str) else None
        if i is not None and i < int(rewrite.ID_LIMIT):
            return (self.add_cat(cat) << 40) | i, False
        key = (cat, fid)
        k = self.other_index.get(key)
        if k is None:
            k = self.other_index[key] = len(self.other)
            self.other.append(key)
        return k, True

    # -- during the pass ---------------------------------------------------------------------------
    def step_event(self, ev, ts: int, dur: int):
        """A decoded event that may be a ProfilerStep (the survey's rule)."""
        account_event(ev, ts, dur, self.tally)

    def add_batch(self, rcls, rec, buf, starts, ends, vbits, path, base, times):
        """One batch's records: ``rcls``/``rec`` as the kernel (and the Python twin) left them (the
        rows of the written events are ``keep_rows``' rows as they are),
        ``vbits`` (``out_view_bits``, or None without validation); the ProfilerStep candidates are
        decoded from ``buf`` (``times(j)``: ``(ts, dur, flags)`` of event j as the scanner reads
        them)."""
        n = len(rcls)
        self.step_candidates(rcls, buf, starts, ends, path, base, times)
        w = np.flatnonzero(rcls & keep_kernels.C_CLASS)
        if len(w):
            rows = rec[:n] if len(w) == n else rec[w]
            if vbits is not None:
                rows[:, keep_kernels.R_BITS] |= vbits[w]
            rows.tofile(self.spill)
            self.written += len(rows)
            t0 = rows[:, keep_kernels.R_T0]      # (a C_KEPT row's is NO_T0, its end NO_T1: min(ts, end) is then NO_T1)
            self.ts_min = min(self.ts_min, int(t0.min()))
            self.ts_max = max(self.ts_max, int(np.minimum(t0, rows[:, keep_kernels.R_T1]).max()))
            self.end = int(rows[-1, keep_kernels.R_END])
            fl = np.flatnonzero((rows[:, keep_kernels.R_BITS] & keep_kernels.C_CLASS) == keep_kernels.C_FLOW)
            if len(fl):
                key = rows[fl, keep_kernels.R_FLOW]
                other_flow = rows[fl, keep_kernels.R_BITS] & keep_kernels.C_OTHER_FLOW
                self.flow_keys.append(np.where(other_flow, -1 - key, key))
                self.flow_ts.append(rows[fl, keep_kernels.R_T0])
        self.n_in += n

    def step_candidates(self, rcls, buf, starts, ends, path, base, times):
        """The batch's ProfilerStep candidates (``rcls & C_STEP``) decoded and told to
        ``step_event`` (see ``add_batch``)."""
        for j in np.flatnonzero(rcls & keep_kernels.C_STEP).tolist():
            s, e = int(starts[j]), int(ends[j])
            ts, dur, flags = times(j)
            if flags & 1:                   # the survey's rule: only an event with a ts
                ev = loads(bytes(buf[s:e]), path, base + s)
                td = event_times_ns(ev, ts, dur, flags)
                if td is not None:
                    self.step_event(ev, *td)

    # -- after the pass ----------------------------------------------------------------------------
    @property
    def first(self) -> int | None:
        """The rank's earliest ts (ns) of any event but metadata, as the survey finds it."""
        return self.tally.first

    @property
    def steps_found(self) -> dict:
        """``{N: (start, end)}`` (ns) of the rank's ``ProfilerStep#N``, as the survey finds them."""
        return self.tally.steps

    def missing(self, path) -> str | None:
        """The error when this rank lacks a step of ``--steps first-last`` (the two-pass merge's
        words), else None (also without ``--steps``)."""
        return None if self.steps is None else missing_steps(path, self.steps, self.tally.steps)

    def window(self, path) -> tuple[int, int]:
        """The keep-window (rank-local ns) of ``--steps first-last`` from this rank's steps.
        Raises ``StreamtraceError`` when a step is missing (see ``missing``)."""
        err = self.missing(path)
        if err:
            raise StreamtraceError(err)
        a, b = self.steps
        return self.tally.steps[a][0], self.tally.steps[b][1]

    def kept_flows(self, lo: int, hi: int) -> np.ndarray:
        """Sorted int64 keys of the flows whose every event has ``lo <= ts <= hi`` (plain keys as
        they are, the others as ``-1 - number``)."""
        keys, first, last = self.flow_extents()
        return keys[(first >= lo) & (last <= hi)]

    def _flows(self) -> tuple[np.ndarray, np.ndarray]:
        """The flow events' keys and ts gathered during the pass, as two arrays (the lists emptied)."""
        keys = np.concatenate(self.flow_keys) if self.flow_keys else np.zeros(0, np.int64)
        ts = np.concatenate(self.flow_ts) if self.flow_ts else np.zeros(0, np.int64)
        self.flow_keys, self.flow_ts = [], []
        return keys, ts

    def covered(self, lo: int, hi: int) -> bool:
        """True when the keep-window ``[lo, hi]`` (ns) holds every written event's ts: then every event
        this filter saw is kept (an event meeting the window is kept, and so is a flow whose every ts is
        in it), and so is every flow (a byte range's flows also need the other ranges covered)."""
        return lo <= self.ts_min and self.ts_max <= hi

    def exact(self, dropped_seq) -> bool:
        """False when a kept flow end has an id the output's check cannot derive
        (``streamtrace.validate.merged.inexact_ends``): as the two-pass merge tells it, from the
        events it keeps."""
        return not any(not dropped_seq[s] for s in self.inexact)

    def park(self, flows_path: str) -> None:
        """Close the spill and move the flows, reduced to their extents (``flow_extents``, here in
        the rank's worker), to ``flows_path``: what is left pickles in a few KB, for the parent to hand
        to ``streamtrace.merge.rank.finish_parked`` or ``streamtrace.merge.split_filter.decide_split``."""
        self.spill.close()
        self.spill = None
        with open(flows_path, "wb") as f:
            for a in flow_extents(*self._flows()):
                np.save(f, a)
        self.flows_path = flows_path

    def flow_extents(self) -> tuple:
        """``(key, first, last)`` of this filter's flows (``flow_extents``): read back from what
        ``park`` set aside, or reduced from the pass's flow events; kept in ``extents``."""
        if self.extents is None and self.flows_path is not None:
            with open(self.flows_path, "rb") as f:
                self.extents = tuple(np.load(f) for _ in range(3))
        if self.extents is None:
            self.extents = flow_extents(*self._flows())
        return self.extents

    def close(self):
        if self.spill is not None and not self.spill.closed:
            self.spill.close()
        for p in (self.spill_path, self.flows_path):
            if p:
                try:
                    os.unlink(p)
                except OSError:
                    pass

    def finish(self, path, shift_ns: int, keep=None, kept_keys=None) -> "Decision":
        """Decide every written event (``streamtrace.kernels.keep.keep_rows`` over the rows
        spilled during the pass) under the keep-window ``keep`` (``(lo, hi)`` rank-local ns; None: this
        rank's steps).  ``kept_keys``: the kept flows' sorted keys in this filter's numbering (None:
        from its own flows, ``kept_flows``; a byte range of a rank gets them from the whole rank's,
        ``streamtrace.merge.split_filter``).  Raises ``StreamtraceError`` when a step is missing."""
        d, keeper = self._begin(path, shift_ns, keep, kept_keys)
        if keeper is None:
            return d
        with open(self.spill_path, "rb") as f:
            while True:
                rows = np.fromfile(f, np.int64, CHUNK_ROWS * keep_kernels.R_COLS).reshape(-1, keep_kernels.R_COLS)
                if not len(rows):
                    break
                keeper.rows(rows)
        keeper.close()
        return d.done(keeper)

    def _close_spill(self) -> None:
        if self.spill is not None:
            self.spill.close()

    def _begin(self, path, shift_ns: int, keep, kept_keys) -> tuple:
        """``finish``'s start: ``(decision, keeper)``, the ``Keeper`` that
        decides the rows, or None when the window covers every written event (the decision is then
        made, ``_keep_all``)."""
        lo, hi = keep if keep is not None else self.window(path)
        self._close_spill()
        d = Decision(lo, hi, self.n_in)
        if kept_keys is None and self.covered(lo, hi):
            return self._keep_all(d, shift_ns), None
        kept_keys = self.kept_flows(lo, hi) if kept_keys is None else kept_keys
        return d, Keeper(lo, hi, kept_keys, shift_ns, d.dropped_seq)

    def _keep_all(self, d: "Decision", shift_ns: int) -> "Decision":
        """``d`` keeping every written event (the window covers them all): what ``keep_rows``
        would decide, without reading the rows back."""
        d.runs = np.array([[0, self.end]] if self.written else [], np.int64).reshape(-1, 2)
        d.kept = self.written
        d.used = set(self.used)
        d.first_out = self.ts_min + shift_ns if self.ts_min != keep_kernels.NO_T0 else None
        return d


class Decision:
    """What a deferred filter keeps of one rank: ``lo``/``hi`` (the keep-window, ns), ``runs``
    (int64[n, 2] byte ranges of the tentative segment holding only kept events, each a
    comma-separated list), ``dropped_seq`` (uint8 per input event: 1 when written, then dropped), the
    count of kept events, the merged pids they use, the earliest kept ts (shifted, ns) and what the
    dropped events counted in the output's validation view (``dropped``: events, missing, negdur)."""

    def __init__(self, lo, hi, n_in):
        self.lo, self.hi = lo, hi
        self.dropped_seq = np.zeros(n_in, np.uint8)
        self.runs = np.zeros((0, 2), np.int64)
        self.kept = 0
        self.used = set()
        self.first_out = None
        self.dropped = {"events": 0, "missing": 0, "negdur": 0}

    def done(self, keeper: Keeper) -> "Decision":
        """This decision once ``keeper`` has seen the last chunk (and closed its last run)."""
        self.runs = keeper.runs
        self.kept = keeper.kept
        self.used = keeper.used
        self.first_out = keeper.first_out
        self.dropped = keeper.dropped
        return self


def warm_keep() -> None:
    """Load ``keep_rows`` (from numba's cache) into this process: merge's
    parent does it before forking its workers, which then share it."""
    Keeper.warm()
