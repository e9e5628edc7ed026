"""``merge --steps`` / ``--window`` in one pass on a rank cut into byte ranges
(``streamtrace.merge.ranges``): the deferred filter of ``streamtrace.merge.deferred``, spread
over the ranges.

Each range's worker writes every event of its range to a tentative segment and records what the
filter decides it by, in groups of consecutive events (a
``GroupedFilter`` per range, parked once the range is read; the rows
of the few groups a window cuts through are made again from the input when deciding,
``streamtrace.merge.rederive``).  The filter is a property of the whole rank: its steps may lie in
any range, and a flow is kept only when every one of its events, in whichever range, is
in the window.  So once every range is read and the pid slots are settled, one task per rank
(``decide_split``) combines the ranges' steps and earliest events (``found_survey``; the
keep-window itself comes from the parent, ``streamtrace.merge.survey.plan_time``), numbers the
ranges' flows in one key space to find the kept ones (``kept_by_range``), decides each range
(``streamtrace.kernels.keep.keep_rows``) and checks the rank's output with the dropped events
taken out of its view (``streamtrace.validate.merged.split_reports`` with an
``OutFilter``).  A plain output then copies each range's kept
byte runs; a ``.json.gz`` output compresses each range's kept runs into a gzip member, a task per
range (``gzip_runs``).
"""
from __future__ import annotations

import os
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

from ..events.sortedsets import in_sorted, sorted_difference, sorted_distinct
from ..validate.merged import rank_validation, split_reports
from ..validate.ordered import OutFilter
from .deferred import missing_steps
from .grouped import GroupedFilter
from .outcome import RangeResult, RankResult
from .output import copy_runs
from .ranges import SplitFile, finish_rank
from .rank import TENTATIVE, RankPlan, open_segment
from .rederive import RangePids, rederive_rows
from .survey import Survey, combine_surveys

_ID_MASK = (1 << 40) - 1


def found_survey(meta: dict, parts: list[RangeResult]) -> Survey:
    """The rank's ``Survey`` (steps, earliest event; no flows) from its parked ranges'
    results, combined as the survey of its ranges would be (``combine_surveys``)."""
    return combine_surveys([Survey(meta, p.parked.first, p.parked.steps_found, {}) for p in parts], meta)


def split_steps_window(path, steps: tuple, found: Survey) -> tuple[int, int] | str:
    """``--steps first-last`` alone: the rank's keep-window (ns) from its combined steps, or the
    two-pass merge's error text when one is missing."""
    err = missing_steps(path, steps, found.steps)
    return err if err else (found.steps[steps[0]][0], found.steps[steps[1]][1])


def _global_keys(keys: np.ndarray, cat_map: np.ndarray | None, other_map: np.ndarray) -> np.ndarray:
    """A range's flow keys (its own numbering: ``cat << 40 | id``, or ``-1 - n`` for the n-th flow
    Python numbered) in the rank's numbering (``cat_map`` None: the same numbering)."""
    if cat_map is None:
        return keys
    out = np.empty_like(keys)
    plain = keys >= 0
    out[plain] = (cat_map[keys[plain] >> 40] << 40) | (keys[plain] & _ID_MASK)
    out[~plain] = -1 - other_map[-1 - keys[~plain]]
    return out


def kept_by_range(filters: list[GroupedFilter], lo: int, hi: int) -> list[np.ndarray]:
    """Per range (its filter's flow events in order, ``flow_events``),
    the sorted keys, in its own numbering, of the rank's flows whose every event, in any range, has
    ``lo <= ts <= hi``: the range's distinct keys but those of the flows with an event outside the
    window, in any range (found in the rank's numbering from the few events that leave it)."""
    cats, others, ranges, leaving = {}, {}, [], []
    for d in filters:
        keys, ts = d.flow_events()
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in d.cats] or [0], np.int64)
        other_map = np.array([others.setdefault(k, len(others)) for k in d.other] or [0], np.int64)
        same = not d.other and np.array_equal(cat_map, np.arange(len(cat_map)))    # the usual case
        maps = (None if same else cat_map, other_map)
        ranges.append((keys, maps))
        leaving.append(_global_keys(keys[(ts < lo) | (ts > hi)], *maps))
    gone = sorted_distinct(np.concatenate(leaving)) if leaving else np.zeros(0, np.int64)
    out = []
    for keys, maps in ranges:
        mine = sorted_distinct(keys)
        if maps[0] is None:         # the rank's numbering: the few leaving keys looked up in the range's
            out.append(sorted_difference(mine, gone))
        else:
            out.append(mine[~in_sorted(_global_keys(mine, *maps), gone)])
    return out


