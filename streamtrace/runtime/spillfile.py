"""Records spilled by worker processes into one file a process, read back by ``(path, offset, size)``.

aggregate's per-rank tasks hand the parent their large results through a spill folder (the timeline
rows, the critical path's piece and segments, the explaining tables, the what-if rows).  A file a
task and table made six files a rank: 24,576 creates and as many removals at 4,096 ranks, each a
round trip to the metadata server on a parallel file system (Lustre, GPFS), where aggregate's output
folder, and so its spill folders, usually lie.  Here each process (each thread of it: a dask worker
runs tasks in threads) appends its records to one file of the folder (``Record``), named after the
process (its pid and a random tag: a pid reused by a later process, or the same pid on another host
of a dask cluster, does not share a file with a live one), opened for each record and closed after it: nothing is held open between tasks, and a
record is complete on disk when its ``Record`` closes.

A record is the tuple ``(path, offset, size)`` (str, int, int; bytes): small to pickle back to the
parent.  Records are never removed one by one: their folder is removed whole by its owner.
"""
from __future__ import annotations

import os
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".spill"

_TAG: dict = {}            # (pid, thread) -> its file's name (a forked child's pid is new: it makes its own)


def process_file(folder) -> Path:
    """The file of ``folder`` this process appends its records to (not created here): one a thread of
    the process, so that tasks run at once in threads (a dask worker's) never write into one file."""
    key = (os.getpid(), threading.get_ident())
    name = _TAG.get(key)
    if name is None:
        if any(pid != key[0] for pid, _ in _TAG):        # (inherited through a fork: not this process's)
            _TAG.clear()
        name = _TAG[key] = f"{key[0]}-{uuid.uuid4().hex[:12]}{SUFFIX}"
    return Path(folder) / name


class Record:
    """``with Record(folder) as f:`` the caller writes one record into ``f`` (this process's file of
    ``folder``, opened for appending, positioned at its end); then ``rec`` is ``(path, offset,
    size)``.  Offsets the caller takes with ``f.tell()`` are the file's own (``read_at`` takes them).
    Raises ``OSError`` when the folder cannot be written."""

    def __init__(self, folder):
        self.path = process_file(folder)
        self.rec: tuple | None = None

    def __enter__(self):
        self._f = open(self.path, "ab")
        self._at = self._f.tell()
        return self._f

    def __exit__(self, *exc):
        end = self._f.tell()
        self._f.close()
        self.rec = (str(self.path), self._at, end - self._at)
        return False


def append(folder, data) -> tuple:
    """Write the bytes ``data`` (bytes, memoryview or any buffer) as one record of ``folder``;
    returns its ``(path, offset, size)``."""
    r = Record(folder)
    with r as f:
        f.write(data)
    return r.rec


@contextmanager
def opened(rec):
    """The file of record ``rec`` opened for reading, positioned at the record's start."""
    path, offset, _ = rec
    with open(path, "rb") as f:
        f.seek(offset)
        yield f


def read_at(path, offset: int, size: int) -> bytes:
    """``size`` bytes at ``offset`` of ``path`` (a record's bytes: ``read_at(*rec)``).  Raises
    ``OSError`` when fewer are there (a file cut short)."""
    with open(path, "rb") as f:
        f.seek(offset)
        b = f.read(size)
    if len(b) != size:
        raise OSError(f"{path}: {size} bytes expected at offset {offset}, {len(b)} there")
    return b
