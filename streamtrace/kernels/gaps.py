"""Gaps between the events of a stream (numba; plain-Python twin in
``streamtrace.kernels.reference.gaps``), for the idle-time breakdown of
``streamtrace.aggregate.idle``.

Unit-agnostic: any int64 times (ns inside streamtrace; the tests also feed HTA's
rounded microseconds).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["running_end_before"]


@njit(cache=True)
def running_end_before(first, end):
    """For rows sorted within segments (``first``: bool[N], True where a segment starts,
    e.g. a new (device, stream) after sorting by (device, stream, ts, end)), the running
    maximum of ``end`` (int64[N]) over the *earlier* rows of the row's segment and the
    index of the row that holds it (the earliest such row on ties).

    Returns ``(prev_end, prev_row)``, int64[N] each; a segment's first row has no earlier
    row: ``prev_end`` = ``end`` of that row (unused) and ``prev_row`` = -1.  ``first[0]``
    is treated as True.  O(N).  Raises nothing (lengths must match)."""
    n = end.shape[0]
    prev_end = np.empty(n, np.int64)
    prev_row = np.full(n, -1, np.int64)
    cur = np.int64(0)
    at = np.int64(-1)
    for i in range(n):
        if i == 0 or first[i]:
            prev_end[i] = end[i]
            cur = end[i]
            at = i
            continue
        prev_end[i] = cur
        prev_row[i] = at
        if end[i] > cur:
            cur = end[i]
            at = i
    return prev_end, prev_row
