"""Merging one rank: the per-event rewrite of ``streamtrace merge`` (see
``streamtrace.merge.run`` for what is rewritten and why).

``merge_rank`` streams one rank's trace through the numba byte kernel
``streamtrace.kernels.rewrite.scan_rewrite`` into a segment file; events the
kernel hands back are decoded and rewritten by its Python twin ``rewrite_dict``.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
from dataclasses import dataclass, field

import numpy as np

from ..kernels import keep as keep_kernels
from ..kernels import scan
from ..kernels.rewrite import KIND_CPU, KIND_GPU, KIND_OTHER
from ..kernels.rewriter import PythonEvent, Rewriter, RewriteSetup
from ..runtime.warmup import warm_trace
from ..trace.decode import bad_ts_warning, loads, text_ns
from ..trace.metadata import device_names, host_name
from ..trace.reader import TraceReader
from ..trace.source import LEAN_BLOCK
from ..validate.check import Checker, ValidateOptions
from ..trace.writer import dumps_event, dumps_events, us_fragment
from ..validate.merged import account_batch, inexact_ends, rank_validation
from ..runtime.files import remove_quietly
from ..validate.ordered import OutFilter
from .deferred import DeferredFilter, out_view_bits, warm_keep
from .grouped import warm_groups
from .prepass import event_times_ns
from .output import copy_runs
from .flows import KeptFlows
from .outcome import MissingSteps, ParkedRank, RankResult, Reading
from .pids import FLOW_PHASES, PROCESS_META, PidMap, hashable, process_meta_events, unique_id

_ID_ARGS = (("correlation", "raw correlation"), ("External id", "raw External id"),
            ("external id", "raw external id"))


TENTATIVE = ".all"    # suffix of a deferred filter's segment of every event, before the decision


@dataclass
class RankPlan:
    """What one worker needs to rewrite one rank (picklable)."""
    path: str
    rank: int
    shift_ns: int
    segment: str
    compress: bool
    compresslevel: int
    drop_cat: frozenset
    gpu_only: bool
    keep: tuple | None            # (lo, hi) rank-local ns, or None
    kept_flows: object | None     # flows kept under a time filter: merge.flows.KeptFlows / SpilledFlows, or a set of (cat, id)
    salvage: bool
    host: str | None = None
    devices: dict = field(default_factory=dict)
    validate: bool = True         # check input and output while rewriting (``streamtrace.validate.merged``)
    defer: tuple | None = None    # a filter decided after the pass (merge.deferred): (first, last) steps, or ()
    park: bool = False            # with defer: stop after the pass, the parent decides (--window)

    @property
    def tentative(self) -> str:
        """With ``defer``: the segment of every event, before the filter (kept runs are copied from it)."""
        return self.segment + TENTATIVE

    def temporaries(self) -> list[str]:
        """With ``defer``: the files the rank's pass may leave for its decision (``deferred_files``)."""
        return deferred_files(self.segment)


def deferred_files(segment: str) -> list[str]:
    """The files a deferred filter's pass over a rank (or a byte range) writing ``segment`` may leave
    for its decision, removed by merge's parent whatever happens: the tentative segment (``.all``), the
    per-event records (a byte range's: per group of events), its flows, a parked checker's sorted runs."""
    return [segment + x for x in (TENTATIVE, ".rec", ".flows", ".val0", ".val1")]


class RankContext:
    """Per-rank rewrite state shared by the byte kernel and its Python twin."""

    def __init__(self, plan: RankPlan):
        self.rank = plan.rank
        self.shift = plan.shift_ns
        self.drop_cat = plan.drop_cat
        self.gpu_only = plan.gpu_only
        self.lo, self.hi = plan.keep if plan.keep else (None, None)
        self.kept_flows = KeptFlows.of(plan.kept_flows, plan.keep) if plan.kept_flows is not None else None
        self.pids = PidMap(plan.rank)
        self.used = set()
        self.first_out = None
        self.count = 0
        self.exact = True         # the output's check can be derived from the input's (see merge.check)
        self.bad_ts = 0             # events dropped: a ts that is not a usable number
        self.defer = None           # a merge.deferred.DeferredFilter: the twin records what it wrote
        self.last = None            # with defer: (class, ts, end, flow key, other flow) of the event written


