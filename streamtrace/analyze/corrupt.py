"""GPU events whose duration CUPTI corrupted (issue 33, class 7), kept out of the metrics.

Kineto's traces carry GPU events with impossible durations: negative ones and ones longer than
the whole trace (reported on real traces in HolisticTraceAnalysis issues #325, #331 and #342).
A negative ``dur`` never reaches the store (``ingest`` counts it in
``reader.negative_durations``); a GPU event longer than its rank's trace is left out here, before
any metric is computed, so that device busy time, overlap and the Parquet partitions that
aggregate reads never hold it.

"The whole trace" of a rank: the largest start minus the smallest start over all the rank's
stored events (CPU and GPU, ns).  A GPU event whose ``dur`` exceeds it cannot be real: it would
last longer than the time during which anything at all started.
"""
from __future__ import annotations

import numpy as np

from ..events.store import span_arrays


class WithoutRows:
    """A view of an event store in which some keys' rows are replaced (by the rows kept of
    them): the ``MemoryStore`` methods the analysis reads, each
    key in ``replaced`` as one block of ``STORE_DTYPE`` rows."""

    def __init__(self, store, replaced: dict):
        self.store = store
        self.replaced = replaced

    def __getattr__(self, name):
        return getattr(self.store, name)

    def rows(self, key) -> int:
        return len(self.replaced[key]) if key in self.replaced else self.store.rows(key)

    def blocks(self, key):
        if key in self.replaced:
            return iter([self.replaced[key]] if len(self.replaced[key]) else [])
        return self.store.blocks(key)

    def block_spans(self, key):
        if key not in self.replaced:
            return self.store.block_spans(key)
        r = self.replaced[key]
        return span_arrays([(len(r), int(r["ts"].min()), int((r["ts"] + r["dur"]).max()))] if len(r) else [])

    def block(self, key, j):
        return self.replaced[key] if key in self.replaced else self.store.block(key, j)

    def get(self, key):
        return self.replaced[key] if key in self.replaced else self.store.get(key)

    def drop(self, key):
        self.replaced.pop(key, None)
        self.store.drop(key)

    def take(self, key):
        out = self.get(key)
        self.drop(key)
        return out


def trace_span(store, keys) -> int:
    """Largest minus smallest ``ts`` (int ns) over the rows of ``keys`` in ``store``; 0 when
    there are none."""
    lo, hi = None, None
    for key in keys:
        for b in store.blocks(key):
            if len(b):
                a, z = int(b["ts"].min()), int(b["ts"].max())
                lo = a if lo is None else min(lo, a)
                hi = z if hi is None else max(hi, z)
    return 0 if lo is None else hi - lo


def without_overlong(store, keys):
    """``(store view, n)``: ``store`` with every GPU event (keys ``("gpu", ...)``) whose ``dur``
    exceeds the rank's ``trace_span`` left out, and ``n`` how many were.  ``keys``: the
    rank's keys.  The store itself is not changed; the view holds the kept rows of the GPU keys
    that had such an event (uncompressed), and reads the others through.  The blocks' spans
    (``block_spans``) rule the check out without
    decompressing anything unless a GPU block lasts longer than the spread of the blocks' first
    starts (a lower bound of the span)."""
    lo = hi = None                                       # the blocks' first starts: smallest, largest
    longest = None                                       # the longest GPU block (last end - first start)
    for key in keys:                                     # (no list of every key's spans: a million tracks)
        rows, first, last = store.block_spans(key)
        used = first[rows > 0]
        if len(used):
            a, b = int(used.min()), int(used.max())
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
        if key[0] == "gpu" and len(rows):
            d = int((last - first).max())
            longest = d if longest is None else max(longest, d)
    if lo is None:
        return store, 0
    low = hi - lo                                        # <= the span: no block can hold a longer event
    if longest is None or longest <= low:
        return store, 0                                  # the usual case: nothing decompressed
    span = trace_span(store, keys)
    replaced, n = {}, 0
    for key in keys:
        if key[0] != "gpu":
            continue
        if not any(len(b) and int(b["dur"].max()) > span for b in store.blocks(key)):
            continue
        rows = store.get(key)
        bad = rows["dur"] > span
        n += int(bad.sum())
        replaced[key] = rows[~bad]
    return (WithoutRows(store, replaced) if replaced else store), n


def corrupted_warning(path, negative: int, overlong: int) -> str:
    """The warning line for GPU events left out for a corrupted duration."""
    return (f"{path}: {negative + overlong:,} event(s) with a corrupted duration left out of the metrics "
            f"({negative:,} negative, {overlong:,} GPU event(s) longer than the whole trace; CUPTI, see "
            f"HolisticTraceAnalysis #325/#331/#342)")
