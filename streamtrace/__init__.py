"""streamtrace: stream PyTorch profiler (Kineto) traces of multi-rank training jobs in flat memory --
merge them for Perfetto, validate them, analyse them, aggregate and report the whole job.

The Python API, after a plain ``import streamtrace`` (each name is imported on first use, so
``import streamtrace`` itself is cheap and loads neither numba nor pyarrow):

* :func:`merge` / :class:`MergeOptions` -- many rank traces -> one Perfetto-loadable trace;
* :func:`validate` -- check a trace for what Perfetto's importer relies on;
* :func:`analyze` / :class:`AnalyzeOptions` -- per-rank kernels, call trees, overlap, as Parquet;
* :func:`aggregate` / :class:`AggregateOptions` -- the whole job's tables;
* :func:`report` / :class:`ReportOptions` -- Markdown, JSON and charts;
* :mod:`epilogue` (``streamtrace.epilogue.run(RUN_DIR)``) -- all of it after a training job;
* :func:`diff` / :class:`DiffOptions` -- what changed between two runs (kernels, CPU ops, groups, ranks);
* :func:`load` -- an output folder (analysis, aggregate, epilogue run, diff) as pyarrow / pandas / polars tables;
* :mod:`capture` -- the training side (profiler schedule, trace handler, topology);
* :class:`TraceReader`, :class:`TraceWriter`, :func:`discover` -- streaming read and write;
* the errors of :mod:`streamtrace.runtime.errors`.

Every stage is a plain function taking its options dataclass: ``streamtrace.merge``,
``streamtrace.validate``, ``streamtrace.analyze``, ``streamtrace.aggregate``, ``streamtrace.report`` and
``streamtrace.diff`` stay those functions after their packages are imported (``from streamtrace.merge import
MergeOptions`` reads the package; ``importlib.import_module("streamtrace.merge")`` gives it).  The package's
stages, bottom up:
:mod:`~streamtrace.kernels` (numba), :mod:`~streamtrace.runtime`, :mod:`~streamtrace.trace`,
:mod:`~streamtrace.events`, :mod:`~streamtrace.topology`, :mod:`~streamtrace.merge` and
:mod:`~streamtrace.analyze`, :mod:`~streamtrace.job`, :mod:`~streamtrace.report`, then
:mod:`~streamtrace.epilogue` and :mod:`~streamtrace.cli`; imports only go down.
"""
from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.2.0"

from .runtime.errors import (DataError, OutputError, RankConflictError, StreamtraceError,  # noqa: E402
                             TopologyError, TraceError, TruncatedTraceError, UnknownRankError, UsageError)

# public name -> (module, attribute; None: the module itself)
_API = {
    "TraceReader": ("streamtrace.trace.reader", "TraceReader"),
    "TraceWriter": ("streamtrace.trace.writer", "TraceWriter"),
    "discover": ("streamtrace.trace.discover", "discover"),
    "validate": ("streamtrace.validate", "validate"),
    "ValidateOptions": ("streamtrace.validate", "ValidateOptions"),
    "merge": ("streamtrace.merge", "merge"),
    "MergeOptions": ("streamtrace.merge", "MergeOptions"),
    "analyze": ("streamtrace.analyze", "analyze"),
    "AnalyzeOptions": ("streamtrace.analyze", "AnalyzeOptions"),
    "aggregate": ("streamtrace.job", "aggregate"),
    "AggregateOptions": ("streamtrace.job", "AggregateOptions"),
    "report": ("streamtrace.report", "report"),
    "ReportOptions": ("streamtrace.report", "ReportOptions"),
    "epilogue": ("streamtrace.epilogue", None),
    "EpilogueOptions": ("streamtrace.epilogue", "EpilogueOptions"),
    "capture": ("streamtrace.topology.capture", None),
    "topology": ("streamtrace.topology", None),
    "load": ("streamtrace.events.load", "load"),
    "diff": ("streamtrace.report.diff", "diff"),
    "DiffOptions": ("streamtrace.report.diff", "DiffOptions"),
}

__all__ = [*_API, "StreamtraceError", "UsageError", "TraceError", "TruncatedTraceError", "RankConflictError",
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


#: the stages whose function has the name of a package (imported, a package becomes its parent's attribute)
_FUNCTIONS = {name for name, (module, attr) in _API.items() if attr == name}


class _Package(types.ModuleType):
    """This package's module type: Python's import system sets a package's attribute to each
    submodule it imports (``streamtrace.merge`` = the package ``streamtrace/merge/``); here a stage's
    name stays its function (:data:`_FUNCTIONS`), read through :func:`__getattr__`."""

    def __setattr__(self, name, value):
        if name in _FUNCTIONS and isinstance(value, types.ModuleType):
            self.__dict__.pop(name, None)
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
