"""The pre-pass of ``streamtrace merge`` over each rank (:func:`survey_rank`, needed by
``--steps``, ``--window`` and ``--align first-step``) or just its metadata (:func:`metadata_task`),
and the per-rank time shifts and keep-windows computed from them (:func:`plan_time`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import StreamtraceError
from ..trace.metadata import read_trailer
from ..trace.reader import TraceReader
from .pids import FLOW_PHASES, GPU_CATS, hashable

@dataclass
class Survey:
    """A full pre-pass over one rank: metadata, time extent and ProfilerStep windows (ns)."""
    metadata: dict
    first_ns: int | None
    steps: dict
    flows: dict


def survey_rank(path, want_flows=False, salvage=False, byte_range=None) -> Survey:
    """Read one rank fully (a pre-pass needed by ``--steps``, ``--window`` and
    ``--align first-step``): ProfilerStep windows ``{N: (start_ns, end_ns)}``, the
    earliest ts, and per flow ``(cat, id) -> (min ts, max ts)`` when ``want_flows``.
    ``byte_range``: survey only that range of a plain file's events (no metadata;
    see :func:`combine_surveys`)."""
    r = TraceReader(path, salvage=salvage, byte_range=byte_range)
    first = None
    steps, flows = {}, {}
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
                try:
                    n = int(name[13:])
                except ValueError:
                    continue
                lo, hi = steps.get(n, (t, t + dur[i]))
                steps[n] = (min(lo, t), max(hi, t + dur[i]))
            elif want_flows and ph in FLOW_PHASES:
                k = (ev.get("cat"), hashable(ev.get("id")))
                lo, hi = flows.get(k, (t, t))
                flows[k] = (min(lo, t), max(hi, t))
    return Survey(r.metadata, first, steps, flows)


def metadata_task(path, head, survey, want_flows, salvage) -> Survey:
    """One rank's :class:`Survey` (``survey``: the full pre-pass) or only its metadata, read as
    cheaply as possible: the head when it has the base time, else the tail, else the whole file."""
    if survey:
        return survey_rank(path, want_flows, salvage)
    if "baseTimeNanoseconds" in head:
        return Survey(head, None, {}, {})
    trailer = read_trailer(path)
    if trailer is not None:
        return Survey({**head, **trailer}, None, {}, {})
    return Survey(TraceReader(path, salvage=True).read_metadata(), None, {}, {})


def plan_time(files, surveys, opt):
    """Per-rank time shift and keep-window (ns).  Returns ``(out_base, shifts, keeps)``.

    Raises :class:`StreamtraceError` when ``--steps`` / ``--align first-step`` need a
    ProfilerStep a rank does not have."""
    bases = {tf.rank: int(s.metadata.get("baseTimeNanoseconds") or 0) for tf, s in zip(files, surveys)}
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
    """One rank's :class:`~streamtrace.merge.Survey` from its ranges' surveys (all
    min / max, so the order does not matter) and its metadata."""
    first, steps, flows = None, {}, {}
    for s in parts:
        if s.first_ns is not None and (first is None or s.first_ns < first):
            first = s.first_ns
        for table, mine in ((steps, s.steps), (flows, s.flows)):
            for k, (lo, hi) in mine.items():
                a, b = table.get(k, (lo, hi))
                table[k] = (min(a, lo), max(b, hi))
    return Survey(meta, first, steps, flows)
