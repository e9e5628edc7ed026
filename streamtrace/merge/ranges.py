"""One big rank on many cores: ``streamtrace merge --jobs N`` cuts a rank trace of at
least ``MergeOptions.split_threshold`` bytes into byte ranges on event boundaries
(``streamtrace.trace.ranges.split_ranges``) and rewrites the ranges in parallel, each
into its own segment; the segments are stitched in file order.  The merged output
is the same, byte for byte, as the unsplit merge of that rank.

Per-rank state of the unsplit pass (see ``streamtrace.merge.rank.RankContext``) and
how a split rank gets exactly the same:

* time shift, ``--steps`` / ``--window`` keep-window and the flows kept under it,
  ``--align first-step``: fixed before any rewrite by the survey, which combines per
  range by min / max (``combine_surveys``), so the ranges share it as is -- or, for
  ``--steps`` / ``--window`` without an alignment that reads the ranks first, decided after the
  pass (``streamtrace.merge.split_filter``): each range writes every event
  and records what the filter decides it by, then the rank is decided from all its ranges' steps,
  earliest events and flows;
* drop-cat / gpu-only filters, id rewrites, ``args.rank``: per event, no state;
* the earliest output ts (the ``ts`` of merge's process metadata): min over ranges;
  event counts: sums; the merged pids that had events: union;
* the process slots: the only order-dependent state.  A pid's slot depends on how
  many pids of its kind were registered before it in the file.  Each range worker
  registers pids exactly as the whole-file pass would (same code:
  ``streamtrace.merge.rank.rewrite_stream``, starting from an empty table, so it
  reports every pid registration it makes, in order) and assigns slots *provisionally*
  as if the range began the file.  The parent replays all ranges' registrations in
  file order through a fresh ``PidMap``: that is the
  whole-file pass's map, registration being independent of the slots assigned.  A range
  whose provisional slots differ from it (two CPU pids first seen in another order, say)
  is rewritten again with the final slots handed in, in the order it registers them.
  A rank with one CPU process and its string pids in one range (Kineto writes those
  last) never needs that second run.

The rank's process metadata events, built from the final map, become its last
segment.  A ``.json.gz`` input is decompressed once to a temporary plain file beside
the output (byte ranges need random access).  That serial pass takes about a quarter
of the time of the rewrite it makes parallel, so splitting pays off from two workers
on.  Files that cannot be split exactly (truncated, a bare event array, a trailer that
does not parse, no events) are merged unsplit; a
range that fails to parse makes the whole merge fall back to the unsplit path, which
reports the error exactly as without ``--jobs``.  Gzip output is written as one gzip
member per range (its decompressed bytes are the unsplit merge's; the compressed
bytes of a merge differ from run to run anyway, as each member's header names its
segment file).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass


from ..runtime.files import remove_quietly
from ..trace.decode import bad_ts_warning
from ..trace.metadata import device_names, host_name, read_trailer
from ..trace.ranges import blank_range, clean_joints, split_ranges
from ..trace.reader import TraceReader
from ..trace.source import plain_copy
from ..validate.check import Checker, distinct_nans
from ..trace.writer import dumps_events
from ..validate.merged import LOG_SUFFIX
from .pids import PID_STRIDE, PidMap, classify_pid, hashable, process_meta_events
from .grouped import GroupedFilter
from .outcome import RangeResult, RankResult, Reading
from .rank import READ_BLOCK, TENTATIVE, RankContext, RankPlan, open_segment, rewrite_stream


@dataclass
class SplitFile:
    """A rank trace cut into byte ranges: ``path`` (the plain file the ranges refer to:
    the input, or ``tmp``, its decompressed copy), ``ranges`` [(start, end)], ``meta``
    (every top-level key but ``traceEvents``) and ``size`` (plain bytes)."""
    path: str
    tmp: str | None
    ranges: list
    meta: dict
    size: int


def parts_for(size, threshold, jobs) -> int:
    """How many byte ranges to cut a plain trace of ``size`` bytes into: at least two
    per worker (for balance), and none larger than the threshold."""
    return max(2 * jobs, math.ceil(size / max(1, threshold)))


def prepare(path, folder, jobs, threshold) -> SplitFile | None:
    """Task: cut one trace into ranges (decompressing a gzip input to a temporary
    file in ``folder`` first).  Returns None, and leaves no temporary file, when the
    trace cannot be split exactly; the caller then merges it unsplit."""
    tmp = None
    try:
        tmp = plain_copy(path, folder)
        src = tmp or str(path)
        with open(src, "rb") as f:
            lead = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if not lead.startswith(b"{"):
            raise ValueError("a bare event array")         # its byte count ends at ']', not at EOF
        size = os.path.getsize(src)
        ranges, meta, _ = split_ranges(src, parts_for(size, threshold, jobs))
        if len(ranges) > 1 and blank_range(src, *ranges[-1]):
            raise ValueError("a comma after the last event")     # (a cut just before ']' is never made)
        if not ranges or "traceEvents" in meta or not clean_joints(src, ranges):
            raise ValueError("not splittable")
        return SplitFile(src, tmp, ranges, meta, size)
    except Exception:       # noqa: BLE001 - the unsplit path reports any real problem
        remove_quietly(tmp)
        return None


def survey_meta(tf, sf: SplitFile) -> dict:
    """The metadata the unsplit path's metadata step would give (merge.\\metadata_task
    without a survey), computed without reading the events again."""
    if "baseTimeNanoseconds" in tf.head:
        return tf.head
    if sf.tmp is None:
        trailer = read_trailer(tf.path)
        if trailer is not None:
            return {**tf.head, **trailer}
    return sf.meta


class RangePidMap(PidMap):
    """The pid map of one range.  Records every pid it registers, in order
    (``records``), and gives each the slot in ``final`` (the rank's final merged pids,
    in this range's registration order) or, without it, a provisional slot counted
    from the range's start."""

    def __init__(self, rank, final=None):
        super().__init__(rank)
        self.final = final
        self.records = []
        self.assigned = []

    def get(self, pid):
        key = hashable(pid)
        mp_ = self.map.get(key)
        if mp_ is not None:
            return mp_
        if self.final is None:
            mp_ = super().get(pid)
        else:
            if len(self.records) >= len(self.final):
                raise RuntimeError(f"rank {self.rank}: a range registered more pids than on its first run")
            mp_ = self.final[len(self.records)]
            kind = classify_pid(pid)
            self.map[key] = mp_
            self.info[mp_] = {"rank": self.rank, "pid": pid, "kind": kind,
                              "device": pid if kind == "gpu" else None, "slot": mp_ - 1 - self.rank * PID_STRIDE}
        self.records.append(pid)
        self.assigned.append(mp_)
        return mp_


def merge_range(plan: RankPlan, src, byte_range, segment, final, progress=None, index: int = 0) -> RangeResult:
    """Worker: rewrite the events of ``byte_range`` (the ``index``-th range, file order) of the
    plain trace ``src`` into ``segment`` with the rank's ``plan``; ``final``: the merged pids to
    give the pids this range registers (None: provisional).  Returns its
    ``RangeResult``: counts, the earliest output
    ts, the merged pids used, the pid registrations (``records``/``assigned``) and, when
    validating, the range's records as sorted runs in ``segment + LOG_SUFFIX``
    (``save_runs``: sorted here, in parallel with the other
    ranges, then only merged by the rank's check)."""
    ctx = RankContext(plan)
    ctx.pids = RangePidMap(plan.rank, final)
    distinct_nans(byte_range[0])
    reader = TraceReader(src, byte_range=byte_range, block=READ_BLOCK, progress=progress)
    check = Checker.for_range(index) if plan.validate else None
    if plan.defer is not None:          # every event written to the tentative segment, decided later
        ctx.defer = GroupedFilter(plan.defer or None, segment + ".rec", byte_range[0] - 1)
    raw, seg = open_segment(segment + TENTATIVE if ctx.defer else segment, plan.compress and not ctx.defer,
                            plan.compresslevel)
    try:
        n_in, n_out, first_out, fast = rewrite_stream(reader, plan, ctx, seg, check)
        if plan.compress and not ctx.defer:
            seg.close()
        raw.close()
        validation = {"parts": check.save_runs(segment + LOG_SUFFIX), "exact": ctx.exact} if check is not None else None
        if ctx.defer is not None:
            ctx.defer.park(segment + ".flows")
    except BaseException:
        raw.close()
        for p in (segment, segment + TENTATIVE):
            remove_quietly(p)
        if ctx.defer is not None:
            ctx.defer.close()
        if check is not None:
            check.close()
            remove_quietly(segment + LOG_SUFFIX)
        raise
    if final is not None and ctx.pids.assigned != final:
        raise RuntimeError(f"rank {plan.rank}: a range registered other pids than on its first run")
    return RangeResult(segment, n_in, n_out, fast, first_out, sorted(ctx.used), ctx.pids.records, ctx.pids.assigned,
                       ctx.bad_ts, validation, ctx.defer, ctx.exact)


def settle_pids(rank, parts):
    """Replay the ranges' pid registrations in file order: returns the whole-file
    pass's ``PidMap``, each range's final merged pids (registration order) and
    the indices of the ranges whose provisional slots were wrong."""
    pids = PidMap(rank)
    final, wrong = [], []
    for k, res in enumerate(parts):
        mps = [pids.get(pid) for pid in res.records]
        final.append(mps)
        if mps != res.assigned:
            wrong.append(k)
    return pids, final, wrong


def finish_rank(plan: RankPlan, sf: SplitFile, parts: list[RangeResult], pids: PidMap, meta_segment) -> RankResult:
    """The rank's result, as ``merge_rank`` returns it, from
    its settled ranges; writes merge's process metadata events to ``meta_segment``."""
    used = set().union(*(p.used for p in parts))
    firsts = [p.first_out for p in parts if p.first_out is not None]
    first_out = min(firsts) if firsts else None
    n_out = sum(p.events_out for p in parts)
    meta = sf.meta
    pmap = {k: v for k, v in sorted(pids.info.items()) if k in used}
    mevs = process_meta_events(pmap, plan.rank, plan.host or host_name(meta), plan.devices or device_names(meta),
                               first_out)
    segments = [p.segment for p in parts if p.events_out]
    if mevs:
        raw, seg = open_segment(meta_segment, plan.compress, plan.compresslevel)
        seg.write(dumps_events(mevs))
        if plan.compress:
            seg.close()
        raw.close()
        segments.append(meta_segment)
    bad_ts = sum(p.bad_ts for p in parts)
    reading = Reading(sf.size, (bad_ts_warning(plan.path, bad_ts),) if bad_ts else (), dropped_bad_ts=bad_ts)
    return RankResult(plan.rank, sum(p.events_in for p in parts), n_out + len(mevs),
                      sum(p.events_fast for p in parts), {str(k): v for k, v in pmap.items()}, meta, tuple(segments),
                      reading)