def rewrite_dict(ev, ts_ns, dur_ns, flag, ctx: RankContext):
    """The Python definition of merge's per-event rewrite (the twin of
    ``streamtrace.kernels.rewrite.scan_rewrite``).  Returns the rewritten
    event dict, or None when a filter drops it.  ``ts_ns``/``dur_ns``/``flag``: the
    exact times and scan flags of the event.  A ``ts`` that the scanner could not read is
    taken from a JSON string holding a number (``text_ns``) and
    shifted like any other; otherwise (null, not numeric, beyond int64 ns) the event is
    dropped and counted in ``ctx.bad_ts``: never copied unshifted.  ``dur`` follows the same
    rule (issue 33, the rule analyze applies): a number in a string is written as its number,
    any other odd value drops the event, counted in ``ctx.bad_ts``."""
    if not isinstance(ev, dict):
        return None
    ph = ev.get("ph")
    if ctx.drop_cat and ev.get("cat") in ctx.drop_cat:
        return None
    if ph == "M" and ev.get("name") in PROCESS_META:
        return None
    newpid = ctx.pids.get(ev.get("pid"))
    if ctx.gpu_only and (ph in FLOW_PHASES or ctx.pids.info[newpid]["kind"] != "gpu"):
        return None
    if flag & 8:                  # the same rule for dur: a number in a string is read, else dropped
        dur_ns = text_ns(ev.get("dur"))
        if dur_ns is None:
            ctx.bad_ts += 1
            return None
        ev["dur"] = us_fragment(dur_ns)
        ctx.exact = False
        flag &= ~8
    if flag & 1:
        t = ts_ns if not flag & 4 else text_ns(ev.get("ts"))
        if t is None:
            ctx.bad_ts += 1
            return None
        if flag & 4:
            ctx.exact = False     # a ts read from a string: the input's check says nothing of the output's
        if ctx.lo is not None and ph != "M":
            end = t + dur_ns if (flag & 2 and not flag & 8 and dur_ns > 0) else t
            if end < ctx.lo or t > ctx.hi:
                return None
            if ph in FLOW_PHASES and (ev.get("cat"), hashable(ev.get("id"))) not in ctx.kept_flows:
                return None
        if ctx.defer is not None:
            ctx.last = _deferred_record(ev, ph, t, t + dur_ns if (flag & 2 and not flag & 8 and dur_ns > 0) else t,
                                        ctx)
        t += ctx.shift
        ev["ts"] = us_fragment(t)
        if ph != "M" and (ctx.first_out is None or t < ctx.first_out):
            ctx.first_out = t
    elif ctx.defer is not None:
        ctx.last = (keep_kernels.C_KEPT, keep_kernels.NO_T0, keep_kernels.NO_T1, -1, False)
    ev["pid"] = newpid
    if "id" in ev and ph in FLOW_PHASES:
        ev["id"] = unique_id(ctx.rank, ev["id"])
    args = ev.get("args")
    if not isinstance(args, dict):
        args = ev["args"] = {} if args is None else {"value": args}
    for key, rawkey in _ID_ARGS:
        if key in args:
            v = args[key]
            args[rawkey] = v
            args[key] = unique_id(ctx.rank, v)
    args["rank"] = ctx.rank
    ctx.used.add(newpid)
    ctx.count += 1
    return ev


def _deferred_record(ev, ph, t, end, ctx):
    """What a deferred filter decides a written event with ts ``t`` by (see scan_rewrite's ``rec``)."""
    if ph == "M":
        return (keep_kernels.C_KEPT, keep_kernels.NO_T0, keep_kernels.NO_T1, -1, False)
    if ph in FLOW_PHASES:
        key, other = ctx.defer.flow_key(ev.get("cat"), hashable(ev.get("id")))
        return (keep_kernels.C_FLOW, t, end, key, other)
    return (keep_kernels.C_WINDOW, t, end, -1, False)


