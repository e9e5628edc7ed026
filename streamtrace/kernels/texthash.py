"""A hash index over a table of byte strings, for the kernels that look a text up per event (merge's
pid texts: ``streamtrace.kernels.rewrite.scan_rewrite``).  A linear search cost every event the
number of texts: a trace with 1,000,000 distinct pids took ~10**12 comparisons (issue 49).

The table is ``text`` (uint8) with ``off`` (int64[n + 1]): entry k is ``text[off[k]:off[k + 1]]``.
The index ``slots`` (int64, a power-of-two length at least twice n) holds ``k + 1`` at the slot the
text hashes to (FNV-1a, 64 bits), or the next free one (linear probing); 0 is free.
Twin: ``streamtrace.kernels.reference.texthash`` (a dict).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["text_hash", "find_text", "insert_text", "index_texts", "slots_for"]

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@njit(cache=True)
def text_hash(buf, s, e):
    """FNV-1a (64 bits) of ``buf[s:e]`` (uint8), as a non-negative int64.  O(e - s)."""
    h = _FNV_OFFSET
    for i in range(s, e):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return np.int64(h >> np.uint64(1))


@njit(cache=True)
def find_text(buf, s, e, text, off, slots):
    """The index k of the table entry equal to ``buf[s:e]`` (see the module docstring), -1 when none.
    O(e - s) expected (a probe compares lengths first)."""
    mask = slots.shape[0] - 1
    j = text_hash(buf, s, e) & mask
    n = e - s
    while True:
        k = slots[j] - 1
        if k < 0:
            return -1
        a = off[k]
        if off[k + 1] - a == n:
            same = True
            for t in range(n):
                if text[a + t] != buf[s + t]:
                    same = False
                    break
            if same:
                return k
        j = (j + 1) & mask


@njit(cache=True)
def insert_text(text, off, k, slots):
    """Put entry ``k`` of the table into ``slots`` (it must not be there yet; ``slots`` must have a
    free slot).  O(length of the entry) expected."""
    mask = slots.shape[0] - 1
    j = text_hash(text, off[k], off[k + 1]) & mask
    while slots[j] != 0:
        j = (j + 1) & mask
    slots[j] = k + 1


@njit(cache=True)
def index_texts(text, off, n, slots):
    """Put the table's first ``n`` entries into the empty index ``slots`` (``insert_text`` each).
    O(total length) expected."""
    for k in range(n):
        insert_text(text, off, k, slots)


def slots_for(n: int) -> int:
    """The length of an index for ``n`` entries: a power of two at least ``2 n`` (and 16)."""
    size = 16
    while size < 2 * n:
        size *= 2
    return size
