"""The checks that need the records in order (slice nesting, flows), run over the sorted records
of a ``Checker`` (``run_nesting``, ``run_flows``), and the
events a time filter dropped after they were written (``OutFilter``).

Merge's ``--steps`` / ``--window`` can rewrite a rank once in full and cut the output to the
keep-window afterwards (the window is known only then); its checker has recorded every written
event in the view ``V_OUT`` and forgets the dropped ones as it reports
(``Checker.reports(out_filter=...)``).  The records carry no event identity, so the filter names
the dropped ones by what they hold: an ``X`` slice record (``start`` = the event's input ``ts``,
``end`` = ``ts + dur``, ns) by the window rule itself, a flow-end record by its ``seq`` (the
event's index in the rank's file order, as ``streamtrace.kernels.validate.batch_records``
numbers it from the checker's ``seq``; a cut trace's ranges number theirs from ``k *
SEQ_STRIDE``, which ``gather_ranges`` maps back).  The events that make no record (a missing field, a
bad ``dur``, any other ``ph``) only count: the caller says how much.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernels import validate as validate_kernels
from ..kernels.validator import FlowRun, NestingRun

__all__ = ["OutFilter", "SEQ_STRIDE", "run_nesting", "run_flows"]

SEQ_STRIDE = 1 << 40     # the checker of byte range k of a trace numbers its events from k * SEQ_STRIDE


@dataclass
class OutFilter:
    """Which written events a time filter dropped after the fact, for the view ``V_OUT`` only
    (``V_IN``, the input as read, is untouched).

    Attributes:
        lo, hi: the keep-window, int ns on the rank's own clock (the clock of the input ``ts``,
            before merge's shift), both ends inclusive.  An ``X`` slice record ``(start, end)`` is
            dropped when ``end < lo or start > hi``: merge's window rule for an ``X`` event
            (kept when ``ts + max(dur, 0) >= lo and ts <= hi``; a record's ``dur`` is >= 0).
        dropped_seq: bool or uint8 array indexed by an event's ``seq`` (``seq0 + i``: its index
            among every event the checker accounted, written or not, i.e. the rank's input events
            in file order): nonzero for a written event the filter dropped.  A flow-end
            record is dropped when ``dropped_seq[seq]``; a ``seq`` past the array's end is kept;
            None: no flow end dropped.  Only flow ends are looked up here (``X`` slices go by the
            window).
        events, missing, negdur: what the dropped events had added to the checker's ``V_OUT``
            counters (``Checker.events[1]``, ``missing[1]``, ``negdur[1]``: events, missing-field
            events, ``X`` events with a missing or negative ``dur``); subtracted from them.
        pending: None, or a callable returning the complete filter (same ``lo``/``hi``) when the
            dropped events are still being decided as the checks start (merge's split filter
            decides them in a thread meanwhile): called once, after the slices, which go by the
            window alone, are checked (``streamtrace.validate.check.Checker.reports``).
    """
    lo: int
    hi: int
    dropped_seq: np.ndarray | None = None
    events: int = 0
    missing: int = 0
    negdur: int = 0
    pending: Callable[[], "OutFilter"] | None = None

    def nest_view(self, c) -> np.ndarray:
        """The ``view`` column (int64[n], a new array) of a sorted chunk ``c`` of ``X`` slice
        records (fields ``start``, ``end``, ``view``), with ``V_OUT`` cleared on those outside
        ``[lo, hi]``.  O(n)."""
        view = np.array(c["view"], np.int64)
        view[(c["end"] < self.lo) | (c["start"] > self.hi)] &= ~validate_kernels.V_OUT
        return view

    def flow_view(self, c, range_starts: np.ndarray | None = None) -> np.ndarray:
        """The ``view`` column (int64[n], a new array) of a sorted chunk ``c`` of flow-end
        records (fields ``seq``, ``view``), with ``V_OUT`` cleared where ``dropped_seq[seq]``.
        ``range_starts``: the records of a trace's byte ranges, range k's ``seq`` numbered from
        ``k * SEQ_STRIDE``; int64[k] the file-order index of each range's first event.  O(n)."""
        view = np.array(c["view"], np.int64)
        d = self.dropped_seq
        if d is None or not len(d):
            return view
        seq = c["seq"]
        if range_starts is not None:
            seq = range_starts[seq // SEQ_STRIDE] + seq % SEQ_STRIDE
        inside = seq < len(d)
        view[inside & (d[np.minimum(seq, len(d) - 1)] != 0)] &= ~validate_kernels.V_OUT
        return view

    def counters(self, events: list, missing: list, negdur: list) -> tuple:
        """``(events, missing, negdur)``, each ``[V_IN, V_OUT]`` as the checker keeps them, with the
        dropped events' share taken from ``V_OUT``.  Raises ValueError when that leaves a count
        below 0 (the filter names more events than were written)."""
        out = []
        for have, gone in ((events, self.events), (missing, self.missing), (negdur, self.negdur)):
            if not 0 <= gone <= have[1]:
                raise ValueError(f"out filter: {gone} dropped of {have[1]} written (events, missing, negdur: "
                                 f"{self.events}, {self.missing}, {self.negdur})")
            out.append([have[0], have[1] - gone])
        return tuple(out)


def run_nesting(sorter, out_filter: OutFilter | None = None) -> list:
    """``[(bad nesting, tracks, GPU-stream overlaps) per view]`` (V_IN, V_OUT) from the X slice
    records of ``sorter`` (an ``ExternalSorter``, consumed) by
    ``streamtrace.kernels.validator.NestingRun``; V_OUT without ``out_filter``'s slices."""
    run = NestingRun()
    for c in sorter.chunks():
        run.add(c["tkind"], c["pid"], c["tid"], c["start"], c["end"],
                c["view"] if out_filter is None else out_filter.nest_view(c))
    return [run.totals(0), run.totals(1)]


def run_flows(sorter, out_filter: OutFilter | None = None, range_starts: np.ndarray | None = None) -> np.ndarray:
    """int64[2, 4] per view (V_IN, V_OUT): flow keys, unmatched, duplicate, cross-rank keys (see
    ``streamtrace.kernels.validate.flow_chunk``, through ``FlowRun``)
    from the flow-end records of ``sorter`` (consumed); V_OUT without ``out_filter``'s flow ends
    (``range_starts``: see ``OutFilter.flow_view``)."""
    run = FlowRun()
    for c in sorter.chunks():
        view = c["view"] if out_filter is None else out_filter.flow_view(c, range_starts)
        run.add(c["kinds"], c["cat"], c["id"], c["ph"], c["rankk"], c["rank"], view)
    return run.close()
