"""Numbers as JSON text, written into a byte buffer at an offset without allocating: int64 as decimal
(``put_int``) and int64 ns as exact decimal microseconds (``put_us``, the text of
``streamtrace.trace.writer.fmt_us``).  Shared by merge's rewrite kernel
(``streamtrace.kernels.rewrite``) and the Nsight Systems text kernel (``streamtrace.kernels.nsys_text``);
tests/kernels/test_kernels.py and tests/kernels/test_nsys_text.py check them against Python's ``str`` /
``fmt_us``."""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["put_int", "put_us"]

_POW10 = np.array([10 ** k for k in range(1, 20)], np.uint64)        # 10 .. 10**19
_DIGITS2 = np.frombuffer(b"".join(b"%02d" % k for k in range(100)), np.uint8).copy()


@njit(cache=True)
def _put_uint(out, o, u):
    """Decimal text of uint64 ``u`` at ``out[o:]``; returns the new end.  Two digits per division
    (a table of "00".."99")."""
    k = 1
    while k < 20 and u >= _POW10[k - 1]:
        k += 1
    end = o + k
    q = end
    h = np.uint64(100)
    while u >= h:
        r = np.intp(u % h) * 2
        u //= h
        q -= 2
        out[q] = _DIGITS2[r]
        out[q + 1] = _DIGITS2[r + 1]
    if u >= np.uint64(10):
        r = np.intp(u) * 2
        out[q - 2] = _DIGITS2[r]
        out[q - 1] = _DIGITS2[r + 1]
    else:
        out[q - 1] = 48 + np.uint8(u)
    return end


@njit(cache=True)
def put_int(out, o, v):
    """Decimal text of int64 ``v`` at ``out[o:]`` (uint8); returns the new end (no allocation)."""
    if v < 0:
        out[o] = 45
        return _put_uint(out, o + 1, np.uint64(0) - np.uint64(v))      # |v|, int64 minimum included
    return _put_uint(out, o, np.uint64(v))


@njit(cache=True)
def put_us(out, o, ns):
    """Exact decimal microseconds of int64 ``ns`` at ``out[o:]``, trailing zeros of the fraction
    stripped (as ``streamtrace.trace.writer.fmt_us``, int64 minimum included); returns the new end."""
    if ns < 0:
        out[o] = 45
        o += 1
        u = np.uint64(0) - np.uint64(ns)
    else:
        u = np.uint64(ns)
    o = _put_uint(out, o, u // np.uint64(1000))
    r = np.int64(u % np.uint64(1000))
    if r != 0:
        out[o] = 46
        o += 1
        d1 = (r // 10) % 10
        d2 = r % 10
        out[o] = 48 + r // 100
        o += 1
        if d1 != 0 or d2 != 0:
            out[o] = 48 + d1
            o += 1
            if d2 != 0:
                out[o] = 48 + d2
                o += 1
    return o
