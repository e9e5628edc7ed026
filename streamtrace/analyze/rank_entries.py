"""``summary.json``'s ``ranks`` (one entry a rank: its devices, steps, phases, trace metadata) without
every rank's entry held by analyze's parent: each task's entries are pickled into a spill file as they
come back (``RankSpill``), written into ``summary.json`` one at a time in the ranks' order
(``runtime.files.JsonItems``), and what ``analyze`` returns reads them from there when asked
(``RankEntries``); a later stage reads them one at a time too (``read_rank_entries``).  At 16,384
synthetic ranks the entries are 89 MB of JSON (5.4 KB a rank), ~300 MB as Python objects: held by
analyze's parent until the file was written, and by aggregate's while it read the file whole."""
from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..runtime.errors import DataError, StreamtraceError, TraceError
from ..trace.reader import TraceReader
from .outputs import NOT_A_SUMMARY, Analysis, ProcessGroups, check_rank_entry


@dataclass(frozen=True)
class RankStub:
    """What the parent keeps of a rank's entry while the tasks run: its place in ``summary.json``'s
    order (``key``), ``rank``, ``iteration`` (None: unknown), ``source`` (the trace file), and where its
    pickle is in the spill (``offset``, ``size``: bytes)."""
    key: tuple
    rank: int
    iteration: int | None
    source: str
    offset: int
    size: int


class RankSpill:
    """``run_tasks``' ``on_result`` for analyze's tasks (a context manager): each task's rank entries'
    process groups taken into the job's table (``groups``, an ``outputs.ProcessGroups`` that keeps no
    entry: each is renumbered as it is read back) and the entries pickled into a file in ``folder``
    (``.streamtrace-ranks-*``, removed on exit); the task's result kept is its ``RankStub`` list.
    ``entries(stubs)`` reads them back.  ``key(entry)``: the ranks' order."""

    def __init__(self, folder, key):
        fd, self.path = tempfile.mkstemp(prefix=".streamtrace-ranks-", suffix=".pickle", dir=folder)
        self._f = os.fdopen(fd, "wb")
        self._key, self.groups = key, ProcessGroups(key, keep=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
        Path(self.path).unlink(missing_ok=True)

    def on_result(self, ranks: list) -> list:
        """One task's rank entries (dicts) spilled; returns their ``RankStub``s."""
        self.groups.on_result(ranks)
        out = []
        for r in ranks:
            b = pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
            out.append(RankStub(self._key(r), r["rank"], r["iteration"], r["source"], self._f.tell(), len(b)))
            self._f.write(b)
        return out

    def entries(self, stubs):
        """The entries of ``stubs`` read back, in their order, each one's process-group indices
        renumbered to the job's table (``ProcessGroups.renumber``: call ``groups.entries()`` first)."""
        self._f.flush()
        with open(self.path, "rb") as f:
            for s in stubs:
                f.seek(s.offset)
                r = pickle.loads(f.read(s.size))
                self.groups.renumber(r.get("trace_metadata"))
                yield r


class RankEntries(Sequence):
    """``summary.json``'s ``ranks`` as ``analyze`` returns them (its ``Analysis``'s ``summary["ranks"]``):
    a read-only sequence of the entries (dicts, as ``json.loads`` of the file gives them) read from the
    file ``path`` as they are asked for, by their byte ``spans`` there (``JsonItems.spans``: flat
    ``start, end`` pairs); iterating reads one at a time.  Equal to a list of the same entries;
    ``list(entries)`` for a list.  Raises ``DataError`` naming ``path`` when it cannot be read
    (replaced or removed since)."""

    def __init__(self, path, spans):
        self.path, self._spans = Path(path), spans

    def __len__(self) -> int:
        return len(self._spans) // 2

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("rank entry index out of range")
        with self._open() as f:
            return self._read(f, i % n)

    def __iter__(self):
        with self._open() as f:
            for i in range(len(self)):
                yield self._read(f, i)

    def __eq__(self, other):
        if isinstance(other, (list, tuple, RankEntries)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"RankEntries({len(self)} ranks of {str(self.path)!r})"

    def _open(self):
        try:
            return open(self.path, "rb")
        except OSError as e:
            raise DataError(self.path, f"cannot read it ({e.strerror or e})") from None

    def _read(self, f, i: int) -> dict:
        start, end = self._spans[2 * i], self._spans[2 * i + 1]
        f.seek(start)
        try:
            return json.loads(f.read(end - start))
        except ValueError as e:
            raise DataError(self.path, f"rank entry {i} is not where analyze wrote it ({e}): the file was "
                                       f"replaced; read it again (streamtrace.load)") from None


RANK_BATCH = 64
"""Rank entries ``read_rank_entries`` decodes at a time."""


def read_rank_entries(folder, meta: dict):
    """Yield the rank entries (dicts, as ``json.loads`` of the file gives them) of the analysed folder
    ``folder``'s ``summary.json`` one at a time, ``RANK_BATCH`` decoded at once, each checked as
    ``Analysis.check`` checks it (``check_rank_entry``); once exhausted, ``meta`` holds the file's other
    top-level keys (``pg_entries``, ``failed``, ...: ``rank_trace_metadata`` needs the first).  By the
    streaming trace reader (``trace.reader.TraceReader``, its array the ``ranks``): never the whole document.
    Raises ``StreamtraceError`` when ``folder`` has no ``summary.json`` (``Analysis.missing``), ``DataError``
    naming it when it is not valid JSON or not an analysis summary."""
    path = Path(folder) / Analysis.marker
    if not path.is_file():
        raise StreamtraceError(Analysis.missing.format(path=folder, kind=Analysis.kind, marker=Analysis.marker))
    reader = TraceReader(path, batch_events=RANK_BATCH, array_key="ranks")
    seen: dict = {}
    i = 0
    try:
        for batch in reader.raw_batches():
            for r in batch.events:
                check_rank_entry(path, i, r, seen)
                i += 1
                yield r
    except TraceError as e:
        raise DataError(path, f"invalid JSON ({e})") from None
    if reader.bare_array or not reader.has_events or reader.repaired or reader.too_deep:
        raise DataError(path, NOT_A_SUMMARY if not reader.has_events or reader.bare_array else
                        "invalid JSON (a rank entry with unescaped quotes or nested too deep)")
    meta.update(reader.metadata)
