"""Stage ``diff``: what changed between two runs (``streamtrace diff``), in one place.

``inputs`` resolves the two sides (analysed folders, or traces analysed on
the way) and their options (``DiffOptions``); ``compare`` compares kernels,
CPU ops, groups and ranks into tables; ``markdown`` writes ``diff.md`` and its
chart.  ``diff`` (``streamtrace.diff(...)``) does all three.  The names are imported on first use
(``streamtrace.runtime.stage``), so that ``outputs`` (``streamtrace.load``)
loads no analysis.
"""
from ...runtime.stage import stage_package

stage_package(__name__, lazy={"diff": "markdown", "DiffOptions": "inputs"})      # called, the package is its function
