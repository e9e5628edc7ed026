"""Reading one trace into an event store (``ingest``): complete events as
``STORE_DTYPE`` rows keyed by ``(kind, rank, pid, tid)``, GPU
events apart from CPU events, collective-args rows on the side."""
from __future__ import annotations

import numpy as np

from ..trace.decode import loads
from ..trace.reader import TraceReader
from .columns import NO_TS, StringTable, column_batches, cut_warning
from .store import STORE_DTYPE

#: newer Kineto's GPU synchronisation events (``ph: X`` on the waiting stream; CUPTI's
#: synchronization activity), stored apart as ``("gpusync", ...)`` rows
CUDA_SYNC_CAT = "cuda_sync"
#: their args kept, in a collective-args row under these keys (-1 when absent)
CUDA_SYNC_ARGS = ("wait_on_stream", "wait_on_cuda_event_record_corr_id")


def _sync_args(b, j, path) -> dict:
    """The ``CUDA_SYNC_ARGS`` of the batch's event ``j`` (decoded from its text: a few per step)."""
    ev = loads(b.buf[int(b.starts[j]):int(b.ends[j])], path, b.offset + int(b.starts[j]) - int(b.starts[0]))
    args = ev.get("args") if isinstance(ev, dict) and isinstance(ev.get("args"), dict) else {}
    out = {}
    for key in CUDA_SYNC_ARGS:
        v = args.get(key)
        out["@" + key] = v if type(v) is int and -2 ** 63 <= v < 2 ** 63 else -1
    return out


def _store_rows(cols, idx, comm_base: int) -> np.ndarray:
    """Rows ``idx`` (int64 indices) of ``cols`` (EVENT_DTYPE) as STORE_DTYPE (the columns the
    analysis keeps), a field at a time (a gather of whole EVENT_DTYPE rows copies the columns not kept too);
    their ``comm`` indices shifted by ``comm_base`` (the collective-args rows before the batch's)."""
    out = np.empty(len(idx), STORE_DTYPE)
    for f in STORE_DTYPE.names:
        out[f] = cols[f][idx]
    if comm_base:
        c = out["comm"]
        c[c >= 0] += comm_base
    return out


