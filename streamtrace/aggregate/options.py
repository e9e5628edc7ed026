"""Options of ``streamtrace.aggregate.run.aggregate`` (a light module: the command line and
``report`` build them without importing the aggregation)."""
from __future__ import annotations

from dataclasses import dataclass

BUCKET_ROWS = 16_384       # communication kernels matched at a time (streamtrace.aggregate.collective_spill; 32,768
#                            took ~25 MB a bucket over the parent's level: its peak at 1,024 synthetic ranks 194 -> 176 MB)


@dataclass
class AggregateOptions:
    """Options of ``aggregate`` (the ``streamtrace aggregate`` flags).

    Attributes:
        iterations: only these iterations (list of int: the trace file's iteration, as analyze's
            ``iteration=N`` partitions); None (default): all.
        steps: only the kernels of these ProfilerStep numbers (tuple of int, ``ProfilerStep#N``; a list is
            made a tuple); None (default): all.
        jobs: worker processes (int); 0 (default) = all cores.
        time_alignment: ``"global"`` (default; one clock through ``baseTimeNanoseconds``) or
            ``"individual"`` (each rank from its own start); see ``streamtrace.aggregate.alignment``.
        clock_sync: ``None``/``"none"`` (default) or ``"collectives"`` (estimate each rank's clock
            offset, ns, from matched collective ends and subtract it).
        topology: a topology file or trace folder (str); None (default): the traces'
            ``distributedInfo.pg_config``, else a topology file beside the traces.
        torchtitan_config: a TorchTitan TOML config file of the job (str): its device mesh is the
            topology unless ``topology`` is given, and its batch, sequence length and model go into
            ``aggregate.json`` (``"train_config"``, ``streamtrace.topology.trainconfig``); None (default).
        force: aggregate folders that look like different jobs (different world sizes, one rank
            of one iteration twice, start times more than a day apart); default False: refuse.
        progress: progress bars over the ranks (reading the traces' metadata, then the tables; bool);
            None (default): only on a terminal.
        consecutive_kernel_delay_ns: the idle breakdown's threshold (int ns): a gap on a GPU stream
            shorter than this, not caused by a late launch, is kernel wait, a longer one other
            (HolisticTraceAnalysis' ``consecutive_kernel_delay``, effectively 30 us); default 30,000.
        collective_bucket_rows: communication kernels matched at a time (int >= 1; memory ~0.5 KB a
            row, ``streamtrace.aggregate.collective_spill``); default ``BUCKET_ROWS`` (16,384).
        critical_path: write ``critical_path.parquet`` and ``critical_path_summary.parquet``
            (``streamtrace.aggregate.critical_path``); default True.
        whatif: with the critical path, replay the step (``whatif.parquet`` with the report's candidate
            changes, and the ``whatif_*`` tables ``streamtrace whatif`` replays from:
            ``streamtrace.aggregate.whatif``); default True.
    """
    iterations: list | None = None
    steps: tuple | None = None
    jobs: int = 0
    time_alignment: str = "global"
    clock_sync: str | None = None
    topology: str | None = None
    torchtitan_config: str | None = None
    force: bool = False
    progress: bool | None = None
    consecutive_kernel_delay_ns: int = 30_000
    collective_bucket_rows: int = BUCKET_ROWS
    critical_path: bool = True
    whatif: bool = True

    def __post_init__(self):
        if self.steps is not None:            # one spelling: steps are a tuple in every options class
            self.steps = tuple(self.steps)
