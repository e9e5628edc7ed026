"""Numba kernel of merge's pre-pass (``merge --steps`` / ``--window`` / ``--align first-step``):
find the events and sort them without decoding them.

``scan_survey`` is ``streamtrace.kernels.scan.scan_events`` (event byte ranges, exact
ts/dur) that, in the same pass over the bytes, reads each event's top-level ph/name/cat/id and
tells what the pre-pass needs of it: a metadata event
(``ph`` exactly ``"M"``), a flow event (``ph`` ``"s"``/``"f"``/``"t"``) with its key (``cat``
string, non-negative integer ``id``), a ProfilerStep candidate, or nothing.  Anything it cannot
read exactly (escapes in those strings, other key shapes, invalid JSON) is left to Python.
The plain-Python twin is ``streamtrace.kernels.reference.survey.classify_event_py``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .jsoncheck import bytes_equal
from .scan import BIG_INT, NEED_MORE, OBJECT, next_element, read_time, skip_string, skip_ws

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["S_OTHER", "S_META", "S_FLOW", "S_DECODE", "ID_DIGITS", "NEW_CAT", "scan_survey"]

S_OTHER = 0     # none of the below: only its ts counts (the earliest ts)
S_META = 1      # ph is exactly "M"
S_FLOW = 2      # a flow event with a plain key: cat_k / flow_id set
S_DECODE = 3    # decode it in Python: a ProfilerStep candidate, or a shape the kernel does not read
ID_DIGITS = 18  # flow ids of at most this many digits are read here (< 10**18)
NEW_CAT = 3     # scan_survey: a flow category not in the table (scan.NEED_MORE / DONE / BAD otherwise)


def _lit(s):
    return np.frombuffer(s.encode(), np.uint8).copy()


K_NAME, K_CAT = (_lit(s) for s in ("name", "cat"))
STEP_PREFIX = _lit("ProfilerStep#")


@njit(cache=True)
def _plain(buf, s, e):
    """True when the JSON string buf[s:e] (quotes included) holds no escape: its bytes are its text."""
    for j in range(s + 1, e - 1):
        if buf[j] == 92:
            return False
    return True


@njit(cache=True, inline="always")
def _classify(buf, ph_s, ph_e, name_s, name_e, cat_s, cat_e, id_s, id_e, cat_text, cat_off, ncats):
    """``(kind, cat index, id)`` of one event from the value spans of its top-level ph/name/cat/id
    (-1: absent); cat index -2: a flow whose cat is not among the ``ncats`` known texts."""
    if ph_s < 0 or buf[ph_s] != 34:
        return S_OTHER, -1, np.int64(0)          # no ph, or not a string: neither "M", "X" nor a flow
    if not _plain(buf, ph_s, ph_e):
        return S_DECODE, -1, np.int64(0)
    if ph_e - ph_s != 3:
        return S_OTHER, -1, np.int64(0)
    ph = buf[ph_s + 1]
    if ph == 77:
        return S_META, -1, np.int64(0)
    if ph == 88:
        if name_s < 0 or buf[name_s] != 34:
            return S_OTHER, -1, np.int64(0)
        if not _plain(buf, name_s, name_e):
            return S_DECODE, -1, np.int64(0)
        if name_e - name_s - 2 < STEP_PREFIX.shape[0]:
            return S_OTHER, -1, np.int64(0)
        for j in range(STEP_PREFIX.shape[0]):
            if buf[name_s + 1 + j] != STEP_PREFIX[j]:
                return S_OTHER, -1, np.int64(0)
        return S_DECODE, -1, np.int64(0)
    if ph != 115 and ph != 102 and ph != 116:
        return S_OTHER, -1, np.int64(0)
    if cat_s < 0 or buf[cat_s] != 34 or not _plain(buf, cat_s, cat_e) or id_s < 0:
        return S_DECODE, -1, np.int64(0)
    if id_e - id_s > ID_DIGITS or id_e <= id_s:
        return S_DECODE, -1, np.int64(0)
    v = np.int64(0)
    for j in range(id_s, id_e):
        c = buf[j]
        if c < 48 or c > 57:
            return S_DECODE, -1, np.int64(0)
        v = v * 10 + (c - 48)
    if id_e - id_s > 1 and buf[id_s] == 48:
        return S_DECODE, -1, np.int64(0)        # a leading zero is not JSON
    a, b = cat_s + 1, cat_e - 1
    for q in range(ncats):
        if bytes_equal(buf, a, b, cat_text[cat_off[q]:cat_off[q + 1]]):
            return S_FLOW, q, v
    return S_FLOW, -2, v


@njit(cache=True)
def scan_survey(buf, pos, n, starts, ends, ts_ns, dur_ns, flags, sep, k0, kind, cat_k, flow_id,
                cat_text, cat_off, ncats, info):
    """``streamtrace.kernels.scan.scan_events`` (same arguments, same ``starts``/``ends``/
    ``ts_ns``/``dur_ns``/``flags``, same return value) that also classifies each event it finds
    into ``kind`` (uint8: S_OTHER, S_META, S_FLOW, S_DECODE) from its top-level ph/name/cat/id,
    in the same pass over the bytes.  Events are stored from index ``k0`` (the count returned
    includes them).  For S_FLOW, ``cat_k`` gets the index of its ``cat`` text among the
    ``ncats`` known texts (``cat_text[cat_off[q]:cat_off[q + 1]]``, raw UTF-8 without quotes)
    and ``flow_id`` its ``id``.

    S_DECODE (decode it in Python): ``ph`` exactly ``"X"`` with a ``name`` that starts with
    ``ProfilerStep#`` or holds an escape; a flow whose ``cat`` is absent, not a string or
    escaped, or whose ``id`` is not a plain integer of at most ID_DIGITS digits; a ``ph`` with
    an escape; a top-level key with an escape; a repeated ph/name/cat/id; a string value of those
    not followed by ``,`` or ``}`` (a broken string).  The scan does not validate JSON: the
    rewrite that follows does.

    Returns ``(count, status, pos)`` as scan_events, or status NEW_CAT with ``pos`` at the start
    of a flow event whose ``cat`` is not known (``info[0:2]``: its byte span without quotes;
    ``count`` the events before it): add it to the table and call again from ``pos``."""
    cap = starts.shape[0]
    k = k0
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
        key_s = np.int64(-1)
        key_e = np.int64(-1)
        ph_s = ph_e = name_s = name_e = cat_s = cat_e = id_s = id_e = np.int64(-1)
        odd = False
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
                i += 1
                if depth != 1 or key_s < 0:
                    key_s = -1
                    continue
                ks, ke = key_s, key_e
                key_s = -1
                for j in range(ks, ke):
                    if buf[j] == 92:
                        odd = True          # an escaped key: its bytes are not its name
                want = 0
                ln = ke - ks
                if ln == 2 and buf[ks] == 116 and buf[ks + 1] == 115:
                    want = 1
                elif ln == 3 and buf[ks] == 100 and buf[ks + 1] == 117 and buf[ks + 2] == 114:
                    want = 2
                elif ln == 2 and buf[ks] == 112 and buf[ks + 1] == 104:
                    want = 3
                elif ln == 4 and bytes_equal(buf, ks, ke, K_NAME):
                    want = 4
                elif ln == 3 and bytes_equal(buf, ks, ke, K_CAT):
                    want = 5
                elif ln == 2 and buf[ks] == 105 and buf[ks + 1] == 100:
                    want = 6
                if want == 0:
                    continue
                if want <= 2:
                    more, i, f, tsv, durv = read_time(buf, i, n, want, f, tsv, durv)
                    if more:
                        break
                    continue
                j = skip_ws(buf, i, n)
                if j >= n:
                    break
                cj = buf[j]
                # ph / name / cat / id: the value's span
                if cj == 34:
                    ve = skip_string(buf, j, n)
                    if ve < 0:
                        break
                    after = skip_ws(buf, ve, n)
                    if after >= n:
                        break
                    if buf[after] != 44 and buf[after] != 125:
                        odd = True
                    i = ve
                else:
                    ve = j
                    while ve < n and (48 <= buf[ve] <= 57 or buf[ve] == 45 or buf[ve] == 43 or buf[ve] == 46
                                      or buf[ve] == 101 or buf[ve] == 69):
                        ve += 1
                    if ve >= n:
                        break
                    if ve == j:
                        ve = j + 1            # a literal, object or array: not a plain id (S_DECODE)
                    # (the main loop still reads the number: its digit run counts for BIG_INT)
                if want == 3:
                    odd |= ph_s >= 0
                    ph_s, ph_e = j, ve
                elif want == 4:
                    odd |= name_s >= 0
                    name_s, name_e = j, ve
                elif want == 5:
                    odd |= cat_s >= 0
                    cat_s, cat_e = j, ve
                else:
                    odd |= id_s >= 0
                    id_s, id_e = j, ve
                continue
            if c == 32 or c == 10 or c == 13 or c == 9:
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
        if odd:
            kd, ck, v = S_DECODE, -1, np.int64(0)
        else:
            kd, ck, v = _classify(buf, ph_s, ph_e, name_s, name_e, cat_s, cat_e, id_s, id_e, cat_text, cat_off, ncats)
        if ck == -2:
            info[0] = cat_s + 1
            info[1] = cat_e - 1
            return k, NEW_CAT, start
        starts[k] = start
        ends[k] = i
        ts_ns[k] = tsv
        dur_ns[k] = durv
        flags[k] = f
        kind[k] = kd
        cat_k[k] = ck
        flow_id[k] = v
        k += 1
        sep[0] = 1
        pos = i
