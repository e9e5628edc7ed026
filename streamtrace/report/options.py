"""The report's options (:class:`ReportOptions`), in a module of their own so that the epilogue and
the command line can build them without importing the report (matplotlib, pyarrow)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReportOptions:
    """Options of :func:`report` (the ``streamtrace report`` flags).

    Attributes:
        name: the run's name in the report and the Markdown file's name (str); None (default): the
            job's, the folder that holds its traces (above ``iteration_N/``, ``tb/``, ...).
        tokens_per_step: tokens per training step (int), for tokens/s; or give ``global_batch``
            (sequences) and ``seq_len`` (tokens per sequence).  None (default): no throughput.
        global_batch: global batch size in sequences (int), with ``seq_len``; None.
        seq_len: sequence length in tokens (int), with ``global_batch``; None.
        charts: render the charts into ``charts/`` (bool, default True).
        chart_formats: their file formats, ``png`` and/or ``svg`` (tuple, default ``("png",)``).
        jobs: processes drawing the charts (int); 0 (default) = all cores.
        chart_ranks: ranks that get per-rank charts (sorted list of int); None (default): all up
            to 8, else the first PP group's stages and the top straggler.
        progress: a progress bar over the charts (bool); None (default): only on a terminal.
    """
    name: str | None = None
    tokens_per_step: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    charts: bool = True
    chart_formats: tuple = ("png",)
    jobs: int = 0
    chart_ranks: list | None = None
    progress: bool | None = None
