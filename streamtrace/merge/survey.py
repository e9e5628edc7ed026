"""The pre-pass of ``streamtrace merge`` over each rank (``survey_rank``, needed by
``--steps``, ``--window``, ``--align first-step`` and ``--align collectives``) or just its metadata
(``metadata_task``), and the per-rank time shifts and keep-windows computed from them
(``plan_time``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.errors import StreamtraceError
from ..events.columns import StringTable, column_batches
from ..trace.metadata import base_time_ns, read_trailer
from ..trace.reader import TraceReader
from ..trace.steps import profiler_step_number
from .clocks import KERNEL_CATS, CollectiveLog
from .flows import FlowExtents
from .pids import FLOW_PHASES, GPU_CATS, hashable
from .prepass import prepass_rank

@dataclass
class Survey:
    """A full pre-pass over one rank: metadata, time extent and ProfilerStep windows (ns), flows
    (``FlowExtents``; a dict ``{(cat, id): (lo, hi)}`` is accepted),
    and (``--align collectives``) its collective kernels."""
    metadata: dict
    first_ns: int | None
    steps: dict
    flows: dict
    collectives: CollectiveLog | None = None


def survey_rank(path, want_flows=False, salvage=False, byte_range=None, want_collectives=False) -> Survey:
    """Read one rank fully (a pre-pass needed by ``--steps``, ``--window``, ``--align first-step``
    and ``--align collectives``): ProfilerStep windows ``{N: (start_ns, end_ns)}``, the
    earliest ts, per flow ``(cat, id) -> (min ts, max ts)`` when ``want_flows``, the collective
    kernels (``CollectiveLog``) when ``want_collectives``.
    ``byte_range``: survey only that range of a plain file's events (no metadata;
    see ``combine_surveys``).  Without flows, collectives are read from the columns of the
    numba extractor (``survey_columns``), not from decoded events."""
    if want_collectives and not want_flows:
        return survey_columns(path, salvage, byte_range)
    if not want_collectives:            # the bytes classified by a kernel, few events decoded
        return Survey(*prepass_rank(path, want_flows, salvage, byte_range))
    r = TraceReader(path, salvage=salvage, byte_range=byte_range)
    first = None
    steps, flows = {}, {}
    log = CollectiveLog() if want_collectives else None
    for b in r.raw_batches():
        ts, dur, flags = b.ts_ns.tolist(), b.dur_ns.tolist(), b.flags.tolist()
        for i, ev in enumerate(b.events):
            if not flags[i] & 1:
                continue
            t = ts[i]
            ph = ev.get("ph")
            if ph != "M" and (first is None or t < first):
                first = t
            name = ev.get("name")
            if ph == "X" and isinstance(name, str) and name.startswith("ProfilerStep#") \
                    and ev.get("cat") not in GPU_CATS:
                n = profiler_step_number(name)
                if n < 0:
                    continue
                lo, hi = steps.get(n, (t, t + dur[i]))
                steps[n] = (min(lo, t), max(hi, t + dur[i]))
            elif want_flows and ph in FLOW_PHASES:
                k = (ev.get("cat"), hashable(ev.get("id")))
                lo, hi = flows.get(k, (t, t))
                flows[k] = (min(lo, t), max(hi, t))
            elif log is not None and ph == "X" and ev.get("cat") in KERNEL_CATS and isinstance(name, str) \
                    and flags[i] & 2 and not flags[i] & 8:
                args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                log.add(name, t, dur[i], args, args.get("stream", -1))
    return Survey(r.metadata, first, steps, FlowExtents.build([], [], flows), log)


def survey_columns(path, salvage=False, byte_range=None) -> Survey:
    """``survey_rank`` without flows, collectives included, from the numba extractor's columns
    (``streamtrace.events.columns.column_batches``: only events with collective args are
    decoded)."""
    r = TraceReader(path, salvage=salvage, byte_range=byte_range)
    table = StringTable()
    step_no, is_comm, is_kernel, is_gpu = (np.zeros(0, t) for t in (np.int64, bool, bool, bool))
    first, steps, log = None, {}, CollectiveLog()
    for b, cols, rows in column_batches(r, table, path):
        if len(step_no) < len(table):                  # per string id, for the strings new in this batch
            new = table.strings[len(step_no):]
            step_no = np.append(step_no, [profiler_step_number(x) for x in new])
            is_comm = np.append(is_comm, [("nccl" in x.lower() or "rccl" in x.lower()) for x in new])
            is_kernel = np.append(is_kernel, [x in KERNEL_CATS for x in new])
            is_gpu = np.append(is_gpu, [x in GPU_CATS for x in new])
        has = (b.flags & 1) != 0
        ts, dur, ph = b.ts_ns, b.dur_ns, cols["ph"]
        timed = has & (ph != ord("M"))
        if timed.any():
            t0 = int(ts[timed].min())
            first = t0 if first is None else min(first, t0)
        x = has & (ph == ord("X")) & (cols["name"] >= 0)
        name, cat = np.maximum(cols["name"], 0), cols["cat"]
        cat_ok = cat >= 0
        gpu_cat = cat_ok & is_gpu[np.maximum(cat, 0)]
        for i in np.flatnonzero(x & (step_no[name] >= 0) & ~gpu_cat).tolist():
            n, t = int(step_no[name[i]]), int(ts[i])
            lo, hi = steps.get(n, (t, t + int(dur[i])))
            steps[n] = (min(lo, t), max(hi, t + int(dur[i])))
        for i in np.flatnonzero(x & (cols["dur"] >= 0) & is_comm[name] & cat_ok & is_kernel[np.maximum(cat, 0)]).tolist():
            c = int(cols["comm"][i])
            log.add(table.strings[name[i]], int(ts[i]), int(dur[i]), rows[c] if c >= 0 else None,
                    int(cols["stream"][i]))
    return Survey(r.metadata, first, steps, FlowExtents(), log)


def metadata_task(path, head, survey, want_flows, salvage, want_collectives=False) -> Survey:
    """One rank's ``Survey`` (``survey``: the full pre-pass) or only its metadata, read as
    cheaply as possible: the head when it has the base time, else the tail, else the whole file."""
    if survey:
        return survey_rank(path, want_flows, salvage, want_collectives=want_collectives)
    if "baseTimeNanoseconds" in head:
        return Survey(head, None, {}, {})
    trailer = read_trailer(path)
    if trailer is not None:
        return Survey({**head, **trailer}, None, {}, {})
    return Survey(TraceReader(path, salvage=True).read_metadata(), None, {}, {})


def plan_time(files, surveys, opt):
    """Per-rank time shift and keep-window (ns).  Returns ``(out_base, shifts, keeps)``.

    Raises ``StreamtraceError`` when ``--steps`` / ``--align first-step`` need a
    ProfilerStep a rank does not have."""
    bases = {tf.rank: base_time_ns(s.metadata) or 0 for tf, s in zip(files, surveys)}
    out_base = min(bases.values())
    shifts = {r: b - out_base for r, b in bases.items()}
    if opt.align == "first-step":
        firsts = {}
        for tf, s in zip(files, surveys):
            if not s.steps:
                raise StreamtraceError(f"{tf.path}: no ProfilerStep# event, cannot --align first-step")
            firsts[tf.rank] = s.steps[min(s.steps)][0]
        target = min(firsts[r] + shifts[r] for r in firsts)
        shifts = {r: target - firsts[r] for r in firsts}
    keeps = {tf.rank: None for tf in files}
    if opt.steps is not None:
        a, b = opt.steps
        for tf, s in zip(files, surveys):
            if a not in s.steps or b not in s.steps:
                have = ", ".join(map(str, sorted(s.steps))) or "none"
                raise StreamtraceError(f"{tf.path}: --steps {a}-{b} not in this rank's ProfilerSteps ({have})")
            keeps[tf.rank] = (s.steps[a][0], s.steps[b][1])
    if opt.window_ms is not None:
        starts = [s.first_ns + shifts[tf.rank] for tf, s in zip(files, surveys) if s.first_ns is not None]
        t0 = min(starts) if starts else 0
        lo_g, hi_g = t0 + int(opt.window_ms[0] * 1e6), t0 + int(opt.window_ms[1] * 1e6)
        for tf in files:
            lo, hi = lo_g - shifts[tf.rank], hi_g - shifts[tf.rank]
            if keeps[tf.rank]:
                lo, hi = max(lo, keeps[tf.rank][0]), min(hi, keeps[tf.rank][1])
            keeps[tf.rank] = (lo, hi)
    return out_base, shifts, keeps


def combine_surveys(parts, meta):
    """One rank's ``Survey`` from its ranges' surveys (``parts`` in file
    order: the collectives are concatenated; the rest are min / max) and its metadata."""
    first, steps = None, {}
    log = CollectiveLog() if any(s.collectives is not None for s in parts) else None
    for s in parts:
        if s.first_ns is not None and (first is None or s.first_ns < first):
            first = s.first_ns
        for k, (lo, hi) in s.steps.items():
            a, b = steps.get(k, (lo, hi))
            steps[k] = (min(a, lo), max(b, hi))
        if log is not None and s.collectives is not None:
            log.extend(s.collectives)                    # ranges in file order
    flows = FlowExtents.combine([s.flows if isinstance(s.flows, FlowExtents) else FlowExtents.build([], [], s.flows)
                                 for s in parts])
    return Survey(meta, first, steps, flows, log)
