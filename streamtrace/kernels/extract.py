"""Numba kernel that pulls the analysis columns out of raw event bytes.

For every event of a ``traceEvents`` array, found in the same walk over its bytes
(``scan_columns``), it reads, without building Python objects: ``ts``/``dur`` (exact
ns); ``ph``; ``pid``/``tid`` (integers, or a 64-bit FNV-1a hash of the string content for string pids such as ``"Spans"``);
``cat`` and ``name`` (hash + byte span of the string content, for interning);
flow ``id``; and in ``args``: ``correlation``, ``External id`` (or legacy
``external id``), ``stream``, ``device``, ``rank``.  Events whose ``args`` hold
collective metadata (``Collective name``, ``In msg nelems``, ``Process Group
Name``, ...) are flagged so Python decodes just their args (their columns stand), and
those the kernel cannot read so Python decodes them whole.  The plain-Python twin is
``streamtrace.events.columns.columns_from_dicts``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .jsoncheck import MAX_DEPTH, MEMBERS_CAP, MEMBERS_INVALID, bytes_equal, object_members
from .scan import DUR_BAD, HAS_DUR, HAS_TS, NEED_MORE, OBJECT, TS_BAD, next_element, parse_ns, scan_events, ts_or_dur
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["F_PID_STR", "F_TID_STR", "F_COMM", "F_PYTHON", "F_HAS_DUR", "NONE", "FNV_OFFSET", "FNV_PRIME",
           "PID", "TID", "CAT_H", "CAT_S", "CAT_E", "NAME_H", "NAME_S", "NAME_E", "FLOW_ID", "CORR", "EXT",
           "STREAM", "DEVICE", "RANK", "N_COLS", "fnv1a", "int_literal", "event_row", "scan_columns"]

# output flag bits
F_PID_STR = 1      # pid is a string (pid column holds its hash)
F_TID_STR = 2
F_COMM = 4         # args carry collective metadata: Python decodes the args row
F_PYTHON = 8       # could not read the event: decode in Python
F_HAS_DUR = 16

NONE = np.int64(-1)
FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)


def _lit(s):
    return np.frombuffer(s.encode(), np.uint8).copy()


K_PH, K_PID, K_TID, K_ID, K_CAT, K_NAME, K_ARGS = (_lit(s) for s in ("ph", "pid", "tid", "id", "cat", "name", "args"))
K_CORR, K_EXT, K_EXT2, K_STREAM, K_DEVICE, K_RANK = (_lit(s) for s in (
    "correlation", "External id", "external id", "stream", "device", "rank"))
K_COLL, K_INMSG, K_PGNAME, K_PGRANKS = (_lit(s) for s in (
    "Collective name", "In msg nelems", "Process Group Name", "Process Group Ranks"))


@njit(cache=True)
def fnv1a(buf, s, e):
    """64-bit FNV-1a hash of ``buf[s:e]`` as int64 (the interning key of a string)."""
    h = FNV_OFFSET
    for j in range(s, e):
        h = (h ^ np.uint64(buf[j])) * FNV_PRIME
    return np.int64(h)


_U63 = np.uint64(9223372036854775807)


@njit(cache=True)
def _int(buf, s, e):
    """Integer literal buf[s:e] when it fits int64, as ``(value, True)``; else
    ``(NONE, False)`` (fractions, exponents, 20+ digit numbers, other text)."""
    neg = False
    if s < e and buf[s] == 45:
        neg = True
        s += 1
    if e <= s or e - s > 19:
        return NONE, False
    v = np.uint64(0)
    for j in range(s, e):
        c = buf[j]
        if c < 48 or c > 57:
            return NONE, False
        v = v * np.uint64(10) + np.uint64(c - 48)     # 19 digits < 2**64: no wrap
    if not neg:
        if v > _U63:
            return NONE, False
        return np.int64(v), True
    if v > _U63 + np.uint64(1):
        return NONE, False
    if v == _U63 + np.uint64(1):
        return np.int64(-9223372036854775807) - np.int64(1), True
    return -np.int64(v), True


int_literal = _int        # public name: ``(value, ok)`` of an int64 integer literal buf[s:e]


# the rows of ``scan_columns``' int64 output ``cols`` (one row per column, one column per event)
PID, TID, CAT_H, CAT_S, CAT_E, NAME_H, NAME_S, NAME_E, FLOW_ID, CORR, EXT, STREAM, DEVICE, RANK, TS, DUR = range(16)
N_COLS = 16


@njit(cache=True, inline="always")
def event_row(buf, i, nm, na, arow, mem, amem, ph, cols, flags, tflags):
    """Column ``i`` of the outputs from the event's members as
    ``streamtrace.kernels.jsoncheck.event_members`` lists them (``nm``, ``na``, ``arow``, ``mem``,
    ``amem``; ``nm`` < 0: F_PYTHON, the other columns their absent values): ``ph`` (uint8: the first
    byte of the phase string, 0 when absent), ``cols`` (int64[N_COLS, >= i + 1], rows ``PID`` ..
    ``DUR``: integers -1 when absent or not an integer, string hashes 0 and spans -1 when absent;
    ``TS``/``DUR`` int64 ns, 0 when absent), ``flags`` (uint8, ``F_*``), ``tflags`` (uint8: HAS_TS,
    HAS_DUR, TS_BAD, DUR_BAD, as ``streamtrace.kernels.scan.scan_events`` reads the top-level
    ``ts``/``dur``; an event it cannot read, F_PYTHON: 0 and no bits).  Inlined into its caller
    (numba's ``inline="always"``: a plain call was slower)."""
    ph[i] = 0
    for c in range(N_COLS):
        cols[c, i] = NONE
    cols[CAT_H, i] = 0
    cols[NAME_H, i] = 0
    cols[TS, i] = 0
    cols[DUR, i] = 0
    f = 0
    tf = 0
    ext_primary = False
    tflags[i] = 0
    if nm < 0:
        flags[i] = F_PYTHON
        return
    for r in range(max(na, 0)):
        aks, ake, avs, j = amem[r, 0], amem[r, 1], amem[r, 2], amem[r, 3]
        if bytes_equal(buf, aks, ake, K_CORR):
            cols[CORR, i] = _int(buf, avs, j)[0]
        elif bytes_equal(buf, aks, ake, K_EXT):          # "External id" wins over legacy
            v, ok = _int(buf, avs, j)
            if ok:
                cols[EXT, i] = v
                ext_primary = True
        elif bytes_equal(buf, aks, ake, K_EXT2):
            v, ok = _int(buf, avs, j)
            if ok and not ext_primary:
                cols[EXT, i] = v
        elif bytes_equal(buf, aks, ake, K_STREAM):
            cols[STREAM, i] = _int(buf, avs, j)[0]
        elif bytes_equal(buf, aks, ake, K_DEVICE):
            cols[DEVICE, i] = _int(buf, avs, j)[0]
        elif bytes_equal(buf, aks, ake, K_RANK):
            cols[RANK, i] = _int(buf, avs, j)[0]
        elif bytes_equal(buf, aks, ake, K_COLL) or bytes_equal(buf, aks, ake, K_INMSG) or \
                bytes_equal(buf, aks, ake, K_PGNAME) or bytes_equal(buf, aks, ake, K_PGRANKS):
            f |= F_COMM
    for r in range(nm):
        ks, ke, vs, j = mem[r, 0], mem[r, 1], mem[r, 2], mem[r, 3]
        if ke - ks > 4 or r == arow:
            continue
        want = ts_or_dur(buf, ks, ke)
        if want != 0:                   # as scan_events reads them (a later member over an earlier one)
            ok, v = False, np.int64(0)
            if buf[vs] == 45 or 48 <= buf[vs] <= 57:
                ok, v, _ = parse_ns(buf, vs, j)
            if want == 1:
                tf |= HAS_TS if ok else HAS_TS | TS_BAD
                cols[TS, i] = v if ok else cols[TS, i]
            else:
                tf |= HAS_DUR if ok else HAS_DUR | DUR_BAD
                cols[DUR, i] = v if ok else cols[DUR, i]
        elif bytes_equal(buf, ks, ke, K_PH):
            if buf[vs] == 34 and j - vs >= 3:
                ph[i] = buf[vs + 1]
        elif bytes_equal(buf, ks, ke, K_PID) or bytes_equal(buf, ks, ke, K_TID):
            is_pid = bytes_equal(buf, ks, ke, K_PID)
            if buf[vs] == 34:
                v = fnv1a(buf, vs + 1, j - 1)
                f |= F_PID_STR if is_pid else F_TID_STR
            else:
                v, ok = _int(buf, vs, j)
                if not ok:
                    f |= F_PYTHON
            cols[PID if is_pid else TID, i] = v
        elif bytes_equal(buf, ks, ke, K_CAT):
            if buf[vs] == 34:
                cols[CAT_H, i] = fnv1a(buf, vs + 1, j - 1)
                cols[CAT_S, i] = vs
                cols[CAT_E, i] = j
        elif bytes_equal(buf, ks, ke, K_NAME):
            if buf[vs] == 34:
                cols[NAME_H, i] = fnv1a(buf, vs + 1, j - 1)
                cols[NAME_S, i] = vs
                cols[NAME_E, i] = j
        elif bytes_equal(buf, ks, ke, K_ID):
            cols[FLOW_ID, i] = _int(buf, vs, j)[0]
    flags[i] = f
    tflags[i] = tf


@njit(cache=True, nogil=True)
def scan_columns(buf, pos, n, starts, ends, sep, ph, cols, flags, tflags):
    """``streamtrace.kernels.scan.scan_events`` and the analysis columns in one pass over the bytes:
    each event of the ``traceEvents`` array from ``pos`` is found, checked and its members read by
    one walk (``streamtrace.kernels.jsoncheck.object_members``), for at most ``len(starts)`` events.

    Arguments and return value as ``scan_events`` (``buf`` uint8, ``n`` the bytes held, ``sep``
    int64[1] the separator state; returns ``(count, status, pos)``), and the outputs of both:
    ``starts``/``ends`` int64 (byte offsets of each ``{...}``), ``ph``/``cols``/``flags``/``tflags`` as
    ``event_row`` fills them (``cols``' rows ``TS``/``DUR`` and ``tflags``: ``scan_events``'
    ``ts_ns``/``dur_ns``/``flags`` but BIG_INT, which is not looked for: no reader of these columns
    decodes through it).
    An event the walk refuses (invalid JSON, an escaped key, ...) or that the bytes cut is measured
    by ``scan_events`` itself: the event's end, or NEED_MORE; its times as ``scan_events`` reads them,
    ``flags`` F_PYTHON.  Twins: ``scan_events`` (starts, ends, times; tests/kernels/test_scan_columns.py)
    and ``streamtrace.events.columns.columns_from_dicts`` (tests/unit/events/test_columns.py).  O(bytes)."""
    cap = starts.shape[0]
    vstack = np.zeros(MAX_DEPTH, np.uint8)
    mem = np.empty((MEMBERS_CAP, 4), np.int64)
    amem = np.empty((MEMBERS_CAP, 4), np.int64)
    one_s, one_e = np.empty(1, np.int64), np.empty(1, np.int64)     # scan_events' outputs for one event
    one_ts, one_dur, one_f = np.empty(1, np.int64), np.empty(1, np.int64), np.empty(1, np.uint8)
    one_sep = np.zeros(1, np.int64)
    open_end = np.bool_(False)
    k = 0
    while True:
        status, pos = next_element(buf, pos, n, sep)
        if status != OBJECT:
            return k, status, pos
        if k >= cap:
            return k, NEED_MORE, pos
        nm, na, arow, end = object_members(buf, pos, n, vstack, mem, amem, K_ARGS, open_end)
        if nm < 0:                             # refused or cut: scan_events says where it ends
            one_sep[0] = 0
            c, _, _ = scan_events(buf, pos, n, one_s, one_e, one_ts, one_dur, one_f, one_sep)
            if c == 0:
                return k, NEED_MORE, pos
            event_row(buf, k, MEMBERS_INVALID, na, arow, mem, amem, ph, cols, flags, tflags)
            end, cols[TS, k], cols[DUR, k], tflags[k] = one_e[0], one_ts[0], one_dur[0], one_f[0] & 15
        else:
            event_row(buf, k, nm, na, arow, mem, amem, ph, cols, flags, tflags)
        starts[k] = pos
        ends[k] = end
        k += 1
        sep[0] = 1
        pos = end