# Bytes a rewrite holds at a time: the input is read in READ_BLOCK blocks (the reader's window
# holds the previous block, the new one and their join while it slides) and written from an
# OUT_BYTES buffer.  2 MiB each instead of the reader's default 8 MiB: 34 MB less resident
# memory per rewriting process (one 296 MB rank: +22 instead of +54 MB over the loaded
# kernels), at the same CPU time (bench/RESULTS.md, 2026-11-24 "merge memory").
READ_BLOCK = LEAN_BLOCK
OUT_BYTES = 2 << 20
_KINDS = {"cpu": KIND_CPU, "gpu": KIND_GPU}     # a merged pid's kind as the byte kernel tells them apart


def open_segment(path, compress, compresslevel):
    """``(raw, seg)``: the segment file and the stream to write it through (a gzip
    member when ``compress``; close ``seg`` then ``raw``)."""
    raw = open(path, "wb")
    seg = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=compresslevel, mtime=0) if compress else raw
    return raw, seg


class _ByteRewrite:
    """One rank's rewrite through the byte kernel (``Rewriter``): what
    it asks of merge (``RewriteHandler``: a pid's merged pid, an event
    for the Python twin ``rewrite_dict``, a deferred filter's flow category) and the segment ``seg`` it
    writes to."""

    def __init__(self, reader: TraceReader, plan: RankPlan, ctx: RankContext, seg, check: Checker | None):
        self.reader, self.ctx, self.seg = reader, ctx, seg
        flows = ctx.kept_flows if ctx.kept_flows is not None else KeptFlows.of(())
        table = ctx.defer if ctx.defer is not None else flows     # a deferred filter's categories grow
        setup = RewriteSetup(ctx.rank, ctx.shift, tuple(c.encode() for c in sorted(plan.drop_cat)), ctx.gpu_only,
                             (ctx.lo, ctx.hi) if ctx.lo is not None else None, _texts(table), flows.keys,
                             ctx.defer is not None)
        self.kernel = Rewriter(setup, self, reader.batch_events,
                               check.buffer(reader.batch_events) if check is not None else None, OUT_BYTES)

    def new_pid(self, text: bytes, offset: int) -> tuple[int, int]:
        newpid = self.ctx.pids.get(loads(text, self.reader.path, offset))
        return newpid, _KINDS.get(self.ctx.pids.info[newpid]["kind"], KIND_OTHER)

    def new_category(self, text: bytes) -> tuple:
        self.ctx.defer.add_cat(text.decode("utf-8", "surrogateescape"))
        return _texts(self.ctx.defer)

    def write(self, data) -> None:
        self.seg.write(data)

    def python(self, window, s: int, e: int, offset: int) -> PythonEvent | None:
        """Event ``window[s:e]`` through the Python twin."""
        ev = loads(window[s:e].tobytes(), self.reader.path, offset)
        times = event_times(window, s, e)
        defer = self.ctx.defer
        if defer is not None and (times[2] & 1):
            td = event_times_ns(ev, *times)
            if td is not None:              # its steps and the rank's earliest ts, as the survey reads them
                defer.step_event(ev, *td)
        ev = rewrite_dict(ev, *times, self.ctx)
        if ev is None:
            return None
        if defer is None:
            return PythonEvent(dumps_event(ev))
        cls, t0, t1, key, other = self.ctx.last
        return PythonEvent(dumps_event(ev), cls | (keep_kernels.C_OTHER_FLOW if other else 0), t0, t1, key, ev["pid"])


