"""Events nested too deep to decode whole (issue 49): an ``args`` value nested 100,000 levels deep is
legal JSON, orjson refuses it (1,024 levels at most), and ijson's fallback keeps the path of every
level (memory that grows with the square of the depth: 3 GB and more).  Such an event is decoded down
to ``MAX_DEPTH`` levels; each value below is kept as its JSON text (a
``JsonText``: merge writes it back as it was, analyze reads nothing in
it) after a streaming check that it is valid JSON; the event is counted per file
(``note_deep`` / ``take_deep``) and each command says how many (the reader's warnings).

Finding the depth is linear and needs no recursion: strings are blanked (a regular expression),
brackets counted by numpy (a cumulative sum)."""
from __future__ import annotations

import io
import re

import ijson
import numpy as np
import orjson

from ..runtime.errors import TraceError
from .writer import JsonText

__all__ = ["MAX_DEPTH", "too_deep", "valid_json", "decode_deep", "note_deep", "take_deep", "deep_warning"]

MAX_DEPTH = 200
"""Levels of an event decoded; below, values are kept as their text.  (The reader keeps top-level
metadata nested deeper than as many levels as its text too: it crosses process boundaries by pickle,
which recurses.)"""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_MARK = b'"\\u0000streamtrace-deep-%d"'
_DEEP: dict = {}


def _depths(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(depth after each byte, opening, closing)`` of ``data`` with its strings' bytes ignored."""
    blank = _STRING.sub(lambda m: b"_" * len(m[0]), data)
    a = np.frombuffer(blank, np.uint8)
    opening = (a == 0x5B) | (a == 0x7B)
    closing = (a == 0x5D) | (a == 0x7D)
    return np.cumsum(opening.astype(np.int64) - closing), opening, closing


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``data`` nests deeper than ``limit`` levels (a cheap test first: fewer
    brackets than that cannot)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return int(_depths(data)[0].max(initial=0)) > limit


def valid_json(text: bytes) -> bool:
    """Whether ``text`` is one valid JSON value: ijson's streaming parser (no tree built; memory
    bounded), then its Python backend for numbers yajl rejects."""
    for backend in (ijson, ijson.get_backend("python")):
        try:
            for _ in backend.basic_parse(io.BytesIO(text), use_float=True):
                pass
            return True
        except Exception:   # noqa: BLE001 - invalid for this backend
            continue
    return False


def decode_deep(data: bytes, path, offset, decode, limit: int = MAX_DEPTH):
    """The value of the JSON text ``data`` with every value that starts deeper than ``limit`` levels
    kept as its text (``JsonText``); counted as one event of ``path``
    (``note_deep``).  ``decode(text, path, offset)`` decodes what remains (at most ``limit``
    levels).  Raises ``TraceError`` naming ``path`` and ``offset`` when a value kept as text is
    not valid JSON, or the brackets do not balance."""
    depth, opening, closing = _depths(data)
    starts = np.flatnonzero(opening & (depth == limit + 1))
    ends = np.flatnonzero(closing & (depth == limit)) + 1
    if len(starts) != len(ends) or (len(starts) and np.any(ends <= starts)):
        raise TraceError(path, "invalid JSON (unbalanced brackets)", offset=offset)
    pieces, kept, at = [], {}, 0
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        text = data[s:e]
        if not valid_json(text):
            raise TraceError(path, f"invalid JSON nested deeper than {limit} levels", offset=offset + s)
        pieces += [data[at:s], _MARK % k]
        kept[f"\0streamtrace-deep-{k}"] = JsonText(text)
        at = e
    pieces.append(data[at:])
    reduced = b"".join(pieces)
    try:
        value = orjson.loads(reduced)
    except orjson.JSONDecodeError:
        value = decode(reduced, path, offset)
    note_deep(path, offset)
    return _put_back(value, kept)


def _put_back(value, kept: dict):
    """``value`` with each placeholder string of ``kept`` replaced by its text (``value`` is at most
    ``MAX_DEPTH`` deep: the recursion is bounded)."""
    if isinstance(value, str):
        return kept.get(value, value)
    if isinstance(value, list):
        return [_put_back(v, kept) for v in value]
    if isinstance(value, dict):
        return {k: _put_back(v, kept) for k, v in value.items()}
    return value


def note_deep(path, offset) -> None:
    """Count the too-deep event at byte ``offset`` of ``path`` (this process; once per event)."""
    _DEEP.setdefault(str(path), set()).add(offset)


def take_deep(path) -> int:
    """The too-deep events of ``path`` counted in this process since the last call (then forgotten)."""
    return len(_DEEP.pop(str(path), ()))


def deep_warning(path, n: int) -> str:
    """The warning for ``n`` events nested deeper than ``MAX_DEPTH`` levels."""
    return (f"{path}: {n:,} event(s) nested deeper than {MAX_DEPTH} levels: the values below that depth kept as "
            f"their JSON text (written back as they were, not analysed)")
