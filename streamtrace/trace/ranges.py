"""Byte ranges of a trace's ``traceEvents`` array that start and end on event boundaries, so
that one big trace can be read by several processes (``analyze --jobs``: ``streamtrace.events.
parallel_ingest``; ``merge --jobs``: ``streamtrace.merge.ranges``).

Two ways to find the boundaries:

* exact: one sequential pass of the numba scanner
  ``streamtrace.kernels.scan.split_points`` (it tracks string/escape state and
  brace depth, so braces inside strings never fool it) -- ``split_ranges``,
  used by ``merge --jobs``;
* guessed, then proven (``guess_ranges``, used by ``analyze --jobs``): the
  array's end from the file's tail, and a cut near each equal share where the text
  looks like ``}, {"ph": ...`` -- no pass over the file.  Each range is then parsed
  from its start; the first range starts where the head says the array starts, and a
  range whose parse ends exactly at its own end (the reader's strict parser accepts
  the appended ``]`` only at array level, outside any string or object) proves that
  the next range starts on an event boundary too.  One range that does not parse
  exactly and the guess is thrown away: the ranges are found again by the scanner.

Byte ranges need a plain file (``streamtrace.trace.source.plain_copy`` decompresses a gzip
input once).  Keys before and after ``traceEvents`` are still found: the head by the normal
reader, the tail from the bytes after the array's closing ``]``.
"""
from __future__ import annotations

import os
import re

import numpy as np
import orjson

from ..runtime.errors import TraceError
from ..kernels import scan
from .metadata import find_trailer
from .reader import TraceReader
from .source import BLOCK

