"""Errors raised by streamtrace.  Every one of them carries a one-line message fit
for a user (the CLI prints it and exits 1); none should surface as a traceback."""
from __future__ import annotations


class StreamtraceError(Exception):
    """Base class: a problem with the user's input or options (CLI exit code 1)."""


class TraceError(StreamtraceError):
    """A trace file that cannot be read: truncated, corrupt gzip, invalid JSON or UTF-8.

    Attributes: ``path`` (str), ``offset`` (byte offset in the uncompressed
    stream, or None), ``events`` (complete events read before the problem).
    """

    def __init__(self, path, message, offset=None, events=None):
        self.path = str(path)
        self.message = message
        self.offset = offset
        self.events = events
        where = f" at byte {offset:,}" if offset is not None else ""
        super().__init__(f"{self.path}: {message}{where}")

    def __reduce__(self):   # picklable, so it crosses process pools and dask intact
        return (type(self), (self.path, self.message, self.offset, self.events))


class TruncatedTraceError(TraceError):
    """The file ends before its JSON document does (for example a killed job)."""


class RankConflictError(StreamtraceError):
    """Two input files claim the same rank in the same iteration."""
