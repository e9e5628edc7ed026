"""Numba kernel of merge's deferred time filter (``streamtrace.merge.deferred``): which of a
rank's written events ``--steps`` keeps, decided after the rewrite from the rows it recorded.

A row (int64[R_COLS] of ``keep_rows``) is one written event, in output order: ``[seq << 8 |
bits, ts, end, output end offset, flow key, merged pid]``; ``bits`` hold its class (the low two bits,
``streamtrace.kernels.rewrite.C_KEPT`` / ``C_WINDOW`` / ``C_FLOW``), ``C_OTHER_FLOW`` and the
validation bits ``MISSING_OUT`` / ``NEGDUR_OUT``.  Twin: ``streamtrace.kernels.reference.keep.keep_rows_py``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["C_KEPT", "C_WINDOW", "C_FLOW", "C_CLASS", "C_STEP", "C_OTHER_FLOW", "MISSING_OUT", "NEGDUR_OUT",
           "SEQ_SHIFT", "R_BITS", "NO_T0", "NO_T1", "R_T0", "R_T1", "R_END", "R_FLOW", "R_PID", "R_COLS",
           "S_OPEN", "S_PREV_END", "S_KEPT", "S_GONE", "S_GONE_MISSING", "S_GONE_NEGDUR", "S_FIRST",
           "S_HAS_FIRST", "S_HINT", "S_COLS", "keep_rows", "lower_bound_from"]

MISSING_OUT = 16        # the event counts as a missing field in the output's validation view
NEGDUR_OUT = 32         # ... as an X event with a missing or negative dur
SEQ_SHIFT = 8
# A deferred time filter (``defer``): per event of the batch, its class (``rcls``, low two bits),
# and what the filter decides it by after the pass (``rec`` columns).
C_KEPT = 1          # written, kept whatever the window (a metadata event, an event without ts)
C_WINDOW = 2        # written, kept when its [ts, ts + dur] meets the window
C_FLOW = 3          # written flow event: kept when its ts is in the window and its flow is kept
C_CLASS = 3         # mask of the class bits
C_STEP = 4          # a ProfilerStep candidate (ph "X", a name starting ProfilerStep# or escaped)
C_OTHER_FLOW = 8    # (set by Python) a flow whose key is not plain: R_FLOW indexes Python's list
# ``rec`` columns of ``streamtrace.kernels.rewrite.scan_rewrite``, the rows of ``keep_rows``: seq << 8 | class bits, ts (ns,
# rank-local), end (ns), output end offset, flow key, merged pid
R_BITS, R_T0, R_T1, R_END, R_FLOW, R_PID = 0, 1, 2, 3, 4, 5
R_COLS = 6
# ts and end of a C_KEPT row: the rows' least ts and greatest min(ts, end) are then those of the timed events
NO_T0, NO_T1 = np.iinfo(np.int64).max, np.iinfo(np.int64).min


# the state carried from one chunk of rows to the next (S_HINT: where the last flow key was looked up)
S_OPEN, S_PREV_END, S_KEPT, S_GONE, S_GONE_MISSING, S_GONE_NEGDUR, S_FIRST, S_HAS_FIRST, S_HINT = range(9)
S_COLS = 9


@njit(cache=True, nogil=True)
def lower_bound_from(a, key, h):
    """The first index ``k`` of the sorted int64 array ``a`` with ``a[k] >= key`` (``len(a)`` when none:
    ``np.searchsorted(a, key)``), searched outwards from the index ``h`` (any int): O(log d) for an
    answer ``d`` places from ``h``, so a run of keys that mostly grow costs O(1) each (a trace's flow
    keys, correlation ids, grow in file order)."""
    n = a.shape[0]
    h = min(max(h, 0), n)
    if h < n and a[h] < key:                # forward: a[lo] < key, the answer in (lo, hi]
        lo, step = h, 1
        hi = lo + 1
        while hi < n and a[hi] < key:
            lo = hi
            step *= 2
            hi = lo + step
        hi = min(hi, n)
        return lo + 1 + np.searchsorted(a[lo + 1:hi], key)
    if h == 0 or a[h - 1] < key:            # a[h] >= key (or h == n) and nothing before it is
        return h
    hi, step = h - 1, 1                     # backward: a[hi] >= key, the answer in [lo, hi]
    lo = hi - 1
    while lo > 0 and a[lo] >= key:
        hi = lo
        step *= 2
        lo = hi - step
    lo = max(lo, 0)
    return lo + np.searchsorted(a[lo:hi + 1], key)


@njit(cache=True, nogil=True)
def keep_rows(rows, lo, hi, kept_keys, shift_ns, dropped_seq, runs, pids, state):
    """Decide one chunk of rows (int64[n, R_COLS], output order) under the keep-window ``[lo, hi]``
    (ns, rank-local): an event of class 1 is kept; class 2 when ``end >= lo and ts <= hi``; class 3
    (a flow event) when that holds and its flow key (``-1 - key`` with C_OTHER_FLOW, bit 8) is in the
    sorted int64 ``kept_keys``.

    Fills ``dropped_seq[seq] = 1`` (uint8) for each dropped event; appends to ``runs`` (int64[>= n + 1,
    2]) the byte ranges ``[start, end)`` of the kept runs that end in this chunk (an event starts one
    byte, its comma, past the one before; the first at 0); writes to ``pids`` (int64[>= n]) each kept
    event's merged pid where it differs from the kept event before it in the chunk.  ``state``
    (int64[S_COLS], zeros and ``S_OPEN`` = -1 before the first chunk) carries the open run's start,
    the last end, counts (kept; dropped; dropped missing-field and negative-dur events) and the
    earliest kept ts + ``shift_ns`` of a class 2/3 event.  Returns ``(runs written, pids written)``;
    call with an empty chunk to close the last run.  O(n log k), O(n) when the flow keys grow in
    row order (``lower_bound_from``)."""
    nr = 0
    npid = 0
    last_pid = np.int64(-1)
    have_pid = False
    n = rows.shape[0]
    for j in range(n):
        bits = rows[j, R_BITS] & 255
        cls = bits & 3
        start = state[S_PREV_END] + 1
        end = rows[j, R_END]
        state[S_PREV_END] = end
        keep = True
        if cls >= 2:
            keep = rows[j, R_T1] >= lo and rows[j, R_T0] <= hi
            if keep and cls == 3:
                key = rows[j, R_FLOW]
                if bits & 8:
                    key = -1 - key
                k = lower_bound_from(kept_keys, key, state[S_HINT])
                state[S_HINT] = k
                keep = k < kept_keys.shape[0] and kept_keys[k] == key
        if keep:
            state[S_KEPT] += 1
            if state[S_OPEN] < 0:
                state[S_OPEN] = start
            if cls >= 2:
                t = rows[j, R_T0] + shift_ns
                if state[S_HAS_FIRST] == 0 or t < state[S_FIRST]:
                    state[S_FIRST] = t
                    state[S_HAS_FIRST] = 1
            p = rows[j, R_PID]
            if not have_pid or p != last_pid:
                pids[npid] = p
                npid += 1
                last_pid = p
                have_pid = True
        else:
            dropped_seq[rows[j, R_BITS] >> SEQ_SHIFT] = 1
            state[S_GONE] += 1
            if bits & MISSING_OUT:
                state[S_GONE_MISSING] += 1
            if bits & NEGDUR_OUT:
                state[S_GONE_NEGDUR] += 1
            if state[S_OPEN] >= 0:
                runs[nr, 0] = state[S_OPEN]
                runs[nr, 1] = start - 1
                nr += 1
                state[S_OPEN] = -1
    if n == 0 and state[S_OPEN] >= 0:
        runs[nr, 0] = state[S_OPEN]
        runs[nr, 1] = state[S_PREV_END]
        nr += 1
        state[S_OPEN] = -1
    return nr, npid
