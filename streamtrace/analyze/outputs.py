"""The analysis folder (``streamtrace analyze -o DIR``) as a kind of output folder
(:class:`~streamtrace.events.load.OutputKind`): ``summary.json``, ``kernels/`` and ``ops/``."""
from __future__ import annotations

from ..events.load import Outputs, read_dataset, register


@register
class Analysis(Outputs):
    """``streamtrace analyze -o DIR``: ``kernels`` and ``ops`` (with ``iteration``, ``rank`` int64
    columns, rows in analyze's order); ``summary`` is ``summary.json``."""
    kind, marker, precedence = "analysis", "summary.json", 3

    @classmethod
    def owns(cls, name) -> bool:
        """The top-level entries of an analysis folder (old spill folders included)."""
        return name in (cls.marker, "kernels", "ops") or name.startswith(".streamtrace-")

    def tables(self):
        return [n for n in ("kernels", "ops") if (self.path / n).is_dir()]

    def _read(self, name):
        return read_dataset(self.path, name)