def decide_split(plan: RankPlan, sf: SplitFile, parts: list[RangeResult], pids, keep: tuple[int, int]) -> RankResult:
    """Task: a split rank's result, as ``finish_rank`` gives it, from
    its parked ranges' results (``parts``, file order, pid slots settled in ``pids``) under the
    keep-window ``keep`` (``(lo, hi)`` rank-local ns); its validation when ``plan.validate``.
    Removes the ranges' records and flows; the tentative segments stay for the parent to copy
    the kept runs from.

    The ranges are decided in a thread while this one checks the rank's slices, which go by the
    window alone (the decisions' kernel releases the GIL): only the flow check and the counts
    wait for the dropped events (``pending``).  A window
    that holds every range's events drops nothing: the check then needs no filter."""
    lo, hi = keep
    filters = [p.parked for p in parts]
    counters = [p.validation["parts"] for p in parts if p.validation is not None]
    reps = None
    try:
        if all(d.covered(lo, hi) for d in filters):
            drops = [d.finish(plan.path, plan.shift_ns, keep) for d in filters]      # no rows read
            if counters:
                reps = split_reports(counters, os.path.dirname(plan.segment))
        else:
            with ThreadPoolExecutor(1, thread_name_prefix="decide") as pool:
                own = [RangePids(plan.rank, p.records, p.assigned, pids.info) for p in parts]
                later = pool.submit(_decide_ranges, plan, sf.path, own, filters, keep)
                if counters:
                    pending = OutFilter(lo, hi, pending=lambda: _out_filter(lo, hi, later.result()))
                    reps = split_reports(counters, os.path.dirname(plan.segment), pending)
                drops = later.result()
    finally:
        for d in filters:
            d.close()
    decided = [replace(p, events_out=dec.kept, used=sorted(dec.used), first_out=dec.first_out,
                       segment=(p.segment + TENTATIVE, dec.runs), parked=None) for p, dec in zip(parts, drops)]
    res = finish_rank(plan, sf, decided, pids, plan.segment)
    if reps is not None:
        exact = all(p.exact and d.exact(dec.dropped_seq) for p, d, dec in zip(parts, filters, drops))
        res = replace(res, validation=rank_validation(reps, res.events_out, exact))
    return res


def _decide_ranges(plan: RankPlan, src: str, pids: list, filters: list[GroupedFilter], keep: tuple[int, int]) -> list:
    """Each range's ``Decision`` (file order) under ``keep``, the
    rank's flows matched across its ranges; the rows of a range's mixed groups are made again from
    ``src`` with the range's ``pids`` (``rederive_rows``)."""
    return [d.finish(plan.path, plan.shift_ns, keep, kk, partial(rederive_rows, plan, src, p, d))
            for d, kk, p in zip(filters, kept_by_range(filters, *keep), pids)]


def _out_filter(lo: int, hi: int, drops: list) -> OutFilter:
    """The rank's ``OutFilter`` from its ranges' decisions (file order)."""
    return OutFilter(lo, hi, np.concatenate([d.dropped_seq for d in drops]),
                     *(sum(d.dropped[k] for d in drops) for k in ("events", "missing", "negdur")))


def gzip_runs(src: str, runs: np.ndarray, dst: str, level: int) -> str:
    """Task: the byte runs ``runs`` (int64[n, 2]) of the plain file ``src`` as one gzip member in
    ``dst`` (a ``.json.gz`` output's range segment); removes ``src``.  Returns ``dst``."""
    raw, seg = open_segment(dst, True, level)
    try:
        copy_runs(src, runs, seg, False)
        seg.close()
    finally:
        raw.close()
    os.unlink(src)
    return dst


def gzip_tasks(res: RankResult, level: int) -> list[tuple]:
    """``(src, runs, dst, level)`` per kept-runs segment of a decided split rank's result ``res``
    (``dst``: the range's own segment name)."""
    return [(seg[0], seg[1], seg[0].removesuffix(TENTATIVE), level)
            for seg in res.segments if isinstance(seg, tuple)]
