"""Kineto's explicit CUDA synchronisation links (newer Kineto's ``cuda_sync`` events, kept by
analyze in ``cuda_sync/``, ``streamtrace.analyze.cuda_sync``) as the critical path uses them
(``streamtrace.aggregate.critical_local``): a ``Stream Wait Event`` makes an event on the waiting
stream wait for the last event launched on the recording stream before the ``cudaEventRecord``
(``linked_waits``); an ``Event Sync`` / ``Stream Sync`` / ``Context Sync`` names the GPU event a
``cudaEventSynchronize`` / ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` call waited for
(``sync_target``).  Correlation ids are given in call order on a rank, so "the last event
launched before a call" is the largest correlation id below the call's.  The same links as
HolisticTraceAnalysis' critical path (``hta/analyzers/critical_path_analysis.py``) reads."""
from __future__ import annotations

import numpy as np

from .alignment import column_numpy

SYNC_COLUMNS = ["device", "stream", "ts_ns", "name", "wait_on_stream", "record_correlation", "correlation"]
"""The ``cuda_sync/`` columns read."""
LINK_COLUMNS = ("device", "stream", "ts_ns", "record_correlation", "wait_on_stream")
"""An explicit link (``cuda_sync`` row): device, waiting stream, sync time, record's correlation, recording stream."""


def sync_links(part, table) -> dict | None:
    """The part's explicit cross-stream links from its ``cuda_sync`` rows (pyarrow table or None,
    ``streamtrace.analyze.cuda_sync``): the ``Stream Wait Event`` rows (any row but ``Event Sync``
    with a waiting stream, a recording stream and a record correlation id), as
    ``LINK_COLUMNS`` arrays with ``ts_ns`` aligned.  None when there are none: the trace's waits
    are then inferred."""
    if table is None or not table.num_rows:
        return None
    c = {x: column_numpy(table[x]) for x in SYNC_COLUMNS}
    ok = (c["stream"] >= 0) & (c["wait_on_stream"] >= 0) & (c["record_correlation"] >= 0) & \
        (c["name"].astype(str) != "Event Sync")
    if not ok.any():
        return None
    out = {x: np.asarray(c[x][ok], np.int64) for x in LINK_COLUMNS}
    out["ts_ns"] = part.align(out["ts_ns"])
    return out


def sync_targets(table) -> dict | None:
    """What each sync call Kineto links waited for, from the part's ``cuda_sync`` rows (pyarrow
    table or None): ``{call correlation: (kind, wait_on_stream, record correlation, stream)}`` for
    ``Event Sync`` (with its recording stream and record), ``Stream Sync`` and ``Context Sync``
    rows; None when there are none."""
    if table is None or not table.num_rows:
        return None
    c = {x: column_numpy(table[x]) for x in ("name", "correlation", "wait_on_stream", "record_correlation", "stream")}
    out = {}
    for name, corr, won, rec, st in zip(c["name"].astype(str).tolist(), *(c[x].tolist() for x in (
            "correlation", "wait_on_stream", "record_correlation", "stream"))):
        if corr > 0 and (name in ("Stream Sync", "Context Sync") or (name == "Event Sync" and won >= 0 and rec > 0)):
            out[int(corr)] = (name, int(won), int(rec), int(st))
    return out or None


def linked_waits(dev, stream, ts, te, corr, links):
    """Cross-stream waits as Kineto links them (``cuda_sync`` events, ``streamtrace.analyze.cuda_sync``):
    per event (sorted by device, stream, start) the row of the event it waits for, -1 none.  A link
    ``(device, waiting stream, sync time, record correlation, recording stream)`` makes the first
    event on the waiting stream starting at or after the sync time wait for the last event on the
    recording stream launched before the ``cudaEventRecord`` (correlation ids are given in call
    order on the rank: the largest correlation below the record's).  A link whose source ends after
    its destination starts is dropped (the clocks disagree; no edge against time); of several links
    into one event the latest-ending source is kept."""
    n = len(ts)
    x = np.full(n, -1, np.int64)
    lane = {}
    if n:
        cut = np.flatnonzero(np.r_[True, (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1]), True])
        lane = {(int(dev[a]), int(stream[a])): (int(a), int(b)) for a, b in zip(cut[:-1], cut[1:])}
    for d, s_wait, t_sync, rec, s_rec in zip(*(links[c].tolist() for c in LINK_COLUMNS)):
        if (d, s_wait) not in lane or (d, s_rec) not in lane:
            continue
        a, b = lane[(d, s_wait)]
        j = a + int(np.searchsorted(ts[a:b], t_sync, "left"))
        a2, b2 = lane[(d, s_rec)]
        c = corr[a2:b2]
        before = np.flatnonzero((c >= 0) & (c < rec))
        if j >= b or not len(before):
            continue
        i = a2 + int(before[np.argmax(c[before])])
        if te[i] <= ts[j] and (x[j] < 0 or te[i] > te[x[j]]):
            x[j] = i
    return x


def sync_target(tgt, kk, corr, kend) -> int:
    """The row (of the step's GPU events) a linked sync call waited for, -1 none: ``Event Sync``
    the last event launched on the recording stream before the ``cudaEventRecord`` (the largest
    correlation id below the record's: ids are given in call order); ``Stream Sync`` the last
    launched on its stream before the call; ``Context Sync`` the latest to end of those launched
    before the call."""
    kind, wait_on, record, stream = tgt
    kstream, kcorr = kk
    if kind == "Event Sync":
        m = (kstream == wait_on) & (kcorr < record)
    elif kind == "Stream Sync":
        m = (kstream == stream) & (kcorr < corr)
    else:
        m = kcorr < corr
    m &= kcorr > 0
    if not m.any():
        return -1
    idx = np.flatnonzero(m)
    return int(idx[np.argmax(kend[idx] if kind == "Context Sync" else kcorr[idx])])
