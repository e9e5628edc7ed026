"""What ``streamtrace.merge`` returns for each trace it writes: ``MergeResult``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..events.load import SummaryMapping


@dataclass(frozen=True, eq=False)
class MergeResult(SummaryMapping):
    """One merged trace ``merge_files`` wrote (merge writes a trace, not an
    output folder: ``streamtrace.load`` does not read it; open it in Perfetto or with
    ``TraceReader``).  Immutable, as the other stages' results.

    Attributes:
        summary: the dict merge returned before it returned this object (``output``, ``ranks``,
            ``iteration``, ``events_in``, ``events_out``, ``bytes_in``, ``bytes_out``, ``seconds``,
            ``warnings``, ``validation``, ...: ``merge_files``).

    For the callers of that dict the object is also a read-only mapping over ``summary``:
    ``res["events_out"]``, ``res.get(...)``, ``==`` a dict compares ``summary``."""
    summary: dict

    @property
    def output(self) -> Path:
        """The merged trace written."""
        return Path(self.summary["output"])

    def __repr__(self):
        return (f"<streamtrace merged trace {self.summary.get('output')}: {len(self.summary.get('ranks', ()))} "
                f"ranks, {self.summary.get('events_out')} events>")
