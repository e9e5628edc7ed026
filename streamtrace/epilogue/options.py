"""Options of ``streamtrace epilogue`` (``EpilogueOptions``), the last release's keywords still taken
(``RENAMED``), and the worker count they give (``worker_count``)."""
from __future__ import annotations

import os
import warnings
from dataclasses import InitVar, dataclass, field, fields, replace

from ..report.options import ReportOptions
from ..runtime.errors import UsageError

# peak RSS of one worker analysing in --chunked mode, for the --max-memory cap (GB)
WORKER_GB = 0.6


@dataclass
class EpilogueOptions:
    """Options of ``run`` (the ``streamtrace epilogue`` flags).

    Attributes:
        gpu_only: merge only the GPU processes (``merged_gpu.json.gz``; bool, default True, as
            ``MergeOptions``' ``gpu_only``); False: every event (``merged.json.gz``,
            the CLI's ``--full``).
        chunked: analyse with ``--chunked`` (spill files on disk), else in memory; bool, default True.
        jobs: worker processes (int); 0 = all cores (default).
        max_memory_gb: a cap in GB (float) that limits the workers (``WORKER_GB`` each); None: no cap.
        strict: the CLI exits 1 when anything failed (``run`` itself never raises); default False.
        outdir: the output folder (str or Path); None: ``RUN_DIR/streamtrace``.  Set it for a read-only
            run folder.
        topology: a topology file (str; ``streamtrace.topology.sources.load_topology``); None: found
            under ``RUN_DIR`` (``find_topology``), else the traces' ``distributedInfo.pg_config``.
        torchtitan_config: the job's TorchTitan TOML (str): tokens per step, model and mesh (the
            topology when none is found or given); None.
        progress: log each stage's progress lines (``done in``, ``reused``, notes); None (default) or True:
            logged, False: only failures, warnings and the final line (the CLI's ``-q/--quiet``).  The
            spelling of every stage's options (there: progress bars).
        verbose: log tracebacks of failures too (bool, default False; the CLI's ``-v``; also
            ``$STREAMTRACE_DEBUG``).
        report: the report's options (``ReportOptions``: name, tokens per
            step or global batch and sequence length, charts, their formats and ranks); its ``jobs`` and
            ``progress`` are the epilogue's.  Default: ``ReportOptions()``.
        step_pattern: a regular expression naming the annotation or NVTX range that marks a training step
            (str; as ``AnalyzeOptions``' and merge's ``step_pattern``); None:
            ``ProfilerStep#N``, or an Nsight export's recognised NVTX step ranges, else the whole capture.
        isolate: run each stage (analyze, merge, aggregate, report) in its own child process
            (bool, default True), so that its memory is returned when it ends and no stage starts on
            top of the last one's (1,024 ranks: the analysis summaries alone are ~70 MB of Python
            objects), and a stage killed by the system is one failure, not the end of the
            epilogue.  False: all in this process (e.g. under a debugger).
        quiet, full: deprecated (removed in the next release; ``RENAMED``): ``quiet=True`` is
            ``progress=False``, ``full=True`` is ``gpu_only=False``, each with a ``DeprecationWarning``.
    """
    gpu_only: bool = True
    chunked: bool = True
    jobs: int = 0
    max_memory_gb: float | None = None
    strict: bool = False
    outdir: str | None = None
    topology: str | None = None
    torchtitan_config: str | None = None
    progress: bool | None = None
    verbose: bool = False
    report: ReportOptions = field(default_factory=ReportOptions)
    step_pattern: str | None = None
    isolate: bool = True
    quiet: InitVar[bool | None] = None
    full: InitVar[bool | None] = None

    def __post_init__(self, quiet, full):
        for name, value in renamed({"quiet": quiet, "full": full}, stacklevel=3).items():
            setattr(self, name, value)

    def check(self):
        """``UsageError`` for options that cannot work together (the CLI
        checks before ``run``, which never raises)."""
        if (self.report.global_batch is None) != (self.report.seq_len is None):
            raise UsageError("give both --global-batch and --seq-len (or --tokens-per-step)")
        if self.jobs < 0:
            raise UsageError(f"bad --jobs {self.jobs}: give a number of processes, or 0 for all cores")


RENAMED = {"quiet": ("progress", lambda quiet: False if quiet else None),
           "full": ("gpu_only", lambda full: not full)}
"""The last release's keywords, accepted for one more with a ``DeprecationWarning``: ``{old: (field,
value of the field for the old value)}`` (None: the field as it is)."""


def renamed(options: dict, stacklevel) -> dict:
    """``options`` with the keywords of ``RENAMED`` given (not None) in today's spelling, each warned
    about at the caller ``stacklevel`` frames up."""
    for old in [k for k, v in options.items() if k in RENAMED and v is not None]:
        new, value = RENAMED[old]
        warnings.warn(f"the epilogue's {old}=... is deprecated (removed in the next release): give "
                      f"{new}={value(True)!r} for {old}=True", DeprecationWarning, stacklevel=stacklevel + 1)
        v = value(options.pop(old))
        if v is not None:
            options[new] = v
    return {k: v for k, v in options.items() if k not in RENAMED}


def with_options(opt: EpilogueOptions, **options) -> EpilogueOptions:
    """``opt`` with the fields given as keywords changed: the epilogue's own, or its report's
    (``with_options(opt, gpu_only=False, charts=False)`` sets ``opt.report.charts``).  Raises ``TypeError``
    for a name that is neither.  The keywords of ``RENAMED`` (deprecated) are taken in today's spelling,
    with a ``DeprecationWarning`` naming the caller of ``run`` / ``streamtrace.open``."""
    options = renamed(options, stacklevel=3)
    own = {f.name for f in fields(EpilogueOptions)}
    rep = {k: options.pop(k) for k in list(options) if k not in own and k in {f.name for f in fields(ReportOptions)}}
    opt = replace(opt, **options)
    return replace(opt, report=replace(opt.report, **rep)) if rep else opt


def worker_count(opt: EpilogueOptions) -> int:
    """The worker processes: ``opt.jobs`` (0: every core), within ``opt.max_memory_gb``."""
    jobs = opt.jobs or os.cpu_count() or 1
    return max(1, min(jobs, int(opt.max_memory_gb / WORKER_GB))) if opt.max_memory_gb else jobs
