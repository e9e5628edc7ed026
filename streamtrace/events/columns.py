"""Columnar events: numpy structured arrays with interned strings, built from the
reader's bytes by the numba kernel ``streamtrace.kernels.extract.scan_columns`` (``column_batches``).

``EVENT_DTYPE`` (one row per event, file order):

====================  =======  ===========================================================
field                 dtype    meaning
====================  =======  ===========================================================
``ts``                int64    start, ns (exact, from the text, also of a number written as a
                               JSON string; -1 when absent or unusable)
``dur``               int64    duration, ns (-1 when absent or unusable)
``ph``                uint8    first byte of the phase (``ord("X")`` ...), 0 when absent
``cat``, ``name``     int32    ids in the ``StringTable`` (-1 when absent)
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

A collective-args row (``comm_rows[k]``, a dict) is kept for an event whose args carry
collective metadata (``COMM_TRIGGER_KEYS``: NCCL kernels and ``record_param_comms`` of newer
PyTorch) and for every CPU op named like a communication call (``COMM_OP_NAME``:
``record_param_comms``, ``nccl:*``, ``gloo:*``, ``c10d::*``) whatever its args.  It holds the
``COMM_KEYS`` (None when absent; a named op's: only those it has) and those of
``COMM_SHAPE_KEYS`` the event has (``Input Dims``, ``Input type``, ``Concrete Inputs`` as their
JSON text, bytes); a named op without any of those keys gets no row unless its name says something
(``gloo:*``, an all-to-all: ``keep_op``).  A named op's row also has ``"@op"`` (its name), ``"@pid"``,
``"@tid"`` (as written), ``"@ts"``, ``"@end"`` (int ns), so
``streamtrace.analyze.collective_facts`` can find the ops enclosing one another.
"""
from __future__ import annotations

import functools
import json
import re

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..kernels import extract
from ..trace.decode import loads, text_ns

EVENT_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("ph", "u1"), ("cat", "i4"), ("name", "i4"),
                        ("pid", "i8"), ("tid", "i8"), ("correlation", "i8"), ("external_id", "i8"),
                        ("flow_id", "i8"), ("stream", "i8"), ("device", "i8"), ("rank", "i8"), ("comm", "i4")])

STR_ID_BASE = -(1 << 62)    # string pids/tids are stored as STR_ID_BASE + their string id
NO_TS = np.iinfo(np.int64).min
"""The ``ts`` of an event without a usable one (missing, not a number, beyond int64 ns).  Not -1: a
``ts`` may be negative (legal in the trace-event format, Perfetto shows it; issue 49), so every
number is a time.  (A missing ``dur`` is -1: a negative ``dur`` is no duration.)"""


def is_str_id(v):
    """Mask (or bool) of pid/tid values that stand for strings."""
    return (v >= STR_ID_BASE) & (v < STR_ID_BASE + (1 << 40))


# an event whose args hold one of these carries collective metadata (kernel and twin agree)
COMM_TRIGGER_KEYS = ("Collective name", "In msg nelems", "Process Group Name", "Process Group Ranks")
COMM_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
             "Process Group Name", "Process Group Description", "Process Group Ranks", "In split size",
             "Out split size")
# kept when present: the recorded shapes of older PyTorch, NCCL's sequence number and p2p peers
COMM_SHAPE_KEYS = ("Input Dims", "Input type", "Concrete Inputs", "Seq", "Src Rank", "Dst Rank")
# the CPU ops around a collective whose args are kept whatever they carry
COMM_OP_NAME = re.compile(r"^(record_param_comms$|nccl:|gloo:|c10d::)")
# ...of those, the ones kept even without such args: their name alone says something
_NAME_TELLS = re.compile(r"^gloo:|all_?to_?all", re.I)
# shape args kept as their JSON text (bytes: a fraction of the lists' memory)
_AS_JSON = ("Input Dims", "Input type", "Concrete Inputs")


_KEPT_KEYS = frozenset(COMM_KEYS + COMM_SHAPE_KEYS)


def keep_op(name: str, args: dict) -> bool:
    """Whether a communication op (``COMM_OP_NAME``) gets a collective-args row: it has one of the
    ``COMM_KEYS`` / ``COMM_SHAPE_KEYS`` or its name tells (``gloo:*``, an all-to-all)."""
    return not _KEPT_KEYS.isdisjoint(args) or _name_tells(name)