def group_rows(keycols) -> dict:
    """Rows grouped by the tuple of key columns, each group in row order:
    ``{key tuple: slice or index array}``.  Consecutive rows mostly share a key
    (one thread's events come in runs), so this works on runs: O(N) plus a
    dictionary step per run, instead of a sort."""
    n = len(keycols[0])
    if n == 0:
        return {}
    change = np.zeros(n, bool)
    change[0] = True
    for a in keycols:
        change[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    runs: dict = {}                        # (the key tuples of Python ints: ``tolist``)
    keys = zip(*(np.asarray(c)[starts].tolist() for c in keycols))
    for key, a, b in zip(keys, starts.tolist(), ends.tolist()):
        runs.setdefault(key, []).append((a, b))
    out = {}
    for key, rr in runs.items():
        if len(rr) == 1:
            out[key] = slice(*rr[0])
        else:                              # the runs' rows: one arange, shifted per run
            a, b = np.asarray(rr, np.int64).T
            out[key] = np.arange(int((b - a).sum())) + np.repeat(a - np.cumsum(np.r_[0, (b - a)[:-1]]), b - a)
    return out


def ingest(path, store, gpu_cats, salvage=False, progress=None, byte_range=None, on_batch=None):
    """Read one trace into ``store``: complete events (``ph == "X"``, ``dur >= 0``) as
    ``STORE_DTYPE`` rows keyed ``("gpu", rank, pid, tid)`` for GPU events (``cat`` in
    ``gpu_cats``: Kineto's kernel and memcpy/memset categories, see
    ``Patterns``), ``("gpuanno", rank, pid, tid)`` for GPU-side
    annotations (``gpu_user_annotation``: a GPU device's pid and a stream's tid) and ``("cpu", rank,
    pid, tid)`` for CPU events (``rank`` = ``args.rank`` or -1; ``Trace`` spans are not stored), and
    ``("gpusync", rank, pid, tid)`` for newer Kineto's ``cuda_sync`` events (pid: the device, tid: the
    waiting stream; stored as CPU events too, as before they were told apart, so that the ops
    table keeps its rows), each with a collective-args row holding ``"@wait_on_stream"`` and
    ``"@wait_on_cuda_event_record_corr_id"`` (``CUDA_SYNC_ARGS``, -1 when absent).
    ``byte_range``: read only that slice of a plain file's events (see ``streamtrace.trace.ranges``).
    ``on_batch(b, cols, table)``: called with each ``RawBatch`` (as ``columns.column_batches`` yields it) in
    file order, its columns (``EVENT_DTYPE``, every event of the batch) and the ``StringTable`` their
    ``cat``/``name`` ids index, before its rows are stored (a consumer of the same bytes, e.g. analyze's
    op costs, then needs no pass of its own).

    Complete events without a usable time (``ts`` or ``dur`` missing, not a number, beyond int64 ns;
    a number written as a string is read; a negative ``ts`` is a time like any other) are not stored: they are counted in
    ``reader.unusable_times``; those whose ``dur`` is a negative number (CUPTI's corrupted
    durations, issue 33) are not stored either, counted in ``reader.negative_durations``.

    Returns ``(table, comm_rows, reader)``: the ``StringTable`` the rows' ``cat``/``name``
    ids index, the collective-args rows the rows' ``comm`` indexes, and the finished
    ``TraceReader`` (metadata, warnings, ``unusable_times``).
    Raises ``TraceError`` for unreadable input."""
    table = StringTable()
    comm_rows: list = []
    reader = TraceReader(path, salvage=salvage, progress=progress, byte_range=byte_range)
    kind_of = np.zeros(0, np.int8)       # per string id: 1 GPU cat, 2 skipped cat, 3 gpu annotation, 4 cuda_sync
    reader.unusable_times = 0
    reader.negative_durations = 0
    for b, cols, rows in column_batches(reader, table, path):
        if on_batch is not None:
            on_batch(b, cols, table)
        if len(kind_of) < len(table):
            kind_of = np.concatenate([kind_of, np.asarray(
                [1 if t in gpu_cats else 3 if t == "gpu_user_annotation"
                 else 4 if t == CUDA_SYNC_CAT else 2 if t == "Trace" else 0
                 for t in table.strings[len(kind_of):]], np.int8)])
        complete = cols["ph"] == ord("X")
        has_ts = cols["ts"] != NO_TS                                   # a negative ts is a time (issue 49)
        timed = (cols["dur"] >= 0) & has_ts
        negative = complete & has_ts & ((b.flags & 10) == 2) & (b.dur_ns < 0)   # a dur read, < 0
        reader.negative_durations += int(negative.sum())
        reader.unusable_times += int((complete & ~timed & ~negative).sum())
        cat = cols["cat"]                               # per event: its category's kind (0: none), -1 not stored
        k = np.append(kind_of, np.int8(0))[np.where(cat >= 0, cat, len(kind_of))]   # (a table of no strings yet too)
        k[~(complete & timed)] = -1
        for j in np.flatnonzero(k == 4).tolist():       # cuda_sync: its args a row each (after the batch's own)
            cols["comm"][j] = len(rows)
            rows.append(_sync_args(b, j, path))
        base = len(comm_rows)
        comm_rows.extend(rows)
        for tag, sel in (("gpu", k == 1), ("gpuanno", k == 3), ("gpusync", k == 4),
                         ("cpu", ((k == 0) | (k == 4)) & (cols["pid"] >= 0))):
            idx = np.flatnonzero(sel)
            if len(idx):
                kept = _store_rows(cols, idx, base)
                for key, at in group_rows([cols[f][idx] for f in ("rank", "pid", "tid")]).items():
                    store.add((tag, *key), kept[at])
    store.flush()
    if table.cut:
        reader.warnings.append(cut_warning(path, table.cut))
    return table, comm_rows, reader