def _texts(table) -> tuple:
    """The flow categories of ``table`` (``cats``, ``cat_text``/``cat_off``: KeptFlows, DeferredFilter) as the
    byte kernel compares them (their UTF-8 bytes)."""
    return tuple(table.cat_text[table.cat_off[k]:table.cat_off[k + 1]].tobytes() for k in range(len(table.cats)))


def rewrite_stream(reader: TraceReader, plan: RankPlan, ctx: RankContext, seg, check: Checker | None = None,
                   after: int = -1):
    """Rewrite every event ``reader`` yields into the binary stream ``seg`` (comma
    separated, no brackets); with ``check``, every batch's events are also recorded in it, as
    read and as written (``streamtrace.validate.merged.account_batch``).  ``after`` >= 0:
    the events continue a segment whose last event ends at that output offset (a comma first;
    the deferred filter's output offsets count from it).
    Returns ``(events_in, events_out, first_out, fast)``:
    ``first_out`` is the earliest shifted non-metadata ts written (ns) or None,
    ``fast`` the events the byte kernel wrote; ``ctx.used`` gets every merged pid
    that had an event.  Pids are registered through ``ctx.pids.get`` in file order
    (the kernel asks once per new pid text), which ``streamtrace.merge.ranges``
    relies on to reproduce the slot assignment of a whole-file pass."""
    rw = _ByteRewrite(reader, plan, ctx, seg, check).kernel
    if after >= 0:
        rw.continue_after(after)
    n_in = 0
    for w in reader.windows():
        w.scanned(*rw.rewrite(w.arr, w.pos, w.n, w.starts, w.ends, w.sep, w.base,
                              ctx.defer.n_in if ctx.defer is not None else 0))
        b = w.batch()
        if b is None:
            continue
        n = len(b.starts)
        n_in += n
        vbits = None
        if check is not None:
            fields = check.finish_read(rw.fields[:n], b.buf, b.starts, b.ends, b.offset, reader.path)
            odd = check.missing[1] + check.negdur[1]
            exact = account_batch(check, fields, rw.kept[:n])
            if ctx.defer is None:
                ctx.exact &= exact
            elif not exact:                       # told once the filter has decided (DeferredFilter.exact)
                ctx.defer.inexact += (ctx.defer.n_in + inexact_ends(fields, rw.kept[:n].astype(bool))).tolist()
            if ctx.defer is not None and check.missing[1] + check.negdur[1] != odd:
                vbits = out_view_bits(fields)     # only a batch with such events needs them told apart
        if ctx.defer is not None:
            arr = np.frombuffer(b.buf, np.uint8)
            ctx.defer.add_batch(rw.rcls[:n], rw.rec[:n], b.buf, b.starts, b.ends, vbits, reader.path,
                                b.offset - int(b.starts[0]), lambda j: event_times(arr, int(b.starts[j]), int(b.ends[j])))
    if ctx.defer is not None and rw.first_in is not None:      # the kernel's earliest ts (any event but metadata)
        ctx.defer.tally.first = _earliest(ctx.defer.tally.first, rw.first_in)
    ctx.used.update(rw.used_pids())
    if ctx.defer is not None:
        ctx.defer.used = set(ctx.used)
    first_out = _earliest(ctx.first_out, rw.first_out)
    return n_in, ctx.count + rw.written, first_out, rw.written


def event_times(buf, s: int, e: int):
    """``(ts_ns, dur_ns, flags)`` of the one event ``buf[s:e]`` (uint8 array), exactly
    as ``streamtrace.kernels.scan.scan_events`` reports them in a batch (int64 ns
    read from the number text; ``flags``: HAS_TS, HAS_DUR, TS_BAD, DUR_BAD, BIG_INT).
    For the rare events the byte kernel hands to the Python twin: the batch itself
    was scanned for byte ranges only."""
    start, end, ts, dur = (np.zeros(1, np.int64) for _ in range(4))
    flags = np.zeros(1, np.uint8)
    scan.scan_events(buf, s, e, start, end, ts, dur, flags, np.zeros(1, np.int64))
    return int(ts[0]), int(dur[0]), int(flags[0])


