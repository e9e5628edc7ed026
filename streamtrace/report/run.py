"""``streamtrace report`` as a function: aggregate analysed folders first when needed, then write
the report (:func:`streamtrace.report.markdown.write_report`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..job.aggregate import AggregateOptions, aggregate
from .markdown import write_report


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


def report(dirs, outdir=None, opt: ReportOptions | None = None, aggregate_opt: AggregateOptions | None = None,
           log=None) -> dict:
    """Write the report of an aggregate folder (``dirs`` = one folder holding ``aggregate.json``), or
    of analysed folders, which are aggregated first (into ``outdir``, default
    ``streamtrace-report``, with ``aggregate_opt``).  The report goes into ``outdir`` (default:
    the aggregate folder).  Returns the report dict, its ``files`` first the Markdown, then
    ``report.json``, then the charts; ``aggregated``: aggregate's result when it ran.
    Raises :class:`~streamtrace.errors.StreamtraceError` on bad input."""
    opt = opt or ReportOptions()
    dirs = [str(d) for d in ([dirs] if isinstance(dirs, (str, Path)) else dirs)]
    agg = None
    if len(dirs) == 1 and (Path(dirs[0]) / "aggregate.json").is_file():
        aggdir = dirs[0]
    else:
        aggdir = outdir or "streamtrace-report"
        agg = aggregate(dirs, aggdir, aggregate_opt or AggregateOptions())
    rep = write_report(aggdir, outdir, opt.name, opt.tokens_per_step, opt.global_batch, opt.seq_len,
                       charts=opt.charts, chart_ranks=opt.chart_ranks, log=log, progress=opt.progress,
                       chart_formats=opt.chart_formats, jobs=opt.jobs)
    rep["aggregated"] = agg
    return rep
