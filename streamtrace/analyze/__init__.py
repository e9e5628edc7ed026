"""Stage 3b, ``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank,
as Parquet + JSON.

:func:`analyze` (``streamtrace.analyze(...)``) runs the files of a job as tasks
(:mod:`~streamtrace.analyze.run`); one file (:mod:`~streamtrace.analyze.file`) holds one or more
ranks, each analysed in bounded memory (:mod:`~streamtrace.analyze.rank`): GPU events as compact
columns (:mod:`~streamtrace.analyze.gpu`), CPU tracks one at a time
(:mod:`~streamtrace.analyze.tracks`; on several cores: :mod:`~streamtrace.analyze.trackfork`),
step/phase/micro-batch (:mod:`~streamtrace.analyze.phases`, rules in
:mod:`~streamtrace.analyze.classify` and :mod:`~streamtrace.analyze.patterns`), collectives
(:mod:`~streamtrace.analyze.comm`) and the metrics (:mod:`~streamtrace.analyze.metrics`).

The names are imported on first use (:mod:`streamtrace.runtime.stage`), so that :mod:`~streamtrace.analyze.outputs` (how
``streamtrace.load`` reads an analysis folder) loads neither numba nor the analysis.
"""
from ..runtime.stage import stage_package

stage_package(__name__, lazy={"analyze": "run", "AnalyzeOptions": "options"})      # called, the package is its function
