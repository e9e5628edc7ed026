"""The rewrite step of ``streamtrace merge``: every rank's events rewritten into its segment files by
worker processes, the largest task first (``RewriteStage``).

A task is a whole rank (``merge_rank``) or one byte range of a cut rank
(``merge_range``); each worker hands back a typed result
(``streamtrace.merge.outcome``).  Then, in this order: the pid slots of the cut ranks are settled
(the ranges whose provisional slots were wrong are rewritten again), a deferred time filter is decided
(a rank without the ``--steps`` asked for raises; parked ranks are decided by tasks on the same pool,
``streamtrace.merge.decide``), and the cut ranks' checks are merged from their ranges' sorted runs.
The result is one ``RankResult`` per rank file, in file order.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, replace

from tqdm import tqdm

from ..runtime import parallel
from ..runtime.errors import StreamtraceError
from ..runtime.parallel import run_tasks
from ..runtime.tuning import trim
from ..validate.merged import split_validation
from . import decide
from .outcome import MissingSteps, ParkedRank, SplitParked, TaskDone, TaskStats, share_metadata_head
from .plan import MergePlan, RewriteTask, naming_file
from .rank import RankPlan, merge_rank, warm_kernels
from .ranges import finish_rank, merge_range, settle_pids


@dataclass(frozen=True)
class Rewritten:
    """What the rewrite step gives the stitch: ``results`` (one
    ``RankResult`` per rank file, in file order), ``stats`` (every task's
    ``TaskStats``, ranges rewritten again counted once, as last run) and
    ``redone`` (how many ranges were rewritten again)."""
    results: list
    stats: list
    redone: int

    @property
    def gpu(self) -> bool:
        """True when a rank has a GPU process."""
        return any(r.gpu for r in self.results)

    def worker_mb_per_s(self) -> list[float]:
        """Each worker process's input MB per busy second (rounded to 0.1)."""
        busy = {}                                   # worker pid -> [bytes, seconds]
        for s in self.stats:
            w = busy.setdefault(s.worker, [0, 0.0])
            w[0] += s.bytes
            w[1] += s.seconds
        return [round(b / 1e6 / max(t, 1e-9), 1) for b, t in busy.values()]


class Progress:
    """A tqdm bar of the bytes the rewrite tasks have read (on a terminal unless ``show``
    says otherwise); workers report through the shared array ``shared``, one slot per task."""

    def __init__(self, tasks, show):
        self.total = sum(t.size for t in tasks)
        self.shared = mp.Array("q", len(tasks), lock=False)
        self.bar = None
        if sys.stderr.isatty() if show is None else show:
            self.bar = tqdm(total=self.total, unit="B", unit_scale=True, desc="merge", file=sys.stderr)

    def tick(self):
        if self.bar is not None:
            self.bar.n = min(self.total, sum(self.shared))
            self.bar.refresh()

    def close(self):
        """Fill and close the bar (once; later calls do nothing)."""
        if self.bar is not None:
            self.bar.n = self.total
            self.bar.close()
            self.bar = None


def run_task(task: RewriteTask) -> TaskDone:
    """Worker: one rewrite task (a whole rank, or one byte range of a split rank)."""
    shared = parallel.PROGRESS

    def report(n):
        shared[task.slot] = n
    progress = report if shared is not None else None
    t0 = time.perf_counter()
    with naming_file(task.plan.path):
        if task.byte_range is None:
            res = merge_rank(task.plan, progress)
        else:
            res = merge_range(task.plan, task.src, task.byte_range, task.segment, task.final, progress, task.index)
    # the worker's own account: bytes in, busy seconds (for "MB/s per worker")
    size = task.size if task.byte_range else res.reading.bytes_in
    stats = TaskStats(os.getpid(), size, time.perf_counter() - t0)
    trim()      # the rewrite's freed buffers back to the OS: a worker's next rank starts from its base again
    return TaskDone(res, stats)


