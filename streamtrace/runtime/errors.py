"""Errors raised by streamtrace, and the exit code of each in the ``streamtrace`` command.

Every one carries a one-line message fit for a user (the CLI prints ``streamtrace: error:
<message>`` and exits with the error's ``exit_code``); none should surface
as a traceback.  Code that must react to a kind of problem catches its class, never its text.

=============================  ====  ===================================================
class                          exit  meaning
=============================  ====  ===================================================
``StreamtraceError``      1     a problem with the user's input or options
``UsageError``            2     the command line itself is wrong (as argparse's)
``TraceError``            1     a trace file that cannot be read
``TruncatedTraceError``   1     a trace file that ends before its document does
``RankConflictError``     1     two inputs claim the same rank in one iteration
``UnknownRankError``      1     a trace whose rank cannot be told
``TopologyError``         1     groups or sizes that do not make a parallel topology
``OutputError``           1     an output path that cannot be written (read-only, full
                                     disk, a folder where a file is wanted, one of the inputs)
``DataError``             1     a file streamtrace wrote earlier (``summary.json``, a
                                     Parquet table, ``aggregate.json``) that is damaged or missing
=============================  ====  ===================================================
"""
from __future__ import annotations

#: exit codes of the ``streamtrace`` command
EXIT_OK = 0
EXIT_INPUT = 1
EXIT_USAGE = 2


class StreamtraceError(Exception):
    """Base class: a problem with the user's input or options (CLI exit code 1)."""
    exit_code = EXIT_INPUT


class UsageError(StreamtraceError):
    """A command line that cannot be run as given: a missing argument, a malformed value
    (CLI exit code 2, as argparse's own usage errors)."""
    exit_code = EXIT_USAGE


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


class UnknownRankError(StreamtraceError):
    """A trace carries no rank: no ``distributedInfo.rank``, no rank in its file name, no entry
    in the rank map.  Attribute ``path``."""

    def __init__(self, path, message=None):
        self.path = str(path)
        super().__init__(message or f"{path}: cannot tell its rank (no distributedInfo.rank, no rank in the file "
                                    f"name); pass --rank-map FILE")

    def __reduce__(self):
        return (type(self), (self.path, str(self)))


class TopologyError(StreamtraceError, ValueError):
    """Parallel groups, sizes or a rank order that do not make a topology (also a ValueError,
    which the training-side helpers of ``streamtrace.topology.capture`` document)."""


class PathError(StreamtraceError):
    """An error about one file or folder: attributes ``path`` and ``message``; the text is
    ``"<path>: <message>"``; picklable (it crosses from worker processes)."""

    def __init__(self, path, message):
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")

    def __reduce__(self):
        return (type(self), (self.path, self.message))


class OutputError(PathError):
    """An output path that cannot be written: a read-only folder or file system, a full disk, a
    folder where a file is wanted (or the reverse), a path under a plain file, one of the
    command's own inputs.  Attributes ``path`` (the output the user named) and ``message``."""


class DataError(PathError):
    """A file an earlier streamtrace command wrote and this one reads (``summary.json``,
    ``aggregate.json``, a Parquet part or table) that is damaged, missing or of another shape.
    Attributes ``path`` (that file) and ``message``."""
