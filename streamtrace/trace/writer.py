"""The streaming trace writer: Chrome trace-event JSON written event by event as
``{"traceEvents": [...], <metadata>}``, plain or gzip (by the output name),
atomically (see :func:`streamtrace.runtime.files.atomic_output`).  The document is valid
JSON whatever number of events is written, zero included."""
from __future__ import annotations

import json

import orjson

from ..runtime.files import atomic_output


def fmt_us(ns: int) -> bytes:
    """Format int nanoseconds as exact decimal microseconds text (``b"12.345"``).

    Exact for every int64: no float is involved, so ``ts`` survives a round trip
    through streamtrace at ns precision whatever its magnitude."""
    if ns < 0:
        return b"-" + fmt_us(-ns)
    q, r = divmod(ns, 1000)
    if r == 0:
        return b"%d" % q
    return (b"%d.%03d" % (q, r)).rstrip(b"0")


def us_fragment(ns: int):
    """An ``orjson.Fragment`` holding :func:`fmt_us` text, to put in an event dict."""
    return orjson.Fragment(fmt_us(ns))


def dumps_event(ev) -> bytes:
    """Serialise one event (or any JSON value) compactly.

    orjson is used when it can; values it refuses (integers beyond 64 bits,
    ``NaN``) go through the standard library, so nothing read is lost."""
    try:
        return orjson.dumps(ev)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(_plain(ev), separators=(",", ":"), ensure_ascii=False,
                          allow_nan=True).encode("utf-8", "surrogatepass")


def dumps_events(events) -> bytes:
    """Serialise a list of events as ``e1,e2,...`` (no brackets)."""
    if not events:
        return b""
    try:
        return orjson.dumps(events)[1:-1]
    except (orjson.JSONEncodeError, TypeError):
        return b",".join(dumps_event(e) for e in events)


def _plain(v):
    """Replace orjson Fragments by numbers the stdlib can write (used on the rare
    fallback path only)."""
    if isinstance(v, orjson.Fragment):
        txt = v.contents.decode() if isinstance(v.contents, bytes) else v.contents
        return json.loads(txt)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


class TraceWriter:
    """Write a trace file event by event.

    >>> with TraceWriter("out.json.gz", metadata={"schemaVersion": 1}) as w:
    ...     w.write({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0})

    ``metadata`` (dict) is written after the events; :attr:`metadata` can be
    updated until the writer is closed.  On an exception inside the ``with``
    block the target file is not created (or left as it was).
    """

    def __init__(self, path, metadata=None, compresslevel=1):
        self.path = path
        self.metadata = dict(metadata or {})
        self.count = 0
        self._cm = atomic_output(path, compresslevel=compresslevel)
        self._f = None

    def __enter__(self):
        self._f = self._cm.__enter__()
        self._f.write(b'{"traceEvents":[')
        return self

    def write(self, ev):
        """Append one event dict."""
        self.write_raw(dumps_event(ev), 1)

    def write_many(self, events):
        """Append a list of event dicts."""
        if events:
            self.write_raw(dumps_events(events), len(events))

    def write_raw(self, data: bytes, count: int):
        """Append ``count`` already-serialised events (``e1,e2`` bytes, no brackets)."""
        if not data:
            return
        if self.count:
            self._f.write(b",")
        self._f.write(data)
        self.count += count

    def __exit__(self, et, ev, tb):
        if et is None:
            self._f.write(b"]")
            for k, v in self.metadata.items():
                self._f.write(b"," + dumps_event(k) + b":" + dumps_event(v))
            self._f.write(b"}\n")
        return self._cm.__exit__(et, ev, tb)
