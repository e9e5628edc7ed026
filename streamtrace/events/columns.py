"""Columnar events: numpy structured arrays with interned strings, built from the
reader's raw batches by the numba kernel :func:`~streamtrace.kernels.extract.extract_columns`.

``EVENT_DTYPE`` (one row per event, file order):

====================  =======  ===========================================================
field                 dtype    meaning
====================  =======  ===========================================================
``ts``                int64    start, ns (exact, from the text, also of a number written as a
                               JSON string; -1 when absent or unusable)
``dur``               int64    duration, ns (-1 when absent or unusable)
``ph``                uint8    first byte of the phase (``ord("X")`` ...), 0 when absent
``cat``, ``name``     int32    ids in the :class:`StringTable` (-1 when absent)
``pid``, ``tid``      int64    integer ids; string pids/tids (``"Spans"``) become
                               ``STR_ID_BASE + string id`` (-2**62 + id, far below any real
                               id, negative ones included; the text is in the table)
``correlation``       int64    ``args.correlation`` (-1 when absent)
``external_id``       int64    ``args["External id"]`` (legacy ``external id``)
``flow_id``           int64    ``id`` of flow events
``stream``            int64    ``args.stream``
``device``            int64    ``args.device``
``rank``              int64    ``args.rank`` (merged traces), else -1
``comm``              int32    row in the batch's collective-args table, else -1
====================  =======  ===========================================================
"""
from __future__ import annotations

import json

import numpy as np
import orjson

from ..kernels import extract as X
from ..trace.decode import loads, text_ns

EVENT_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("ph", "u1"), ("cat", "i4"), ("name", "i4"),
                        ("pid", "i8"), ("tid", "i8"), ("correlation", "i8"), ("external_id", "i8"),
                        ("flow_id", "i8"), ("stream", "i8"), ("device", "i8"), ("rank", "i8"), ("comm", "i4")])

STR_ID_BASE = -(1 << 62)    # string pids/tids are stored as STR_ID_BASE + their string id


def is_str_id(v):
    """Mask (or bool) of pid/tid values that stand for strings."""
    return (v >= STR_ID_BASE) & (v < STR_ID_BASE + (1 << 40))


# an event whose args hold one of these carries collective metadata (kernel and twin agree)
COMM_TRIGGER_KEYS = ("Collective name", "In msg nelems", "Process Group Name", "Process Group Ranks")
COMM_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
             "Process Group Name", "Process Group Description", "Process Group Ranks", "In split size",
             "Out split size")


class StringTable:
    """Interned strings: ``id(text) -> int`` and ``strings[id] -> text``."""

    def __init__(self):
        self.strings: list[str] = []
        self.ids: dict[str, int] = {}
        self._by_hash: dict[int, int] = {}

    def id(self, text: str) -> int:
        i = self.ids.get(text)
        if i is None:
            i = self.ids[text] = len(self.strings)
            self.strings.append(text)
        return i

    def __len__(self):
        return len(self.strings)

    def intern_spans(self, hashes, starts, ends, raw: bytes) -> np.ndarray:
        """Map FNV hashes of JSON string spans (``raw[s:e]`` includes the quotes) to
        ids, decoding each new string once.  Absent strings (start -1) give -1.
        Returns int32 ids.  Hash collisions are detected (a different text under a
        known hash) and resolved exactly by decoding those events' text."""
        out = np.full(len(hashes), -1, np.int32)
        present = starts >= 0
        if not present.any():
            return out
        h = hashes[present]
        uh, first, inv = np.unique(h, return_index=True, return_inverse=True)
        idx = np.flatnonzero(present)
        lut = np.empty(len(uh), np.int32)
        for k, (hv, fi) in enumerate(zip(uh.tolist(), first.tolist())):
            known = self._by_hash.get(hv)
            if known is None:
                j = idx[fi]
                text = json.loads(raw[starts[j]:ends[j]])
                known = self._by_hash[hv] = self.id(text)
            lut[k] = known
        out[present] = lut[inv]
        return out


def _int_or(v, default=-1):
    return v if type(v) is int and -2 ** 63 <= v < 2 ** 63 else default


def _str_key(v, table):
    if type(v) is int and -2 ** 63 <= v < 2 ** 63:
        return v
    if v is None:
        return -1
    return STR_ID_BASE + table.id(v if isinstance(v, str) else json.dumps(v))


