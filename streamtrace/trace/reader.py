"""The streaming trace reader: one pass over a Kineto / Chrome trace-event file,
never holding the whole document.

How it reads: bytes arrive in blocks (gzip decompressed on the fly, detected by
magic bytes); numba kernels (``streamtrace.kernels.scan``) find each event's
byte range inside ``traceEvents`` and read its ``ts``/``dur`` text exactly into
int64 nanoseconds; a batch of events is then decoded with one ``orjson`` call.
Events orjson refuses (integers beyond 64 bits, ``NaN``) are decoded with ijson's
C backend (yajl2_c), and when that rejects a number too, with ijson's pure-Python
backend, so such a file is still read in full.  Top-level keys other than
``traceEvents`` become ``TraceReader.metadata`` wherever they stand (Kineto
writes some before the events and some after).  A bare JSON array of events
(the other Chrome trace format) is accepted too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import orjson

from ..runtime.errors import TraceError, TruncatedTraceError
from ..kernels import scan
from .decode import decode_value
from .deep import deep_warning, take_deep, too_deep, valid_json
from .repair import repair_warning, take_repairs
from .source import BLOCK, COPY_RATIO, ByteSource
from .writer import JsonText

BATCH_EVENTS = 16384
# a top-level value nested deeper than this is kept as its JSON text (a writer.JsonText): it
# crosses process boundaries (pickle recurses) and is written back as it was
MAX_NESTING = 200
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


class ScanWindow:
    """The reader's bytes in memory inside ``traceEvents`` (``TraceReader.windows``): ``arr`` (the
    uint8 view of ``buf``; ``buf[0]`` is at uncompressed offset ``base`` of the file), scanning to
    resume at ``pos``, ``n`` bytes held, and the arrays ``scan_bounds``
    fills (``starts``/``ends``, int64, as many events as they hold; ``sep``: its separator state).
    ``index``: the ordinal of the next event in the file."""

    def __init__(self, arr, buf, base, pos, n, starts, ends, sep, index):
        self.arr, self.buf, self.base, self.pos, self.n = arr, buf, base, pos, n
        self.starts, self.ends, self.sep, self.index = starts, ends, sep, index
        self.found = None

    def scanned(self, k: int, status: int, pos: int) -> None:
        """What the consumer's scan of this window returned, as scan_bounds returns it: ``k`` events
        found (their ranges in ``starts[:k]``/``ends[:k]``), the scan status, the position it stopped at."""
        self.found = (int(k), int(status), int(pos))

    def batch(self) -> RawBatch | None:
        """The events found, as ``raw_batches(decode="bounds")`` yields them (None when none)."""
        k = self.found[0]
        if not k:
            return None
        return RawBatch(None, None, None, None, self.base + int(self.starts[0]), self.index, self.buf,
                        self.starts[:k].copy(), self.ends[:k].copy())


class TraceReader:
    """Stream one trace file.

    Parameters: ``path`` (plain or gzip JSON), ``salvage`` (on a truncated file,
    keep every complete event before the cut and record a warning instead of
    raising ``TruncatedTraceError``), ``batch_events`` (events per batch), ``raw_keys``
    (top-level keys whose values are kept as their JSON text: a caller that only copies them).

    Attributes filled while reading: ``metadata`` (every top-level key except
    ``traceEvents``; a value nested deeper than ``MAX_NESTING`` levels, or one of a key in
    ``raw_keys``, is kept as its JSON text, a ``JsonText``, checked to be valid JSON without
    building it), ``head_keys`` (the keys that stood before the events),
    ``events_read``, ``bytes_read`` (uncompressed), ``truncated``, ``warnings``, ``repaired``
    (events with unescaped quotes, repaired: ``streamtrace.trace.repair``, known once the
    events were read and decoded);
    ``array_key``: the top-level key whose array of objects is streamed as the events (default
    ``traceEvents``; analyze's ``summary.json`` is read a rank entry at a time with ``"ranks"``);
    ``has_events``: the document has a ``traceEvents`` array (or is a bare array);
    ``events_empty``: after ``read_head``, whether that array is ``[]`` (None: not known).

    Raises ``TraceError`` (corrupt gzip, invalid JSON or UTF-8) and
    ``TruncatedTraceError`` naming the file and byte offset.
    """

    def __init__(self, path, salvage=False, batch_events=BATCH_EVENTS, block=BLOCK, progress=None,
                 byte_range=None, raw_keys=(), array_key="traceEvents"):
        self.path = str(path)
        self.array_key = array_key
        self.raw_keys = frozenset(raw_keys)   # top-level keys kept as their text (JsonText), never decoded
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
        self.repaired = 0              # events decoded once their unescaped quotes were escaped (trace.repair)
        self.too_deep = 0              # events nested deeper than trace.deep.MAX_DEPTH: their depths kept as text
        self.unusable_times = 0        # complete events a consumer dropped for their time (events.ingest)
        self.has_events = False
        self.events_empty = None       # read_head: traceEvents is [] (True), holds something (False)
        self.bare_array = False        # the file is the bare-array form "[...]" (no top-level object)
        self.progress = progress   # callable(file bytes consumed so far), called per block

    # -- public iteration -------------------------------------------------
    def raw_batches(self, decode=True):
        """Yield ``RawBatch`` objects in file order; ``metadata`` is complete
        once the generator is exhausted.  ``decode=False`` skips building dicts
        (``events`` is None; use ``buf``/``starts``/``ends``); ``decode="bounds"``
        also skips reading the times (``ts_ns``/``dur_ns``/``flags`` are None too):
        only the event byte ranges are found, by the faster
        ``streamtrace.kernels.scan.scan_bounds``."""
        mode = "bounds" if decode == "bounds" else ("decode" if decode else "raw")
        return self._parse(events=mode, stop_at_events=False)

    def windows(self):
        """Yield the byte window inside ``traceEvents`` as a ``ScanWindow``, for a consumer that
        finds the events itself in the same pass as its own work (merge's rewrite and pre-pass
        kernels, in place of ``streamtrace.kernels.scan.scan_bounds``): it scans the window, tells
        what it found with ``ScanWindow.scanned`` before asking for the next one, and reads the
        events found from ``ScanWindow.batch``.  ``metadata`` is complete once the generator is
        exhausted; errors are raised as by ``raw_batches``."""
        return self._parse(events="windows", stop_at_events=False)

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
        src = ByteSource(self.path, self.block, self.byte_range)
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
                if c == -1:
                    self._truncated(st, "after a ',' between top-level keys"
                                    + (" (every event of traceEvents is complete)" if seen_events else ""))
            first = False
            if c != 0x22:
                self._fail(st, "expected a key string")
            key = self._key(st)
            st.skip_ws()
            if st.peek() != 0x3A:
                self._fail(st, "expected ':' after a key")
            st.pos += 1
            st.skip_ws()
            if key == self.array_key and st.peek() == 0x5B:
                seen_events = self.has_events = True
                self.events_offset = st.base + st.pos + 1
                if stop_at_events:
                    st.pos += 1               # one look past '[': an empty trace is said as such (issue 33)
                    st.skip_ws()
                    self.events_empty = st.peek() == 0x5D
                    return
                st.pos += 1
                yield from self._events(st, events)
                continue
            val = self._value(st, key in self.raw_keys)
            self.metadata[key] = val
            if not seen_events:
                self.head_keys.append(key)
        st.skip_ws()
        if not st.at_end():
            self._fail(st, "unexpected data after the JSON document")

    def _key(self, st):
        while True:
            e = scan.skip_string(st.arr, st.pos, st.n)
            if e >= 0:
                raw = st.buf[st.pos:e]
                st.pos = e
                try:
                    return json.loads(raw)
                except ValueError:
                    self._fail(st, "invalid key string")
            if not st.more():
                self._truncated(st, "inside a top-level key")

    def _value(self, st, keep_text=False):
        while True:
            status, end = scan.skip_value(st.arr, st.pos, st.n)
            if status == scan.DONE:
                break
            if status == scan.BAD:
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
        if keep_text or too_deep(raw, MAX_NESTING):    # kept as its text, never decoded (issue 49: 100,000 levels
                                                       # took GBs; a merged header copied as it is)
            if not valid_json(raw):
                self._fail(st, "invalid JSON value", pos=end)
            return JsonText(raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return decode_value(raw, self.path, off)

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
            if decode == "windows":
                w = ScanWindow(st.arr, st.buf, st.base, st.pos, st.n, starts, ends, sep, self.events_read)
                yield w
                if w.found is None:
                    raise RuntimeError("a ScanWindow was not scanned before the next one")
                k, status, newpos = w.found
            elif bounds:
                k, status, newpos = scan.scan_bounds(st.arr, st.pos, st.n, starts, ends, sep)
            else:
                k, status, newpos = scan.scan_events(st.arr, st.pos, st.n, starts, ends, ts, dur, flags, sep)
            if k:
                if bounds:
                    yield RawBatch(None, None, None, None, st.base + int(starts[0]), self.events_read,
                                   st.buf, starts[:k].copy(), ends[:k].copy())
                elif decode in ("decode", "raw"):
                    s0, e1 = int(starts[0]), int(ends[k - 1])
                    off = st.base + s0
                    evs = self._decode(st.buf, s0, e1, starts[:k], ends[:k], flags[:k], off - s0) \
                        if decode == "decode" else None
                    yield RawBatch(evs, ts[:k].copy(), dur[:k].copy(), flags[:k].copy(), off, self.events_read,
                                   st.buf, starts[:k].copy(), ends[:k].copy())
                self.events_read += k
            st.pos = newpos
            if status == scan.DONE:
                self.events_end = st.base + newpos
                self._repairs()
                self._inflation(st)
                return
            if status == scan.BAD:
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
                for i in np.flatnonzero(flags & scan.BIG_INT).tolist():
                    s = int(starts[i])
                    evs[i] = decode_value(buf[s:int(ends[i])], self.path, s + delta)
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
                    out.append(decode_value(raw, self.path, s + delta))
            return out

    def _repairs(self):
        """Count and report the events decoded with repaired quotes (issue 33) and those nested too
        deep to decode whole (issue 49, ``streamtrace.trace.deep``)."""
        n = take_repairs(self.path)
        if n:
            self.repaired += n
            self.warnings.append(repair_warning(self.path, n))
        n = take_deep(self.path)
        if n:
            self.too_deep += n
            self.warnings.append(deep_warning(self.path, n))

    def _inflation(self, st):
        """A gzip trace that inflated more than ``COPY_RATIO`` times its
        size is said (a gzip bomb, issue 49: read as a stream, no copy on disk)."""
        src = st.src
        if src.gz and src.compressed_read and st.base + st.n > COPY_RATIO * src.compressed_read:
            self.warnings.append(f"{self.path}: inflates {(st.base + st.n) / src.compressed_read:,.0f}x "
                                 f"({(st.base + st.n) / 1e6:,.1f} MB from {src.compressed_read / 1e6:,.1f} MB; real "
                                 f"traces ~20x): read as a stream, without a decompressed copy on disk")

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
        """Read on: at least as many new bytes as the window holds unconsumed (blocks joined), so
        that an event larger than a block is scanned and copied a bounded number of times (one
        event of 200 MB read block by block was scanned and copied again per block: quadratic,
        issue 49).  False at the end of the input."""
        left = self.n - self.pos
        data = self.src.read()
        if self.reader.progress is not None:
            self.reader.progress(self.src.compressed_read)
        if not data:
            return False
        if len(data) < left:
            chunks, got = [data], len(data)
            while got < left and (d := self.src.read()):
                chunks.append(d)
                got += len(d)
            data = b"".join(chunks)
            del chunks
        keep = memoryview(self.buf)[self.pos:]
        self.base += self.pos
        self.buf = b"".join((keep, data))
        del keep
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
            self.pos = int(scan.skip_ws(self.arr, self.pos, self.n))
            if self.pos < self.n or not self.more():
                return

    def at_end(self) -> bool:
        return self.peek() == -1

    def eof_value_ok(self) -> bool:
        return False


