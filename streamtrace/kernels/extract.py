"""Numba kernel that pulls the analysis columns out of raw event bytes.

For every event (byte range from ``streamtrace.kernels.scan.scan_events``) it
reads, without building Python objects: ``ph``; ``pid``/``tid`` (integers, or a
64-bit FNV-1a hash of the string content for string pids such as ``"Spans"``);
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

from .jsoncheck import MAX_DEPTH, MEMBERS_CAP, bytes_equal, event_members
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["F_PID_STR", "F_TID_STR", "F_COMM", "F_PYTHON", "F_HAS_DUR", "NONE", "FNV_OFFSET", "FNV_PRIME",
           "fnv1a", "int_literal", "extract_columns"]

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


@njit(cache=True)
def extract_columns(buf, starts, ends, ph, pid, tid, cat_h, cat_s, cat_e, name_h, name_s, name_e,
                    flow_id, corr, ext, stream, device, rank, flags):
    """Fill the per-event output arrays (length >= len(starts)) for every event.

    Integer columns hold -1 when the field is absent or not an integer; string
    hashes are 0 and spans -1 when absent.  ``ph`` holds the first byte of the
    phase string (0 when absent).  O(bytes)."""
    n = starts.shape[0]
    vstack = np.zeros(MAX_DEPTH, np.uint8)
    mem = np.empty((MEMBERS_CAP, 4), np.int64)
    amem = np.empty((MEMBERS_CAP, 4), np.int64)
    for i in range(n):
        s = starts[i]
        e = ends[i]
        ph[i] = 0
        pid[i] = NONE
        tid[i] = NONE
        cat_h[i] = 0
        cat_s[i] = -1
        cat_e[i] = -1
        name_h[i] = 0
        name_s[i] = -1
        name_e[i] = -1
        flow_id[i] = NONE
        corr[i] = NONE
        ext[i] = NONE
        stream[i] = NONE
        device[i] = NONE
        rank[i] = NONE
        f = 0
        ext_primary = False
        nm, na, arow = event_members(buf, s, e, vstack, mem, amem, K_ARGS)
        if nm < 0:
            flags[i] = F_PYTHON
            continue
        for r in range(max(na, 0)):
            aks, ake, avs, j = amem[r, 0], amem[r, 1], amem[r, 2], amem[r, 3]
            if bytes_equal(buf, aks, ake, K_CORR):
                corr[i] = _int(buf, avs, j)[0]
            elif bytes_equal(buf, aks, ake, K_EXT):          # "External id" wins over legacy
                v, ok = _int(buf, avs, j)
                if ok:
                    ext[i] = v
                    ext_primary = True
            elif bytes_equal(buf, aks, ake, K_EXT2):
                v, ok = _int(buf, avs, j)
                if ok and not ext_primary:
                    ext[i] = v
            elif bytes_equal(buf, aks, ake, K_STREAM):
                stream[i] = _int(buf, avs, j)[0]
            elif bytes_equal(buf, aks, ake, K_DEVICE):
                device[i] = _int(buf, avs, j)[0]
            elif bytes_equal(buf, aks, ake, K_RANK):
                rank[i] = _int(buf, avs, j)[0]
            elif bytes_equal(buf, aks, ake, K_COLL) or bytes_equal(buf, aks, ake, K_INMSG) or \
                    bytes_equal(buf, aks, ake, K_PGNAME) or bytes_equal(buf, aks, ake, K_PGRANKS):
                f |= F_COMM
        for r in range(nm):
            ks, ke, vs, j = mem[r, 0], mem[r, 1], mem[r, 2], mem[r, 3]
            if ke - ks > 4 or r == arow:
                continue
            if bytes_equal(buf, ks, ke, K_PH):
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
                if is_pid:
                    pid[i] = v
                else:
                    tid[i] = v
            elif bytes_equal(buf, ks, ke, K_CAT):
                if buf[vs] == 34:
                    cat_h[i] = fnv1a(buf, vs + 1, j - 1)
                    cat_s[i] = vs
                    cat_e[i] = j
            elif bytes_equal(buf, ks, ke, K_NAME):
                if buf[vs] == 34:
                    name_h[i] = fnv1a(buf, vs + 1, j - 1)
                    name_s[i] = vs
                    name_e[i] = j
            elif bytes_equal(buf, ks, ke, K_ID):
                flow_id[i] = _int(buf, vs, j)[0]
        flags[i] = f
