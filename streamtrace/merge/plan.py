"""The survey/plan step of ``streamtrace merge``: what one iteration's merge will do, fixed before any
rank is rewritten.

``MergePlan`` holds the rank files, the output, the options, the big ranks cut into byte ranges
(``cut_ranks``, ``streamtrace.merge.ranges``) and the worker count; it reads every rank once
when the options need it (``MergePlan.surveys``: steps, earliest events, flows, collectives), then
gives each rank its time shift and keep-window (``MergePlan.time``, a ``TimePlan``), its
``RankPlan`` (``MergePlan.ranks``) and the rewrite tasks, one per
whole rank and one per byte range (``MergePlan.tasks``).  The line that runs it is
``streamtrace.merge.line``.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..runtime.errors import StreamtraceError, TraceError
from ..runtime.files import remove_quietly, temp_name
from ..runtime.parallel import run_tasks
from ..trace.discover import TraceFile
from ..trace.metadata import device_names, host_name
from ..trace.source import size_hint
from ..validate.merged import LOG_SUFFIX
from .clocks import plan_clock_sync
from .flows import FlowExtents, SpilledFlows
from .options import MergeOptions
from .outcome import share_metadata_head
from .rank import RankPlan, deferred_files
from .ranges import SplitFile, prepare, survey_meta
from .survey import Survey, combine_surveys, metadata_task, plan_time, survey_rank


@dataclass
class RewriteTask:
    """One worker's rewrite: a whole rank (``byte_range`` None, read from ``plan.path``) or one
    byte range of a split rank (read from the plain copy ``src`` into ``segment``).  ``final``:
    the settled merged pids of a range that is rewritten again (see ``streamtrace.merge.ranges``);
    ``size``: input bytes (largest first; MB/s); ``slot``: its place in the progress array."""
    plan: RankPlan
    file_index: int
    size: int
    src: str | None = None
    byte_range: tuple | None = None
    segment: str | None = None
    final: list | None = None
    slot: int = 0
    index: int = 0          # a byte range's place in its rank (file order)


@dataclass
class SurveyTask:
    """One survey (or metadata) read: a whole rank file, or one byte range of a split rank."""
    path: str
    file_index: int
    head: dict
    full: bool                  # the full pre-pass (steps, first ts, flows), else metadata only
    want_flows: bool
    salvage: bool
    byte_range: tuple | None = None
    want_collectives: bool = False
    spill: str | None = None        # write the flows found to this file (merge.flows.SpilledFlows)


@dataclass(frozen=True)
class TimePlan:
    """Every rank's place in time: ``out_base`` (the merged trace's ``baseTimeNanoseconds``, ns),
    ``shifts`` ``{rank: ns}`` added to its timestamps, ``keeps`` ``{rank: (lo, hi) rank-local ns, or
    None}``, and with ``--align collectives`` the clock fit (``clock``,
    ``plan_clock_sync``) and its ``warnings``."""
    out_base: int
    shifts: dict
    keeps: dict
    clock: dict | None = None
    warnings: tuple = ()


def split_pays(sizes: list, jobs: int, slack: float = 1.1) -> bool:
    """True when cutting big ranks into byte ranges can shorten the merge: the ranks as whole
    tasks, the largest first on the least loaded of ``jobs`` workers, would keep one worker
    busy more than ``slack`` times an even share (sum / jobs).  Cutting costs a pass over each
    cut rank to find event boundaries and its ranges' sorted validation runs merged: equal ranks, at
    least as many as the workers, are merged whole."""
    loads = [0] * max(1, jobs)
    for n in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += n
    return max(loads) > slack * sum(sizes) / len(loads)


def workers_wanted(opt: MergeOptions) -> int:
    """The worker processes ``opt.jobs`` asks for (0: every core)."""
    return opt.jobs or os.cpu_count() or 1


def cut_ranks(files: list[TraceFile], output: Path, opt: MergeOptions) -> dict[int, SplitFile]:
    """``{file index: SplitFile}``: the big ranks cut into byte ranges when that balances the work
    (``split_pays``, ``opt.split_threshold``, ``opt.split_always``), a task each; a rank that
    cannot be cut exactly is left out (merged whole).  The caller removes each one's ``tmp``."""
    want = workers_wanted(opt)
    sizes = [size_hint(tf.path, tf.size) for tf in files]
    big = [i for i, n in enumerate(sizes) if want > 1 and opt.split_threshold is not None
           and n >= opt.split_threshold] if opt.split_always or split_pays(sizes, want) else []
    if not big:
        return {}
    output.parent.mkdir(parents=True, exist_ok=True)
    prepared = run_tasks(prepare, [(files[i].path, str(output.parent), want, opt.split_threshold) for i in big],
                         min(want, len(big)), scheduler=opt.scheduler)
    return {i: sf for i, sf in zip(big, prepared) if sf is not None}