_KEPT_TEXT = re.compile(b'"(?:' + b"|".join(re.escape(k.encode()) for k in sorted(_KEPT_KEYS)) + b')"')
"""One of the kept keys, quoted (a pattern that starts with its quote: ~2x faster a search than one that may
also start with a backslash, which ``may_keep_op`` looks for apart)."""


def may_keep_op(raw: bytes, name: str) -> bool:
    """False when ``keep_op`` is false for the event whose JSON text is ``raw`` whatever its args:
    none of the kept keys is in the text, quoted, and its name does not tell.  A text with a
    backslash (a key could be written with escapes) may always be kept: it is decoded.  Saves
    decoding the communication ops that carry nothing to keep (64,640 of a 339 MB DDP rank's
    events: ~0.15 CPU-s of its analyze)."""
    return _name_tells(name) or b"\\" in raw or _KEPT_TEXT.search(raw) is not None


def texts_may_keep(buf: bytes, starts, ends) -> np.ndarray:
    """``may_keep_op``'s test of the text alone for each event ``buf[starts[i]:ends[i]]`` (int arrays of
    byte offsets), bool[n]: searched in place, no event's text copied out (~2 us an event less, the
    194 k communication ops of a 1 GB DDP rank)."""
    search, spans = _KEPT_TEXT.search, zip(np.asarray(starts).tolist(), np.asarray(ends).tolist())
    return np.fromiter((buf.find(b"\\", s, e) >= 0 or search(buf, s, e) is not None for s, e in spans), bool,
                       len(starts))


@functools.lru_cache(maxsize=4096)
def _name_tells(name: str) -> bool:
    return bool(_NAME_TELLS.search(name))


MAX_TEXT = 1 << 16
"""Bytes of a name's JSON text the string table keeps: a longer one (a 200 MB kernel name) is cut to
its first characters and counted (``cut_text``, ``StringTable.cut``; issue 49)."""


def cut_text(raw: bytes, limit: int = MAX_TEXT) -> str:
    """The JSON string ``raw`` (with its quotes) of more than ``limit`` bytes, decoded from its first
    ``limit`` bytes (backed off to the end of a whole character or escape), followed by
    ``... (N more bytes cut)``."""
    for cut in range(limit, max(limit - 12, 1), -1):
        try:
            head = json.loads(raw[:cut] + b'"')
            break
        except ValueError:
            continue
    else:
        head, cut = "", 1
    return f"{head}... ({len(raw) - 1 - cut:,} more bytes cut)"


def cut_warning(path, n: int) -> str:
    """The warning for ``n`` names cut (``MAX_TEXT``)."""
    return (f"{path}: {n:,} name(s) longer than {MAX_TEXT:,} bytes cut to their first {MAX_TEXT:,} in the "
            f"analysis (the merged trace keeps them whole)")


class StringTable:
    """Interned strings: ``id(text) -> int`` and ``strings[id] -> text``; ``cut``: the strings cut to
    ``MAX_TEXT`` bytes (``intern_spans``)."""

    def __init__(self):
        self.strings: list[str] = []
        self.ids: dict[str, int] = {}
        self._by_hash: dict[int, int] = {}
        self._comm_op = self._tells = np.zeros(0, bool)
        self.cut = 0

    def comm_op(self, ids) -> np.ndarray:
        """Bool mask of the name ids ``ids`` (int array, -1 = none) that are communication ops
        (``COMM_OP_NAME``)."""
        return self._mask("_comm_op", COMM_OP_NAME.match, ids)

    def name_tells(self, ids) -> np.ndarray:
        """Bool mask of the name ids ``ids`` (int array, -1 = none) whose name alone makes ``keep_op``
        keep an op (``gloo:*``, an all-to-all)."""
        return self._mask("_tells", _NAME_TELLS.search, ids)

    def _mask(self, attr: str, test, ids) -> np.ndarray:
        """``test`` of each id's string (a bool kept per string, extended as strings come)."""
        known = getattr(self, attr)
        if len(known) < len(self.strings):
            new = [bool(test(t)) for t in self.strings[len(known):]]
            known = np.concatenate([known, np.asarray(new, bool)])
            setattr(self, attr, known)
        ids = np.asarray(ids)
        return (ids >= 0) & np.append(known, False)[np.where(ids >= 0, ids, len(known))]

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
        d = pc.dictionary_encode(pa.array(h))          # (a hash table: no sort of the batch's hashes)
        uh, code = d.dictionary.to_numpy(), d.indices.to_numpy()
        lut = np.empty(len(uh), np.int32)
        new = []
        for k, hv in enumerate(uh.tolist()):
            known = self._by_hash.get(hv)
            if known is None:
                new.append((hv, k))
            else:
                lut[k] = known
        if new:                                          # decoded in ascending hash order, as ids were given
            idx = np.flatnonzero(present)
            ks = np.asarray([k for _, k in new], np.int64)
            at = np.flatnonzero(np.isin(code, ks))
            got, first = np.unique(code[at], return_index=True)
            first_of = dict(zip(got.tolist(), at[first].tolist()))
            for hv, k in sorted(new):
                j = idx[first_of[k]]
                if ends[j] - starts[j] > MAX_TEXT:      # a name of megabytes: cut (issue 49)
                    text = cut_text(raw[starts[j]:ends[j]])
                    self.cut += 1
                else:
                    text = json.loads(raw[starts[j]:ends[j]])
                lut[k] = self._by_hash[hv] = self.id(text)
        out[present] = lut[code]
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
    row["ts"] = _time(ts, flag, 1, 4, ev.get("ts"), NO_TS)
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
    op = isinstance(name, str) and bool(COMM_OP_NAME.match(name)) and keep_op(name, args)
    if op or any(k in args for k in COMM_TRIGGER_KEYS):
        row["comm"] = len(comm_rows)
        comm_rows.append(comm_row(args, ev, int(row["ts"]), int(row["dur"]) if op else None))
    else:
        row["comm"] = -1


