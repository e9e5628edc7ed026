"""Decoding one JSON value exactly when orjson cannot: integers beyond 64 bits (orjson would
turn 20+ digit integers into floats), numbers yajl rejects, NaN/Infinity.  ``loads`` is what
every reader of event bytes calls (orjson first, these fallbacks only for what it refuses)."""
from __future__ import annotations

import io
import json
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import ijson
import orjson

from ..runtime.errors import TraceError
from .deep import decode_deep, too_deep
from .repair import note_repair, repair_quotes


def loads(data: bytes, path, offset):
    """``orjson.loads(data)``, or ``decode_value`` when orjson refuses the text."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return decode_value(data, path, offset)


def decode_value(data: bytes, path, offset):
    """Decode one JSON value that orjson refused or would make inexact (integers of
    20+ digits): ijson's yajl2_c backend, then ijson's python backend (for numbers
    yajl rejects), then the stdlib (NaN/Infinity), then an event with unescaped double quotes
    in one string value, repaired where unambiguous and counted
    (``streamtrace.trace.repair.repair_quotes``).  A value nested deeper than
    ``MAX_DEPTH`` levels is decoded down to that depth, what lies below
    kept as its JSON text and counted (``streamtrace.trace.deep.decode_deep``: bounded memory and
    time; ijson's memory grows with the square of the depth).  Raises ``TraceError`` naming
    ``path`` and the byte ``offset`` for invalid UTF-8 or JSON."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, "invalid UTF-8", offset=offset + e.start) from None
    if too_deep(data):
        return decode_deep(data, path, offset, decode_value)
    for backend in (ijson, python_backend()):
        try:
            return next(iter(backend.items(io.BytesIO(data), "", use_float=True)))
        except Exception:
            continue
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        fixed = repair_quotes(data)           # Kineto's unescaped quotes (pytorch#146900), issue 33
        if fixed is None:
            raise TraceError(path, f"invalid JSON ({e})", offset=offset) from None
    note_repair(path, offset)
    return fixed


_PY_BACKEND = None


def python_backend():
    """ijson's pure-Python backend (loaded once)."""
    global _PY_BACKEND
    if _PY_BACKEND is None:
        _PY_BACKEND = ijson.get_backend("python")
    return _PY_BACKEND


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def text_ns(value) -> int | None:
    """A ``ts`` written as a JSON string holding a number of microseconds
    (``"4458676417669.918"``) as int64 nanoseconds, rounded half away from zero as the byte
    scanner rounds numbers (``streamtrace.kernels.scan.parse_ns``); None when ``value`` is
    not such a string or the time does not fit int64 ns."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not _NUMBER.fullmatch(text):
        return None
    try:
        ns = int((Decimal(text) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return ns if _INT64[0] <= ns <= _INT64[1] else None


def bad_ts_warning(path, n: int) -> str:
    """The warning for ``n`` events dropped because their ``ts`` or ``dur`` is unusable."""
    return (f"{path}: {n:,} event(s) dropped: their ts or dur is not a number of microseconds that fits int64 "
            f"nanoseconds (null, a non-numeric string, beyond +-9.2e15 us)")