def deferred_filter(opt: MergeOptions, splits: dict) -> bool:
    """True when ``--steps`` / ``--window`` are decided after each rank's one pass
    (``streamtrace.merge.deferred``; a rank cut into byte ranges: ``streamtrace.merge.split_filter``)
    instead of by a survey before it: without an alignment that reads the ranks first.  ``--steps``
    alone is decided by each unsplit rank's worker; ``--window`` (its origin is the job's earliest
    event) and split ranks by tasks the parent starts once every rank is read."""
    return (opt.steps is not None or opt.window_ms is not None) and opt.align == "global"


@contextlib.contextmanager
def naming_file(path):
    """An unexpected error while reading rank file ``path`` becomes a ``TraceError`` naming
    it (so that a caller can merge the other ranks); input and output errors pass as they are."""
    try:
        yield
    except (StreamtraceError, OSError, MemoryError):
        raise
    except Exception as e:      # noqa: BLE001 - name the rank file
        line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TraceError(path, f"cannot merge this file ({type(e).__name__}: {line})") from e


def run_survey(task: SurveyTask) -> Survey:
    """Task: one ``SurveyTask`` read (its flows spilled to ``task.spill`` when it names a file)."""
    with naming_file(task.path):
        if task.byte_range is not None:
            return survey_rank(task.path, task.want_flows, False, task.byte_range, task.want_collectives)
        s = metadata_task(task.path, task.head, task.full, task.want_flows, task.salvage, task.want_collectives)
        if task.spill and isinstance(s.flows, FlowExtents):
            s.flows = s.flows.spill(task.spill)
        return s


