"""Stage 5, the report: Markdown + ``report.json`` (``markdown``) and charts
(``charts``, matplotlib) of an aggregated job; ``report``
(``streamtrace.report(...)``) aggregates analysed folders first when needed (``run``);
its options ``ReportOptions`` (``options``).

The names are imported on first use (``streamtrace.runtime.stage``), so that
``streamtrace.report.options`` (what the epilogue and the command line need) does not load the report itself.
"""
from ..runtime.stage import stage_package

stage_package(__name__, lazy={"report": "run", "ReportOptions": "options",          # called: report(...)
                              "write_report": "markdown", "build_report": "markdown"})