def _json_bytes(v) -> bytes:
    """``v`` as JSON text (numbers orjson cannot write, Decimal or beyond 64 bits, as the stdlib does)."""
    try:
        return orjson.dumps(v)
    except TypeError:
        return json.dumps(v, default=str).encode()


def comm_row(args: dict, ev: dict, ts: int, dur: int | None) -> dict:
    """One collective-args row (module docstring) of an event with ``args``; ``dur`` None: not a
    named communication op (no position keys).  A named op's row holds only the keys it has (most
    have none: a few hundred bytes each), a kernel's every ``COMM_KEYS`` key (None when absent)."""
    if dur is None:
        out = {k: args.get(k) for k in COMM_KEYS}
    else:
        out = {k: args[k] for k in COMM_KEYS if k in args}
    out.update({k: _json_bytes(args[k]) if k in _AS_JSON else args[k] for k in COMM_SHAPE_KEYS if k in args})
    if dur is not None:
        out.update({"@op": ev.get("name"), "@pid": ev.get("pid"), "@tid": ev.get("tid"), "@ts": ts,
                    "@end": ts + max(dur, 0) if ts != NO_TS else NO_TS})
    return out


def _time(ns, flag, has, bad, value, missing=-1) -> int:
    """An event's ts or dur (int ns): the scanner's value, else a number written as a string
    (``text_ns``), else ``missing`` (``NO_TS`` for a ts)."""
    if flag & has and not flag & bad:
        return ns
    v = text_ns(value) if flag & bad else None
    return missing if v is None else v


def columns_from_dicts(events, ts_ns, dur_ns, flags, table: StringTable):
    """Plain-Python twin of ``column_batches``' columns: (structured array, comm rows)."""
    out = np.zeros(len(events), EVENT_DTYPE)
    comm = []
    for i, ev in enumerate(events):
        row_from_dict(ev, int(ts_ns[i]), int(dur_ns[i]), int(flags[i]), table, out[i], comm)
    return out, comm


def scanned_batches(reader):
    """Yield ``(b, ph, cols, flags)`` for each batch of ``reader``'s events (a ``TraceReader``), the
    events found and read in one pass over the bytes (``streamtrace.kernels.extract.scan_columns``):
    ``b`` a ``RawBatch`` as ``raw_batches(decode=False)`` yields it (``ts_ns``/``dur_ns`` int64 ns,
    ``flags`` uint8 with HAS_TS, HAS_DUR, TS_BAD, DUR_BAD; BIG_INT is not looked for); ``ph``
    uint8[k], ``cols`` int64[N_COLS, k] (rows ``extract.PID`` .. ``extract.DUR``) and ``flags``
    uint8[k] (``extract.F_*``) the kernel's columns, views of arrays the next batch writes over.
    Raises ``TraceError`` as ``raw_batches`` does."""
    cap = ph = cols = flags = tflags = None
    for w in reader.windows():
        if cap != len(w.starts):
            cap = len(w.starts)
            ph, flags, tflags = (np.empty(cap, np.uint8) for _ in range(3))
            cols = np.empty((extract.N_COLS, cap), np.int64)
        w.scanned(*extract.scan_columns(w.arr, w.pos, w.n, w.starts, w.ends, w.sep, ph, cols, flags, tflags))
        b = w.batch()
        if b is None:
            continue
        k = len(b.starts)
        b.ts_ns, b.dur_ns, b.flags = cols[extract.TS, :k].copy(), cols[extract.DUR, :k].copy(), tflags[:k].copy()
        yield b, ph[:k], cols[:, :k], flags[:k]


