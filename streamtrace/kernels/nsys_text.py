"""The Chrome-trace text of Nsight Systems rows (``merge`` of an export,
``streamtrace.merge.nsys``): one ``X`` event per row and the ``ac2g`` flow end it starts, written
straight into a byte buffer, byte for byte what ``orjson.dumps`` writes for the event dicts of
``streamtrace.merge.nsys.event_dicts`` (the twin: tests/kernels/test_nsys_text.py).

The Python path spent ~5 us a row building dicts and formatting ``ts``/``dur`` (43 of 53 CPU-s of a
300 MB export's merge, bench/RESULTS.md); this writes a batch of 16 k rows in one call.  Names and
categories come pre-encoded as JSON strings (``orjson.dumps`` of each, so their escaping is
orjson's) in one table; times are exact decimal microseconds of int64 ns
(``put_us``).
"""
from __future__ import annotations

from numba import njit

from .numtext import put_int, put_us
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["nsys_event_text", "ROW_BYTES"]

#: bytes of one row's two events, numbers and quotes included, beside its name and category
ROW_BYTES = 640

_ID_LIMIT = 1 << 40                  # merge.pids.unique_id: ints in [0, 2**40) become rank << 40 | id

_X_CAT = tuple(b'{"ph":"X","cat":')
_NAME = tuple(b',"name":')
_PID = tuple(b',"pid":')
_TID = tuple(b',"tid":')
_TS = tuple(b',"ts":')
_DUR = tuple(b',"dur":')
_ARGS_RANK = tuple(b',"args":{"rank":')
_CORR = tuple(b',"correlation":')
_RAW = tuple(b',"raw correlation":')
_DEVICE = tuple(b',"device":')
_STREAM = tuple(b',"stream":')
_FLOW_F = tuple(b',{"ph":"f","id":')
_FLOW_S = tuple(b',{"ph":"s","id":')
_FLOW_TAIL = tuple(b',"cat":"ac2g","name":"ac2g","args":{"rank":')
_BP = tuple(b'},"bp":"e"}')


@njit(cache=True, nogil=True, inline="always")
def _lit(out, at, lit):
    for c in lit:
        out[at] = c
        at += 1
    return at


@njit(cache=True, nogil=True)
def _uid(out, at, rank, corr):
    """``merge.pids.unique_id(rank, corr)`` as JSON (``corr`` >= 0): ``rank << 40 | corr`` below
    2**40, else the string ``"r<rank>:<corr>"``."""
    if corr < _ID_LIMIT:
        return put_int(out, at, (rank << 40) | corr)
    out[at] = 34
    out[at + 1] = 114
    at = put_int(out, at + 2, rank)
    out[at] = 58
    at = put_int(out, at + 1, corr)
    out[at] = 34
    return at + 1


@njit(cache=True, nogil=True)
def _text(out, at, table, table_at, k):
    for i in range(table_at[k], table_at[k + 1]):
        out[at] = table[i]
        at += 1
    return at


@njit(cache=True, nogil=True)
def _place(out, at, pid, track, ts):
    """``,"pid":P,"tid":T,"ts":TS`` (the ts in us)."""
    at = _lit(out, at, _PID)
    at = put_int(out, at, pid)
    at = _lit(out, at, _TID)
    at = put_int(out, at, track)
    at = _lit(out, at, _TS)
    return put_us(out, at, ts)


@njit(cache=True, nogil=True)
def nsys_event_text(ts, dur, cat, name, pid, track, rank, corr, dev, stream, flow, gpu, table, table_at, done, out):
    """Write the events of ``n`` rows into ``out`` (uint8, at least ``n * ROW_BYTES`` plus the
    rows' name and category bytes), comma-separated, no brackets.

    Per row ``j`` (int64[n] each): ``ts`` (ns, shifted) and ``dur`` (ns), ``cat`` and ``name``
    (indices into the JSON text table ``table`` (uint8) / ``table_at`` (int64[k + 1] offsets)),
    the merged ``pid``, ``track`` (the tid, or the GPU stream), ``rank`` (>= 0), ``corr`` (the raw
    correlation id; < 0: none), ``dev`` and ``stream`` (written in ``args`` when ``gpu``), ``flow``
    (index into ``done`` (uint8) of the flow it starts, < 0: none).  A row writes
    ``{"ph":"X",...,"args":{"rank",["correlation","raw correlation"],["device","stream"]}}``, then,
    when its flow is not ``done`` yet (which it then marks), the flow end: ``ph`` ``f`` with
    ``"bp":"e"`` on a GPU row, ``s`` on a CPU row, its id the row's correlation made unique.

    Returns ``(bytes written, events written, flow ends written)``.  O(bytes)."""
    at = 0
    nflow = 0
    n = ts.shape[0]
    for j in range(n):
        if j:
            out[at] = 44
            at += 1
        at = _lit(out, at, _X_CAT)
        at = _text(out, at, table, table_at, cat[j])
        at = _lit(out, at, _NAME)
        at = _text(out, at, table, table_at, name[j])
        at = _place(out, at, pid[j], track[j], ts[j])
        at = _lit(out, at, _DUR)
        at = put_us(out, at, dur[j])
        at = _lit(out, at, _ARGS_RANK)
        at = put_int(out, at, rank[j])
        if corr[j] >= 0:
            at = _lit(out, at, _CORR)
            at = _uid(out, at, rank[j], corr[j])
            at = _lit(out, at, _RAW)
            at = put_int(out, at, corr[j])
        if gpu:
            at = _lit(out, at, _DEVICE)
            at = put_int(out, at, dev[j])
            at = _lit(out, at, _STREAM)
            at = put_int(out, at, stream[j])
        out[at] = 125
        out[at + 1] = 125
        at += 2
        k = flow[j]
        if k >= 0 and not done[k]:
            done[k] = 1
            nflow += 1
            at = _lit(out, at, _FLOW_F if gpu else _FLOW_S)
            at = _uid(out, at, rank[j], corr[j])
            at = _place(out, at, pid[j], track[j], ts[j])
            at = _lit(out, at, _FLOW_TAIL)
            at = put_int(out, at, rank[j])
            if gpu:
                at = _lit(out, at, _BP)
            else:
                out[at] = 125
                out[at + 1] = 125
                at += 2
    return at, n + nflow, nflow
