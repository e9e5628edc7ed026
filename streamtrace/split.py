"""One big trace on many cores: split the ``traceEvents`` array into byte ranges
that start and end on event boundaries, parse the ranges in worker processes,
and put the results back together in file order.

Two ways to find the boundaries:

* exact: one sequential pass of the numba scanner
  :func:`streamtrace.kernels.scan.split_points` (it tracks string/escape state and
  brace depth, so braces inside strings never fool it) -- :func:`split_ranges`,
  used by ``merge --jobs``;
* guessed, then proven (:func:`guess_ranges`, used by ``analyze --jobs``): the
  array's end from the file's tail, and a cut near each equal share where the text
  looks like ``}, {"ph": ...`` -- no pass over the file.  Each range is then parsed
  from its start; the first range starts where the head says the array starts, and a
  range whose parse ends exactly at its own end (the reader's strict parser accepts
  the appended ``]`` only at array level, outside any string or object) proves that
  the next range starts on an event boundary too.  One range that does not parse
  exactly and the guess is thrown away: the ranges are found again by the scanner.

A ``.json.gz`` input is first decompressed once to a temporary file beside the
output (byte ranges need random access).  Keys before and after ``traceEvents`` are
still found: the head by the normal reader, the tail from the bytes after the
array's closing ``]``.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import zlib
from typing import NamedTuple

import numpy as np
import orjson

from .errors import TraceError
from .io import BLOCK, GZIP_MAGIC
from .kernels import scan as K
from .reader import TraceReader, find_trailer

SPLIT_THRESHOLD = 256 << 20     # files smaller than this are parsed by one process
RANGES_PER_JOB = 4              # byte ranges per worker process: even finish (and, scanned, an early start)
GUESS_WINDOW = 1 << 20          # bytes searched for a likely event boundary after each equal share
GUESS_TRIES = 256               # places that look like "}, {" tried per share
GUESS_EVENT_BYTES = 1 << 16     # the object after one must close within this many bytes
_LIKELY_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")      # "}, {": end of one event, start of the next


def plain_copy(path, folder) -> str | None:
    """Decompress a gzip file to a temporary plain file in ``folder`` and return its
    path, or None when ``path`` is not gzip.  The caller deletes it."""
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return None
    fd, tmp = tempfile.mkstemp(prefix=".streamtrace-", suffix=".json", dir=folder)
    z = zlib.decompressobj(31)
    try:
        with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            while True:
                chunk = src.read(BLOCK)
                if not chunk:
                    break
                data = z.decompress(chunk)
                while z.eof and z.unused_data:
                    rest = z.unused_data
                    z = zlib.decompressobj(31)
                    data += z.decompress(rest)
                dst.write(data)
    except zlib.error as e:
        os.unlink(tmp)
        raise TraceError(path, f"corrupt gzip data ({e})") from None
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def split_ranges(path, parts: int):
    """Byte ranges ``[(start, end), ...]`` of a PLAIN trace's ``traceEvents`` content,
    about ``parts`` of them, each holding whole events; plus the metadata (keys
    before and after the array) and the array's end offset.

    Returns ``(ranges, metadata, head_keys)``.  Raises :class:`TraceError` when the
    file has no ``traceEvents`` array or it is not closed (truncated)."""
    found = {}
    ranges = list(iter_ranges(path, parts, found))
    return ranges, found["metadata"], found["head_keys"]


def iter_ranges(path, parts: int, found: dict, end_at: int | None = None):
    """:func:`split_ranges` as a generator: yields each ``(start, end)`` byte range as soon
    as the scan has passed its end, so its parsing can start while the rest of the file
    is scanned.  When exhausted, ``found`` holds ``"metadata"`` and ``"head_keys"``.
    Raises :class:`TraceError` like :func:`split_ranges` (a truncated array: after the
    ranges before the last one were yielded), and when ``end_at`` is given and the
    array's ``]`` is not at that offset (the scanner does not tell ``}`` from ``]``, so
    a ``}`` closing the array, or a second ``]``, would end it elsewhere)."""
    r = TraceReader(path)
    head = r.read_head()
    if not r.has_events or r.events_offset is None:
        raise TraceError(path, "no traceEvents array")
    start = r.events_offset
    size = os.path.getsize(path)
    every = max(1, (size - start) // max(1, parts))
    state = np.zeros(5, np.int64)
    state[3] = start
    out = np.empty(max(4, parts * 2), np.int64)
    with open(path, "rb") as f:
        prev, end, pos, npoints = start, -1, start, 0
        while end < 0:
            f.seek(pos)
            data = f.read(BLOCK)
            if not data:
                break
            k, end = K.split_points(np.frombuffer(data, np.uint8), len(data), pos, every, out, state)
            pos += len(data)
            points = out[:k].tolist()
            npoints += k
            for i, b in enumerate(points):
                if end >= 0 and i == k - 1 and b >= end:     # the array's end is the last range's end
                    break
                nxt = _after_comma(f, b)
                if nxt < 0:                                  # a cut just before the array's ']'
                    continue
                yield (prev, b)
                prev = nxt
        if end < 0:
            raise TraceError(path, "truncated: traceEvents is not closed", offset=pos)
        if end_at is not None and end != end_at:
            raise TraceError(path, "traceEvents closes where the file's tail says it does not", offset=end)
        if npoints or start < end:                          # an empty array without a cut: no range
            yield (prev, end)
        f.seek(end + 1)
        tail = f.read().strip()
    meta = dict(head)
    if tail.startswith(b","):
        try:
            trailer = orjson.loads(b"{" + tail[1:])
        except orjson.JSONDecodeError:
            trailer = TraceReader(path).read_metadata()
        meta.update(trailer)
    found["metadata"], found["head_keys"] = meta, list(head)


def _after_comma(f, a) -> int:
    """The offset after the whitespace and the one comma that follow offset ``a`` of
    the open file ``f`` (where the next range starts), or -1 when the array's ``]``
    follows instead.  Raises :class:`TraceError` on anything else (a missing comma
    between two events)."""
    pos = a
    while True:
        f.seek(pos)
        chunk = f.read(4096)
        stripped = chunk.lstrip(b" \t\r\n")
        pos += len(chunk) - len(stripped)
        if stripped or not chunk:
            break
    if stripped.startswith(b","):
        return pos + 1
    if stripped.startswith(b"]"):
        return -1
    raise TraceError(f.name, "no comma after an event", offset=pos)


def guess_cut(f, lo, hi) -> int | None:
    """A likely event boundary in ``[lo, hi)`` of the open plain file ``f``: the offset
    just past the first ``}`` (within :data:`GUESS_WINDOW` bytes of ``lo``) that is
    followed by ``,`` and an object with a ``"ph"`` key, i.e. what the end of one
    trace event and the start of the next look like.  None when there is none among
    the first :data:`GUESS_TRIES` places that look like ``}, {`` (an object longer than
    :data:`GUESS_EVENT_BYTES` is passed over), so the work stays bounded.  Only a guess
    (the text may sit inside a string or an event's args): :func:`ingest_parallel`
    proves it."""
    f.seek(lo)
    data = f.read(max(0, min(GUESS_WINDOW, hi - lo)))
    arr = np.frombuffer(data, np.uint8)
    for tries, m in enumerate(_LIKELY_CUT.finditer(data)):
        if tries >= GUESS_TRIES:                            # bounded work whatever the text
            return None
        s = m.end() - 1
        status, e = K.skip_value(arr, s, min(len(data), s + GUESS_EVENT_BYTES))
        if status != K.DONE:
            continue                                        # not an object, or a long one: the next
        try:
            ev = orjson.loads(data[s:e])
        except orjson.JSONDecodeError:
            continue
        if isinstance(ev, dict) and "ph" in ev:
            return lo + m.start() + 1
    return None


def guess_ranges(path, parts: int):
    """Likely byte ranges of a PLAIN trace's ``traceEvents`` content without a pass
    over the file: the array's start from the head, its end from the tail
    (:func:`streamtrace.reader.find_trailer`), and a :func:`guess_cut` after each of
    ``parts`` equal shares.  Returns ``(ranges, metadata, head_keys)`` like
    :func:`split_ranges`, or None when the head or the tail is not what a whole trace
    has (truncated file, data after the document, no ``traceEvents``).  The ranges are
    only likely right; :func:`ingest_parallel` shows how they are proven.  Raises
    :class:`TraceError` when the head cannot be read."""
    r = TraceReader(path)
    head = r.read_head()
    if not r.has_events or r.events_offset is None:
        return None
    found = find_trailer(path, bare=r.bare_array)
    if found is None:
        return None
    trailer, end = found
    start = r.events_offset
    if end < start:
        return None
    every = max(1, (end - start) // max(1, parts))
    ranges, prev = [], start
    with open(path, "rb") as f:
        for k in range(1, parts):
            lo = max(start + k * every, prev + 1)
            if lo >= end:
                break
            cut = guess_cut(f, lo, end)
            if cut is None:
                continue
            nxt = _after_comma(f, cut)                      # a comma: guess_cut saw one
            ranges.append((prev, cut))
            prev = nxt
    ranges.append((prev, end))
    meta = dict(head)
    meta.update(trailer)
    return ranges, meta, list(head)


def range_events(path, byte_range, **kw):
    """A :class:`TraceReader` over one byte range (a bare array of whole events)."""
    return TraceReader(path, byte_range=byte_range, **kw)


def cleanup(tmp):
    if tmp:
        try:
            os.unlink(tmp)
        except OSError:
            pass



# -- parallel ingest for analyze ----------------------------------------------------

def _ingest_range(path, byte_range, patterns, salvage, spill_dir, chunk_events, exact=False, first=True):
    """Worker: columns of one byte range into its own store.  Returns
    ``(key -> [block reference], strings, comm_rows, warnings)`` (compressed blocks, or
    blocks in spill files, see :meth:`streamtrace.store.MemoryStore.export`).
    ``exact=True`` (a guessed range): raises :class:`TraceError` unless the range is a
    whole number of events that the closing ``]`` appended to it ends exactly.
    ``first=False``: the range follows a comma, so holding no event is an error (a
    trailing comma in the array) -- :class:`TraceError` too."""
    from .analyze import ingest
    from .patterns import Patterns
    from .store import MemoryStore, SpillStore
    store = SpillStore(spill_dir, chunk_events) if spill_dir else MemoryStore(chunk_events)
    table, comm_rows, reader = ingest(path, store, Patterns.load(patterns), salvage and not exact,
                                      byte_range=byte_range)
    a, b = byte_range
    if exact and reader.events_end != b - a + 2:           # the stream is "[" + range + "]"
        raise TraceError(path, "byte range does not end on an event boundary", offset=b)
    if not first and reader.events_read == 0:
        raise TraceError(path, "no event after a comma in traceEvents", offset=a)
    return store.export(), table.strings, comm_rows, reader.warnings


class MergedStore:
    """The stores of several byte ranges seen as one, in file order; string ids and
    collective-args rows of each range are remapped to the shared table on read."""

    def __init__(self, chunk_events=65536):
        self.chunk_events = chunk_events
        self.parts = []        # (dict key -> [block reference], lut int64, comm offset)

    def add_range(self, parts, lut, comm_offset):
        from .columns import STR_ID_BASE, is_str_id

        def canon(v):                      # string pids/tids: this range's table -> the shared one
            return int(STR_ID_BASE + lut[v - STR_ID_BASE]) if is_str_id(v) else v
        parts = {(k[0], k[1], *map(canon, k[2:])): v for k, v in parts.items()}
        self.parts.append((parts, lut, comm_offset))

    def keys(self):
        return sorted({k for p, _, _ in self.parts for k in p}, key=repr)

    def rows(self, key) -> int:
        return sum(ref[1] for parts, _, _ in self.parts for ref in parts.get(key, ()))

    def _refs(self, key):
        """``[(block reference, lut, comm offset)]`` of ``key``, ranges in file order."""
        return [(ref, lut, off) for parts, lut, off in self.parts for ref in parts.get(key, ())]

    @staticmethod
    def _load(ref, lut, off):
        """One block's rows, string ids and collective-args rows remapped."""
        from .store import load_block
        a = load_block(ref)
        for col in ("cat", "name"):
            m = a[col] >= 0
            a[col][m] = lut[a[col][m]]
        m = a["comm"] >= 0
        a["comm"][m] += off
        return a

    def blocks(self, key):
        """The key's rows block by block, ranges in file order, ids remapped."""
        for ref, lut, off in self._refs(key):
            yield self._load(ref, lut, off)

    def block_spans(self, key):
        """Per block, in :meth:`blocks` order: ``(rows, first_ts, last_end)`` int64 arrays
        (see :meth:`streamtrace.store.MemoryStore.block_spans`)."""
        from .store import _span_arrays
        return _span_arrays([(ref[1], ref[-2], ref[-1]) for ref, _, _ in self._refs(key)])

    def block(self, key, j):
        """Block ``j`` of ``key`` (as :meth:`blocks` gives it)."""
        return self._load(*self._refs(key)[j])

    def get(self, key):
        from .analyze import STORE_DTYPE
        out = list(self.blocks(key))
        return np.concatenate(out) if out else np.zeros(0, STORE_DTYPE)

    def drop(self, key):
        """Release this key's blocks (and spill files)."""
        for parts, _, _ in self.parts:
            for ref in parts.pop(key, ()):
                if ref[0] == "file":
                    try:
                        os.unlink(ref[4])
                    except OSError:
                        pass

    def take(self, key):
        """:meth:`get`, then :meth:`drop`."""
        out = self.get(key)
        self.drop(key)
        return out


_WARM_TRACE = (
    b'{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":2},"traceEvents":['
    b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":100},'
    b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1.5,"dur":20,"args":{"External id":3}},'
    b'{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":30,"dur":20,'
    b'"args":{"Collective name":"allreduce","In msg nelems":4,"Out msg nelems":4,"dtype":"Float",'
    b'"Group size":2,"Process Group Ranks":"[0, 1]"}},'
    b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":5,'
    b'"args":{"correlation":9,"External id":3}},'
    b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":31,"dur":5,'
    b'"args":{"correlation":10}},'
    b'{"ph":"X","cat":"cpu_op","name":"autograd::engine","pid":1,"tid":2,"ts":40,"dur":20},'
    b'{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":8,"dur":2,'
    b'"args":{"device":0,"stream":7,"correlation":9,"External id":3}},'
    b'{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":8,"ts":37,"dur":9,'
    b'"args":{"device":0,"stream":8,"correlation":10,"Collective name":"allreduce","In msg nelems":4,'
    b'"Out msg nelems":4,"dtype":"Float","Group size":2}},'
    b'{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":0,"tid":7,"ts":50,"dur":1,"args":{"device":0}}'
    b']}')


