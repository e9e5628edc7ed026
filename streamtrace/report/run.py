"""``streamtrace report`` as a function: aggregate analysed folders first when needed, then write
the report (``streamtrace.report.markdown.write_report``)."""
from __future__ import annotations

import os
from pathlib import Path

from ..aggregate.folder import Aggregate, owned
from ..aggregate.options import AggregateOptions
from ..runtime.errors import StreamtraceError
from ..runtime.files import output_folder
from .efficiency import EfficiencyOptions
from .markdown import write_report
from .options import ReportOptions
from .outputs import Report

__all__ = ["report", "ReportOptions", "EfficiencyOptions"]


def report(dirs, outdir=None, opt: ReportOptions | None = None, aggregate_opt: AggregateOptions | None = None,
           log=None) -> Report:
    """Write the report of an aggregate folder (``dirs`` = one folder holding ``aggregate.json``), or
    of analysed folders, which are aggregated first (into ``outdir``, default
    ``streamtrace-report``, with ``aggregate_opt``).  The report goes into ``outdir`` (default:
    the aggregate folder).

    The report is one unit (``output_folder``): into a folder of
    its own, that folder is replaced at the end (with the aggregate it made, if any); into the
    aggregate folder, or a folder holding it (the epilogue's), the folder is replaced by a copy
    (hard links) of everything but the earlier report, plus the new one.  An interrupted or
    failed run leaves the folder as it was.

    Parameters
    ----------
    dirs : str, Path or list of them
        One aggregate folder, or analysis folders (aggregated first).
    outdir : str or Path, optional
        Where the report goes (see above).
    opt : ReportOptions, optional
        The report's options (default ``ReportOptions()``).
    aggregate_opt : AggregateOptions, optional
        The options of the aggregation, when ``dirs`` are analysis folders.
    log : callable, optional
        A function taking one line of progress, or None.

    Returns
    -------
    streamtrace.report.outputs.Report
        The report folder (``OutputKind``; ``streamtrace.load(outdir)``
        gives the aggregate's tables when the folder holds them).  Its ``summary`` is the report
        dict, also read through the object: ``rep["files"]`` (first the Markdown, then
        ``report.json``, then the charts), ``rep["aggregated"]`` (aggregate's ``aggregate.json``
        dict when it ran, else None).

    Raises
    ------
    StreamtraceError
        On bad input (``DataError`` naming a damaged file).
    OutputError
        When the output cannot be written.
    """
    opt = opt or ReportOptions()
    dirs = [str(d) for d in ([dirs] if isinstance(dirs, (str, Path)) else dirs)]
    kw = dict(opt=opt, log=log)
    if not aggregates(dirs):
        aggdir = Path(dirs[0])
        out = Path(outdir or aggdir)
        if _holds(out, aggdir):               # add the report to a folder it does not own
            with output_folder(out, carry=_not_report) as stage:
                rep = write_report(aggdir, stage, final=out, **kw)
        else:
            with output_folder(out, owned=owned, inputs=[aggdir]) as stage:
                rep = write_report(aggdir, stage, final=out, **kw)
        rep["aggregated"] = None
        return Report.of(out, rep)
    out = Path(outdir or "streamtrace-report")
    from ..aggregate.run import aggregate_into     # (numba kernels: only when it aggregates)
    with output_folder(out, owned=owned, inputs=dirs) as stage:
        agg = aggregate_into(dirs, stage, aggregate_opt or AggregateOptions())
        rep = write_report(stage, stage, final=out, shown=out, **kw)
    rep["aggregated"] = agg
    return Report.of(out, rep)


def aggregates(dirs) -> bool:
    """Whether ``report`` of ``dirs`` (folders, str or Path) aggregates them first: unless
    they are one aggregate folder (holding ``aggregate.json``)."""
    dirs = [dirs] if isinstance(dirs, (str, Path)) else list(dirs)
    try:
        return not (len(dirs) == 1 and (Path(dirs[0]) / Aggregate.marker).is_file())
    except OSError as e:                   # a folder that cannot be read: one line naming it
        raise StreamtraceError(f"{dirs[0]}: cannot read the folder ({e.strerror or e})") from None


def _holds(folder: Path, inner: Path) -> bool:
    """``inner`` is ``folder`` or inside it."""
    a, b = os.path.realpath(folder), os.path.realpath(inner)
    return a == b or b.startswith(a.rstrip(os.sep) + os.sep)


def _not_report(name: str) -> bool:
    """What a report keeps of the folder it writes into: all but an earlier report."""
    return not Report.owns(name)
