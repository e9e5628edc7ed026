"""Numba kernels of ``streamtrace validate``: the fields each check needs, read from raw event
bytes (``event_fields``), and the two checks that need events in order, run over sorted
chunks with their state carried from chunk to chunk (``nesting_chunk``, ``flow_chunk``).

Plain-Python twins: ``streamtrace.kernels.reference.validate``.

**Canonical values.**  The checks compare ``pid``, ``tid``, ``cat``, flow ``id`` and ``args.rank``
as Python compares the decoded values (``1 == 1.0 == true``), so each is reduced to a
``(kind, value)`` pair of int64: ``ABSENT`` (no such member), ``NULL``, ``INT`` (integers that fit
int64, booleans as 0/1, integral floats), ``STR`` (64-bit FNV-1a hash of the UTF-8 text), ``FLOAT``
(other finite or infinite floats: the float64 bits), ``OTHER`` (anything else: a 64-bit hash of a
canonical text, computed in Python).  This kernel reads integer literals, ``true``/``false``/``null``
and strings without a backslash; every other value, and any event whose shape the member walk
does not know (escaped keys, a repeated member the checks read, more than 64 members, invalid
JSON), is marked ``PY`` for Python to decode (``streamtrace.validate.check``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .extract import fnv1a, int_literal
from .jsoncheck import MAX_DEPTH, MEMBERS_CAP, bytes_equal, event_members
from .scan import DUR_BAD, HAS_DUR, HAS_TS, TS_BAD, parse_ns
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["ABSENT", "NULL", "INT", "STR", "FLOAT", "OTHER", "PH_NONE", "PH_X", "PH_S", "PH_F", "PH_OTHER",
           "NF", "C_PH", "C_PIDK", "C_PIDV", "C_TIDK", "C_TIDV", "C_TS", "C_DUR", "C_TFLAGS", "C_CATK", "C_CATV",
           "C_IDK", "C_IDV", "C_RANKK", "C_RANKV", "C_PY", "event_fields", "member_fields", "span_fields", "nesting_chunk", "flow_chunk", "flow_close",
           "batch_records", "NEST_COLS", "FLOW_COLS", "BC_EVENTS", "BC_MISSING", "BC_NEGDUR", "NEST_STATE", "NS_BAD",
           "NS_TRACKS", "NS_GPU_OVERLAP", "FLOW_STATE", "FC_KEYS", "FC_UNMATCHED", "FC_DUPLICATE", "FC_CROSS_RANK",
           "V_IN", "V_OUT", "GPU_TRACK", "GPU_CATS", "GPU_CAT_HASHES"]

# value kinds
ABSENT, NULL, INT, STR, FLOAT, OTHER = 0, 1, 2, 3, 4, 5
# ph codes: PH_NONE = absent or null (a missing field)
PH_NONE, PH_X, PH_S, PH_F, PH_OTHER = 0, 1, 2, 3, 4

# columns of event_fields' output (int64[n, NF])
(C_PH, C_PIDK, C_PIDV, C_TIDK, C_TIDV, C_TS, C_DUR, C_TFLAGS, C_CATK, C_CATV, C_IDK, C_IDV, C_RANKK, C_RANKV,
 C_PY) = range(15)
NF = 15

# view bits of a record (nesting_chunk / flow_chunk): which report counts it
V_IN = 1       # the trace as read (streamtrace validate; merge: its input)
V_OUT = 2      # merge: the event as written to the output


# tkind bit of an X slice whose ``cat`` is a GPU activity (kernel, memcpy, memset; legacy Kineto's
# capitalised names): its track is a CUDA stream, where two slices that overlap are two kernels
# overlapping (clock jitter, CUDA graphs), counted apart from CPU bad nesting (issue 33, class 8).
GPU_TRACK = 64
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def _fnv_text(data: bytes) -> int:
    h = 14695981039346656037
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


GPU_CAT_HASHES = np.array([_fnv_text(c.encode()) for c in GPU_CATS], np.int64)   # STR values of GPU_CATS


def _lit(s):
    return np.frombuffer(s.encode(), np.uint8).copy()


K_PH, K_PID, K_TID, K_TS, K_DUR, K_CAT, K_ID, K_ARGS, K_RANK = (_lit(s) for s in (
    "ph", "pid", "tid", "ts", "dur", "cat", "id", "args", "rank"))
_TRUE = _lit("true")
_FALSE = _lit("false")
_NULL = _lit("null")


@njit(cache=True)
def _value(buf, vs, ve, out, i, ck, cv):
    """Canonical (kind, value) of the JSON value buf[vs:ve] into out[i, ck], out[i, cv];
    False when Python must decode it.  Callers pass the columns as ``np.int64(C_...)``, as ``_time``'s:
    a bare module constant is a numba literal, and each distinct one a compile of its own."""
    c = buf[vs]
    if c == 34:
        for j in range(vs + 1, ve - 1):
            if buf[j] == 92:
                return False
        out[i, ck] = STR
        out[i, cv] = fnv1a(buf, vs + 1, ve - 1)
        return True
    if c == 45 or 48 <= c <= 57:
        v, ok = int_literal(buf, vs, ve)
        if not ok:
            return False
        out[i, ck] = INT
        out[i, cv] = v
        return True
    if bytes_equal(buf, vs, ve, _TRUE):
        out[i, ck] = INT
        out[i, cv] = 1
        return True
    if bytes_equal(buf, vs, ve, _FALSE):
        out[i, ck] = INT
        out[i, cv] = 0
        return True
    if bytes_equal(buf, vs, ve, _NULL):
        out[i, ck] = NULL
        out[i, cv] = 0
        return True
    return False


@njit(cache=True)
def _time(buf, vs, ve, out, i, has, bad, col):
    """ts/dur as ``streamtrace.kernels.scan.scan_events`` reads them (a number text read
    exactly into int64 ns, else the BAD bit)."""
    f = out[i, C_TFLAGS] | has
    c = buf[vs]
    if c == 45 or 48 <= c <= 57:
        ok, v, _ = parse_ns(buf, vs, ve)
        if ok:
            out[i, col] = v
        else:
            f |= bad
    else:
        f |= bad
    out[i, C_TFLAGS] = f


@njit(cache=True)
def event_fields(buf, starts, ends, out):
    """Fill ``out`` (int64[n, NF], n >= len(starts)) with the fields of each event ``buf[starts[i]:
    ends[i]]`` (uint8 bytes): ``C_PH`` (PH_* code), ``(C_PIDK, C_PIDV)``, ``(C_TIDK, C_TIDV)``,
    ``(C_CATK, C_CATV)``, ``(C_IDK, C_IDV)`` and ``(C_RANKK, C_RANKV)`` (args.rank; ABSENT when args
    is absent or not an object) as canonical (kind, value) pairs; ``C_TS``/``C_DUR`` (int64 ns) and
    ``C_TFLAGS`` (HAS_TS, HAS_DUR, TS_BAD, DUR_BAD of ``streamtrace.kernels.scan``); ``C_PY`` 1 when
    Python must decode the event instead (the other columns are then undefined).  The event's JSON
    is checked strictly (``streamtrace.kernels.jsoncheck.event_members``); invalid JSON is
    left to Python (C_PY), whose decoder reports it.  O(bytes)."""
    n = starts.shape[0]
    vstack = np.zeros(MAX_DEPTH, np.uint8)
    mem = np.empty((MEMBERS_CAP, 4), np.int64)
    amem = np.empty((MEMBERS_CAP, 4), np.int64)
    for i in range(n):
        nm, na, arow = event_members(buf, starts[i], ends[i], vstack, mem, amem, K_ARGS)
        member_fields(buf, nm, na, arow, mem, amem, out, i)


@njit(cache=True)
def member_fields(buf, nm, na, arow, mem, amem, out, i):
    """Row ``i`` of ``event_fields``' ``out`` from the result of
    ``streamtrace.kernels.jsoncheck.event_members`` for that event (``nm``, ``na``, ``arow``,
    ``mem``, ``amem``; members of ``args``): for kernels that walk the members anyway (merge's
    rewrite)."""
    for c in range(NF):
        out[i, c] = 0
    if nm < 0:
        out[i, C_PY] = 1
        return
    seen = 0
    py = False
    ph = PH_NONE
    for r in range(nm):
        ks, ke, vs, ve = mem[r, 0], mem[r, 1], mem[r, 2], mem[r, 3]
        L = ke - ks
        if L > 4 or r == arow:
            continue
        if L == 2:
            if bytes_equal(buf, ks, ke, K_PH):
                bit = 1
                if buf[vs] == 34:
                    if ve - vs == 3 and buf[vs + 1] == 88:
                        ph = PH_X
                    elif ve - vs == 3 and buf[vs + 1] == 115:
                        ph = PH_S
                    elif ve - vs == 3 and buf[vs + 1] == 102:
                        ph = PH_F
                    else:
                        ph = PH_OTHER
                        for j in range(vs + 1, ve - 1):
                            py |= buf[j] == 92          # an escape may spell "X"
                elif bytes_equal(buf, vs, ve, _NULL):
                    ph = PH_NONE
                else:
                    ph = PH_OTHER
            elif bytes_equal(buf, ks, ke, K_TS):
                bit = 2
                _time(buf, vs, ve, out, i, np.int64(HAS_TS), np.int64(TS_BAD), np.int64(C_TS))
            elif bytes_equal(buf, ks, ke, K_ID):
                bit = 4
                py |= not _value(buf, vs, ve, out, i, np.int64(C_IDK), np.int64(C_IDV))
            else:
                continue
        elif L == 3:
            if bytes_equal(buf, ks, ke, K_PID):
                bit = 8
                py |= not _value(buf, vs, ve, out, i, np.int64(C_PIDK), np.int64(C_PIDV))
            elif bytes_equal(buf, ks, ke, K_TID):
                bit = 16
                py |= not _value(buf, vs, ve, out, i, np.int64(C_TIDK), np.int64(C_TIDV))
            elif bytes_equal(buf, ks, ke, K_DUR):
                bit = 32
                _time(buf, vs, ve, out, i, np.int64(HAS_DUR), np.int64(DUR_BAD), np.int64(C_DUR))
            elif bytes_equal(buf, ks, ke, K_CAT):
                bit = 64
                py |= not _value(buf, vs, ve, out, i, np.int64(C_CATK), np.int64(C_CATV))
            else:
                continue
        else:
            continue
        py |= (seen & bit) != 0            # a repeated member: Python's decoder says which wins
        seen |= bit
    for r in range(max(na, 0)):
        if bytes_equal(buf, amem[r, 0], amem[r, 1], K_RANK):
            if out[i, C_RANKK] != ABSENT:          # a second "rank"
                py = True
            elif not _value(buf, amem[r, 2], amem[r, 3], out, i, np.int64(C_RANKK), np.int64(C_RANKV)):
                py = True
    out[i, C_PH] = ph
    if py:
        out[i, C_PY] = 1


@njit(cache=True)
def span_fields(buf, out, i, ph_s, pid_s, pid_e, tid_s, tid_e, ts_s, ts_e, dur_s, dur_e, cat_s, cat_e, id_s, id_e):
    """Row ``i`` of ``event_fields``' ``out`` from member value spans a caller already found
    (merge's rewrite; -1 for an absent member), for an event with no repeated member of these,
    a ``ph`` of one character at ``buf[ph_s]`` (its quote) and no ``args.rank``.  Returns False
    when a value needs ``member_fields`` (or Python) instead."""
    out[i, C_PY] = 0
    c = buf[ph_s + 1]
    out[i, C_PH] = PH_X if c == 88 else PH_S if c == 115 else PH_F if c == 102 else PH_OTHER
    out[i, C_TFLAGS] = 0
    out[i, C_TS] = 0
    out[i, C_DUR] = 0
    out[i, C_RANKK] = ABSENT
    out[i, C_RANKV] = 0
    if ts_s >= 0:
        _time(buf, ts_s, ts_e, out, i, np.int64(HAS_TS), np.int64(TS_BAD), np.int64(C_TS))
    if dur_s >= 0:
        _time(buf, dur_s, dur_e, out, i, np.int64(HAS_DUR), np.int64(DUR_BAD), np.int64(C_DUR))
    ok = True
    for s, e, ck, cv in ((pid_s, pid_e, C_PIDK, C_PIDV), (tid_s, tid_e, C_TIDK, C_TIDV),
                         (cat_s, cat_e, C_CATK, C_CATV), (id_s, id_e, C_IDK, C_IDV)):
        if s < 0:
            out[i, ck] = ABSENT
            out[i, cv] = 0
        elif not _value(buf, s, e, out, i, ck, cv):
            ok = False
    return ok


NEST_COLS = 6       # batch_records' X-slice rows: tkind, pid, tid, start, end, view
FLOW_COLS = 8       # its flow-end rows: kinds, cat, id, seq, ph, rankk, rank, view
BC_EVENTS, BC_MISSING, BC_NEGDUR = 0, 1, 2          # batch_records' counts columns (int64[2, 3], a row per view)
# nesting_chunk's state (int64[NEST_STATE]): the running totals of view v at NS_BAD + v, NS_TRACKS + v,
# NS_GPU_OVERLAP + v (the other slots: the track in progress and its stacks' depths)
NEST_STATE = 14
NS_BAD, NS_TRACKS, NS_GPU_OVERLAP = 6, 8, 12
FLOW_STATE = 16     # flow_chunk's state: the key in progress
FC_KEYS, FC_UNMATCHED, FC_DUPLICATE, FC_CROSS_RANK = 0, 1, 2, 3     # flow_chunk's counts columns (int64[2, 4])


@njit(cache=True)
def batch_records(f, view, out_pid, seq0, nest, flows, counts):
    """The records of one batch of events for the order-dependent checks, and its counts, in one
    pass over the fields ``f`` (int64[n, NF], ``event_fields``).

    ``view``: int64[n], each event's view bits (V_IN, V_OUT); ``out_pid``: in the V_OUT view an
    absent ``pid`` counts as ``null`` (merge writes a merged pid on every event).  Per view an event
    is a *missing field* (``ph`` absent or null, ``pid`` or ``tid`` absent, ``ts`` absent or not a
    number), else an ``X`` event with a ``dur`` absent, not a number or negative (*negative dur*),
    else an ``X`` slice (a row of ``nest``: track kind ``pid kind * 8 + tid kind``, pid and tid
    values, start ``ts``, end ``ts + dur`` in ns, its views; the track kind plus ``GPU_TRACK`` when
    ``cat`` is one of ``GPU_CATS``) or an ``s``/``f`` flow end (a row of
    ``flows``: key kind ``cat kind * 8 + id kind`` with an absent kind read as NULL, cat and id
    values, ``seq0 + i`` (file order), ph, ``args.rank`` kind and value, its views).  Rows are in
    file order; ``nest``: int64[>= n, NEST_COLS], ``flows``: int64[>= n, FLOW_COLS].  ``counts``:
    int64[2, 3] per view: BC_EVENTS events, BC_MISSING missing field, BC_NEGDUR negative dur (added to);
    callers use it through ``streamtrace.kernels.validator.BatchRecords``.  Returns ``(X rows, flow
    rows)``.  O(n).  Twin: ``streamtrace.kernels.reference.validate.batch_records_py``."""
    nn = 0
    nf = 0
    for i in range(f.shape[0]):
        ph = f[i, C_PH]
        tfl = f[i, C_TFLAGS]
        pidk = f[i, C_PIDK]
        pidv = f[i, C_PIDV]
        other = ph == PH_NONE or f[i, C_TIDK] == ABSENT or (tfl & HAS_TS) == 0 or (tfl & TS_BAD) != 0
        xv = 0
        fv = 0
        for v in range(2):
            if not (view[i] >> v) & 1:
                continue
            counts[v, BC_EVENTS] += 1
            if other or (pidk == ABSENT and not (v == 1 and out_pid)):
                counts[v, BC_MISSING] += 1
            elif ph == PH_X:
                if (tfl & HAS_DUR) == 0 or (tfl & DUR_BAD) != 0 or f[i, C_DUR] < 0:
                    counts[v, BC_NEGDUR] += 1
                else:
                    xv |= 1 << v
            elif ph == PH_S or ph == PH_F:
                fv |= 1 << v
        if pidk == ABSENT and out_pid:
            pidk = NULL
            pidv = 0
        if xv:
            gpu = 0
            if f[i, C_CATK] == STR:
                for h in GPU_CAT_HASHES:
                    if f[i, C_CATV] == h:
                        gpu = GPU_TRACK
            nest[nn, 0] = pidk * 8 + f[i, C_TIDK] + gpu
            nest[nn, 1] = pidv
            nest[nn, 2] = f[i, C_TIDV]
            nest[nn, 3] = f[i, C_TS]
            nest[nn, 4] = f[i, C_TS] + f[i, C_DUR]
            nest[nn, 5] = xv
            nn += 1
        if fv:
            flows[nf, 0] = max(f[i, C_CATK], NULL) * 8 + max(f[i, C_IDK], NULL)
            flows[nf, 1] = f[i, C_CATV]
            flows[nf, 2] = f[i, C_IDV]
            flows[nf, 3] = seq0 + i
            flows[nf, 4] = ph
            flows[nf, 5] = f[i, C_RANKK]
            flows[nf, 6] = f[i, C_RANKV]
            flows[nf, 7] = fv
            nf += 1
    return nn, nf


@njit(cache=True, nogil=True)
def nesting_chunk(tkind, pidv, tidv, start, end, view, state, stacks):
    """The slice-nesting check over one chunk of X events sorted by track ``(tkind, pidv, tidv)``,
    then ``start`` ascending, then ``end`` descending (int64 arrays, ns), with the state carried
    from the previous chunk.  Each record counts in the views of its ``view`` bits (V_IN, V_OUT):
    one stack per view, as ``streamtrace.kernels.nesting.count_bad_nesting`` builds for one
    track (a slice starting inside the top of the stack must end no later than it, else it is
    counted bad and not pushed).  On a GPU stream's track (``tkind & GPU_TRACK``) such a slice is
    two kernels overlapping on one stream, counted apart.

    ``state``: int64[NEST_STATE]: [0] 1 once a track was seen, [1..3] the current track, [4] depth of the
    V_IN stack, [5] of the V_OUT stack, [NS_BAD + v] bad slices of view v, [NS_TRACKS + v] tracks (running
    totals), [10], [11] 1 once the current track had a V_IN / V_OUT record, [NS_GPU_OVERLAP + v]
    GPU-stream overlaps (running totals).  Callers use it through
    ``streamtrace.kernels.validator.NestingRun``, which owns the state and grows the stacks.
    ``stacks``: int64[2, cap] (ends of the open slices per view).  Returns the number of records
    consumed: less than ``len(start)`` when a stack is full (grow ``stacks`` and call again on the
    rest).  O(n) amortised."""
    n = start.shape[0]
    cap = stacks.shape[1]
    for i in range(n):
        if state[0] == 0 or tkind[i] != state[1] or pidv[i] != state[2] or tidv[i] != state[3]:
            state[0] = 1
            state[1] = tkind[i]
            state[2] = pidv[i]
            state[3] = tidv[i]
            state[4] = 0
            state[5] = 0
            state[10] = 0
            state[11] = 0
        full = False                    # a stack this record may push on is full: grow it
        for v in range(2):              # before anything of the record is counted
            if view[i] & (1 << v) and state[4 + v] >= cap:
                full = True
        if full:
            return i
        s = start[i]
        e = end[i]
        for v in range(2):
            if not view[i] & (1 << v):
                continue
            if state[10 + v] == 0:
                state[10 + v] = 1
                state[NS_TRACKS + v] += 1
            top = state[4 + v]
            while top > 0 and stacks[v, top - 1] <= s:
                top -= 1
            if top > 0 and e > stacks[v, top - 1]:
                if tkind[i] & GPU_TRACK:
                    state[NS_GPU_OVERLAP + v] += 1
                else:
                    state[NS_BAD + v] += 1
            else:
                stacks[v, top] = e
                top += 1
            state[4 + v] = top
    return n


@njit(cache=True, nogil=True)
def flow_chunk(kinds, catv, idv, ph, rankk, rankv, view, state, counts):
    """Flow ends grouped by key ``(kinds, catv, idv)`` (sorted by key, then file order), with the
    state of the key in progress carried from the previous chunk.  Per key and view (V_IN, V_OUT):
    the ``s`` and ``f`` ends (``ph``: PH_S / PH_F); in V_IN only, whether any end's ``args.rank``
    ``(rankk, rankv)`` (ABSENT or NULL: none) differs from the rank of the key's first end, when that
    one has a rank (Python equality of the canonical pairs).  (V_OUT is merge's output of one rank,
    whose every event has that rank.)

    ``state``: int64[FLOW_STATE]: [0] 1 once a key was seen, [1..3] the key, then per view v at
    4 + 6*v: s ends, f ends, 1 when the view had an end, first rank kind, first rank value, cross.
    ``counts``: int64[2, 4] running totals per view: FC_KEYS keys, FC_UNMATCHED unmatched keys (no ``s``
    or no ``f``), FC_DUPLICATE duplicate keys (more than one ``s`` or ``f``), FC_CROSS_RANK cross-rank
    keys.  Callers use it through ``streamtrace.kernels.validator.FlowRun``.  After the last chunk, close the
    last key with ``flow_close``.  Returns ``len(kinds)``.  O(n)."""
    n = kinds.shape[0]
    for i in range(n):
        if state[0] == 0 or kinds[i] != state[1] or catv[i] != state[2] or idv[i] != state[3]:
            if state[0] != 0:
                flow_close(state, counts)
            state[0] = 1
            state[1] = kinds[i]
            state[2] = catv[i]
            state[3] = idv[i]
            for q in range(4, FLOW_STATE):
                state[q] = 0
        for v in range(2):
            if not view[i] & (1 << v):
                continue
            b = 4 + 6 * v
            if ph[i] == PH_S:
                state[b] += 1
            else:
                state[b + 1] += 1
            rk = rankk[i]
            if v == 1:
                state[b + 2] = 1
                continue
            if state[b + 2] == 0:
                state[b + 2] = 1
                state[b + 3] = rk
                state[b + 4] = rankv[i]
            elif rk != ABSENT and rk != NULL and state[b + 3] != ABSENT and state[b + 3] != NULL and \
                    (rk != state[b + 3] or rankv[i] != state[b + 4]):
                state[b + 5] = 1
    return n


@njit(cache=True)
def flow_close(state, counts):
    """Add the key in progress of ``flow_chunk``'s ``state`` to ``counts`` and forget it
    (call once after the last chunk)."""
    if state[0] == 0:
        return
    for v in range(2):
        b = 4 + 6 * v
        if state[b + 2] == 0:
            continue
        counts[v, FC_KEYS] += 1
        if state[b] == 0 or state[b + 1] == 0:
            counts[v, FC_UNMATCHED] += 1
        if state[b] > 1 or state[b + 1] > 1:
            counts[v, FC_DUPLICATE] += 1
        if state[b + 5]:
            counts[v, FC_CROSS_RANK] += 1
    state[0] = 0