class RewriteStage:
    """The rewrite step of one ``MergePlan`` (module docstring): its
    ``ranks`` (``RankPlan``, file order), ``tasks`` and ``progress`` bar."""

    def __init__(self, plan: MergePlan, ranks: list[RankPlan], tasks: list[RewriteTask], progress: Progress):
        self.plan, self.ranks, self.tasks, self.progress = plan, ranks, tasks, progress
        self.executor = None

    def run(self, surveys: list) -> Rewritten:
        """Rewrite every rank (``surveys``: the plan's, for a deferred filter's decisions).  Raises
        ``StreamtraceError`` for a one-pass ``--steps`` rank without the steps (the first in rank
        order), ``TraceError`` for a rank that cannot be read."""
        plan = self.plan
        local = plan.jobs > 1 and len(self.tasks) > 1 and not parallel.scheduler_address(plan.opt.scheduler)
        if local:
            # forked workers inherit the loaded kernels (one process: loaded on use), the deferred
            # filter's for whole ranks and for byte ranges as the job has them
            warm_kernels(self.ranks[0], whole=len(plan.splits) < len(plan.files), ranges=bool(plan.splits))
        trim()                            # and only the heap this process uses (see run_task)
        with contextlib.ExitStack() as stack:
            later = any(p.park for p in self.ranks) or any(self.ranks[i].defer is not None for i in plan.splits)
            if later and local:
                # one fork for both rounds; a decision runs in a worker even alone (not in this process)
                self.executor = stack.enter_context(parallel.pool(plan.jobs, self.progress.shared))
            done = self._largest_first(self.tasks)
            results, done, redone = self._settle(done)
            results = self._decide(results, surveys)
        return Rewritten(results, [d.stats for d in done], redone)

    def _largest_first(self, tasks: list[RewriteTask]) -> list[TaskDone]:
        """Run rewrite tasks, the largest first (better balance); results in task order."""
        order = sorted(range(len(tasks)), key=lambda j: -tasks[j].size)
        res = run_tasks(run_task, [(tasks[j],) for j in order], self.plan.jobs, self.progress.shared,
                        self.progress.tick, executor=self.executor, scheduler=self.plan.opt.scheduler, retries=1,
                        on_result=share_metadata_head)
        out = [None] * len(tasks)
        for j, r in zip(order, res):
            out[j] = r
        return out

    def _settle(self, done: list[TaskDone]) -> tuple[list, list[TaskDone], int]:
        """One result per file from the tasks' ``done``: the pid slots of split ranks settled (the ranges
        whose provisional slots were wrong rewritten again), a split rank under a deferred filter as a
        ``SplitParked``; the split ranks' checks.  Returns ``(results,
        every task's TaskDone, ranges redone)``."""
        plan, ranks = self.plan, self.ranks
        of = {}                     # file index -> its task indices, in file order
        for j, t in enumerate(self.tasks):
            of.setdefault(t.file_index, []).append(j)
        results = [None if i in plan.splits else done[of[i][0]].result for i in range(len(plan.files))]
        redo = []
        for i in plan.splits:
            _, final, wrong = settle_pids(ranks[i].rank, [done[j].result for j in of[i]])
            redo += [replace(self.tasks[of[i][k]], final=final[k]) for k in wrong]
        if redo:
            done = list(done)
            for t, res in zip(redo, self._largest_first(redo)):
                done[t.slot] = res
        for i, sf in plan.splits.items():
            parts = [done[j].result for j in of[i]]
            pids, _, wrong = settle_pids(ranks[i].rank, parts)
            if wrong:
                raise RuntimeError(f"rank {ranks[i].rank}: pid slots did not settle")
            if ranks[i].defer is not None:      # decided with the rank's every range read (split_filter)
                results[i] = SplitParked(sf, parts, pids)
            else:
                results[i] = finish_rank(ranks[i], sf, parts, pids, ranks[i].segment)
        if plan.opt.validate and plan.splits:      # a split rank's check: its ranges' sorted runs merged
            idx = [i for i in plan.splits if not isinstance(results[i], SplitParked)]
            vals = run_tasks(split_validation, [([done[j].result.validation for j in of[i]],
                                                 os.path.dirname(ranks[i].segment), results[i].events_out)
                                                for i in idx], plan.jobs, scheduler=plan.opt.scheduler)
            for i, v in zip(idx, vals):
                results[i] = replace(results[i], validation=v)
        return results, done, len(redo)

    def _decide(self, results: list, surveys: list) -> list:
        """The deferred filter's decisions: a one-pass ``--steps`` rank without the steps raises (the
        first in rank order); ranks parked for ``--window`` (and split ranks) are decided by tasks on the
        pool (``streamtrace.merge.decide``), a ``.json.gz`` output's kept runs compressed."""
        plan = self.plan
        parked = any(isinstance(r, (ParkedRank, SplitParked)) for r in results)
        try:
            keeps = decide.parked_keeps(plan.files, surveys, results, plan.opt) if parked else {}
            missing = [r.message if isinstance(r, MissingSteps) else keeps.get(tf.rank)
                       for tf, r in zip(plan.files, results)]
            missing = [m for m in missing if isinstance(m, str)]
            if missing:
                raise StreamtraceError(missing[0])
        except StreamtraceError:
            self.progress.close()
            raise
        if parked:
            results = decide.finish_parked_ranks(self.ranks, results, keeps, plan.opt, plan.jobs, self.executor)
        if plan.splits and any(p.defer is not None and p.compress for p in self.ranks):
            results = decide.gzip_split_runs(results, plan.opt, plan.jobs, self.executor)
        return results
