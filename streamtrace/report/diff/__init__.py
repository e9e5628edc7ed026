"""Stage ``diff``: what changed between two runs (``streamtrace diff``), in one place.

:mod:`~streamtrace.report.diff.inputs` resolves the two sides (analysed folders, or traces analysed on
the way) and their options (:class:`DiffOptions`); :mod:`~streamtrace.report.diff.compare` compares kernels,
CPU ops, groups and ranks into tables; :mod:`~streamtrace.report.diff.markdown` writes ``diff.md`` and its
chart.  :func:`diff` (``streamtrace.diff(...)``) does all three.  The names are imported on first use
(:mod:`streamtrace.runtime.stage`), so that :mod:`~streamtrace.report.diff.outputs` (``streamtrace.load``)
loads no analysis.
"""
from ...runtime.stage import stage_package

stage_package(__name__, lazy={"diff": "markdown", "DiffOptions": "inputs"})      # called, the package is its function
