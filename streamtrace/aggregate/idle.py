"""Idle-time breakdown per GPU stream and per device, from one rank's ``kernels`` rows and the
launch rows they join (``streamtrace.aggregate.stats.launch_rows``).

The rule is HolisticTraceAnalysis' ``BreakdownAnalysis.get_idle_time_breakdown``
(``hta/analyzers/breakdown_analysis.py``, ``_analyze_idle_time_for_stream``): the GPU events of a
stream (kernels, memcpy, memset) in start order; the gap before an event is its start minus the
end of the work before it on that stream; a gap is

* **host wait** when the event's launch call *started* after that end -- the GPU had nothing
  queued because the CPU was late (HTA tests the launch start, ``ts_runtime > prev_end``, not the
  launch end; so does streamtrace);
* else **kernel wait** when it is shorter than the threshold (HTA's ``consecutive_kernel_delay``:
  its default 30 is compared against microsecond timestamps, i.e. 30 us; here
  ``DEFAULT_THRESHOLD_NS`` = 30,000 ns) -- the normal launch-to-launch bubble;
* else **other** (synchronisation, waits on other streams, ...).

Where streamtrace differs from HTA (on purpose): times are exact int64 ns (HTA rounds starts up
and ends down to whole us); "the work before" is the running maximum of the earlier events' ends
(HTA takes the previous event's end, so an event contained in a longer one makes a negative
"gap" HTA adds to kernel wait): a negative gap is no idle time, it counts in
``overlapped_kernels``; an event without a launch row (launched before the profiling window) is
judged by the threshold alone and counted in ``no_launch_gaps`` / ``no_launch_ns``; every step
is kept (HTA drops the last ProfilerStep).  ``stream`` -1 is the whole device (all its streams
merged): its idle time summed over the steps equals analyze's ``idle`` of the device
(span - busy, ``summary.json``) exactly.

A gap belongs to the step of the event that ends it (its ``step`` column); ``cross_step_ns`` sums
the gaps whose earlier event belongs to another step.  For a stream whose steps do not
interleave, ``idle_ns - cross_step_ns = span_ns - busy_ns`` per step.
"""
from __future__ import annotations

import numpy as np

from ..kernels import intervals as iv
from ..kernels.gaps import running_end_before
from .folder import IDLE_BREAKDOWN_COLUMNS
from .stats import group_ids

DEFAULT_THRESHOLD_NS = 30_000
COLUMNS = tuple(c for c in IDLE_BREAKDOWN_COLUMNS if c not in ("iteration", "rank"))
"""A rank's columns of ``idle_breakdown`` (``iteration`` and ``rank`` are added when it is written)."""


def classify(first, ts, end, linked, launch_ts, threshold_ns=DEFAULT_THRESHOLD_NS) -> dict:
    """Classify the gap before every event (rows sorted by (segment, start, end); ``first``:
    bool[N], True where a segment -- a stream -- starts; ``ts``, ``end``, ``launch_ts``: int64[N]
    in one unit, ``linked``: bool[N], the event has a launch row; ``threshold_ns`` in that unit).

    Returns int64/bool arrays of length N: ``gap`` (the idle gap, 0 where there is none),
    ``has_gap`` (an earlier event exists and the gap is >= 0), ``host``, ``kernel``, ``other``
    (the category of the gap, exclusive; all False without a gap), ``overlapped`` (the event
    starts before the work before it ends), ``prev_row`` (row holding that end, -1 none)."""
    ts, end, launch_ts = (np.asarray(x, np.int64) for x in (ts, end, launch_ts))
    prev_end, prev_row = running_end_before(np.asarray(first, bool), end)
    raw = ts - prev_end
    earlier = prev_row >= 0
    has_gap = earlier & (raw >= 0)
    host = has_gap & np.asarray(linked, bool) & (launch_ts > prev_end)
    kernel = has_gap & ~host & (raw < threshold_ns)
    return {"gap": np.where(has_gap, raw, 0), "has_gap": has_gap, "host": host, "kernel": kernel,
            "other": has_gap & ~host & ~kernel, "overlapped": earlier & (raw < 0), "prev_row": prev_row}


def breakdown(device, stream, ts, end, step, linked, launch_ts, threshold_ns=DEFAULT_THRESHOLD_NS) -> dict:
    """The idle breakdown of one rank's GPU events (int64[N] arrays, any order): one row per
    (device, stream, step) and per (device, -1, step) for the whole device; columns
    ``COLUMNS`` as numpy arrays, sorted by device, stream (-1 first), step."""
    device, stream, ts, end, step = (np.asarray(x, np.int64) for x in (device, stream, ts, end, step))
    linked, launch_ts = np.asarray(linked, bool), np.asarray(launch_ts, np.int64)
    parts = [_level(device, stream, ts, end, step, linked, launch_ts, threshold_ns),
             _level(device, np.full(len(ts), -1, np.int64), ts, end, step, linked, launch_ts, threshold_ns)]
    out = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    o = np.lexsort((out["step"], out["stream"], out["device"]))
    return {c: v[o] for c, v in out.items()}


def _level(device, stream, ts, end, step, linked, launch_ts, threshold_ns) -> dict:
    """Rows of one level (per stream, or per device when ``stream`` is all -1)."""
    o = np.lexsort((end, ts, stream, device))
    d, s, t, e, st, lk, lt = (x[o] for x in (device, stream, ts, end, step, linked, launch_ts))
    n = len(t)
    first = np.ones(n, bool)
    first[1:] = (d[1:] != d[:-1]) | (s[1:] != s[:-1])
    c = classify(first, t, e, lk, lt, threshold_ns)
    gid, head = group_ids(d, s, st)
    g = len(head)
    gap = c["gap"]
    cross = c["has_gap"] & (st[np.maximum(c["prev_row"], 0)] != st)

    def total(mask, values=None):
        out = np.zeros(g, np.int64)
        np.add.at(out, gid, np.where(mask, 1 if values is None else values, 0))
        return out
    lo = np.full(g, np.iinfo(np.int64).max, np.int64)
    hi = np.full(g, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(lo, gid, t)
    np.maximum.at(hi, gid, e)
    mx = np.zeros(g, np.int64)
    np.maximum.at(mx, gid, gap)
    order = np.argsort(gid, kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(g + 1))
    busy = np.asarray([iv.union_length(t[order[a:b]], e[order[a:b]])
                       for a, b in zip(bounds[:-1], bounds[1:])], np.int64)
    host, kern, oth = total(c["host"], gap), total(c["kernel"], gap), total(c["other"], gap)
    idle = host + kern + oth
    pct = lambda x: np.where(idle > 0, 100.0 * x / np.maximum(idle, 1), np.nan)  # noqa: E731
    return {"device": d[head], "stream": s[head], "step": st[head], "kernels": total(np.ones(n, bool)),
            "span_ns": hi - lo if g else np.zeros(0, np.int64), "busy_ns": busy, "idle_ns": idle,
            "host_wait_ns": host, "kernel_wait_ns": kern, "other_ns": oth, "host_wait_gaps": total(c["host"]),
            "kernel_wait_gaps": total(c["kernel"]), "other_gaps": total(c["other"]),
            "no_launch_gaps": total(c["has_gap"] & ~lk), "no_launch_ns": total(c["has_gap"] & ~lk, gap),
            "cross_step_ns": total(cross, gap), "overlapped_kernels": total(c["overlapped"]), "max_gap_ns": mx,
            "host_wait_pct": pct(host), "kernel_wait_pct": pct(kern), "other_pct": pct(oth)}