SPLIT_THRESHOLD = 256 << 20     # files smaller than this are parsed by one process
RANGES_PER_JOB = 4              # byte ranges per worker process: even finish (and, scanned, an early start)
GUESS_WINDOW = 1 << 20          # bytes searched for a likely event boundary after each equal share
GUESS_TRIES = 256               # places that look like "}, {" tried per share
GUESS_EVENT_BYTES = 1 << 16     # the object after one must close within this many bytes
_LIKELY_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")      # "}, {": end of one event, start of the next


def split_ranges(path, parts: int):
    """Byte ranges ``[(start, end), ...]`` of a PLAIN trace's ``traceEvents`` content,
    about ``parts`` of them, each holding whole events; plus the metadata (keys
    before and after the array) and the array's end offset.

    Returns ``(ranges, metadata, head_keys)``.  Raises ``TraceError`` when the
    file has no ``traceEvents`` array or it is not closed (truncated)."""
    found = {}
    ranges = list(iter_ranges(path, parts, found))
    return ranges, found["metadata"], found["head_keys"]


def iter_ranges(path, parts: int, found: dict, end_at: int | None = None):
    """``split_ranges`` as a generator: yields each ``(start, end)`` byte range as soon
    as the scan has passed its end, so its parsing can start while the rest of the file
    is scanned.  When exhausted, ``found`` holds ``"metadata"`` and ``"head_keys"``.
    Raises ``TraceError`` like ``split_ranges`` (a truncated array: after the
    ranges before the last one were yielded), and when ``end_at`` is given and the
    array's ``]`` is not at that offset (the scanner does not tell ``}`` from ``]``, so
    a ``}`` closing the array, or a second ``]``, would end it elsewhere)."""
    r = TraceReader(path)
    head = r.read_head()
    if not r.has_events or r.events_offset is None:
        raise TraceError(path, "no traceEvents array")
    start = r.events_offset
    size = os.path.getsize(path)
    every = max(1, (size - start) // max(1, parts))
    state = np.zeros(5, np.int64)
    state[3] = start
    out = np.empty(max(4, parts * 2), np.int64)
    with open(path, "rb") as f:
        prev, end, pos, npoints = start, -1, start, 0
        while end < 0:
            f.seek(pos)
            data = f.read(BLOCK)
            if not data:
                break
            k, end = scan.split_points(np.frombuffer(data, np.uint8), len(data), pos, every, out, state)
            pos += len(data)
            points = out[:k].tolist()
            npoints += k
            for i, b in enumerate(points):
                if end >= 0 and i == k - 1 and b >= end:     # the array's end is the last range's end
                    break
                nxt = after_comma(f, b)
                if nxt < 0:                                  # a cut just before the array's ']'
                    continue
                yield (prev, b)
                prev = nxt
        if end < 0:
            raise TraceError(path, "truncated: traceEvents is not closed", offset=pos)
        if end_at is not None and end != end_at:
            raise TraceError(path, "traceEvents closes where the file's tail says it does not", offset=end)
        if npoints or start < end:                          # an empty array without a cut: no range
            yield (prev, end)
        f.seek(end + 1)
        tail = f.read().strip()
    meta = dict(head)
    if tail.startswith(b","):
        try:
            trailer = orjson.loads(b"{" + tail[1:])
        except orjson.JSONDecodeError:
            trailer = TraceReader(path).read_metadata()
        meta.update(trailer)
    found["metadata"], found["head_keys"] = meta, list(head)


def after_comma(f, a) -> int:
    """The offset after the whitespace and the one comma that follow offset ``a`` of
    the open file ``f`` (where the next range starts), or -1 when the array's ``]``
    follows instead.  Raises ``TraceError`` on anything else (a missing comma
    between two events)."""
    pos = a
    while True:
        f.seek(pos)
        chunk = f.read(4096)
        stripped = chunk.lstrip(b" \t\r\n")
        pos += len(chunk) - len(stripped)
        if stripped or not chunk:
            break
    if stripped.startswith(b","):
        return pos + 1
    if stripped.startswith(b"]"):
        return -1
    raise TraceError(f.name, "no comma after an event", offset=pos)


def guess_cut(f, lo, hi) -> int | None:
    """A likely event boundary in ``[lo, hi)`` of the open plain file ``f``: the offset
    just past the first ``}`` (within ``GUESS_WINDOW`` bytes of ``lo``) that is
    followed by ``,`` and an object with a ``"ph"`` key, i.e. what the end of one
    trace event and the start of the next look like.  None when there is none among
    the first ``GUESS_TRIES`` places that look like ``}, {`` (an object longer than
    ``GUESS_EVENT_BYTES`` is passed over), so the work stays bounded.  Only a guess
    (the text may sit inside a string or an event's args): ``ingest_parallel``
    proves it."""
    f.seek(lo)
    data = f.read(max(0, min(GUESS_WINDOW, hi - lo)))
    arr = np.frombuffer(data, np.uint8)
    for tries, m in enumerate(_LIKELY_CUT.finditer(data)):
        if tries >= GUESS_TRIES:                            # bounded work whatever the text
            return None
        s = m.end() - 1
        status, e = scan.skip_value(arr, s, min(len(data), s + GUESS_EVENT_BYTES))
        if status != scan.DONE:
            continue                                        # not an object, or a long one: the next
        try:
            ev = orjson.loads(data[s:e])
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict) and "ph" in ev:
            return lo + m.start() + 1
    return None


def prove_range(reader, path, byte_range, first: bool, exact: bool = True):
    """After ``reader`` (a ``TraceReader`` over ``byte_range`` of
    ``path``, which it reads as ``"[" + range + "]"``) read its range: raise ``TraceError``
    when ``exact`` and the range is not whole events that the appended ``]`` closes exactly (a
    guessed cut inside an event), or when a range after the first holds no event (a comma with
    nothing after it)."""
    a, b = byte_range
    if exact and reader.events_end != b - a + 2:
        raise TraceError(path, "byte range does not end on an event boundary", offset=b)
    if not first and reader.events_read == 0:
        raise TraceError(path, "no event after a comma in traceEvents", offset=a)


def likely_ranges(path, parts: int) -> tuple | None:
    """``guess_ranges`` as its two callers (``analyze --jobs``, ``validate --jobs``) want it:
    ``(ranges, metadata)``, or None also when the head cannot be read (the caller then reads the
    file in one process, which reports the error)."""
    try:
        plan = guess_ranges(path, parts)
    except TraceError:
        return None
    return None if plan is None else plan[:2]


def guess_ranges(path, parts: int):
    """Likely byte ranges of a PLAIN trace's ``traceEvents`` content without a pass
    over the file: the array's start from the head, its end from the tail
    (``streamtrace.trace.metadata.find_trailer``), and a ``guess_cut`` after each of
    ``parts`` equal shares.  Returns ``(ranges, metadata, head_keys)`` like
    ``split_ranges``, or None when the head or the tail is not what a whole trace
    has (truncated file, data after the document, no ``traceEvents``).  The ranges are
    only likely right; ``ingest_parallel`` shows how they are proven.  Raises
    ``TraceError`` when the head cannot be read."""
    r = TraceReader(path)
    head = r.read_head()
    if not r.has_events or r.events_offset is None:
        return None
    found = find_trailer(path, bare=r.bare_array)
    if found is None:
        return None
    trailer, end = found
    start = r.events_offset
    if end < start:
        return None
    every = max(1, (end - start) // max(1, parts))
    ranges, prev = [], start
    with open(path, "rb") as f:
        for k in range(1, parts):
            lo = max(start + k * every, prev + 1)
            if lo >= end:
                break
            cut = guess_cut(f, lo, end)
            if cut is None:
                continue
            nxt = after_comma(f, cut)                      # a comma: guess_cut saw one
            ranges.append((prev, cut))
            prev = nxt
    ranges.append((prev, end))
    meta = dict(head)
    meta.update(trailer)
    return ranges, meta, list(head)


def range_events(path, byte_range, **kw):
    """A ``TraceReader`` over one byte range (a bare array of whole events)."""
    return TraceReader(path, byte_range=byte_range, **kw)


# -- parallel ingest for analyze ----------------------------------------------------


def blank_range(src, a, b) -> bool:
    """True when bytes ``[a, b)`` of ``src`` hold only JSON whitespace (and are at most 64 KB)."""
    if b - a > 1 << 16:
        return False
    with open(src, "rb") as f:
        f.seek(a)
        return f.read(b - a).strip(b" \t\r\n") == b""


def clean_joints(src, ranges) -> bool:
    """True when exactly one comma separates consecutive ranges and the document
    after the events is a well-formed trailer (what the unsplit reader checks)."""
    with open(src, "rb") as f:
        for (_, b), (a, _) in zip(ranges, ranges[1:]):
            f.seek(b)
            if f.read(a - b).strip(b" \t\r\n") != b",":
                return False
        f.seek(ranges[-1][1] + 1)
        tail = f.read().strip(b" \t\r\n")
    if tail == b"}":
        return True
    if not tail.startswith(b","):
        return False
    try:
        return isinstance(orjson.loads(b"{" + tail[1:]), dict)
    except orjson.JSONDecodeError:
        return False
