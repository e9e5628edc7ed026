"""Numba byte scanners for Chrome trace-event JSON.

These kernels walk raw JSON bytes (a ``uint8`` array) without building Python
objects.  They find where each element of the ``traceEvents`` array starts and
ends, skip over arbitrary JSON values, and read an event's top-level ``ts`` and
``dur`` numbers *from their decimal text* into int64 nanoseconds, so no float64
rounding ever touches a timestamp (Kineto writes float microseconds such as
``4458676522690.655``; float64 cannot hold every nanosecond at that magnitude).

Every kernel has a plain-Python twin in ``streamtrace.kernels.reference``
used by the property tests.

Status codes returned by the scanners:
  ``NEED_MORE`` (0)  the buffer ended inside a value: read more bytes and retry
  ``DONE`` (1)       the value / array was closed
  ``BAD`` (-1)       a syntax error at the returned position
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["NEED_MORE", "DONE", "BAD", "HAS_TS", "HAS_DUR", "TS_BAD", "DUR_BAD", "BIG_INT", "OBJECT", "skip_ws",
           "skip_string", "skip_value", "parse_ns", "read_time", "next_element", "scan_events", "split_points",
           "scan_bounds", "ts_or_dur"]

NEED_MORE = 0
DONE = 1
BAD = -1

# per-event flag bits written by scan_events
HAS_TS = 1
HAS_DUR = 2
TS_BAD = 4     # "ts" present but not a plain number we could read exactly
DUR_BAD = 8
BIG_INT = 16   # an integer literal of 20+ digits: orjson would turn it into a float

_INT64_MAX = np.int64(9223372036854775807)


@njit(cache=True, nogil=True)
def _is_ws(c):
    return c == 32 or c == 10 or c == 13 or c == 9


@njit(cache=True, nogil=True)
def skip_ws(buf, pos, n):
    """Index of the first non-whitespace byte at or after ``pos`` (``n`` if none)."""
    while pos < n and _is_ws(buf[pos]):
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def skip_string(buf, pos, n):
    """``buf[pos]`` is an opening quote; return the index just past the closing quote,
    or -1 when the buffer ends first."""
    pos += 1
    while pos < n:
        c = buf[pos]
        if c == 92:          # backslash: skip the escaped byte
            pos += 2
        elif c == 34:
            return pos + 1
        else:
            pos += 1
    return -1


@njit(cache=True, nogil=True)
def skip_value(buf, pos, n):
    """Skip one JSON value starting at ``buf[pos]`` (no leading whitespace).

    Returns ``(status, end)``: ``DONE`` and the index just past the value,
    ``NEED_MORE`` when the buffer ends inside it (also for a bare number that
    touches the end, since more digits may follow), or ``BAD`` and the offending
    index.  Brackets are only counted, not matched by kind (the full parse that
    follows reports mismatches).
    """
    if pos >= n:
        return NEED_MORE, pos
    c = buf[pos]
    if c == 34:
        e = skip_string(buf, pos, n)
        if e < 0:
            return NEED_MORE, pos
        return DONE, e
    if c == 123 or c == 91:
        depth = 0
        i = pos
        while i < n:
            c = buf[i]
            if c == 34:
                e = skip_string(buf, i, n)
                if e < 0:
                    return NEED_MORE, pos
                i = e
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return DONE, i + 1
            i += 1
        return NEED_MORE, pos
    # scalar: number, true, false, null
    i = pos
    while i < n:
        c = buf[i]
        if c == 44 or c == 125 or c == 93 or _is_ws(c):
            break
        if c == 34 or c == 123 or c == 91 or c == 58:
            return BAD, i
        i += 1
    if i == pos:
        return BAD, pos
    if i >= n:
        return NEED_MORE, pos
    return DONE, i


@njit(cache=True, nogil=True)
def parse_ns(buf, pos, n):
    """Read the JSON number at ``buf[pos]`` as a count of *microseconds* and
    return ``(ok, ns, end)`` with ``ns`` the exact int64 nanoseconds (rounded
    half away from zero beyond the third decimal).  ``ok`` is False for text
    that is not a number or does not fit int64."""
    i = pos
    neg = False
    if i < n and buf[i] == 45:
        neg = True
        i += 1
    mant = np.int64(0)
    full = False          # mantissa cannot take another digit: later digits only round
    frac = 0
    exp = 0
    round_up = False
    dropped = False
    seen_digit = False
    while i < n and 48 <= buf[i] <= 57:
        seen_digit = True
        d = buf[i] - 48
        if not full and mant <= (_INT64_MAX - d) // 10:
            mant = mant * 10 + d
        else:
            full = True
            exp += 1            # integer digit that does not fit: scale instead
            if not dropped:
                round_up = d >= 5
                dropped = True
        i += 1
    if i < n and buf[i] == 46:
        i += 1
        while i < n and 48 <= buf[i] <= 57:
            seen_digit = True
            d = buf[i] - 48
            if not full and mant <= (_INT64_MAX - d) // 10:
                mant = mant * 10 + d
                frac += 1
            else:
                full = True
                if not dropped:
                    round_up = d >= 5
                    dropped = True
            i += 1
    if not seen_digit:
        return False, np.int64(0), i
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < n and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        e = 0
        edig = False
        while i < n and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            edig = True
            i += 1
        if not edig:
            return False, np.int64(0), i
        exp += -e if eneg else e
    p = 3 + exp - frac          # ns = mant * 10**p
    # digits past the mantissa decide the rounding only when the mantissa ends at the ns digit;
    # when it holds finer digits, the first of those decides (rounding twice would be wrong:
    # 92233720368548.33745 us is 92233720368548337 ns, not ...338)
    if round_up and p == 0 and mant < _INT64_MAX:
        mant += 1
    if dropped and p > 0:       # a digit did not fit at or above the ns digit: beyond int64 ns
        return False, np.int64(0), i
    if mant == 0:
        return True, np.int64(0), i
    if p >= 0:
        for _ in range(p):
            if mant > _INT64_MAX // 10:
                return False, np.int64(0), i
            mant *= 10
    else:
        q = -p
        if q > 19:
            mant = 0
        else:
            div = np.int64(1)
            for _ in range(q):
                div *= 10
            r = mant % div
            mant = mant // div
            if 2 * r >= div:
                mant += 1
    if neg:
        mant = -mant
    return True, mant, i


@njit(cache=True, nogil=True)
def _ts_or_dur(buf, s, e):
    """1 when the key bytes ``buf[s:e]`` (without quotes) are ``ts``, 2 for ``dur``, else 0."""
    ln = e - s
    if ln == 2 and buf[s] == 116 and buf[s + 1] == 115:
        return 1
    if ln == 3 and buf[s] == 100 and buf[s + 1] == 117 and buf[s + 2] == 114:
        return 2
    return 0


ts_or_dur = _ts_or_dur    # public name (streamtrace.kernels.extract.scan_columns reads the member keys)


@njit(cache=True, nogil=True)
def read_time(buf, i, n, want, f, tsv, durv):
    """The value of a top-level ``"ts"`` (``want`` 1) or ``"dur"`` (``want`` 2) member, from ``i`` just
    past its ``:``: a number's exact ns (``parse_ns``) into ``tsv`` / ``durv`` with HAS_TS / HAS_DUR in
    the flags ``f`` (and TS_BAD / DUR_BAD when it does not fit or is not a number).  Returns ``(more, i, f,
    tsv, durv)``: ``more`` True when the bytes end before the value does (the caller resumes the event
    with more bytes); else ``i`` just past a number, or unchanged for any other value (the caller's scan
    goes on over it).  Shared by ``scan_events`` and ``streamtrace.kernels.survey.scan_survey``."""
    j = skip_ws(buf, i, n)
    if j >= n:
        return True, i, f, tsv, durv
    cj = buf[j]
    if cj == 45 or (48 <= cj <= 57):
        ok, v, j2 = parse_ns(buf, j, n)
        if j2 >= n:
            return True, i, f, tsv, durv     # the number may continue in the next block
        if want == 1:
            f |= HAS_TS
            if ok:
                tsv = v
            else:
                f |= TS_BAD
        else:
            f |= HAS_DUR
            if ok:
                durv = v
            else:
                f |= DUR_BAD
        return False, j2, f, tsv, durv
    if want == 1:
        f |= HAS_TS | TS_BAD
    else:
        f |= HAS_DUR | DUR_BAD
    return False, i, f, tsv, durv


OBJECT = 2    # next_element: an object starts at the returned position


@njit(cache=True, nogil=True)
def next_element(buf, pos, n, sep):
    """Move from ``pos`` to the next element of the ``traceEvents`` array, across
    whitespace and one comma (``sep`` as in ``scan_events``).  Returns
    ``(status, pos)``: ``OBJECT`` with ``pos`` at its ``{``; DONE just past the
    closing ``]``; NEED_MORE at ``n``; BAD at a missing or doubled comma or an
    element that is not an object."""
    while True:
        pos = skip_ws(buf, pos, n)
        if pos >= n:
            return NEED_MORE, pos
        c = buf[pos]
        if sep[0] == 1:
            if c == 93:
                return DONE, pos + 1
            if c != 44:
                return BAD, pos
            sep[0] = 2
            pos += 1
            continue
        if c == 93 and sep[0] == 0:
            return DONE, pos + 1
        if c != 123:
            return BAD, pos
        return OBJECT, pos


@njit(cache=True, nogil=True)
def scan_events(buf, pos, n, starts, ends, ts_ns, dur_ns, flags, sep):
    """Scan elements of a JSON array of objects from ``pos`` (just after ``[`` or
    after a previous element), filling ``starts``/``ends`` (byte offsets of each
    ``{...}``), ``ts_ns``/``dur_ns`` (int64 ns read exactly from the top-level
    ``ts``/``dur`` text) and ``flags`` (HAS_TS, HAS_DUR, TS_BAD, DUR_BAD, BIG_INT) for at
    most ``len(starts)`` events.  ``sep`` (int64[1]) carries the separator state
    across calls: 0 right after ``[``, 1 after an element, 2 after a comma.

    Returns ``(count, status, pos)``: ``status`` is DONE when the closing ``]``
    was consumed (``pos`` just past it), NEED_MORE when the buffer or the output
    arrays ran out (``pos`` = where to resume), BAD on a syntax error at ``pos``
    (a missing or doubled comma, an element that is not an object).  O(bytes).
    """
    cap = starts.shape[0]
    k = 0
    while True:
        status, pos = next_element(buf, pos, n, sep)
        if status != OBJECT:
            return k, status, pos
        if k >= cap:
            return k, NEED_MORE, pos
        start = pos
        depth = 0
        i = pos
        f = 0
        tsv = np.int64(0)
        durv = np.int64(0)
        want = 0              # 1: next value is ts, 2: next value is dur
        key_s = np.int64(-1)      # typed: a literal -1 here would make numba compile a
        key_e = np.int64(-1)      # callee once more for Literal[int](-1) arguments
        complete = False
        run = 0
        while i < n:
            c = buf[i]
            if 48 <= c <= 57:
                run += 1
                i += 1
                continue
            if run >= 20 and c != 46 and c != 101 and c != 69:
                f |= BIG_INT
            run = 0
            if c == 34:
                e = skip_string(buf, i, n)
                if e < 0:
                    break
                key_s = i + 1
                key_e = e - 1
                i = e
                continue
            if c == 58:           # ':' -- the string just before was a key
                if depth == 1 and key_s >= 0:
                    want = _ts_or_dur(buf, key_s, key_e)
                key_s = -1
                i += 1
                if want != 0:
                    more, i, f, tsv, durv = read_time(buf, i, n, want, f, tsv, durv)
                    if more:
                        break
                    want = 0
                continue
            if _is_ws(c):
                i += 1
                continue
            key_s = -1
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    complete = True
                    i += 1
                    break
            i += 1
        if not complete:
            return k, NEED_MORE, start
        starts[k] = start
        ends[k] = i
        ts_ns[k] = tsv
        dur_ns[k] = durv
        flags[k] = f
        k += 1
        sep[0] = 1
        pos = i


# -- split_points: 8 bytes at a time (SWAR on uint64 words) --------------------------

_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
_CASE = np.uint64(0x2020202020202020)     # '[' | 0x20 == '{' and ']' | 0x20 == '}'
_QUOTES = np.uint64(0x2222222222222222)
_BSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_OPENS = np.uint64(0x7B7B7B7B7B7B7B7B)
_CLOSES = np.uint64(0x7D7D7D7D7D7D7D7D)
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U3 = np.uint64(3)
_U7 = np.uint64(7)
_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U32 = np.uint64(32)
_U56 = np.uint64(56)


@njit(cache=True, nogil=True, inline="always")
def _zero_bytes(y):
    """Bit 7 of every byte of the uint64 ``y`` that is 0, other bits clear (exact:
    no carry crosses a byte, unlike the shorter ``(y - 0x01..) & ~y & 0x80..``)."""
    return ~(((y & _LOW7) + _LOW7) | y) & _HIGH


@njit(cache=True, nogil=True, inline="always")
def _word_structure(w, in_str):
    """One 8-byte word without a backslash, entered inside a string when ``in_str``
    is 1: ``(mask, in_str)`` with bit 8j of ``mask`` set when byte j is an opener
    ``{[`` or a closer ``}]`` outside strings, and the string state after the word.
    The in-string bytes are the prefix XOR of the quote bits (exact zero-byte tests),
    flipped by the carried state."""
    q = _zero_bytes(w ^ _QUOTES) >> _U7                 # bit 8j: byte j is '"'
    wc = w | _CASE
    s = (_zero_bytes(wc ^ _OPENS) | _zero_bytes(wc ^ _CLOSES)) >> _U7
    p = q ^ (q << _U8)                                  # bit 8j: parity of the
    p ^= p << _U16                                      # quotes in bytes 0..j
    p ^= p << _U32
    s &= p ^ (np.uint64(in_str) - _U1)                  # in a string: p, else ~p
    return s, in_str ^ np.int64((p >> _U56) & _U1)


@njit(cache=True, nogil=True, boundscheck=False)
def split_points(buf, n, base, every, out, state):
    """Find event boundaries inside a ``traceEvents`` array, one at least every
    ``every`` bytes, for splitting a file into byte ranges parsed in parallel.

    ``buf[:n]`` is the next block of the array's content (``base`` = absolute
    offset of ``buf[0]``); ``state`` (int64[5]) carries across blocks:
    [0] inside a string, [1] after a backslash, [2] brace/bracket depth relative to
    the array, [3] absolute offset of the last boundary, [4] 1 once the array's
    closing ``]`` was seen.
    Boundaries are absolute offsets just past an event's closing ``}`` (at depth 0),
    written to ``out`` (at most ``len(out)`` per call; later ones are dropped).
    Returns ``(count, end)``: ``end`` is the absolute offset of the closing ``]``
    (any close at depth 0) when found in this block, else -1.  O(bytes).

    Works on aligned 8-byte words: per word, bit masks of the quotes, the openers
    ``{[`` and the closers ``}]`` (exact zero-byte tests), the in-string bytes as
    the prefix XOR of the quote bits flipped by the carried string state, and only
    the rare openers/closers outside strings are visited one by one.  A word holding
    a backslash, the bytes before the first aligned word and the tail go byte by
    byte (the escaped byte may lie in the next word or the next block).  The
    result is exactly that of a byte-at-a-time scan, for any bytes and any block
    sizes (tests/test_scan_split.py checks it against a plain-Python twin)."""
    in_str = state[0]
    esc = state[1]
    depth = state[2]
    last = state[3]
    cap = out.shape[0]
    k = 0
    i = 0
    if esc and n > 0:          # a backslash ended the previous block
        esc = 0
        i = 1
    b = np.ascontiguousarray(buf[:n])           # no copy for a C-contiguous buffer
    words = b[:(n >> 3) << 3].view(np.uint64)
    while i < n:
        if (i & 7) == 0 and i + 8 <= n:
            w = words[i >> 3]
            if _zero_bytes(w ^ _BSLASHES) == _U0:
                s, in_str = _word_structure(w, in_str)
                while s != _U0:                                 # openers/closers outside strings
                    j = i + np.int64(trailing_zeros(s) >> _U3)
                    s &= s - _U1
                    c = b[j]
                    if c == 123 or c == 91:
                        depth += 1
                    else:
                        if depth == 0:            # the array's own ']'
                            state[0], state[1], state[2], state[3], state[4] = 0, 0, depth, last, 1
                            return k, base + j
                        depth -= 1
                        if depth == 0 and c == 125 and base + j + 1 - last >= every and k < cap:
                            last = base + j + 1
                            out[k] = last
                            k += 1
                i += 8
                continue
            lim = i + 8
        else:
            lim = min(n, (i | 7) + 1)          # up to the next aligned word
        while i < lim:                         # byte at a time
            c = b[i]
            if in_str:
                if c == 92:
                    if i + 1 >= n:
                        esc = 1
                    i += 2
                    continue
                if c == 34:
                    in_str = 0
            elif c == 34:
                in_str = 1
            elif c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                if depth == 0:            # the array's own ']'
                    state[0], state[1], state[2], state[3], state[4] = in_str, esc, depth, last, 1
                    return k, base + i
                depth -= 1
                if depth == 0 and c == 125 and base + i + 1 - last >= every and k < cap:
                    last = base + i + 1
                    out[k] = last
                    k += 1
            i += 1
    state[0], state[1], state[2], state[3] = in_str, esc, depth, last
    return k, -1


# -- scan_bounds: event boundaries only, 8 bytes at a time ---------------------------

@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _object_end(b, words, i, n):
    """``b[i]`` is ``{``: the index just past its matching close (braces and brackets
    counted outside strings, not matched by kind), or -1 when ``b[:n]`` ends first.
    Aligned 8-byte words without a backslash are handled as in ``split_points``
    (quote parity by prefix XOR, only openers/closers outside strings visited);
    other bytes one at a time."""
    depth = 0
    in_str = np.int64(0)          # typed: _word_structure is compiled for int64 only
    while i < n:
        if (i & 7) == 0 and i + 8 <= n:
            w = words[i >> 3]
            if _zero_bytes(w ^ _BSLASHES) == _U0:
                s, in_str = _word_structure(w, in_str)
                while s != _U0:
                    j = i + np.int64(trailing_zeros(s) >> _U3)
                    s &= s - _U1
                    c = b[j]
                    if c == 123 or c == 91:
                        depth += 1
                    else:
                        depth -= 1
                        if depth == 0:
                            return j + 1
                i += 8
                continue
            lim = i + 8
        else:
            lim = min(n, (i | 7) + 1)
        while i < lim:
            c = b[i]
            if in_str:
                if c == 92:
                    i += 2
                    continue
                if c == 34:
                    in_str = 0
            elif c == 34:
                in_str = 1
            elif c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    return -1


@njit(cache=True, nogil=True, boundscheck=False)
def scan_bounds(buf, pos, n, starts, ends, sep):
    """``scan_events`` without the times: fills only ``starts``/``ends`` (byte
    offsets of each ``{...}`` element of the ``traceEvents`` array), with the same
    ``sep`` state, return value ``(count, status, pos)`` and errors (a missing or
    doubled comma, an element that is not an object).  For callers that locate
    ``ts``/``dur`` themselves (validate reads them from the member spans it finds
    anyway; merge's ``streamtrace.kernels.rewrite.scan_rewrite`` finds the same
    byte ranges in its own member walk).  The events' own bytes are skipped a word at a time
    (see ``_object_end``), so this runs at a few times ``scan_events``'
    speed.  Twin: ``scan_events``' starts/ends (property-tested)."""
    cap = starts.shape[0]
    b = np.ascontiguousarray(buf[:n])           # no copy for a C-contiguous buffer
    words = b[:(n >> 3) << 3].view(np.uint64)
    k = 0
    while True:
        status, pos = next_element(buf, pos, n, sep)     # buf: scan_events' specialisation
        if status != OBJECT:
            return k, status, pos
        if k >= cap:
            return k, NEED_MORE, pos
        end = _object_end(b, words, pos, n)
        if end < 0:
            return k, NEED_MORE, pos
        starts[k] = pos
        ends[k] = end
        k += 1
        sep[0] = 1
        pos = end