def row_from_dict(ev: dict, ts, dur, flag, table: StringTable, row, comm_rows: list):
    """Fill one EVENT_DTYPE row from a decoded event (the Python twin of the kernel)."""
    if not isinstance(ev, dict):
        ev = {}
    ph = ev.get("ph")
    row["ts"] = _time(ts, flag, 1, 4, ev.get("ts"))
    row["dur"] = _time(dur, flag, 2, 8, ev.get("dur"))
    row["ph"] = ord(ph[0]) if isinstance(ph, str) and ph and ord(ph[0]) < 256 else 0
    cat, name = ev.get("cat"), ev.get("name")
    row["cat"] = table.id(cat) if isinstance(cat, str) else -1
    row["name"] = table.id(name) if isinstance(name, str) else -1
    row["pid"] = _str_key(ev.get("pid"), table)
    row["tid"] = _str_key(ev.get("tid"), table)
    row["flow_id"] = _int_or(ev.get("id"))
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    row["correlation"] = _int_or(args.get("correlation"))
    ext = args.get("External id")
    row["external_id"] = ext if type(ext) is int and -2 ** 63 <= ext < 2 ** 63 else _int_or(args.get("external id"))
    row["stream"] = _int_or(args.get("stream"))
    row["device"] = _int_or(args.get("device"))
    row["rank"] = _int_or(args.get("rank"))
    if any(k in args for k in COMM_TRIGGER_KEYS):
        row["comm"] = len(comm_rows)
        comm_rows.append({k: args.get(k) for k in COMM_KEYS})
    else:
        row["comm"] = -1


def _time(ns, flag, has, bad, value) -> int:
    """An event's ts or dur (int ns): the scanner's value, else a number written as a string
    (:func:`~streamtrace.trace.decode.text_ns`), else -1."""
    if flag & has and not flag & bad:
        return ns
    v = text_ns(value) if flag & bad else None
    return -1 if v is None else v


def columns_from_dicts(events, ts_ns, dur_ns, flags, table: StringTable):
    """Plain-Python twin of :func:`columns_from_batch`: (structured array, comm rows)."""
    out = np.zeros(len(events), EVENT_DTYPE)
    comm = []
    for i, ev in enumerate(events):
        row_from_dict(ev, int(ts_ns[i]), int(dur_ns[i]), int(flags[i]), table, out[i], comm)
    return out, comm


def columns_from_batch(b, table: StringTable, path="?"):
    """Columns of one :class:`~streamtrace.trace.reader.RawBatch` read with ``decode=False``.

    Returns ``(array of EVENT_DTYPE, comm_rows)``; ``comm_rows[k]`` is a dict of the
    collective args (``COMM_KEYS``) of the event whose ``comm`` field is k."""
    n = len(b.starts)
    buf = np.frombuffer(b.buf, np.uint8)
    i64 = lambda: np.empty(n, np.int64)  # noqa: E731
    ph = np.empty(n, np.uint8)
    pid, tid, cat_h, cat_s, cat_e, name_h, name_s, name_e = (i64() for _ in range(8))
    flow, corr, ext, stream, device, rank = (i64() for _ in range(6))
    flags = np.empty(n, np.uint8)
    X.extract_columns(buf, b.starts, b.ends, ph, pid, tid, cat_h, cat_s, cat_e, name_h, name_s, name_e,
                      flow, corr, ext, stream, device, rank, flags)
    out = np.zeros(n, EVENT_DTYPE)
    ok_ts = (b.flags & 1).astype(bool) & ~(b.flags & 4).astype(bool)
    out["ts"] = np.where(ok_ts, b.ts_ns, -1)
    ok_dur = (b.flags & 2).astype(bool) & ~(b.flags & 8).astype(bool)
    out["dur"] = np.where(ok_dur, b.dur_ns, -1)
    out["ph"] = ph
    out["cat"] = table.intern_spans(cat_h, cat_s, cat_e, b.buf)
    out["name"] = table.intern_spans(name_h, name_s, name_e, b.buf)
    for col, src, bit in (("pid", pid, X.F_PID_STR), ("tid", tid, X.F_TID_STR)):
        out[col] = src
        strs = np.flatnonzero(flags & bit)
        if len(strs):
            for j in strs.tolist():
                raw = _string_value(b.buf, int(b.starts[j]), int(b.ends[j]), col)
                out[col][j] = STR_ID_BASE + table.id(raw)
    out["correlation"], out["external_id"], out["flow_id"] = corr, ext, flow
    out["stream"], out["device"], out["rank"] = stream, device, rank
    out["comm"] = -1
    comm_rows = []
    for j in np.flatnonzero(b.flags & 12).tolist():         # TS_BAD | DUR_BAD: a number in a string?
        raw = b.buf[int(b.starts[j]):int(b.ends[j])]
        ev = loads(raw, path, b.offset + int(b.starts[j]) - int(b.starts[0]))
        if isinstance(ev, dict):
            f = int(b.flags[j])
            out["ts"][j] = _time(int(b.ts_ns[j]), f, 1, 4, ev.get("ts"))
            out["dur"][j] = _time(int(b.dur_ns[j]), f, 2, 8, ev.get("dur"))
    slow = np.flatnonzero(flags & (X.F_COMM | X.F_PYTHON))
    if len(slow):
        for j in slow.tolist():
            raw = b.buf[int(b.starts[j]):int(b.ends[j])]
            ev = loads(raw, path, b.offset + int(b.starts[j]) - int(b.starts[0]))
            row_from_dict(ev, int(b.ts_ns[j]), int(b.dur_ns[j]), int(b.flags[j]), table, out[j], comm_rows)
    return out, comm_rows


def _string_value(raw: bytes, s: int, e: int, key: str) -> str:
    v = orjson.loads(raw[s:e]).get(key)
    return v if isinstance(v, str) else json.dumps(v)