def warm_analysis(folder, opt, ingest_only=False) -> None:
    """Load analyze's numba kernels (and pyarrow's Parquet writer) into this process by
    analysing a small trace with ``opt``'s options in a temporary folder in ``folder``;
    ``ingest_only``: only the parse kernels (reading that trace into a store).
    ``--jobs N`` on one big trace loads the parse kernels before forking the parse
    workers, and the rest while they parse: the track children, forked later, inherit
    it all, so the split run loads every kernel once, as the single-process run does."""
    from dataclasses import replace
    from .analyze import analyze_file, ingest
    from .patterns import Patterns
    from .store import MemoryStore
    with tempfile.TemporaryDirectory(dir=folder, prefix=".streamtrace-warm-") as d:
        src = os.path.join(d, "warm.json")
        with open(src, "wb") as f:
            f.write(_WARM_TRACE)
        if ingest_only:
            ingest(src, MemoryStore(opt.chunk_events), Patterns.load(opt.patterns))
        else:
            analyze_file(src, d, 0, None, replace(opt, split_jobs=1))


class SplitIngest(NamedTuple):
    """What :func:`ingest_parallel` read: the columns as one store, the shared string
    table, collective-args rows, top-level metadata, reader warnings, and ``how`` the
    ranges were found (``"guessed"``: :func:`guess_ranges`, all proven; ``"scanned"``:
    the guess was wrong somewhere, :func:`iter_ranges`' exact scan)."""
    store: "MergedStore"
    table: object
    comm_rows: list
    metadata: dict
    warnings: list
    how: str