def merge_rank(plan: RankPlan, progress=None) -> RankResult | ParkedRank | MissingSteps:
    """Rewrite one rank's events into ``plan.segment``; returns its
    ``RankResult`` (counts, the process map and the rank's metadata:
    all small).  Runs in a worker process.

    Events go through the byte kernel ``scan_rewrite``
    (see ``rewrite_stream``); those it hands back (unusual shapes, invalid JSON) are
    decoded and rewritten by its Python twin ``rewrite_dict``, which raises
    ``TraceError`` for invalid input.  With ``plan.defer`` the time filter is decided after
    the pass (``streamtrace.merge.deferred``): here from the rank's own steps (a
    ``MissingSteps`` when the rank lacks them), or, with
    ``plan.park``, by the parent (a ``ParkedRank``, then
    ``finish_parked``)."""
    ctx = RankContext(plan)
    reader = TraceReader(plan.path, salvage=plan.salvage, block=READ_BLOCK, progress=progress)
    spill = os.path.dirname(os.path.abspath(plan.segment))
    check = Checker(ValidateOptions(spill_dir=spill), keep=plan.segment + ".val" if plan.park else None) \
        if plan.validate else None
    if plan.defer is not None:
        ctx.defer = DeferredFilter(plan.defer or None, plan.segment + ".rec")
    raw, seg = open_segment(plan.tentative if plan.defer is not None else plan.segment,
                            plan.compress and plan.defer is None, plan.compresslevel)
    parked = None
    try:
        n_in, n_out, first_out, fast = rewrite_stream(reader, plan, ctx, seg, check)
        if ctx.defer is None:
            used = ctx.used
        else:
            raw.close()
            parked = Parked(ctx.pids, ctx.defer, check.hand_over() if plan.park and check is not None else None,
                            ctx.exact, n_in, fast, reader.metadata)
            if plan.park:
                ctx.defer.park(plan.segment + ".flows")
                return ParkedRank(plan.rank, parked, _reading(reader, plan, ctx))
            missing = ctx.defer.missing(plan.path)
            if missing:             # the parent raises it, for the first such rank in rank order
                return MissingSteps(plan.rank, missing, Reading(reader.bytes_read))
            res = _finish(plan, parked, ctx.defer.window(plan.path), _reading(reader, plan, ctx), check)
            parked = None
            return res
        mevs = _meta_events(plan, reader.metadata, ctx.pids, used, first_out)
        if mevs:
            if n_out:
                seg.write(b",")
            seg.write(dumps_events(mevs))
            n_out += len(mevs)
        if plan.compress:
            seg.close()
        raw.close()
        validation = rank_validation(check.reports(), n_out, ctx.exact) if check is not None else None
    except BaseException:
        raw.close()
        remove_quietly(plan.segment)
        raise
    finally:
        if check is not None:
            check.close()
        if ctx.defer is not None and parked is None:
            ctx.defer.close()
    return RankResult(plan.rank, n_in, n_out, fast, {str(k): v for k, v in _pmap(ctx.pids, used).items()},
                      reader.metadata, (plan.segment,), _reading(reader, plan, ctx), validation)


def _earliest(a, b):
    return b if a is None else a if b is None else min(a, b)


def _reading(reader, plan, ctx) -> Reading:
    """What reading the rank told (its warnings: the reader's, then the events dropped for their time)."""
    warnings = reader.warnings + ([bad_ts_warning(plan.path, ctx.bad_ts)] if ctx.bad_ts else [])
    return Reading(reader.bytes_read, tuple(warnings), reader.truncated, reader.repaired, ctx.bad_ts)


def _pmap(pids, used) -> dict:
    return {k: v for k, v in sorted(pids.info.items()) if k in used}


def _meta_events(plan, meta, pids, used, first_out) -> list:
    """Our own process metadata, one set per process that had events."""
    devices = plan.devices or device_names(meta)
    host = plan.host or host_name(meta)
    return process_meta_events(_pmap(pids, used), plan.rank, host, devices, first_out)


