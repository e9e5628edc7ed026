"""Options of ``streamtrace merge``."""
from __future__ import annotations

from dataclasses import dataclass

from ..trace.ranges import SPLIT_THRESHOLD



@dataclass
class MergeOptions:
    """Options of ``streamtrace.merge.merge`` (the ``streamtrace merge`` flags).

    Attributes:
        ranks: keep only these ranks (set of int); None keeps all.
        drop_cat: drop events whose ``cat`` is one of these (frozenset of str).
        steps: ``(first, last)`` ProfilerStep numbers, inclusive: keep events overlapping
            ``ProfilerStep#first`` .. ``ProfilerStep#last`` of each rank; None keeps all.
        gpu_only: keep only GPU processes (kernels, memcpy/memset, GPU annotations); drops flows.
        window_ms: ``(start, end)`` in milliseconds from the start of the merged timeline
            (floats); None keeps all.
        align: ``"global"`` (one clock through ``baseTimeNanoseconds``), ``"first-step"``
            (every rank's first ``ProfilerStep#`` starts together) or ``"collectives"`` (the global
            clock corrected by each rank's offset estimated from the ends of its collectives:
            ``streamtrace.merge.clocks``).
        iterations: merge only these iterations (list of int: the trace folder's ``iteration_N``);
            None merges each iteration found, each into its own output.
        jobs: worker processes; 0 = all cores.
        salvage: on a truncated file keep every complete event before the cut.
        progress: show a progress bar; None = only when stderr is a terminal.
        compresslevel: gzip level of a ``.json.gz`` output (1-9; 1 favours speed).
        scheduler: dask.distributed scheduler address (or ``$STREAMTRACE_SCHEDULER``); None runs
            on local processes.
        split_threshold: with ``jobs`` > 1, a rank trace of at least this many bytes
            (uncompressed) is rewritten in byte ranges by several workers when that balances
            the work (``streamtrace.merge.plan.split_pays``); None: never.
        split_always: cut every rank of at least ``split_threshold`` bytes, balanced or not.
        validate: check the inputs and the output while rewriting (``streamtrace.validate.merged``):
            the result's ``validation`` tells the problems the inputs had and those merge added.
        step_pattern: Nsight Systems exports only: a regular expression naming the NVTX range that
            marks a step, its first group the step number, instead of the default names
            (``streamtrace.trace.steps``); None: the defaults.  Kineto traces' steps are
            ``ProfilerStep#N`` (a warning says it is not applied to them).
        rank_map: the ``--rank-map`` file (set by ``merge`` from its
            ``rank_map``): an export's ``"<pid> <rank>"`` lines rank its processes.
    """
    ranks: set | None = None
    drop_cat: frozenset = frozenset()
    steps: tuple | None = None
    gpu_only: bool = False
    window_ms: tuple | None = None
    align: str = "global"
    iterations: list | None = None
    jobs: int = 0
    salvage: bool = False
    progress: bool | None = None
    compresslevel: int = 1
    scheduler: str | None = None
    split_threshold: int | None = SPLIT_THRESHOLD
    split_always: bool = False
    validate: bool = True
    step_pattern: str | None = None
    rank_map: str | None = None

    def __post_init__(self):
        if self.steps is not None:
            self.steps = tuple(self.steps)

    def needs_survey(self) -> bool:
        """True when merge must read every rank once before rewriting it (time filters, alignment)."""
        return self.align in ("first-step", "collectives") or self.steps is not None or self.window_ms is not None
