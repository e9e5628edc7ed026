"""Decoding one JSON value exactly when orjson cannot: integers beyond 64 bits (orjson would
turn 20+ digit integers into floats), numbers yajl rejects, NaN/Infinity.  :func:`loads` is what
every reader of event bytes calls (orjson first, these fallbacks only for what it refuses)."""
from __future__ import annotations

import io
import json

import ijson
import orjson

from ..errors import TraceError


def loads(data: bytes, path, offset):
    """``orjson.loads(data)``, or :func:`decode_value` when orjson refuses the text."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return decode_value(data, path, offset)


def decode_value(data: bytes, path, offset):
    """Decode one JSON value that orjson refused or would make inexact (integers of
    20+ digits): ijson's yajl2_c backend, then ijson's python backend (for numbers
    yajl rejects), then the stdlib (NaN/Infinity).  Raises :class:`TraceError` naming
    ``path`` and the byte ``offset`` for invalid UTF-8 or JSON."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, "invalid UTF-8", offset=offset + e.start) from None
    for backend in (ijson, python_backend()):
        try:
            return next(iter(backend.items(io.BytesIO(data), "", use_float=True)))
        except Exception:
            continue
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise TraceError(path, f"invalid JSON ({e})", offset=offset) from None


_PY_BACKEND = None


def python_backend():
    """ijson's pure-Python backend (loaded once)."""
    global _PY_BACKEND
    if _PY_BACKEND is None:
        _PY_BACKEND = ijson.get_backend("python")
    return _PY_BACKEND
