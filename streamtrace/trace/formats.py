"""The input formats, each a ``TraceSource`` decided once per file (when
``identify`` reads it: ``TraceFile.source``) and asked by every stage,
instead of each stage testing the file itself: a Kineto / Chrome trace-event JSON file (``KINETO``)
or an Nsight Systems SQLite export (``NSYS``).  A stage that does the work differently per format
keeps one table keyed by source (merge: ``streamtrace.merge.line.MERGERS``); a new format is a
source here, its reader in ``trace/`` and one entry in each such table."""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.errors import StreamtraceError

__all__ = ["TraceSource", "KINETO", "NSYS", "SOURCES", "one_source"]


@dataclass(frozen=True)
class TraceSource:
    """One input format.

    Attributes:
        name: its short name (``"kineto"``, ``"nsys"``).
        files: what several such files are called in messages.
        rank_per_file: the file is one rank's trace (its rank told when it is identified); False: the
            file holds several ranks, its processes', told only when it is read (an export) -- a rank
            selection or a rank claimed twice is then decided per process by the stage that reads it.
        json: the file is trace-event JSON (read by ``TraceReader``; it may
            be a trace merged already, by streamtrace or a peer tool).
    """
    name: str
    files: str
    rank_per_file: bool
    json: bool


KINETO = TraceSource("kineto", "Kineto traces", rank_per_file=True, json=True)
NSYS = TraceSource("nsys", "Nsight Systems exports", rank_per_file=False, json=False)
SOURCES = (KINETO, NSYS)


def one_source(files) -> TraceSource:
    """The one source of ``files`` (``TraceFile`` s, at least one); raises ``StreamtraceError``
    naming the first file of another source when they mix (their ranks cannot share one output)."""
    first = files[0].source
    if any(tf.source is not first for tf in files):
        export = next(tf for tf in files if tf.source is not KINETO)
        raise StreamtraceError(f"{export.path}: {NSYS.files} and {KINETO.files} cannot be merged together")
    return first
