"""streamtrace: stream PyTorch profiler (Kineto) traces of multi-rank training jobs in flat memory --
merge them for Perfetto, validate them, analyse them, aggregate and report the whole job.

The Python API, after a plain ``import streamtrace`` (each name is imported on first use, so
``import streamtrace`` itself is cheap and loads neither numba nor pyarrow):

* ``merge`` / ``MergeOptions`` -- many rank traces -> one Perfetto-loadable trace;
* ``validate`` -- check a trace for what Perfetto's importer relies on;
* ``analyze`` / ``AnalyzeOptions`` -- per-rank kernels, call trees, overlap, as Parquet;
* ``aggregate`` / ``AggregateOptions`` -- the whole job's tables;
* ``report`` / ``ReportOptions`` -- Markdown, JSON and charts;
* ``epilogue`` (``streamtrace.epilogue.run(RUN_DIR)``) -- all of it after a training job;
* ``diff`` / ``DiffOptions`` -- what changed between two runs (kernels, CPU ops, groups, ranks);
* ``open`` -- rank traces analysed and aggregated into a cache (reused when unchanged), loaded;
* ``load`` -- an output folder (analysis, aggregate, epilogue run, diff) as pyarrow / pandas / polars tables;
* ``capture`` -- the training side (profiler schedule, trace handler, topology);
* ``TraceReader``, ``TraceWriter``, ``discover`` -- streaming read and write;
* the errors of ``streamtrace.runtime.errors``.

Every stage is a plain function taking its options dataclass; a stage that writes an output folder
returns it as ``load`` does (``analyze`` an ``Analysis``, ``aggregate`` an ``Aggregate``, ``report`` a
``Report``, ``diff`` a ``Diff``; ``merge`` a list of ``MergeResult``), each also a read-only mapping over
``.summary``, the dict these functions returned before (docs/api.md).  ``streamtrace.merge``,
``streamtrace.validate``, ``streamtrace.analyze``, ``streamtrace.aggregate``, ``streamtrace.report`` and ``streamtrace.diff`` are the
stages' packages, callable as their functions (``streamtrace.runtime.stage.StagePackage``), so that
``import streamtrace.merge.run as m`` and ``from streamtrace.merge import MergeOptions`` work as usual.  The package's
stages, bottom up:
``kernels`` (numba), ``runtime``, ``trace``,
``events``, ``topology``, ``merge`` and
``analyze``, ``aggregate``, ``report``, then
``epilogue`` and ``cli``; imports only go down.
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0"

from .runtime.errors import (DataError, OutputError, RankConflictError, StreamtraceError,  # noqa: E402
                             TopologyError, TraceError, TruncatedTraceError, UnknownRankError, UsageError)

# public name -> (module, attribute; None: the module itself)
_API = {
    "TraceReader": ("streamtrace.trace.reader", "TraceReader"),
    "TraceWriter": ("streamtrace.trace.writer", "TraceWriter"),
    "discover": ("streamtrace.trace.discover", "discover"),
    "validate": ("streamtrace.validate", None),
    "ValidateOptions": ("streamtrace.validate", "ValidateOptions"),
    "merge": ("streamtrace.merge", None),
    "MergeOptions": ("streamtrace.merge", "MergeOptions"),
    "analyze": ("streamtrace.analyze", None),
    "AnalyzeOptions": ("streamtrace.analyze", "AnalyzeOptions"),
    "aggregate": ("streamtrace.aggregate", None),
    "AggregateOptions": ("streamtrace.aggregate", "AggregateOptions"),
    "report": ("streamtrace.report", None),
    "ReportOptions": ("streamtrace.report", "ReportOptions"),
    "epilogue": ("streamtrace.epilogue", None),
    "EpilogueOptions": ("streamtrace.epilogue", "EpilogueOptions"),
    "open": ("streamtrace.epilogue.notebook", "open_job"),
    "capture": ("streamtrace.topology.capture", None),
    "topology": ("streamtrace.topology", None),
    "diff": ("streamtrace.report.diff", None),
    "DiffOptions": ("streamtrace.report.diff", "DiffOptions"),
}

__all__ = [*_API, "load", "StreamtraceError", "UsageError", "TraceError", "TruncatedTraceError", "RankConflictError",
           "UnknownRankError", "TopologyError", "DataError", "OutputError", "__version__"]


def __getattr__(name):
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'streamtrace' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))


#: the modules that implement a kind of output folder (streamtrace.events.load.OutputKind); report.outputs holds
#: the report's and the epilogue's
_KINDS = ("streamtrace.analyze.outputs", "streamtrace.aggregate.folder", "streamtrace.report.outputs",
          "streamtrace.report.diff.outputs")


def load(path):
    """Open the streamtrace output folder ``path`` as tables: an analysis (``analyze -o``), an aggregate,
    an epilogue's output, a report, a diff (``streamtrace.events.load``; each kind implemented by
    its stage, registered here first).

    Parameters
    ----------
    path : str or Path
        The folder.

    Returns
    -------
    streamtrace.events.load.Outputs
        Its kind's reader: ``summary`` (dict), ``tables()``, ``table(name)`` (pyarrow), ``to_pandas(name)``,
        ``to_polars(name)``.

    Raises
    ------
    StreamtraceError
        When ``path`` is none of these folders, or its marker file cannot be read.
    """
    for module in _KINDS:
        importlib.import_module(module)
    from .events.load import load as load_folder
    return load_folder(path)