@dataclass
class Parked:
    """A rank rewritten under a deferred filter, waiting for its keep-window (picklable once parked:
    the checker as ``hand_over`` gives it)."""
    pids: PidMap
    defer: DeferredFilter
    checker: dict | None
    exact: bool
    n_in: int
    fast: int
    metadata: dict


def _finish(plan: RankPlan, p: Parked, keep, reading: Reading, check=None) -> RankResult:
    """Decide a deferred rank under ``keep`` (``(lo, hi)`` rank-local ns) and write its segments;
    the validation from ``check`` (live) or ``p.checker`` (handed over).  Removes the rank's temporaries
    but the tentative segment that a plain output copies its runs from."""
    runs = None
    try:
        dec = p.defer.finish(plan.path, plan.shift_ns, keep)
        exact = p.exact and p.defer.exact(dec.dropped_seq)
        out_filter = OutFilter(lo=dec.lo, hi=dec.hi, dropped_seq=dec.dropped_seq, **dec.dropped) \
            if dec.kept < p.defer.written else None        # (nothing dropped: the check needs no filter)
        raw, seg = open_segment(plan.segment, plan.compress, plan.compresslevel)
        try:
            if plan.compress:           # compressed here, in the worker; a plain output copies the runs itself
                copy_runs(plan.tentative, dec.runs, seg, False)
            else:
                runs = dec.runs
            mevs = _meta_events(plan, p.metadata, p.pids, dec.used, dec.first_out)
            n_out = dec.kept + len(mevs)
            if mevs:
                if dec.kept and plan.compress:
                    seg.write(b",")
                seg.write(dumps_events(mevs))
            if plan.compress:
                seg.close()
        finally:
            raw.close()
        validation = None
        if check is not None:
            validation = rank_validation(check.reports(out_filter=out_filter), n_out, exact)
        elif p.checker is not None:
            with Checker.take_over(p.checker, ValidateOptions(spill_dir=os.path.dirname(plan.segment))) as chk:
                validation = rank_validation(chk.reports(out_filter=out_filter), n_out, exact)
    finally:
        p.defer.close()
        if runs is None:
            remove_quietly(plan.tentative)
    segments = (plan.segment,) if runs is None else ((plan.tentative, runs),) + ((plan.segment,) if mevs else ())
    return RankResult(plan.rank, p.n_in, n_out, p.fast, {str(k): v for k, v in _pmap(p.pids, dec.used).items()},
                      p.metadata, segments, reading, validation)


def finish_parked(plan: RankPlan, res: ParkedRank, keep) -> RankResult:
    """Task: a parked rank's result (``res`` from ``merge_rank`` with ``plan.park``) under the
    keep-window ``keep`` the parent computed."""
    return _finish(plan, res.parked, keep, res.reading)


def warm_kernels(plan: RankPlan, whole: bool = True, ranges: bool = False) -> None:
    """Load merge's numba kernels into this process (from numba's on-disk cache) by
    rewriting the warm-up trace (``streamtrace.runtime.warmup``) with ``plan``'s options
    (same argument types, so the same compiled versions), and with ``plan.defer`` the deferred
    filter's kernels its workers use: of ``whole`` ranks, of byte ``ranges`` of cut ranks.  Called
    by the parent before it forks its worker pool.  Writes and removes a temporary folder beside
    ``plan.segment``."""
    with warm_trace(os.path.dirname(os.path.abspath(plan.segment))) as (d, src):
        merge_rank(dataclasses.replace(plan, path=src, segment=os.path.join(d, "warm.seg"), salvage=False,
                                       kept_flows=None if plan.kept_flows is None else set(), defer=None))
    if plan.defer is not None and whole:        # the deferred filter's kernels, loaded once for every worker
        warm_keep()
    if plan.defer is not None and ranges:
        warm_groups()
