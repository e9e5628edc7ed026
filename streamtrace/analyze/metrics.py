"""Per-device GPU utilisation and communication-overlap metrics.

The definitions follow ``shared/traces/README.md`` (section "../reference/ —
expected metrics for real/"), the same definitions that produced the reference
files ``shared/reference/<trace>.metrics.json``:

* GPU events are complete events (``ph`` ``"X"``) whose ``cat`` is ``kernel``,
  ``gpu_memcpy`` or ``gpu_memset`` (legacy Kineto: ``Kernel``, ``Memcpy``,
  ``Memset``).  Events with a negative ``dur`` are ignored.
* communication: a kernel whose name matches ``(?i)nccl|rccl``; memory:
  ``gpu_memcpy`` / ``gpu_memset``; compute: every other kernel.
* ``span_us`` = last end - first start; ``busy_us`` = length of the union of all
  GPU intervals; ``idle_us`` = span - busy.
* ``compute_us``, ``comm_us``, ``memory_us`` = length of the union of each class.
* ``overlap_us`` = length of (union comm) ∩ (union compute);
  ``exposed_comm_us`` = comm - overlap; ``overlap_pct`` = 100 * overlap / comm
  (``None`` when comm is 0).
* ``kernel_time_us`` = plain sum of GPU event durations; ``gpu_events`` = count.

All arithmetic is done exactly on int64 nanoseconds; only the final values are
converted to microseconds (float, rounded to 3 decimals).
"""
from __future__ import annotations

import re

import numpy as np

from ..kernels import intervals

__all__ = [
    "COMPUTE",
    "COMM",
    "MEMORY",
    "NOT_GPU",
    "METRIC_KEYS",
    "classify_gpu_event",
    "device_metrics",
]

COMPUTE = 0
COMM = 1
MEMORY = 2
#: the unions ``device_metrics`` measures, as class sets (columns COMPUTE, COMM, MEMORY): every
#: event (busy), compute, communication, memory, compute or communication (for the overlap)
_CLASS_SETS = np.array([[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], bool)
NOT_GPU = -1

#: Keys of the dict returned by ``device_metrics``, in reference-file order.
METRIC_KEYS = (
    "gpu_events",
    "kernel_time_us",
    "span_us",
    "busy_us",
    "idle_us",
    "compute_us",
    "comm_us",
    "memory_us",
    "overlap_us",
    "exposed_comm_us",
    "overlap_pct",
)

_KERNEL_CATS = frozenset(("kernel", "Kernel"))
_MEMORY_CATS = frozenset(("gpu_memcpy", "gpu_memset", "Memcpy", "Memset"))
_COMM_NAME = re.compile(r"nccl|rccl", re.IGNORECASE)


def classify_gpu_event(cat, name):
    """Class code of a GPU event, following ``shared/traces/README.md``.

    Parameters
    ----------
    cat : str or None
        The event's ``cat``.  ``kernel`` / ``Kernel`` are kernels;
        ``gpu_memcpy``, ``gpu_memset``, ``Memcpy``, ``Memset`` are memory
        operations (exact, case-sensitive match, as in the README).
    name : str or None
        The event's ``name``; a kernel whose name contains ``nccl`` or ``rccl``
        (any case, anywhere: ``re.search`` of ``(?i)nccl|rccl``) is communication.

    Returns
    -------
    int
        ``COMPUTE`` (0), ``COMM`` (1), ``MEMORY`` (2), or
        ``NOT_GPU`` (-1) when ``cat`` is not a GPU category.

    The README also requires ``ph == "X"``; checking ``ph`` (and dropping
    negative durations) is left to the caller, which sees the whole event.
    """
    if cat in _KERNEL_CATS:
        if name and _COMM_NAME.search(name):
            return COMM
        return COMPUTE
    if cat in _MEMORY_CATS:
        return MEMORY
    return NOT_GPU


def _us(ns):
    """int ns -> float microseconds rounded to 3 decimals (exact: ns is an integer)."""
    return round(int(ns) / 1000.0, 3)


def device_metrics(start_ns, end_ns, kind):
    """GPU metrics of ONE device, as defined in ``shared/traces/README.md``.

    Parameters
    ----------
    start_ns, end_ns : array_like of int, shape (N,)
        Start and end (``ts`` and ``ts + dur``) of each GPU event of the device, in
        int64 nanoseconds, in any order.  Events with ``end_ns < start_ns``
        (negative ``dur``) are ignored, as the README prescribes; zero-length
        events count in ``gpu_events`` and ``span_us`` but cover no time.
    kind : array_like of int8, shape (N,)
        ``COMPUTE`` (0), ``COMM`` (1) or ``MEMORY`` (2) per event,
        e.g. from ``classify_gpu_event``.

    Returns
    -------
    dict
        Exactly the keys of ``METRIC_KEYS``: ``gpu_events`` (int) and
        ``span_us, busy_us, idle_us, compute_us, comm_us, memory_us, overlap_us,
        exposed_comm_us, kernel_time_us`` (float microseconds rounded to 3
        decimals), and ``overlap_pct`` (float, 100 * overlap / comm rounded to 3
        decimals, or ``None`` when comm is 0).  With no events every time is 0.0.

    Complexity
    ----------
    O(N log N) (one stable argsort by start), then one O(N) sweep for every union
    (``streamtrace.kernels.intervals.union_lengths``); memory: 8 bytes an event beyond the
    inputs (the sort order), no per-class copies.

    Raises
    ------
    ValueError
        if the three arrays differ in length, or ``kind`` holds a code other
        than 0, 1, 2.
    TypeError
        if ``start_ns`` / ``end_ns`` do not hold integers.
    """
    s = intervals.as_int64(start_ns, "start_ns")
    e = intervals.as_int64(end_ns, "end_ns")
    k = np.asarray(kind)
    if k.ndim != 1:
        raise ValueError(f"kind must be one-dimensional, got shape {k.shape}")
    if not (s.shape[0] == e.shape[0] == k.shape[0]):
        raise ValueError(
            f"start_ns, end_ns and kind lengths differ "
            f"({s.shape[0]}, {e.shape[0]}, {k.shape[0]})"
        )
    if k.size and (k.dtype.kind not in "iu" or not np.isin(k, (COMPUTE, COMM, MEMORY)).all()):
        raise ValueError("kind must hold only COMPUTE (0), COMM (1) or MEMORY (2)")

    keep = e >= s
    if not keep.all():
        s, e, k = s[keep], e[keep], k[keep]

    n = int(s.shape[0])
    if n == 0:
        span = busy = compute = comm = memory = overlap = kernel_time = 0
    else:
        span = int(e.max()) - int(s.min())
        kernel_time = int((e - s).sum())
        # one sweep over the start order for every union (no per-class copies); overlap =
        # |comm ∩ compute| = |comm| + |compute| - |comm ∪ compute| (inclusion-exclusion)
        busy, compute, comm, memory, either = intervals.union_lengths(s, e, k, _CLASS_SETS)
        overlap = comm + compute - either

    return {
        "gpu_events": n,
        "kernel_time_us": _us(kernel_time),
        "span_us": _us(span),
        "busy_us": _us(busy),
        "idle_us": _us(span - busy),
        "compute_us": _us(compute),
        "comm_us": _us(comm),
        "memory_us": _us(memory),
        "overlap_us": _us(overlap),
        "exposed_comm_us": _us(comm - overlap),
        "overlap_pct": None if comm == 0 else round(100.0 * overlap / comm, 3),
    }