@dataclass(frozen=True)
class MergePlan:
    """One iteration's merge, fixed before any rank is rewritten (module docstring).

    Attributes:
        files: the rank files (``TraceFile``), in merge order.
        output: the merged trace.
        opt: the options.
        splits: ``{file index: SplitFile}``, the ranks cut into byte ranges (``cut_ranks``).
        jobs: the worker processes (no more than the tasks).
        defer: ``--steps`` / ``--window`` decided after the one pass over each rank (``deferred_filter``).
    """
    files: tuple
    output: Path
    opt: MergeOptions
    splits: dict = field(default_factory=dict)
    jobs: int = 1
    defer: bool = False

    @classmethod
    def of(cls, files, output: Path, opt: MergeOptions, splits: dict) -> MergePlan:
        """The plan of ``files`` into ``output`` with the ranks already cut (``splits``)."""
        jobs = max(1, min(workers_wanted(opt), len(files) + sum(len(sf.ranges) - 1 for sf in splits.values())))
        return cls(tuple(files), output, opt, splits, jobs, deferred_filter(opt, splits))

    @property
    def compress(self) -> bool:
        """The output is gzip compressed (``.json.gz``)."""
        return self.output.name.endswith(".gz")

    def surveys(self) -> list[Survey]:
        """Each rank's ``Survey`` (a split rank: its ranges' surveys
        combined, or its metadata without reading the events again).  An unsplit rank's flows stay in a
        temporary file beside the output (``SpilledFlows``), for its
        rewrite worker: this process never holds every rank's flows (``remove_spills``)."""
        opt, splits = self.opt, self.splits
        full = opt.needs_survey() and not self.defer
        want_flows = full and (opt.window_ms is not None or opt.steps is not None)
        coll = opt.align == "collectives"
        self.output.parent.mkdir(parents=True, exist_ok=True)
        tasks = []
        for i, tf in enumerate(self.files):
            if i not in splits:
                spill = str(self.output.parent / temp_name(self.output.name, f"flows{i}")) \
                    if full and want_flows else None
                tasks.append(SurveyTask(tf.path, i, tf.head, full, want_flows, opt.salvage, want_collectives=coll,
                                        spill=spill))
            elif full:
                tasks += [SurveyTask(splits[i].path, i, {}, True, want_flows, False, r, coll) for r in splits[i].ranges]
        done = run_tasks(run_survey, [(t,) for t in tasks], self.jobs, scheduler=opt.scheduler,
                         on_result=share_metadata_head)
        by_file: dict = {}                   # file index -> its surveys, in task order
        for s, t in zip(done, tasks):
            by_file.setdefault(t.file_index, []).append(s)
        surveys = []
        for i, tf in enumerate(self.files):
            mine = by_file.get(i, [])
            if i not in splits:
                surveys.append(mine[0])
            elif full:
                surveys.append(combine_surveys(mine, splits[i].meta))
            else:
                surveys.append(Survey(survey_meta(tf, splits[i]), None, {}, {}))
        return surveys

    @staticmethod
    def remove_spills(surveys: list[Survey]) -> None:
        """Remove the flows ``surveys`` left in temporary files."""
        for s in surveys:
            if isinstance(s.flows, SpilledFlows):
                remove_quietly(s.flows.path)

    def time(self, surveys: list[Survey]) -> TimePlan:
        """Each rank's shift and keep-window (``plan_time``; with a deferred
        filter the keep-windows are decided later), corrected by the collectives' clock offsets with
        ``--align collectives``.  Raises ``StreamtraceError`` for a step a rank lacks."""
        opt = replace(self.opt, steps=None, window_ms=None) if self.defer else self.opt
        out_base, shifts, keeps = plan_time(self.files, surveys, opt)
        if self.opt.align != "collectives":
            return TimePlan(out_base, shifts, keeps)
        shifts, clock, warnings = plan_clock_sync(self.files, surveys, shifts)
        return TimePlan(out_base, shifts, keeps, clock, tuple(warnings))

    def ranks(self, surveys: list[Survey], time: TimePlan) -> list[RankPlan]:
        """One ``RankPlan`` per rank: its shift, keep-window and the
        flows kept under it, its segment file beside the output; with a deferred filter, the steps to
        find (and, for ``--window``, to park the rank for the parent's decision)."""
        opt = self.opt
        self.output.parent.mkdir(parents=True, exist_ok=True)
        stem = str(self.output.parent / temp_name(self.output.name, "rank"))
        plans = []
        for tf, s in zip(self.files, surveys):
            keep = time.keeps[tf.rank]
            kept_flows = None
            if isinstance(s.flows, SpilledFlows) and keep is not None:
                kept_flows = s.flows          # read by the rank's rewrite worker
            elif keep is not None:
                flows = s.flows if isinstance(s.flows, FlowExtents) else FlowExtents.build([], [], s.flows)
                kept_flows = flows.kept(*keep)
            plan = RankPlan(tf.path, tf.rank, time.shifts[tf.rank], f"{stem}{tf.rank}.seg", self.compress,
                            opt.compresslevel, frozenset(opt.drop_cat), opt.gpu_only, keep, kept_flows, opt.salvage,
                            host_name(s.metadata), device_names(s.metadata), validate=opt.validate)
            if self.defer:
                plan = replace(plan, defer=opt.steps or (), park=opt.window_ms is not None)
            plans.append(plan)
        return plans

    def tasks(self, ranks: list[RankPlan]) -> list[RewriteTask]:
        """One task per unsplit rank, one per byte range of a split rank, in file order."""
        tasks = []
        for i, (tf, p) in enumerate(zip(self.files, ranks)):
            if i not in self.splits:
                tasks.append(RewriteTask(p, i, tf.size))
                continue
            sf = self.splits[i]
            for k, r in enumerate(sf.ranges):
                tasks.append(RewriteTask(p, i, r[1] - r[0], sf.path, r, f"{p.segment}.{k}", index=k))
        for j, t in enumerate(tasks):
            t.slot = j
        return tasks

    def temporaries(self, ranks: list[RankPlan], tasks: list[RewriteTask]) -> list[str]:
        """Every file the rewrite may leave beside the output, removed once the merge is written or has
        failed: the segments, a deferred filter's records, the ranges' sorted validation runs."""
        out = [p.segment for p in ranks] + [x for p in ranks if p.defer is not None for x in p.temporaries()]
        for t in tasks:
            if t.segment:
                out += [t.segment, t.segment + LOG_SUFFIX] + (deferred_files(t.segment) if self.defer else [])
        return out

    def names_cut_rank(self, path: str) -> bool:
        """True when ``path`` is one of the cut ranks' files (its input or its plain copy)."""
        return any(path in (sf.path, self.files[i].path) for i, sf in self.splits.items())
