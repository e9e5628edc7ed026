"""The report folder (``streamtrace report -o DIR`` of analysed folders, without the aggregate's
tables) as a kind of output folder (:class:`~streamtrace.events.load.OutputKind`)."""
from __future__ import annotations

from ..events.load import Outputs, register


@register
class Report(Outputs):
    """``streamtrace report -o DIR``: no tables; ``summary`` is ``report.json``."""
    kind, marker, precedence = "report", "report.json", 4

    @classmethod
    def owns(cls, name: str) -> bool:
        """What a report writes at the top of its folder: ``report.json``, ``charts/``, ``*.md``."""
        return name in (cls.marker, "charts") or name.endswith(".md")

    def tables(self):
        return []
