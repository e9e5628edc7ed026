"""The deferred time filter's decisions in ``streamtrace merge``, once every rank is read
(``streamtrace.merge.deferred``): the keep-windows of the parked ranks (``parked_keeps``: a
``--window``'s origin is the job's earliest event; a rank cut into byte ranges has its steps in any
range), a task per parked rank (``finish_parked_ranks``), and the gzip members of a cut rank's
kept runs (``gzip_split_runs``).  Called by ``streamtrace.merge.run`` on the rewrite's pool."""
from __future__ import annotations

from dataclasses import replace

from ..runtime.parallel import run_tasks
from .outcome import ParkedRank, RankResult, SplitParked
from .rank import RankPlan, finish_parked
from .split_filter import decide_split, found_survey, gzip_runs, gzip_tasks, split_steps_window
from .survey import Survey, plan_time


def parked_keeps(files, surveys, results, opt) -> dict:
    """``{rank: (lo, hi)}``, the keep-windows (rank-local ns) of the ranks rewritten in one pass and
    parked, from their steps and earliest events as the survey would have found them: with
    ``--window`` every rank is parked (the window's origin is the job's earliest event) and
    ``plan_time`` raises its errors in rank order; with ``--steps`` alone only split ranks are,
    and a missing step is the error's text, as an unsplit rank's worker notes it."""
    found = [_found(s, r) for s, r in zip(surveys, results)]
    if opt.window_ms is not None:
        return plan_time(files, found, opt)[2]
    return {tf.rank: split_steps_window(tf.path, opt.steps, f) for tf, f, r in zip(files, found, results)
            if isinstance(r, SplitParked)}


def finish_parked_ranks(plans, results, keeps, opt, jobs, executor=None) -> list:
    """Each parked rank decided under its keep-window and written by a task
    (``streamtrace.merge.rank.finish_parked``, ``streamtrace.merge.split_filter.decide_split``);
    the other results as they are."""
    todo = [i for i, r in enumerate(results) if isinstance(r, (ParkedRank, SplitParked))]
    done = run_tasks(_decide, [(plans[i], results[i], keeps[plans[i].rank]) for i in todo], jobs,
                     executor=executor, scheduler=opt.scheduler)
    out = list(results)
    for i, r in zip(todo, done):
        out[i] = r
    return out


def _found(s: Survey, r) -> Survey | None:
    """A parked rank's steps and earliest event as its survey would give them (None: not parked)."""
    if isinstance(r, ParkedRank):
        return Survey(s.metadata, r.parked.defer.first, r.parked.defer.steps_found, {})
    if isinstance(r, SplitParked):
        return found_survey(s.metadata, r.parts)
    return None


def _decide(plan: RankPlan, res: ParkedRank | SplitParked, keep) -> RankResult:
    """Task: one parked rank decided (``finish_parked``, or a split rank's
    ``decide_split``)."""
    if isinstance(res, SplitParked):
        return decide_split(plan, res.split, res.parts, res.pids, keep)
    return finish_parked(plan, res, keep)


def gzip_split_runs(results: list[RankResult], opt, jobs, executor=None) -> list[RankResult]:
    """A ``.json.gz`` output: each decided split rank's kept runs (``(tentative, runs)`` segments of
    ``results``) compressed into the range's own segment, a task per range; returns the results with
    those segments replaced by the members written."""
    gz = [(i, t) for i, res in enumerate(results) for t in gzip_tasks(res, opt.compresslevel)]
    members = run_tasks(gzip_runs, [t for _, t in gz], jobs, executor=executor, scheduler=opt.scheduler)
    written = {t[0]: path for (_, t), path in zip(gz, members)}
    return [replace(res, segments=tuple(written.get(s[0], s) if isinstance(s, tuple) else s for s in res.segments))
            if any(isinstance(s, tuple) for s in res.segments) else res for res in results]
