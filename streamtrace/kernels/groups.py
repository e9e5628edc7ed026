"""Numba kernels of merge's deferred time filter on a rank cut into byte ranges
(``streamtrace.merge.grouped``): the written events summarised per group of consecutive events
instead of one row each, and the groups a window keeps or drops whole decided from their summary.

A group is up to ``GROUP_MAX`` (63) consecutive events of one batch, written or not (so that its
events fit the bitmasks of an int64).  Its summary (int64[G_COLS]) holds what
``streamtrace.kernels.keep.keep_rows`` would need of all its rows to find that every one is kept,
or that every one is dropped: the extremes of its timed events' ts and end, its flow events' count
(their keys are kept apart, in order), its class-1 events' count, its merged pids (two at most) and
bitmasks of its written, missing-field and negative-dur events.  Any other group is *mixed*: its
rows are made again (``streamtrace.merge.rederive``) and decided by ``keep_rows``.
Twin: ``streamtrace.kernels.reference.groups``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .keep import (C_CLASS, MISSING_OUT, NEGDUR_OUT, NO_T0, NO_T1, R_BITS, R_END, R_FLOW, R_PID, R_T0, R_T1, S_FIRST,
                   S_GONE, S_GONE_MISSING, S_GONE_NEGDUR, S_HAS_FIRST, S_KEPT, S_OPEN, S_PREV_END, lower_bound_from)

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["GROUP_MAX", "G_SEQ", "G_N", "G_IN0", "G_IN1", "G_OUT0", "G_OUT1", "G_WRITTEN", "G_MISSING",
           "G_NEGDUR", "G_KEPT1", "G_TIMED", "G_T0MIN", "G_T0MAX", "G_T1MIN", "G_T1MAX", "G_FLOWS", "G_PID0",
           "G_PID1", "G_MIXED", "G_COLS", "X_TS_MIN", "X_TS_MAX", "X_END", "X_WRITTEN", "KIND_EMPTY", "KIND_KEPT",
           "KIND_DROPPED", "KIND_MIXED", "group_batch", "flows_kept", "keep_groups"]

GROUP_MAX = 63      # events per group at most: bit k of a mask is the group's k-th event
# summary columns: first seq; events; file offsets of the first event's start and past the last one's
# end; output offsets past the written event before the group (-1: none) and past its last written
# one (G_OUT0 when none); bitmasks of the written / MISSING_OUT / NEGDUR_OUT events; counts of class-1
# and class-2/3 events; least and greatest ts and end (ns) of the class-2/3 events; flow events; the
# merged pids of its written events (-1: none); 1 when they are more than two (then always mixed)
(G_SEQ, G_N, G_IN0, G_IN1, G_OUT0, G_OUT1, G_WRITTEN, G_MISSING, G_NEGDUR, G_KEPT1, G_TIMED, G_T0MIN, G_T0MAX,
 G_T1MIN, G_T1MAX, G_FLOWS, G_PID0, G_PID1, G_MIXED) = range(19)
G_COLS = 19
# the pass's extremes, carried from batch to batch (``ext``): least ts, greatest min(ts, end) of the
# written events (NO_T0 / NO_T1 while none is timed), output offset past the last written event (-1),
# written events
X_TS_MIN, X_TS_MAX, X_END, X_WRITTEN = 0, 1, 2, 3
# a group under a window (merge.grouped.group_kinds)
KIND_EMPTY, KIND_KEPT, KIND_DROPPED, KIND_MIXED = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def group_batch(rcls, rec, vbits, starts, ends, base, seq0, size, groups, fkeys, fts, ext):
    """Summarise one batch of ``n = len(rcls)`` events (``rcls``/``rec`` as
    ``streamtrace.kernels.rewrite.scan_rewrite`` and its Python twin leave them; ``vbits``:
    uint8[n] of MISSING_OUT / NEGDUR_OUT, or empty) in groups of ``size`` (1..GROUP_MAX) consecutive
    events.  ``starts``/``ends``: the events' byte offsets in the batch, ``base`` added makes them file
    offsets; ``seq0``: the first event's seq.  Writes one summary per group to ``groups``
    (int64[>= ceil(n / size), G_COLS]) and the written flow events' keys (``-1 - key`` for a flow
    Python numbered) and ts (ns) to ``fkeys``/``fts`` (int64[>= n]); updates ``ext`` (int64[4]:
    X_TS_MIN, X_TS_MAX, X_END, X_WRITTEN).  Returns ``(groups written, flow events written)``.  O(n)."""
    n = rcls.shape[0]
    ng = 0
    nf = 0
    has_bits = vbits.shape[0] > 0
    ts_min, ts_max, out_end, n_written = ext[X_TS_MIN], ext[X_TS_MAX], ext[X_END], ext[X_WRITTEN]
    for a in range(0, n, size):
        b = min(n, a + size)
        out0 = out_end
        written = np.int64(0)
        missing = np.int64(0)
        negdur = np.int64(0)
        kept1 = 0
        timed = 0
        t0min, t0max, t1min, t1max = NO_T0, NO_T1, NO_T0, NO_T1
        flows = 0
        pid0 = np.int64(-1)
        pid1 = np.int64(-1)
        mixed = 0
        for j in range(a, b):
            if rcls[j] & C_CLASS == 0:
                continue
            bit = np.int64(1) << (j - a)
            bits = rec[j, R_BITS] & 255
            if has_bits:
                bits |= vbits[j]
            written |= bit
            if bits & MISSING_OUT:
                missing |= bit
            if bits & NEGDUR_OUT:
                negdur |= bit
            out_end = rec[j, R_END]
            n_written += 1
            p = rec[j, R_PID]
            if pid0 < 0 or pid0 == p:
                pid0 = p
            elif pid1 < 0 or pid1 == p:
                pid1 = p
            else:
                mixed = 1
            cls = bits & C_CLASS
            if cls == 1:
                kept1 += 1
                continue
            t0, t1 = rec[j, R_T0], rec[j, R_T1]
            timed += 1
            t0min = min(t0min, t0)
            t0max = max(t0max, t0)
            t1min = min(t1min, t1)
            t1max = max(t1max, t1)
            ts_max = max(ts_max, min(t0, t1))
            if cls == 3:
                flows += 1
                fkeys[nf] = -1 - rec[j, R_FLOW] if bits & 8 else rec[j, R_FLOW]
                fts[nf] = t0
                nf += 1
        ts_min = min(ts_min, t0min)
        g = groups[ng]
        g[G_SEQ] = seq0 + a
        g[G_N] = b - a
        g[G_IN0] = base + starts[a]
        g[G_IN1] = base + ends[b - 1]
        g[G_OUT0] = out0
        g[G_OUT1] = out_end
        g[G_WRITTEN] = written
        g[G_MISSING] = missing
        g[G_NEGDUR] = negdur
        g[G_KEPT1] = kept1
        g[G_TIMED] = timed
        g[G_T0MIN] = t0min
        g[G_T0MAX] = t0max
        g[G_T1MIN] = t1min
        g[G_T1MAX] = t1max
        g[G_FLOWS] = flows
        g[G_PID0] = pid0
        g[G_PID1] = pid1
        g[G_MIXED] = mixed
        ng += 1
    ext[X_TS_MIN], ext[X_TS_MAX], ext[X_END], ext[X_WRITTEN] = ts_min, ts_max, out_end, n_written
    return ng, nf


@njit(cache=True, nogil=True)
def flows_kept(nflow, fkeys, kept_keys, out):
    """``out[g] = 1`` (uint8) when every flow event of group ``g`` (its ``nflow[g]`` keys, int64, next in
    ``fkeys``: the groups' flow events in order) has its key in the sorted ``kept_keys``, else 0.
    O(len(fkeys)) when the keys mostly grow (``lower_bound_from``)."""
    f = 0
    h = 0
    m = kept_keys.shape[0]
    for g in range(nflow.shape[0]):
        ok = 1
        for _ in range(nflow[g]):
            if ok:
                h = lower_bound_from(kept_keys, fkeys[f], h)
                if h >= m or kept_keys[h] != fkeys[f]:
                    ok = 0
            f += 1
        out[g] = ok


@njit(cache=True, nogil=True)
def keep_groups(groups, kinds, a, b, shift_ns, dropped_seq, runs, pids, state):
    """Decide groups ``a..b-1`` of ``groups`` (summaries of ``group_batch``, output order), none of
    them mixed: ``kinds[g]`` KIND_EMPTY, KIND_KEPT (every written event kept) or KIND_DROPPED (every
    one dropped).  Does to ``dropped_seq``, ``runs`` (int64[>= b - a + 1, 2]), ``pids`` (int64[>= 2 (b -
    a)]) and ``state`` what ``streamtrace.kernels.keep.keep_rows`` does given the groups' rows, so
    that the two may take turns on one state.  Returns ``(runs written, pids written)``.  O(b - a +
    dropped events)."""
    nr = 0
    npid = 0
    for g in range(a, b):
        k = kinds[g]
        if k == KIND_EMPTY:
            continue
        row = groups[g]
        start = state[S_PREV_END] + 1
        state[S_PREV_END] = row[G_OUT1]
        w = row[G_WRITTEN]
        if k == KIND_KEPT:
            if state[S_OPEN] < 0:
                state[S_OPEN] = start
            for j in range(row[G_N]):
                state[S_KEPT] += (w >> j) & 1
            if row[G_TIMED]:
                t = row[G_T0MIN] + shift_ns
                if state[S_HAS_FIRST] == 0 or t < state[S_FIRST]:
                    state[S_FIRST] = t
                    state[S_HAS_FIRST] = 1
            pids[npid] = row[G_PID0]
            npid += 1
            if row[G_PID1] >= 0:
                pids[npid] = row[G_PID1]
                npid += 1
        else:
            for j in range(row[G_N]):
                if (w >> j) & 1:
                    dropped_seq[row[G_SEQ] + j] = 1
                    state[S_GONE] += 1
                    state[S_GONE_MISSING] += (row[G_MISSING] >> j) & 1
                    state[S_GONE_NEGDUR] += (row[G_NEGDUR] >> j) & 1
            if state[S_OPEN] >= 0:
                runs[nr, 0] = state[S_OPEN]
                runs[nr, 1] = start - 1
                nr += 1
                state[S_OPEN] = -1
    return nr, npid
