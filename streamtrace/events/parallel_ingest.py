"""One big trace read by several processes (``analyze --jobs N`` on one file): byte ranges of
its ``traceEvents`` (``streamtrace.trace.ranges``) parsed by worker processes, each into its
own store, then seen as one store in file order (``MergedStore``)
with one string table.  The result equals ``streamtrace.events.ingest.ingest`` on the whole
file (tests/unit/events/test_parallel_ingest.py)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from ..runtime.errors import TraceError
from ..runtime.files import remove_quietly
from ..runtime.parallel import pool
from ..trace.ranges import RANGES_PER_JOB, iter_ranges, likely_ranges, prove_range
from ..trace.source import InflateBoundError, plain_copy
from .columns import StringTable
from .ingest import ingest
from .store import CHUNK_EVENTS, MemoryStore, MergedStore, SpillStore

@dataclass(frozen=True)
class IngestSettings:
    """How every range of one trace is read: ``gpu_cats`` (the Kineto categories stored as GPU
    events, see ``ingest``), ``salvage`` (keep the complete events
    of a truncated file), ``spill_dir`` (None: blocks kept in memory; else each range spills to
    its own folder inside it) and ``chunk_events`` (rows per stored block)."""
    gpu_cats: frozenset
    salvage: bool = False
    spill_dir: str | None = None
    chunk_events: int = CHUNK_EVENTS


@dataclass(frozen=True)
class RangeTask:
    """One worker's range: bytes ``byte_range`` of the plain trace ``path``; ``folder`` its spill
    folder (or None); ``exact``: a guessed range, which must end exactly on an event boundary;
    ``first``: the range starts the array (a later one follows a comma, so it must hold an event)."""
    path: str
    byte_range: tuple
    settings: IngestSettings
    folder: str | None = None
    exact: bool = False
    first: bool = True


@dataclass
class RangeResult:
    """What a worker sends back: ``blocks`` (``{key: [block reference]}``, see
    ``export``), its string table's ``strings``, its
    collective-args rows, the reader's warnings and the complete events dropped for their time
    (``reader.unusable_times``, see ``ingest``)."""
    blocks: dict
    strings: list
    comm_rows: list
    warnings: list
    unusable_times: int = 0
    negative_durations: int = 0


@dataclass
class SplitIngest:
    """What ``ingest_parallel`` read: the columns as one store, the shared string
    table, collective-args rows, top-level metadata, reader warnings, and ``how`` the
    ranges were found (``"guessed"``: ``guess_ranges``, all
    proven; ``"scanned"``: the guess was wrong somewhere,
    ``iter_ranges``' exact scan)."""
    store: MergedStore
    table: StringTable
    comm_rows: list
    metadata: dict
    warnings: list
    how: str
    unusable_times: int = 0      # complete events dropped for their time, summed over the ranges
    negative_durations: int = 0  # complete events dropped for a negative dur, summed over the ranges


def ingest_range(task: RangeTask) -> RangeResult:
    """Worker: the columns of one byte range into its own store.
    Raises ``TraceError`` when ``task.exact`` and the range is not a whole number of
    events that the ``]`` appended to it ends exactly, and when a range after a comma holds
    no event (a trailing comma in the array)."""
    s = task.settings
    store = SpillStore(task.folder, s.chunk_events) if task.folder else MemoryStore(s.chunk_events)
    table, comm_rows, reader = ingest(task.path, store, s.gpu_cats, s.salvage and not task.exact,
                                      byte_range=task.byte_range)
    prove_range(reader, task.path, task.byte_range, task.first, task.exact)
    return RangeResult(store.export(), table.strings, comm_rows, reader.warnings, reader.unusable_times,
                       reader.negative_durations)


def ingest_parallel(path, tmpdir, jobs: int, settings: IngestSettings, while_parsing=None) -> SplitIngest | None:
    """Parse one big trace with ``jobs`` worker processes (byte ranges in file order,
    about ``RANGES_PER_JOB`` per worker).  The ranges are first
    guessed (``guess_ranges``, no pass over the file) and parsed;
    each one must parse to exactly its end, which proves the next one's start (see
    ``streamtrace.trace.ranges``).  If one does not, that work is dropped and the ranges come
    from the exact scanner (``iter_ranges``, each handed out as
    soon as the scan has found its end).  A gzip input is decompressed to a temporary file in
    ``tmpdir`` first.

    Returns a ``SplitIngest`` equivalent to ``ingest`` on
    the whole file, or None when the file cannot be read in byte ranges (truncated, data after
    the document, a syntax error): the caller then reads it in one process, which reports the
    error (or, with ``salvage``, keeps what can be kept) exactly as ``--jobs 1`` does.
    ``while_parsing()``: called once in this process while the workers parse (after every
    range was handed out), e.g. to load other code."""
    try:
        plain = plain_copy(path, tmpdir)
    except InflateBoundError:        # a gzip bomb: read as a stream, in one process (issue 49)
        return None
    parts = jobs * RANGES_PER_JOB
    pending = [while_parsing] if while_parsing else []

    def submitted():
        while pending:
            pending.pop()()
    try:
        src = plain or str(path)
        plan = likely_ranges(src, parts)
        if plan is None:
            return None
        ranges, meta = plan
        how = "guessed"
        results = None
        if len(ranges) >= jobs:          # else too few likely cuts (events without "ph", > 1 MB events): scan
            results = _parse_ranges(src, ranges, jobs, settings, "g", True, submitted)
        if results is None:
            how, found = "scanned", {}
            results = _parse_ranges(src, iter_ranges(src, parts, found, end_at=ranges[-1][1]), jobs, settings,
                                    "r", False, submitted)
            if results is None:
                return None
            meta = found["metadata"]
    finally:
        remove_quietly(plain)
    table = StringTable()
    comm_rows, warnings = [], []
    store = MergedStore(settings.chunk_events)
    for res in results:
        lut = np.asarray([table.id(s) for s in res.strings] or [0], np.int64)
        store.add_range(res.blocks, lut, len(comm_rows))
        comm_rows.extend(res.comm_rows)
        warnings.extend(res.warnings)
    return SplitIngest(store, table, comm_rows, meta, warnings, how, sum(r.unusable_times for r in results),
                       sum(r.negative_durations for r in results))


def _parse_ranges(src, ranges, jobs, settings, tag, exact, submitted=None):
    """Each byte range of ``ranges`` (an iterable, consumed as it yields) parsed by a
    pool of ``jobs`` processes; the workers' results in order, or None as soon as one
    range raises ``TraceError`` (the others are cancelled, their spill folders
    ``<spill_dir>/<tag><i>`` removed).  ``submitted()`` is called once every range is
    handed out.  Other exceptions propagate."""
    futures, folders = [], []
    failed = False
    results = []
    try:
        with pool(jobs) as ex:
            try:
                for i, r in enumerate(ranges):
                    folder = os.path.join(settings.spill_dir, f"{tag}{i}") if settings.spill_dir else None
                    if folder:
                        os.makedirs(folder, exist_ok=True)
                        folders.append(folder)
                    futures.append(ex.submit(ingest_range, RangeTask(src, r, settings, folder, exact, i == 0)))
                if submitted is not None:
                    submitted()
                for f in futures:
                    results.append(f.result())
            except BaseException:
                failed = True
                for f in futures:
                    f.cancel()
                raise
    except TraceError:
        return None
    finally:
        if failed:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
    return results
