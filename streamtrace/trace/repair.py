"""Repairing an event that Kineto wrote with unescaped double quotes inside a string value
(pytorch#146900, fixed in kineto#1459; older traces keep them): a ``torch.compile`` / dynamo frame
whose file name holds quotes gives ``"name": "{"device": "cpu"}(12): run"``.

The repair is tried only on an event orjson and every fallback refused
(``streamtrace.trace.decode.decode_value``), never on the numba hot path.  For each string
value's opening quote (a quote after ``:``) whose string, as written, closes before more text (its
next quote followed by neither ``,``, ``}``, ``]`` nor ``:``), and each later quote that could close it
(followed by ``,`` then a quote, or by ``}``), the quotes between the two are escaped and the event's bytes
parsed again; the event is repaired only when exactly one such choice parses to a JSON object
(else it stays invalid JSON, reported as before).  Repairs are counted per file path in this
process, once per event offset (``take_repairs``); the reader reports them (``TraceReader``'s
``repaired`` and a warning)."""
from __future__ import annotations

import re

import orjson

__all__ = ["repair_quotes", "take_repairs", "note_repair", "repair_warning"]

MAX_QUOTES = 256                   # an event with more quotes is not tried (quadratic in them)
_OPEN = re.compile(rb':\s*"')
_CLOSE_AFTER = re.compile(rb'\s*(?:,\s*"|\})')
_ENDS = re.compile(rb'\s*[,}\]:]')           # what may follow a string's closing quote in JSON
_REPAIRED: dict = {}


def _quotes(data: bytes) -> list:
    """Offsets of the double quotes of ``data`` not escaped by a backslash."""
    out, i = [], 0
    while True:
        i = data.find(b'"', i)
        if i < 0:
            return out
        k = i
        while k > 0 and data[k - 1] == 0x5C:
            k -= 1
        if (i - k) % 2 == 0:
            out.append(i)
        i += 1


def repair_quotes(data: bytes):
    """The event (a dict) that ``data`` (one event's bytes, invalid JSON) decodes to once the
    unescaped double quotes inside one string value are escaped, when exactly one choice of that
    value's closing quote parses; else None."""
    qs = _quotes(data)
    if len(qs) > MAX_QUOTES:
        return None
    at = {q: k for k, q in enumerate(qs)}
    opens = []          # a value's opening quote whose string, as written, ends before more text
    for m in _OPEN.finditer(data):
        k = at.get(m.end() - 1)
        if k is not None and k + 1 < len(qs) and not _ENDS.match(data, qs[k + 1] + 1):
            opens.append(qs[k])
    found = {}
    for o in opens:
        for c in qs:
            if c <= o + 1 or not _CLOSE_AFTER.match(data, c + 1):
                continue
            inner = [q for q in qs if o < q < c]
            if not inner:
                continue
            fixed = bytearray(data)
            for q in reversed(inner):
                fixed[q:q] = b"\\"
            try:
                ev = orjson.loads(bytes(fixed))
            except orjson.JSONDecodeError:
                continue
            if isinstance(ev, dict):
                found[orjson.dumps(ev, option=orjson.OPT_SORT_KEYS)] = ev
                if len(found) > 1:
                    return None
    return next(iter(found.values())) if found else None


def note_repair(path, offset) -> None:
    """Count the repaired event at byte ``offset`` of ``path`` (this process; an event decoded
    twice, as merge's rewrite and its validation do, counts once)."""
    _REPAIRED.setdefault(str(path), set()).add(offset)


def take_repairs(path) -> int:
    """The events of ``path`` repaired in this process since the last call (then forgotten)."""
    return len(_REPAIRED.pop(str(path), ()))


def repair_warning(path, n: int) -> str:
    """The warning for ``n`` repaired events."""
    return (f"{path}: {n:,} events repaired: unescaped double quotes inside a string value "
            f"(Kineto before kineto#1459, pytorch#146900), escaped")
