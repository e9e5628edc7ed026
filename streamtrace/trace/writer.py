"""The streaming trace writer: Chrome trace-event JSON written event by event as
``{"traceEvents": [...], <metadata>}``, plain or gzip (by the output name),
atomically (see ``streamtrace.runtime.files.atomic_output``).  The document is valid
JSON whatever number of events is written, zero included.

Serialising one event (``dumps_event``) is orjson's, with an exact fallback for what orjson
refuses: integers beyond 64 bits, NaN, strings holding a lone surrogate (``"\\udc80"``, written
as that escape: the output stays valid UTF-8), values nested deeper than orjson's 254 levels
(``encode_json`` has no depth limit: no recursion).  A value can be kept as its JSON text,
``JsonText`` (exact decimal times; metadata nested too deep to pickle)."""
from __future__ import annotations

import json
import math
import re

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


class JsonText:
    """A JSON value kept as its text (``bytes``, valid compact JSON): written as is by
    ``dumps_event`` and ``encode_json``.  Small to pickle whatever its nesting."""
    __slots__ = ("text",)

    def __init__(self, text: bytes):
        self.text = text

    def __reduce__(self):
        return (JsonText, (self.text,))

    def __eq__(self, other):
        return isinstance(other, JsonText) and other.text == self.text

    def __hash__(self):
        return hash(self.text)

    def __repr__(self):
        return f"JsonText({self.text[:40]!r}{'...' if len(self.text) > 40 else ''})"


def us_fragment(ns: int) -> JsonText:
    """``fmt_us`` text as a ``JsonText``, to put in an event dict."""
    return JsonText(fmt_us(ns))


def _as_fragment(o):
    if isinstance(o, JsonText):
        return orjson.Fragment(o.text)
    raise TypeError(type(o).__name__)


def dumps_event(ev) -> bytes:
    """Serialise one event (or any JSON value) compactly.

    orjson is used when it can; values it refuses (integers beyond 64 bits, ``NaN``, lone
    surrogates, deep nesting) go through ``encode_json``, so nothing read is lost."""
    try:
        return orjson.dumps(ev, default=_as_fragment)
    except (orjson.JSONEncodeError, TypeError):
        return encode_json(ev)


def dumps_events(events) -> bytes:
    """Serialise a list of events as ``e1,e2,...`` (no brackets)."""
    if not events:
        return b""
    try:
        return orjson.dumps(events, default=_as_fragment)[1:-1]
    except (orjson.JSONEncodeError, TypeError):
        return b",".join(dumps_event(e) for e in events)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_END = object()


def _string(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def _scalar(v) -> str:
    if isinstance(v, str):
        return _string(v)
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return float.__repr__(v)
    if isinstance(v, JsonText):
        return v.text.decode("utf-8")
    raise TypeError(f"cannot write a {type(v).__name__} as JSON")


def _key(k) -> str:
    return _string(k) if isinstance(k, str) else _string(_scalar(k).strip('"'))


def encode_json(value) -> bytes:
    """``value`` (dicts, lists, str, int, float, bool, None, ``JsonText``) as compact JSON
    text, without recursion (any nesting depth).  Integers are exact whatever their size; NaN
    and infinities are written as JavaScript does (``NaN``, ``Infinity``, as Python's json);
    a lone surrogate in a string is written as its ``\\uXXXX`` escape, other text as UTF-8."""
    parts: list = []
    stack: list = []                 # [iterator, is_dict, items written]
    v = value
    while True:
        if isinstance(v, dict):
            parts.append("{")
            stack.append([iter(v.items()), True, 0])
        elif isinstance(v, (list, tuple)):
            parts.append("[")
            stack.append([iter(v), False, 0])
        else:
            parts.append(_scalar(v))
        while stack:
            top = stack[-1]
            nxt = next(top[0], _END)
            if nxt is _END:
                parts.append("}" if top[1] else "]")
                stack.pop()
                continue
            if top[2]:
                parts.append(",")
            top[2] += 1
            if top[1]:
                parts.append(_key(nxt[0]) + ":")
                v = nxt[1]
            else:
                v = nxt
            break
        else:
            return "".join(parts).encode("utf-8")


def nesting_depth(value) -> int:
    """How deep ``value``'s lists and dicts nest (0 for a scalar), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            todo.extend((x, d + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend((x, d + 1) for x in v)
        else:
            deepest = max(deepest, d)
            continue
        deepest = max(deepest, d + 1)
    return deepest


class TraceWriter:
    """Write a trace file event by event.

    >>> with TraceWriter("out.json.gz", metadata={"schemaVersion": 1}) as w:
    ...     w.write({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0})

    ``metadata`` (dict) is written after the events; ``metadata`` can be
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
