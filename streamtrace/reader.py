"""The streaming trace reader: one pass over a Kineto / Chrome trace-event file,
never holding the whole document.

How it reads: bytes arrive in blocks (gzip decompressed on the fly, detected by
magic bytes); numba kernels (:mod:`streamtrace.kernels.scan`) find each event's
byte range inside ``traceEvents`` and read its ``ts``/``dur`` text exactly into
int64 nanoseconds; a batch of events is then decoded with one ``orjson`` call.
Events orjson refuses (integers beyond 64 bits, ``NaN``) are decoded with ijson's
C backend (yajl2_c), and when that rejects a number too, with ijson's pure-Python
backend, so such a file is still read in full.  Top-level keys other than
``traceEvents`` become :attr:`TraceReader.metadata` wherever they stand (Kineto
writes some before the events and some after).  A bare JSON array of events
(the other Chrome trace format) is accepted too.
"""
from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass

import ijson
import numpy as np
import orjson

from .errors import TraceError, TruncatedTraceError
from .io import BLOCK, GZIP_MAGIC
from .kernels import scan as K

BATCH_EVENTS = 16384
_WS = b" \t\r\n"


@dataclass
class RawBatch:
    """A batch of consecutive events as parsed dicts plus exact times.

    ``events``: list of dicts as in the file (``ts``/``dur`` left as parsed
    floats in microseconds); ``ts_ns``/``dur_ns``: int64 arrays (ns) read from
    the number text; ``flags``: uint8 array of ``kernels.scan`` bits (HAS_TS,
    HAS_DUR, TS_BAD, DUR_BAD, BIG_INT); ``offset``: byte offset (uncompressed) of
    the first event; ``index``: ordinal of the first event in the file;
    ``buf``/``starts``/``ends``: the raw bytes window and each event's byte range
    in it (``events`` is None when the batch was read with ``decode=False``).
    """
    events: list
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    flags: np.ndarray
    offset: int
    index: int
    buf: bytes = b""
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None


