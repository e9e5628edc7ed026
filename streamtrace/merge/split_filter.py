"""``merge --steps`` / ``--window`` in one pass on a rank cut into byte ranges
(:mod:`streamtrace.merge.ranges`): the deferred filter of :mod:`streamtrace.merge.deferred`, spread
over the ranges.

Each range's worker writes every event of its range to a tentative segment and records what the
filter decides it by, as an unsplit rank's does (a :class:`~streamtrace.merge.deferred.DeferredFilter`
per range, parked once the range is read).  The filter is a property of the whole rank: its steps
may lie in any range, and a flow is kept only when every one of its events, in whichever range, is
in the window.  So once every range is read and the pid slots are settled, one task per rank
(:func:`decide_split`) combines the ranges' steps and earliest events (:func:`found_survey`; the
keep-window itself comes from the parent, :func:`streamtrace.merge.survey.plan_time`), numbers the
ranges' flows in one key space to find the kept ones (:func:`kept_by_range`), decides each range
(:func:`streamtrace.kernels.keep.keep_rows`) and checks the rank's output with the dropped events
taken out of its view (:func:`streamtrace.validate.merged.split_validation` with an
:class:`~streamtrace.validate.ordered.OutFilter`).  A plain output then copies each range's kept
byte runs; a ``.json.gz`` output compresses each range's kept runs into a gzip member, a task per
range (:func:`gzip_runs`).
"""
from __future__ import annotations

import os

import numpy as np

from ..validate.merged import split_validation
from ..validate.ordered import OutFilter
from .deferred import DeferredFilter, flow_extents, in_sorted, missing_steps
from .output import copy_runs
from .ranges import SplitFile, finish_rank
from .rank import TENTATIVE, RankPlan, open_segment
from .survey import Survey, combine_surveys

_ID_MASK = (1 << 40) - 1


def found_survey(meta: dict, parts: list[dict]) -> Survey:
    """The rank's :class:`Survey` (steps, earliest event; no flows) from its parked ranges'
    results, combined as the survey of its ranges would be (:func:`combine_surveys`)."""
    return combine_surveys([Survey(meta, p["parked"].first, p["parked"].steps_found, {}) for p in parts], meta)


def split_steps_window(path, steps: tuple, found: Survey) -> tuple[int, int] | str:
    """``--steps first-last`` alone: the rank's keep-window (ns) from its combined steps, or the
    two-pass merge's error text when one is missing."""
    err = missing_steps(path, steps, found.steps)
    return err if err else (found.steps[steps[0]][0], found.steps[steps[1]][1])


def _global_keys(keys: np.ndarray, cat_map: np.ndarray, other_map: np.ndarray) -> np.ndarray:
    """A range's flow keys (its own numbering: ``cat << 40 | id``, or ``-1 - n`` for the n-th flow
    Python numbered) in the rank's numbering."""
    out = np.empty_like(keys)
    plain = keys >= 0
    out[plain] = (cat_map[keys[plain] >> 40] << 40) | (keys[plain] & _ID_MASK)
    out[~plain] = -1 - other_map[-1 - keys[~plain]]
    return out


def kept_by_range(filters: list[DeferredFilter], lo: int, hi: int) -> list[np.ndarray]:
    """Per range (its unparked filter, holding its flows' extents), the sorted keys, in its own
    numbering, of the rank's flows whose every event, in any range, has ``lo <= ts <= hi``."""
    cats, others = {}, {}
    maps = []
    for d in filters:
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in d.cats] or [0], np.int64)
        other_map = np.array([others.setdefault(k, len(others)) for k in d.other] or [0], np.int64)
        maps.append((cat_map, other_map))
    keys, first, last = flow_extents(np.concatenate([_global_keys(d.extents[0], *m) for d, m in zip(filters, maps)]),
                                     np.concatenate([d.extents[1] for d in filters]),
                                     np.concatenate([d.extents[2] for d in filters]))
    kept = keys[(first >= lo) & (last <= hi)]
    del keys, first, last
    out = []
    for d, m in zip(filters, maps):
        mine = d.extents[0]                     # sorted, distinct
        out.append(mine[in_sorted(_global_keys(mine, *m), kept)])
        d.extents = None
    return out


def decide_split(plan: RankPlan, sf: SplitFile, parts: list[dict], pids, keep: tuple[int, int]) -> dict:
    """Task: a split rank's result, as :func:`~streamtrace.merge.ranges.finish_rank` gives it, from
    its parked ranges' results (``parts``, file order, pid slots settled in ``pids``) under the
    keep-window ``keep`` (``(lo, hi)`` rank-local ns); its validation when ``plan.validate``.
    Removes the ranges' records and flows; the tentative segments stay for the parent to copy
    the kept runs from."""
    lo, hi = keep
    filters = [p["parked"] for p in parts]
    try:
        for d in filters:
            d.unpark()
        decided, drops, checks = [], [], []
        for p, d, kk in zip(parts, filters, kept_by_range(filters, lo, hi)):
            dec = d.finish(plan.path, plan.shift_ns, keep, kk)
            decided.append(dict(p, events_out=dec.kept, used=sorted(dec.used), first_out=dec.first_out,
                                segment=(p["segment"] + TENTATIVE, dec.runs), parked=None))
            drops.append(dec)
            if p["validation"] is not None:
                checks.append({"parts": p["validation"]["parts"], "exact": p["exact"] and d.exact(dec.dropped_seq)})
    finally:
        for d in filters:
            d.close()
    res = finish_rank(plan, sf, decided, pids, plan.segment)
    if checks:
        out_filter = OutFilter(lo, hi, np.concatenate([d.dropped_seq for d in drops]),
                               *(sum(d.dropped[k] for d in drops) for k in ("events", "missing", "negdur")))
        res["validation"] = split_validation(checks, os.path.dirname(plan.segment), res["events_out"], out_filter)
    return res


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


def gzip_tasks(res: dict, level: int) -> list[tuple]:
    """``(src, runs, dst, level)`` per kept-runs segment of a decided split rank's result ``res``
    (``dst``: the range's own segment name)."""
    return [(seg[0], seg[1], seg[0].removesuffix(TENTATIVE), level) for seg in res["segments"] if isinstance(seg, tuple)]
