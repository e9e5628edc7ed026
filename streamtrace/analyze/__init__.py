"""Stage 3b, ``streamtrace analyze``: classified kernels, call trees and overlap metrics per rank,
as Parquet + JSON.

``analyze`` (``streamtrace.analyze(...)``) runs the files of a job as tasks
(``run``); one file (``file``) holds one or more
ranks, each analysed in bounded memory (``rank``): GPU events as compact
columns (``gpu``), CPU tracks one at a time
(``tracks``; on several cores: ``trackfork``),
step/phase/micro-batch (``phases``, rules in
``classify`` and ``patterns``), collectives
(``comm``) and the metrics (``metrics``).

The names are imported on first use (``streamtrace.runtime.stage``), so that ``outputs`` (how
``streamtrace.load`` reads an analysis folder) loads neither numba nor the analysis.
"""
from ..runtime.stage import stage_package

stage_package(__name__, lazy={"analyze": "run", "AnalyzeOptions": "options"})      # called, the package is its function
