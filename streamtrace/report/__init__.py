"""Stage 5, the report: Markdown + ``report.json`` (:mod:`~streamtrace.report.markdown`) and charts
(:mod:`~streamtrace.report.charts`, matplotlib) of an aggregated job; :func:`report` (also callable
as ``streamtrace.report(...)``) aggregates analysed folders first when needed
(:mod:`~streamtrace.report.run`).
"""
import sys
import types

from .markdown import build_report, write_report
from .run import ReportOptions, report

__all__ = ["report", "ReportOptions", "write_report", "build_report"]


class _ReportModule(types.ModuleType):
    """``streamtrace.report`` is this package and, called, :func:`report`."""

    def __call__(self, *args, **kwargs):
        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _ReportModule
