"""Stage 5, the report: Markdown + ``report.json`` (:mod:`~streamtrace.report.markdown`) and charts
(:mod:`~streamtrace.report.charts`, matplotlib) of an aggregated job; :func:`report`
(``streamtrace.report(...)``) aggregates analysed folders first when needed (:mod:`~streamtrace.report.run`);
its options :class:`ReportOptions` (:mod:`~streamtrace.report.options`).

The names are imported on first use (:mod:`streamtrace.runtime.stage`), so that
``streamtrace.report.options`` (what the epilogue and the command line need) does not load the report itself.
"""
from ..runtime.stage import stage_package

stage_package(__name__, lazy={"report": "run", "ReportOptions": "options",          # called: report(...)
                              "write_report": "markdown", "build_report": "markdown"})