def ingest_parallel(path, tmpdir, jobs, patterns, salvage=False, spill_dir=None, chunk_events=1_000_000,
                    while_parsing=None):
    """Parse one big trace with ``jobs`` worker processes (byte ranges in file order,
    about :data:`RANGES_PER_JOB` per worker).  The ranges are first guessed
    (:func:`guess_ranges`, no pass over the file) and parsed; each one must parse to
    exactly its end, which proves the next one's start (see the module docstring).  If
    one does not, that work is dropped and the ranges come from the exact scanner
    (:func:`iter_ranges`, each handed out as soon as the scan has found its end).

    Returns a :class:`SplitIngest` equivalent to :func:`streamtrace.analyze.ingest` on
    the whole file, or None when the file cannot be read in byte ranges (truncated,
    data after the document, a syntax error): the caller then reads it in one process,
    which reports the error (or, with ``salvage``, keeps what can be kept) exactly as
    ``--jobs 1`` does.  ``while_parsing()``: called once in this process while the
    workers parse (after every range was handed out), e.g. to load other code."""
    plain = plain_copy(path, tmpdir)
    parts = jobs * RANGES_PER_JOB
    pending = [while_parsing] if while_parsing else []

    def submitted():
        while pending:
            pending.pop()()
    try:
        src = plain or str(path)
        try:
            plan = guess_ranges(src, parts)
        except TraceError:
            return None
        if plan is None:
            return None
        ranges, meta, _ = plan
        how = "guessed"
        results = None
        if len(ranges) >= jobs:          # else too few likely cuts (events without "ph", > 1 MB events): scan
            results = _parse_ranges(src, ranges, jobs, patterns, salvage, spill_dir, "g", chunk_events, True,
                                    submitted)
        if results is None:
            how, found = "scanned", {}
            results = _parse_ranges(src, iter_ranges(src, parts, found, end_at=ranges[-1][1]), jobs, patterns,
                                    salvage, spill_dir, "r", chunk_events, False, submitted)
            if results is None:
                return None
            meta = found["metadata"]
    finally:
        cleanup(plain)
    from .columns import StringTable
    table = StringTable()
    comm_rows, warnings = [], []
    store = MergedStore(chunk_events)
    for parts_, strings, rows, warns in results:
        lut = np.asarray([table.id(s) for s in strings] or [0], np.int64)
        store.add_range(parts_, lut, len(comm_rows))
        comm_rows.extend(rows)
        warnings.extend(warns)
    return SplitIngest(store, table, comm_rows, meta, warnings, how)


def _parse_ranges(src, ranges, jobs, patterns, salvage, spill_dir, tag, chunk_events, exact, submitted=None):
    """Each byte range of ``ranges`` (an iterable, consumed as it yields) parsed by a
    pool of ``jobs`` processes; the workers' results in order, or None as soon as one
    range raises :class:`TraceError` (the others are cancelled, their spill folders
    ``<spill_dir>/<tag><i>`` removed).  ``submitted()`` is called once every range is
    handed out.  Other exceptions propagate."""
    from .parallel import pool
    futures, folders = [], []
    failed = False
    results = []
    try:
        with pool(jobs) as ex:
            try:
                for i, r in enumerate(ranges):
                    folder = os.path.join(spill_dir, f"{tag}{i}") if spill_dir else None
                    if folder:
                        os.makedirs(folder, exist_ok=True)
                        folders.append(folder)
                    futures.append(ex.submit(_ingest_range, src, r, patterns, salvage, folder, chunk_events,
                                             exact, i == 0))
                if submitted is not None:
                    submitted()
                for f in futures:
                    results.append(f.result())
            except BaseException:
                failed = True
                for f in futures:
                    f.cancel()
                raise
    except TraceError:
        return None
    finally:
        if failed:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
    return results