class _Source:
    """Binary input stream (plain or gzip by magic bytes) with exact accounting
    of how many uncompressed bytes were produced; reports truncated gzip members
    instead of losing the tail the way ``gzip.GzipFile`` does."""

    def __init__(self, path, block=BLOCK, byte_range=None):
        self.path = str(path)
        self.block = block
        try:
            self.f = open(path, "rb")
        except OSError as e:
            raise TraceError(path, f"cannot open: {e.strerror or e}") from None
        self.gz = self.f.read(2) == GZIP_MAGIC
        self.f.seek(0)
        self.range = None
        if byte_range is not None:
            # a slice of a plain file's traceEvents array, read as a bare array: "[" slice "]"
            if self.gz:
                raise TraceError(path, "byte ranges need an uncompressed file")
            a, b = byte_range
            self.f.seek(a)
            self.range = [b"[", b - a, b"]"]
        self.z = zlib.decompressobj(31) if self.gz else None
        self.compressed_read = 0   # bytes of the file consumed so far (for progress bars)
        self.eof = False
        self.gzip_truncated = False

    def read(self) -> bytes:
        """Next block of uncompressed bytes; b"" at the end."""
        if self.eof:
            return b""
        if self.range is not None:
            head, left, tail = self.range
            data = self.f.read(min(self.block, left)) if left > 0 else b""
            self.compressed_read += len(data)
            left -= len(data)
            if left > 0 and data:
                self.range = [b"", left, tail]
                return head + data
            self.range = [b"", 0, b""]          # range done (or the file ended early)
            out = head + data + tail
            self.eof = not out
            return out
        if not self.gz:
            data = self.f.read(self.block)
            if not data:
                self.eof = True
            self.compressed_read += len(data)
            return data
        out = []
        produced = 0
        while produced < max(1, self.block // 2):
            chunk = self.f.read(max(1, self.block // 4))
            if not chunk:
                if not self.z.eof and (self.compressed_read > 0):
                    self.gzip_truncated = True
                self.eof = True
                break
            self.compressed_read += len(chunk)
            try:
                data = self.z.decompress(chunk)
                while self.z.eof and self.z.unused_data:
                    rest = self.z.unused_data           # concatenated gzip members
                    self.z = zlib.decompressobj(31)
                    data += self.z.decompress(rest)
            except zlib.error as e:
                raise TraceError(self.path, f"corrupt gzip data ({e})",
                                 offset=self.compressed_read) from None
            out.append(data)
            produced += len(data)
        return b"".join(out)

    def close(self):
        self.f.close()


def _loads_one(data: bytes, path, offset):
    """Decode one JSON value that orjson refused or would make inexact (integers of
    20+ digits): ijson's yajl2_c backend, then ijson's python backend (for numbers
    yajl rejects), then the stdlib (NaN/Infinity)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, "invalid UTF-8", offset=offset + e.start) from None
    for backend in (ijson, _python_backend()):
        try:
            return next(iter(backend.items(io.BytesIO(data), "", use_float=True)))
        except Exception:
            continue
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise TraceError(path, f"invalid JSON ({e})", offset=offset) from None


_PY_BACKEND = None


def _python_backend():
    global _PY_BACKEND
    if _PY_BACKEND is None:
        _PY_BACKEND = ijson.get_backend("python")
    return _PY_BACKEND


class TraceReader:
    """Stream one trace file.

    Parameters: ``path`` (plain or gzip JSON), ``salvage`` (on a truncated file,
    keep every complete event before the cut and record a warning instead of
    raising :class:`TruncatedTraceError`), ``batch_events`` (events per batch).

    Attributes filled while reading: ``metadata`` (every top-level key except
    ``traceEvents``), ``head_keys`` (the keys that stood before the events),
    ``events_read``, ``bytes_read`` (uncompressed), ``truncated``, ``warnings``.

    Raises :class:`TraceError` (corrupt gzip, invalid JSON or UTF-8) and
    :class:`TruncatedTraceError` naming the file and byte offset.
    """

    def __init__(self, path, salvage=False, batch_events=BATCH_EVENTS, block=BLOCK, progress=None,
                 byte_range=None):
        self.path = str(path)
        self.byte_range = byte_range   # (start, end): read only these bytes of a plain file's events
        self.events_offset = None      # absolute offset just past traceEvents' '[' once seen
        self.events_end = None         # offset just past traceEvents' closing ']' once read (in a
                                       # byte range: of the stream "[" + range + "]")
        self.salvage = salvage
        self.batch_events = batch_events
        self.block = block
        self.metadata: dict = {}
        self.head_keys: list = []
        self.events_read = 0
        self.bytes_read = 0
        self.truncated = False
        self.warnings: list = []
        self.has_events = False
        self.bare_array = False        # the file is the bare-array form "[...]" (no top-level object)
        self.progress = progress   # callable(file bytes consumed so far), called per block

    # -- public iteration -------------------------------------------------
    def raw_batches(self, decode=True):
        """Yield :class:`RawBatch` objects in file order; ``metadata`` is complete
        once the generator is exhausted.  ``decode=False`` skips building dicts
        (``events`` is None; use ``buf``/``starts``/``ends``); ``decode="bounds"``
        also skips reading the times (``ts_ns``/``dur_ns``/``flags`` are None too):
        only the event byte ranges are found, by the faster
        :func:`streamtrace.kernels.scan.scan_bounds` (merge's rewrite kernel reads
        ``ts``/``dur`` itself)."""
        mode = "bounds" if decode == "bounds" else ("decode" if decode else "raw")
        return self._parse(events=mode, stop_at_events=False)

    def events(self):
        """Yield each event as a dict (``ts``/``dur`` as parsed floats, us)."""
        for b in self.raw_batches():
            yield from b.events

    def read_head(self) -> dict:
        """Read only the keys before ``traceEvents`` (cheap) and return them."""
        for _ in self._parse(events=False, stop_at_events=True):
            pass
        return dict(self.metadata)

    def read_metadata(self) -> dict:
        """Read the whole file, skipping events without decoding them, and return
        all top-level metadata (use when keys after ``traceEvents`` are needed
        before the events, e.g. ``baseTimeNanoseconds``)."""
        for _ in self._parse(events=False, stop_at_events=False):
            pass
        return dict(self.metadata)

    # -- the parser ----------------------------------------------------------
    def _parse(self, events: bool, stop_at_events: bool):
        self.metadata = {}
        self.head_keys = []
        self.events_read = 0
        src = _Source(self.path, self.block, self.byte_range)
        st = _State(src, self)
        try:
            yield from self._document(st, events, stop_at_events)
        except _Salvaged:
            return
        finally:
            self.bytes_read = st.base + st.n
            src.close()

    def _document(self, st, events, stop_at_events):
        st.skip_ws()
        if st.startswith(b"\xef\xbb\xbf"):
            st.pos += 3
            st.skip_ws()
        c = st.peek()
        if c == -1:
            self._fail(st, "empty file")
        if c == 0x5B:  # '[': the bare-array form of the format
            self.has_events = self.bare_array = True
            self.events_offset = st.base + st.pos + 1
            if stop_at_events:
                return
            st.pos += 1
            yield from self._events(st, events)
            return
        if c != 0x7B:
            self._fail(st, "not a JSON object or array (is this a trace file?)")
        st.pos += 1
        seen_events = False
        first = True
        while True:
            st.skip_ws()
            c = st.peek()
            if c == -1:
                self._truncated(st, "before the closing '}' of the document")
            if c == 0x7D:
                st.pos += 1
                break
            if not first:
                if c != 0x2C:
                    self._fail(st, "expected ',' or '}' between top-level keys")
                st.pos += 1
                st.skip_ws()
                c = st.peek()
            first = False
            if c != 0x22:
                self._fail(st, "expected a key string")
            key = self._key(st)
            st.skip_ws()
            if st.peek() != 0x3A:
                self._fail(st, "expected ':' after a key")
            st.pos += 1
            st.skip_ws()
            if key == "traceEvents" and st.peek() == 0x5B:
                seen_events = self.has_events = True
                self.events_offset = st.base + st.pos + 1
                if stop_at_events:
                    return
                st.pos += 1
                yield from self._events(st, events)
                continue
            val = self._value(st)
            self.metadata[key] = val
            if not seen_events:
                self.head_keys.append(key)
        st.skip_ws()
        if not st.at_end():
            self._fail(st, "unexpected data after the JSON document")

    def _key(self, st):
        while True:
            e = K.skip_string(st.arr, st.pos, st.n)
            if e >= 0:
                raw = st.buf[st.pos:e]
                st.pos = e
                try:
                    return json.loads(raw)
                except ValueError:
                    self._fail(st, "invalid key string")
            if not st.more():
                self._truncated(st, "inside a top-level key")

    def _value(self, st):
        while True:
            status, end = K.skip_value(st.arr, st.pos, st.n)
            if status == K.DONE:
                break
            if status == K.BAD:
                st.pos = end
                self._fail(st, "invalid JSON value")
            if not st.more():
                if st.n > st.pos and st.eof_value_ok():
                    end = st.n      # a bare number ending the stream
                    break
                self._truncated(st, "inside top-level metadata")
        raw = st.buf[st.pos:end]
        off = st.base + st.pos
        st.pos = end
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _loads_one(raw, self.path, off)

    def _events(self, st, decode):
        cap = self.batch_events
        starts = np.empty(cap, np.int64)
        ends = np.empty(cap, np.int64)
        ts = np.empty(cap, np.int64)
        dur = np.empty(cap, np.int64)
        flags = np.empty(cap, np.uint8)
        sep = np.zeros(1, np.int64)
        bounds = decode == "bounds"
        while True:
            if bounds:
                k, status, newpos = K.scan_bounds(st.arr, st.pos, st.n, starts, ends, sep)
            else:
                k, status, newpos = K.scan_events(st.arr, st.pos, st.n, starts, ends, ts, dur, flags, sep)
            if k:
                if bounds:
                    yield RawBatch(None, None, None, None, st.base + int(starts[0]), self.events_read,
                                   st.buf, starts[:k].copy(), ends[:k].copy())
                elif decode:
                    s0, e1 = int(starts[0]), int(ends[k - 1])
                    off = st.base + s0
                    evs = self._decode(st.buf, s0, e1, starts[:k], ends[:k], flags[:k], off - s0) \
                        if decode == "decode" else None
                    yield RawBatch(evs, ts[:k].copy(), dur[:k].copy(), flags[:k].copy(), off, self.events_read,
                                   st.buf, starts[:k].copy(), ends[:k].copy())
                self.events_read += k
            st.pos = newpos
            if status == K.DONE:
                self.events_end = st.base + newpos
                return
            if status == K.BAD:
                self._fail(st, "invalid JSON in traceEvents (expected an event object, ',' or ']')")
            if k == cap:
                continue
            if not st.more():
                self._truncated(st, f"inside traceEvents after {self.events_read:,} complete events")
                return

    def _decode(self, buf, s0, e1, starts, ends, flags, delta):
        try:
            evs = orjson.loads(b"[" + buf[s0:e1] + b"]")
            if flags.any():
                for i in np.flatnonzero(flags & K.BIG_INT).tolist():
                    s = int(starts[i])
                    evs[i] = _loads_one(buf[s:int(ends[i])], self.path, s + delta)
            return evs
        except orjson.JSONDecodeError:
            out = []
            prev = None
            for s, e in zip(starts.tolist(), ends.tolist()):
                if prev is not None and buf[prev:s].strip(_WS) != b",":
                    raise TraceError(self.path, "events are not separated by commas", offset=s + delta)
                prev = e
                raw = buf[s:e]
                try:
                    out.append(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    out.append(_loads_one(raw, self.path, s + delta))
            return out

    def _fail(self, st, msg, pos=None):
        raise TraceError(self.path, msg, offset=st.base + (st.pos if pos is None else pos),
                         events=self.events_read)

    def _truncated(self, st, where):
        msg = f"truncated: the file ends {where}"
        if st.src.gzip_truncated:
            msg += " (the .gz stream is cut short)"
        if self.salvage:
            self.truncated = True
            self.warnings.append(f"{self.path}: {msg} at byte {st.base + st.n:,}; "
                                 f"kept {self.events_read:,} complete events (--salvage)")
            raise _Salvaged()
        raise TruncatedTraceError(self.path, msg, offset=st.base + st.n, events=self.events_read)


class _Salvaged(Exception):
    pass


class _State:
    """The sliding byte window: ``buf`` (bytes) holds the unconsumed input from
    absolute offset ``base``; ``arr`` is its uint8 view for the numba kernels."""

    def __init__(self, src, reader):
        self.src = src
        self.reader = reader
        self.buf = b""
        self.arr = np.frombuffer(self.buf, np.uint8)
        self.base = 0
        self.pos = 0
        self.n = 0

    def more(self) -> bool:
        data = self.src.read()
        if self.reader.progress is not None:
            self.reader.progress(self.src.compressed_read)
        if not data:
            return False
        keep = self.buf[self.pos:]
        self.base += self.pos
        self.buf = keep + data
        self.arr = np.frombuffer(self.buf, np.uint8)
        self.pos = 0
        self.n = len(self.buf)
        return True

    def peek(self) -> int:
        while self.pos >= self.n:
            if not self.more():
                return -1
        return self.buf[self.pos]

    def startswith(self, b):
        while self.n - self.pos < len(b) and self.more():
            pass
        return self.buf.startswith(b, self.pos)

    def skip_ws(self):
        while True:
            self.pos = int(K.skip_ws(self.arr, self.pos, self.n))
            if self.pos < self.n or not self.more():
                return

    def at_end(self) -> bool:
        return self.peek() == -1

    def eof_value_ok(self) -> bool:
        return False


def read_trailer(path, tail: int = 1 << 16) -> dict | None:
    """The top-level keys after ``traceEvents`` of a PLAIN (not gzip) trace, read
    from its last ``tail`` bytes without reading the events (Kineto writes
    ``baseTimeNanoseconds``, ``traceName`` and, in some versions, more there).

    The closing ``]`` of ``traceEvents`` is not known from the tail alone (the
    trailer may hold arrays too), so every ``]`` of the window is tried from the
    end and the LONGEST text after one that parses as the rest of the document
    wins.  Returns that dict (``{}`` when the document ends right after the
    array), or None when nothing parses or the file is gzip / unreadable: the
    caller then reads the whole file (:meth:`TraceReader.read_metadata`).
    Never raises for bad input."""
    found = find_trailer(path, tail)
    return None if found is None else found[0]


def find_trailer(path, tail: int = 1 << 16, bare: bool = False):
    """:func:`read_trailer` with the place it was found: ``(trailer dict, offset of
    the ']' that closes traceEvents)``, or None.  ``bare=True``: the file is the bare
    array form (``[...]``), whose last ``]`` (nothing but whitespace after it) is the
    end, with an empty trailer.  A guess from the tail: a caller that relies on the
    offset must confirm it (the split reader does: its last byte range must parse to
    exactly that ``]``).  Never raises for bad input."""
    try:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return None
            f.seek(0, 2)
            size = f.tell()
            base = max(0, size - tail)
            f.seek(base)
            data = f.read()
    except OSError:
        return None
    best = None
    pos = len(data)
    while True:
        pos = data.rfind(b"]", 0, pos)
        if pos < 0:
            break
        rest = data[pos + 1:].strip(_WS)                 # JSON whitespace only (not \x0b, \x0c)
        if bare:
            return ({}, base + pos) if not rest else None
        if rest == b"}":
            best = ({}, base + pos)
        elif rest.startswith(b",") and rest[1:].lstrip(_WS).startswith(b'"'):     # not ",}"
            try:
                out = orjson.loads(b"{" + rest[1:])
            except orjson.JSONDecodeError:
                continue
            if isinstance(out, dict):
                if "traceEvents" in out:        # went back past the array itself
                    break
                best = (out, base + pos)
    return best