def column_batches(reader, table: StringTable, path="?"):
    """Yield ``(b, columns, comm_rows)`` for each batch of ``reader``'s events: ``b`` as
    ``scanned_batches`` yields it, ``columns`` an array of EVENT_DTYPE (one row per event of the
    batch, file order) whose ``cat``/``name`` index ``table``, ``comm_rows[k]`` a dict of the
    collective args (``COMM_KEYS``) of the event whose ``comm`` field is k.  Plain-Python twin:
    ``columns_from_dicts`` of the decoded events.  Raises ``TraceError`` as the reader does."""
    for b, ph, cols, flags in scanned_batches(reader):
        out, rows = _columns(b, ph, cols, flags, table, path)
        yield b, out, rows


def _columns(b, ph, cols, flags, table: StringTable, path):
    """``column_batches``' columns of batch ``b`` from the kernel's ``ph``, ``cols``, ``flags``."""
    n = len(b.starts)
    x = extract
    pid, tid, corr, ext, flow = cols[x.PID], cols[x.TID], cols[x.CORR], cols[x.EXT], cols[x.FLOW_ID]
    stream, device, rank = cols[x.STREAM], cols[x.DEVICE], cols[x.RANK]
    cat_h, cat_s, cat_e, name_h, name_s, name_e = (cols[c] for c in (x.CAT_H, x.CAT_S, x.CAT_E, x.NAME_H,
                                                                     x.NAME_S, x.NAME_E))
    out = np.zeros(n, EVENT_DTYPE)
    ok_ts = (b.flags & 1).astype(bool) & ~(b.flags & 4).astype(bool)
    out["ts"] = np.where(ok_ts, b.ts_ns, NO_TS)
    ok_dur = (b.flags & 2).astype(bool) & ~(b.flags & 8).astype(bool)
    out["dur"] = np.where(ok_dur, b.dur_ns, -1)
    out["ph"] = ph
    out["cat"] = table.intern_spans(cat_h, cat_s, cat_e, b.buf)
    out["name"] = table.intern_spans(name_h, name_s, name_e, b.buf)
    for col, src, bit in (("pid", pid, extract.F_PID_STR), ("tid", tid, extract.F_TID_STR)):
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
            out["ts"][j] = _time(int(b.ts_ns[j]), f, 1, 4, ev.get("ts"), NO_TS)
            out["dur"][j] = _time(int(b.dur_ns[j]), f, 2, 8, ev.get("dur"))
    python = (flags & extract.F_PYTHON) != 0       # the kernel could not read it: every column from Python
    coll = (flags & extract.F_COMM) != 0           # collective args: the columns right, the args row missing
    op = table.comm_op(out["name"]) & ~python      # a communication op: the columns right, its args row maybe
    decode = python | coll | op
    quiet = np.flatnonzero(op & ~coll & ~table.name_tells(out["name"]))    # its text tells (``may_keep_op``):
    decode[quiet] = texts_may_keep(b.buf, b.starts[quiet], b.ends[quiet])  # nothing it could keep, not decoded
    for j in np.flatnonzero(decode).tolist():      # in file order, as the twin numbers the rows
        raw = b.buf[int(b.starts[j]):int(b.ends[j])]
        ev = loads(raw, path, b.offset + int(b.starts[j]) - int(b.starts[0]))
        if python[j]:
            row_from_dict(ev, int(b.ts_ns[j]), int(b.dur_ns[j]), int(b.flags[j]), table, out[j], comm_rows)
            continue
        ev = ev if isinstance(ev, dict) else {}
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        kept = bool(op[j]) and keep_op(table.strings[out["name"][j]], args)
        if kept or (coll[j] and any(k in args for k in COMM_TRIGGER_KEYS)):     # (``row_from_dict``'s rule)
            out["comm"][j] = len(comm_rows)
            comm_rows.append(comm_row(args, ev, int(out["ts"][j]), int(out["dur"][j]) if kept else None))
    return out, comm_rows


def _string_value(raw: bytes, s: int, e: int, key: str) -> str:
    v = orjson.loads(raw[s:e]).get(key)
    return v if isinstance(v, str) else json.dumps(v)
