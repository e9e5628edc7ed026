"""What ``streamtrace diff`` compares: its options, each side's analysed folders (analysing traces
on the fly when it is given traces), the ranks of each side and how they pair.

A **side** (BASE or TEST) is any of:

* an analysed folder (``streamtrace analyze -o``: ``summary.json`` and ``kernels/``);
* an aggregate folder (``aggregate.json``): the analysed folders it was made from;
* an epilogue output (``epilogue.json``, or any folder holding ``*/analysis/summary.json``):
  every analysed iteration in it;
* anything else -- trace files, folders of rank traces, globs -- is analysed first, into
  ``OUTDIR/analysis-base`` or ``OUTDIR/analysis-test`` (``DiffOptions.analyze``).

**Ranks** pair by id: by default every rank both sides have (sorted); ``ranks`` picks some on both
sides; ``base_ranks``/``test_ranks`` pair two lists in order (rank 0 of one job with rank 8 of
another); ``ranks="all"`` takes every rank of each side unpaired.  Two sides of one rank each
with different ids pair with a notice.  **Steps** (``ProfilerStep#N`` numbers) are selected on each
side alike (``steps``) or apart (``base_steps``/``test_steps``); default: all.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...analyze import AnalyzeOptions, analyze
from ...analyze.outputs import Analysis
from ...aggregate.folder import Aggregate
from ...aggregate.steps import StepNames, step_names, step_patterns_of
from ..outputs import EpilogueRun
from ...runtime.errors import StreamtraceError, UsageError
from ...events.dataset import partition_files


@dataclass
class DiffOptions:
    """Options of ``streamtrace.report.diff`` (the ``streamtrace diff`` flags).

    Attributes:
        ranks: ranks compared on both sides (list of int), or ``"all"`` (every rank of each
            side, unpaired); None (default): the ranks both sides have.
        base_ranks: base ranks paired in order with ``test_ranks`` (list of int, same length); None.
        test_ranks: test ranks paired in order with ``base_ranks`` (list of int); None.
        steps: ProfilerStep numbers kept on both sides (tuple of int; a list is made a tuple); None (default): all.
        base_steps: ProfilerStep numbers of the base side (tuple of int, paired in order with ``test_steps``);
            None: all.
        test_steps: ProfilerStep numbers of the test side (tuple of int); None: all.
        name_key: ``"full"`` (default): names as the trace has them; ``"short"``: kernel and op
            names without template arguments, argument lists and return type
            (``streamtrace.report.diff.compare.short_name``), so instantiations of one kernel compare as one.
        top: rows in each list of ``diff.md`` (int, default 10).
        labels: names of the two sides in ``diff.md`` (tuple of two str; default ("base", "test")).
        charts: draw ``charts/diff_top_deltas.png`` (bool, default True).
        jobs: worker processes reading the ranks (int); 0 (default) = all cores.  Used when the
            analysed Parquet of both sides exceeds 64 MB; below, one process is faster.
        analyze: options for sides given as traces (``AnalyzeOptions``);
            None: the defaults with ``jobs``.
        progress: progress bars (bool); None (default): only on a terminal.
    """
    ranks: list | str | None = None
    base_ranks: list | None = None
    test_ranks: list | None = None
    steps: tuple | None = None
    base_steps: tuple | None = None
    test_steps: tuple | None = None
    name_key: str = "full"
    top: int = 10
    labels: tuple = ("base", "test")
    charts: bool = True
    jobs: int = 0
    analyze: object = None
    progress: bool | None = None

    def __post_init__(self):
        for name in ("steps", "base_steps", "test_steps"):     # one spelling: steps are a tuple everywhere
            if getattr(self, name) is not None:
                setattr(self, name, tuple(getattr(self, name)))

    def check(self):
        """Raise ``UsageError`` for options that contradict each other."""
        if self.ranks is not None and (self.base_ranks is not None or self.test_ranks is not None):
            raise UsageError("give --rank, or --base-rank and --test-rank, not both")
        if (self.base_ranks is None) != (self.test_ranks is None):
            raise UsageError("give both --base-rank and --test-rank")
        if self.base_ranks is not None and len(self.base_ranks) != len(self.test_ranks):
            raise UsageError(f"--base-rank and --test-rank pair in order: give as many of each "
                             f"({len(self.base_ranks)} vs {len(self.test_ranks)})")
        if self.steps is not None and (self.base_steps is not None or self.test_steps is not None):
            raise UsageError("give --step, or --base-step and/or --test-step, not both")
        if isinstance(self.ranks, str) and self.ranks != "all":
            raise UsageError(f"bad --rank {self.ranks!r}: a list such as 0-7,12, or all")
        if self.name_key not in ("full", "short"):
            raise UsageError(f"bad --name-key {self.name_key!r}: full or short")
        if len(self.labels) != 2 or any(not str(x) for x in self.labels):
            raise UsageError("--labels takes two names, e.g. before,after")
        if self.top < 1:
            raise UsageError(f"bad --top {self.top}: at least 1")


@dataclass
class Part:
    """One rank of one analysed iteration: ``dir`` (the analysed folder), ``rank``, ``iteration``
    (the trace file's, -1 unknown), ``source`` (the trace), ``step_patterns`` (the step names analyze
    used, ``Analysis.step_patterns``; None: ``ProfilerStep#N``), ``steps`` compiled."""
    dir: str
    rank: int
    iteration: int
    source: str = ""
    step_patterns: list | None = None

    @property
    def steps(self) -> StepNames:
        """The part's step names (``streamtrace.aggregate.steps.step_names``)."""
        return step_names(self.step_patterns)

    def files(self, dataset) -> list:
        return partition_files(self.dir, dataset, self.rank, None if self.iteration < 0 else self.iteration)


@dataclass
class Side:
    """One side of the comparison: ``label``, ``given`` (the path as given), ``dirs`` (analysed
    folders), ``parts`` (every rank of every iteration), ``steps`` (selected step numbers or
    None), ``analysed`` (True when diff analysed traces for it), ``notices``."""
    label: str
    given: str
    dirs: list
    parts: list
    steps: list | None = None
    analysed: bool = False
    notices: list = field(default_factory=list)

    def ranks(self) -> list:
        return sorted({p.rank for p in self.parts})


def analysed_dirs(path) -> list | None:
    """The analysed folders ``path`` stands for (see the module docstring), or None when it is
    none of those folders (traces, to be analysed)."""
    p = Path(path)
    if not p.is_dir():
        return None
    if (p / Analysis.marker).is_file():
        return [p]
    if (p / Aggregate.marker).is_file():
        try:
            ins = json.loads((p / Aggregate.marker).read_text()).get("inputs") or []
        except ValueError as e:
            raise StreamtraceError(f"{p / Aggregate.marker}: invalid JSON ({e})") from None
        dirs = [Path(d) for d in ins if (Path(d) / Analysis.marker).is_file()]
        if not dirs:
            raise StreamtraceError(f"{p}: the analysed folders this aggregate was made from are gone "
                                   f"({', '.join(ins) or 'none listed'}); give them instead")
        return dirs
    found = EpilogueRun.analysis_folders(p)
    if found or (p / EpilogueRun.marker).is_file():
        if not found:
            raise StreamtraceError(f"{p}: an epilogue output without analysed iterations")
        return found
    return None


def read_parts(dirs) -> list:
    """Every rank of every analysed folder in ``dirs`` (their ``summary.json``, ``Analysis.read``:
    a ``DataError`` naming it when it is damaged), as ``Part``."""
    parts = []
    for d in dirs:
        for r in Analysis.read(d).summary["ranks"]:
            it = r.get("iteration")
            parts.append(Part(str(d), int(r["rank"]), -1 if it is None else int(it), str(r.get("source", "")),
                              step_patterns_of(d, r)))
    return parts


def open_side(label, given, outdir, opt: DiffOptions, steps) -> Side:
    """The ``Side`` ``given`` (a path or glob) stands for; traces are analysed into
    ``outdir/analysis-<label>`` first.  Raises ``StreamtraceError`` when there is nothing
    to compare."""
    dirs = analysed_dirs(given)
    analysed = False
    if dirs is None:
        a = opt.analyze or AnalyzeOptions(jobs=opt.jobs, progress=opt.progress)
        target = Path(outdir) / f"analysis-{label}"
        summ = analyze([given], target, a)
        if not summ.get("ranks"):
            raise StreamtraceError(f"{given}: no rank could be analysed")
        dirs, analysed = [target], True
    parts = read_parts(dirs)
    if not parts:
        raise StreamtraceError(f"{given}: no ranks in {', '.join(str(Path(d) / Analysis.marker) for d in dirs)}")
    return Side(label, str(given), [str(d) for d in dirs], parts, steps, analysed)


def pair_ranks(base: Side, test: Side, opt: DiffOptions) -> tuple[list, list]:
    """``(pairs, notices)``: pairs of (base rank, test rank) -- None on one side for unpaired
    ranks under ``ranks="all"`` -- after which each side keeps only its paired ranks' parts.
    Raises ``StreamtraceError`` when a rank asked for is missing or no rank is common."""
    b, t = base.ranks(), test.ranks()
    notices = []
    if opt.ranks == "all":
        pairs = [(r if r in b else None, r if r in t else None) for r in sorted(set(b) | set(t))]
    elif opt.ranks is not None:
        _need(opt.ranks, b, base)
        _need(opt.ranks, t, test)
        pairs = [(r, r) for r in sorted(opt.ranks)]
    elif opt.base_ranks is not None:
        _need(opt.base_ranks, b, base)
        _need(opt.test_ranks, t, test)
        pairs = list(zip(opt.base_ranks, opt.test_ranks))
    else:
        common = sorted(set(b) & set(t))
        if common:
            pairs = [(r, r) for r in common]
            if set(b) != set(t):
                notices.append(f"comparing the {len(common)} rank(s) both sides have ({list_text(common)}); "
                               f"base has {list_text(b)}, test {list_text(t)}")
        elif len(b) == 1 and len(t) == 1:
            pairs = [(b[0], t[0])]
            notices.append(f"one rank on each side: comparing base rank {b[0]} with test rank {t[0]}")
        else:
            raise StreamtraceError(f"no common ranks: base {list_text(b)}, test {list_text(t)}; give --base-rank and "
                                   f"--test-rank")
    keep_b = {p[0] for p in pairs if p[0] is not None}
    keep_t = {p[1] for p in pairs if p[1] is not None}
    base.parts = [p for p in base.parts if p.rank in keep_b]
    test.parts = [p for p in test.parts if p.rank in keep_t]
    return pairs, notices


def _need(ranks, have, side):
    missing = sorted(set(ranks) - set(have))
    if missing:
        raise StreamtraceError(f"{side.given}: no rank {list_text(missing)} on the {side.label} side "
                               f"(it has {list_text(have)})")


def list_text(xs) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3,7"`` (the tool's list syntax)."""
    xs = sorted(set(xs))
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)
