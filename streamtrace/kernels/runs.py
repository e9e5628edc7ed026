"""Numba helpers on runs of intervals, shared by the call-tree kernels
(``streamtrace.kernels.tree``, ``streamtrace.kernels.treestream``): sorting a small
group by start, merging sorted runs, and writing the union of sorted intervals.

Times are int64 ns; every function works in place on arrays the caller owns.  They are
exercised through their callers' property tests (tests/kernels/test_tree.py,
tests/kernels/test_treestream.py), whose plain-Python twins compute the same unions
from scratch.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["union_into", "merge_runs", "sort_group"]


@njit(cache=True, nogil=True)
def union_into(src_s, src_e, lo, hi, dst_s, dst_e, at):
    """Canonical union of src[lo:hi] (sorted by start) written to dst[at:].
    Returns (number written, covered length).  dst may alias src if at <= lo."""
    k = at
    length = np.int64(0)
    have = False
    cs = np.int64(0)
    ce = np.int64(0)
    for i in range(lo, hi):
        a = src_s[i]
        b = src_e[i]
        if b <= a:
            continue
        if have and a <= ce:
            if b > ce:
                ce = b
        else:
            if have:
                dst_s[k] = cs
                dst_e[k] = ce
                k += 1
                length += ce - cs
            cs = a
            ce = b
            have = True
    if have:
        dst_s[k] = cs
        dst_e[k] = ce
        k += 1
        length += ce - cs
    return k - at, length


@njit(cache=True, nogil=True)
def merge_runs(s, e, t_s, t_e, runs, r):
    """Stable merge sort by start of s[runs[0]:runs[r]], made of r sorted runs.

    Adjacent runs are merged pairwise until one is left: O(S log r).  Uses
    t_s/t_e as scratch; returns True when the result ended up in t_s/t_e."""
    in_t = False
    while r > 1:
        if in_t:
            a_s, a_e, b_s, b_e = t_s, t_e, s, e
        else:
            a_s, a_e, b_s, b_e = s, e, t_s, t_e
        w = 0
        q = 0
        while q < r:
            lo = runs[q]
            if q + 1 >= r:                   # odd run out: copy
                hi = runs[q + 1]
                for x in range(lo, hi):
                    b_s[x] = a_s[x]
                    b_e[x] = a_e[x]
                runs[w] = lo
                w += 1
                q += 1
                continue
            mid = runs[q + 1]
            hi = runs[q + 2]
            x = lo
            y = mid
            z = lo
            while x < mid and y < hi:
                if a_s[y] < a_s[x]:
                    b_s[z] = a_s[y]
                    b_e[z] = a_e[y]
                    y += 1
                else:
                    b_s[z] = a_s[x]
                    b_e[z] = a_e[x]
                    x += 1
                z += 1
            while x < mid:
                b_s[z] = a_s[x]
                b_e[z] = a_e[x]
                x += 1
                z += 1
            while y < hi:
                b_s[z] = a_s[y]
                b_e[z] = a_e[y]
                y += 1
                z += 1
            runs[w] = lo
            w += 1
            q += 2
        runs[w] = runs[r]
        r = w
        in_t = not in_t
    return in_t


@njit(cache=True, nogil=True)
def sort_group(s, e, lo, hi):
    """Sort s[lo:hi] (with e) by start, stably: insertion sort of blocks of 16, then the
    blocks merged pairwise by ``merge_runs``.  O(k log k) time, O(k) scratch; not
    ``np.argsort``, whose quicksort costs numba ~2 s to compile."""
    k = hi - lo
    if k <= 1:
        return
    for a0 in range(lo, hi, 16):
        b0 = min(hi, a0 + 16)
        for i in range(a0 + 1, b0):
            a = s[i]
            b = e[i]
            j = i - 1
            while j >= a0 and s[j] > a:
                s[j + 1] = s[j]
                e[j + 1] = e[j]
                j -= 1
            s[j + 1] = a
            e[j + 1] = b
    if k <= 16:
        return
    nr = (k + 15) // 16
    runs = np.empty(nr + 1, dtype=np.int64)
    for r in range(nr):
        runs[r] = 16 * r
    runs[nr] = k
    gs = s[lo:hi]
    ge = e[lo:hi]
    t_s = np.empty(k, dtype=np.int64)
    t_e = np.empty(k, dtype=np.int64)
    if merge_runs(gs, ge, t_s, t_e, runs, np.int64(nr)):
        for i in range(k):
            gs[i] = t_s[i]
            ge[i] = t_e[i]
