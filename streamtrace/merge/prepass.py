"""merge's pre-pass over one rank without decoding its events (``--align first-step``, and ``--steps`` /
``--window`` with it or on a rank cut into byte ranges; otherwise the time filters read each rank once:
``streamtrace.merge.deferred``; not ``--align collectives``, which reads collectives:
``streamtrace.merge.survey.survey_rank``).

The numba kernel ``streamtrace.kernels.survey.scan_survey`` (through its facade
``Surveyor``) finds every event's byte range
and exact ts/dur (as the reader's ``streamtrace.kernels.scan.scan_events``) and, in the same
pass, tells metadata events, flow events with their keys and ProfilerStep candidates apart.  Only the candidates and the events the kernel
cannot read exactly are decoded, and go through the same per-event rule as the decoding
pre-pass (``account_event``), so the result is the same: the earliest ts of a non-metadata
event, each ``ProfilerStep#N``'s window, each flow's ``(min ts, max ts)``
(``FlowExtents``).  Measured: bench/RESULTS.md, "filtered merge".
"""
from __future__ import annotations

import numpy as np

from ..kernels import survey
from ..kernels import scan
from ..kernels.surveyor import Surveyor
from ..trace.decode import decode_value, loads, text_ns
from ..trace.reader import TraceReader
from ..trace.source import LEAN_BLOCK
from ..trace.steps import profiler_step_number
from .flows import FlowExtents
from .pids import FLOW_PHASES, GPU_CATS, hashable


class Tally:
    """What the pre-pass gathers: ``first`` (ns or None), ``steps`` {N: (start, end)} and, when
    ``flows`` is a dict, the flows read in Python {(cat, id): (lo, hi)}."""

    def __init__(self, want_flows):
        self.first = None
        self.steps = {}
        self.flows = {} if want_flows else None


def account_event(ev, t, d, acc: Tally):
    """One decoded event with a ts (``t``, ``d``: its ts and dur in ns, as the scanner read them)
    into ``acc``: the pre-pass's rule (ProfilerStep# X events outside the GPU categories, flows)."""
    if not isinstance(ev, dict):
        return
    ph = ev.get("ph")
    if ph != "M" and (acc.first is None or t < acc.first):
        acc.first = t
    name = ev.get("name")
    if ph == "X" and isinstance(name, str) and name.startswith("ProfilerStep#") and ev.get("cat") not in GPU_CATS:
        n = profiler_step_number(name)      # -1: no number, or one past MAX_STEP: no step
        if n < 0:
            return
        lo, hi = acc.steps.get(n, (t, t + d))
        acc.steps[n] = (min(lo, t), max(hi, t + d))
    elif acc.flows is not None and ph in FLOW_PHASES:
        k = (ev.get("cat"), hashable(ev.get("id")))
        lo, hi = acc.flows.get(k, (t, t))
        acc.flows[k] = (min(lo, t), max(hi, t))


def event_times_ns(ev, ts: int, dur: int, flags: int):
    """``(ts, dur)`` (ns) of a decoded event as merge's rewrite reads them: the scanner's numbers,
    or a number written in a string (``text_ns``); None when its ts is
    unusable (the rewrite drops the event).  ``flags``: the scanner's (TS_BAD 4, DUR_BAD 8)."""
    if flags & 4:
        ts = text_ns(ev.get("ts")) if isinstance(ev, dict) else None
        if ts is None:
            return None
    if flags & 8:
        dur = text_ns(ev.get("dur")) if isinstance(ev, dict) else None
        if dur is None:
            return None
    return ts, dur


def prepass_rank(path, want_flows=False, salvage=False, byte_range=None):
    """``(metadata, first_ns, steps, flows)`` of one rank (``flows``: a
    ``FlowExtents``, empty unless ``want_flows``), exactly as the
    decoding pre-pass finds them.  ``byte_range``: only that range of a plain file (no metadata)."""
    r = TraceReader(path, salvage=salvage, byte_range=byte_range, block=LEAN_BLOCK)
    acc, sc, parts = Tally(want_flows), Surveyor(r.batch_events), []
    for w in r.windows():
        w.scanned(*sc.scan(w.arr, w.pos, w.n, w.starts, w.ends, w.sep))
        b = w.batch()
        if b is None:
            continue
        n = len(b.starts)
        kind, flags, ts = sc.kind[:n], sc.flags[:n], sc.ts[:n]
        has = (flags & 1) != 0
        text = has & ((flags & 12) != 0)       # a ts or dur in a string: decoded, read as the rewrite reads it
        plain = has & ~text & ((kind == survey.S_OTHER) | (kind == survey.S_FLOW))
        if plain.any():
            t0 = int(ts[plain].min())
            acc.first = t0 if acc.first is None or t0 < acc.first else acc.first
        if want_flows:
            fl = has & ~text & (kind == survey.S_FLOW)
            if fl.any():
                parts.append((sc.cat_k[:n][fl], sc.flow_id[:n][fl], ts[fl]))
        base = b.offset - int(b.starts[0])
        for j in np.flatnonzero(has & ((kind == survey.S_DECODE) | text)).tolist():
            s, e = int(b.starts[j]), int(b.ends[j])
            dec = decode_value if flags[j] & scan.BIG_INT else loads      # as the reader decodes a batch
            ev = dec(b.buf[s:e], path, base + s)
            td = event_times_ns(ev, int(ts[j]), int(sc.dur[j]), int(flags[j]))
            if td is not None:
                account_event(ev, *td, acc)
    cat_names = [t.decode("utf-8") for t in sc.categories]
    flows = FlowExtents.build(cat_names, parts, acc.flows or {}) if want_flows else FlowExtents()
    return r.metadata, acc.first, acc.steps, flows
