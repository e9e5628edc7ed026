"""Stage 5, the report: Markdown + ``report.json`` (:mod:`~streamtrace.report.markdown`) and charts
(:mod:`~streamtrace.report.charts`, matplotlib) of an aggregated job; :func:`report` (``streamtrace.report(...)``) aggregates analysed folders first when needed
(:mod:`~streamtrace.report.run`).
"""
from .markdown import build_report, write_report
from .run import ReportOptions, report

__all__ = ["report", "ReportOptions", "write_report", "build_report"]
