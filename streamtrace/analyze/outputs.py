"""The analysis folder (``streamtrace analyze -o DIR``) as a kind of output folder
(:class:`~streamtrace.events.load.OutputKind`): ``summary.json``, ``kernels/`` and ``ops/``, and where
written ``cpu_collectives/`` (a CPU-only rank's gloo collectives), ``op_perf/`` and ``kernel_perf/``
(``analyze --op-perf``), ``cuda_sync/`` (newer Kineto's GPU sync events: :mod:`streamtrace.analyze.cuda_sync`)."""
from __future__ import annotations

from ..events.load import Outputs, read_dataset, register

#: the analysis folder's datasets (one Parquet file per iteration and rank), in the order ``tables()`` lists them
TABLES = ("kernels", "ops", "cpu_collectives", "op_perf", "kernel_perf", "cuda_sync")


@register
class Analysis(Outputs):
    """``streamtrace analyze -o DIR``: ``kernels`` and ``ops`` (with ``iteration``, ``rank`` int64
    columns, rows in analyze's order), and ``cpu_collectives``, ``op_perf``, ``kernel_perf``,
    ``cuda_sync`` where written; ``summary`` is ``summary.json``."""
    kind, marker, precedence = "analysis", "summary.json", 3

    @classmethod
    def owns(cls, name) -> bool:
        """The top-level entries of an analysis folder (old spill folders included)."""
        return name in (cls.marker, *TABLES) or name.startswith(".streamtrace-")

    def tables(self):
        return [n for n in TABLES if (self.path / n).is_dir()]

    def _read(self, name):
        return read_dataset(self.path, name)
