"""Finding rank trace files and telling which rank and iteration each one is.

Layouts recognised (file-name patterns, applied to the name and its folder):
  Megatron-LM + TraceViz patch  ``iteration_10/rank_0003_iter_10.pt.trace.json``
  Megatron-LM                   ``torch_profile/rank-3.json.gz``
  TorchTitan                    ``profile_traces/iteration_10/rank3_trace.json[.gz]``
  tensorboard_trace_handler     ``<host>_<pid>.<time_ns>.pt.trace.json[.gz]`` (rank from
                                ``distributedInfo``, the only place it is written)
The rank comes from ``distributedInfo.rank`` first, then the file name, then a
``--rank-map`` file.
"""
from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.errors import RankConflictError, StreamtraceError, TraceError, UnknownRankError
from .formats import KINETO, NSYS, TraceSource
from .metadata import MAX_RANK, read_trailer, share_head
from .nsys import is_nsys_report, is_sqlite, report_hint
from .nsys.db import open_export, table_columns
from .reader import TraceReader

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")   # .sqlite: Nsight Systems exports (told by content)
_SKIP_NAME = re.compile(r"(topology|merged|summary|report|\.tmp$)", re.I)
_RANK_PATTERNS = [
    re.compile(r"rank[_-]?(\d+)_iter[_-]?\d+", re.I),     # rank_0003_iter_10
    re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)", re.I),    # rank-3, rank3_trace, rank_3
]
_ITER_PATTERNS = [
    re.compile(r"(?:^|[^a-z])iter(?:ation)?[_-]?(\d+)", re.I),
]


@dataclass
class TraceFile:
    """One rank's trace: ``path``, ``rank`` (int), ``iteration`` (int or None),
    ``rank_source`` ("distributedInfo", "file name", "rank map", or "lone file" for the one
    input of a run that carries no rank: rank 0; "nsys export"), ``head``
    (the top-level keys that stand before ``traceEvents``; all of them when the
    file had to be skimmed to find ``distributedInfo``), ``size`` (bytes) and ``source``, its format
    (``TraceSource``: ``KINETO`` or
    ``NSYS``), which the stages ask instead of looking at the file."""
    path: str
    rank: int
    iteration: int | None
    rank_source: str
    head: dict = field(default_factory=dict, repr=False)
    size: int = 0
    source: TraceSource = KINETO


def expand_inputs(inputs, warn=None) -> list[str]:
    """Expand files, directories (searched recursively) and glob patterns into a
    sorted list of candidate trace files (``*.json``, ``*.json.gz``).

    A folder below an input folder that cannot be read is skipped and reported to
    ``warn(path, message)`` (None: skipped silently).  Raises ``StreamtraceError`` when an
    input matches nothing, or is a folder that cannot be read."""
    out = []
    for item in inputs:
        item = str(item)
        paths = [item] if os.path.exists(item) else sorted(glob.glob(item, recursive=True))
        if not paths:
            raise StreamtraceError(f"{item}: no such file, folder or matching pattern")
        for p in paths:
            if os.path.isdir(p):
                try:
                    os.scandir(p).close()
                except OSError as e:
                    raise StreamtraceError(f"{p}: cannot read the folder ({e.strerror or e})") from None

                def unreadable(e, top=p):
                    if warn is not None and e.filename != top:
                        warn(e.filename, f"cannot read the folder ({e.strerror or e}); the traces in it are skipped")
                for root, dirs, files in os.walk(p, onerror=unreadable):
                    dirs[:] = sorted(d for d in dirs if d != "streamtrace" and not d.startswith("."))
                    for f in sorted(files):
                        if f.endswith(TRACE_SUFFIXES) and not _SKIP_NAME.search(f) and not f.startswith("."):
                            out.append(os.path.join(root, f))
            else:
                out.append(p)
    seen = set()
    return [p for p in out if not (p in seen or seen.add(p))]


def rank_from_name(path) -> int | None:
    """Rank written in the file name (``rank_0003_iter_10``, ``rank-3``, ``rank3_trace``)."""
    name = Path(path).name
    for pat in _RANK_PATTERNS:
        m = pat.search(name)
        if m:
            return int(m.group(1))
    return None


def iteration_from_path(path) -> int | None:
    """Iteration from the file name (``_iter_10``) or a parent folder (``iteration_10``)."""
    p = Path(path)
    for part in [p.name] + [q.name for q in p.parents][:3]:
        for pat in _ITER_PATTERNS:
            m = pat.search(part)
            if m:
                return int(m.group(1))
    return None


def load_rank_map(path) -> dict:
    """Read a ``--rank-map`` file: JSON ``{"file name or path": rank}`` or lines
    ``<file> <rank>``.  Keys are matched against the full path and the file name."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise StreamtraceError(f"{path}: cannot read rank map ({e.strerror})") from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        return {str(k): int(v) for k, v in data.items()}
    except ValueError:
        out = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise StreamtraceError(f"{path}:{n}: expected '<file> <rank>'") from None
            out[parts[0]] = int(parts[1])
        return out


LONE_FILE = "lone file"


def no_events_reason(path, reader) -> str | None:
    """Why a JSON file without a ``traceEvents`` array is worth a word, or None for a file that
    is plainly not a trace (a config file beside the traces): its ``traceEvents`` is there but
    is not an array, or its name is a rank trace's."""
    what = no_events_text(reader)
    if "traceEvents" in reader.metadata or reader.has_events:
        return what + SKIPPED
    name = Path(path).name
    if not reader.metadata or rank_from_name(path) is not None or ".pt.trace." in name or "trace" in name.lower():
        return what + SKIPPED
    return None


SKIPPED = "; the file is skipped"
"""How ``no_events_reason`` ends (what merge and analyze of that file alone leave out)."""


def nothing_found(inputs, skipped) -> StreamtraceError:
    """The error of merge and analyze when ``inputs`` hold no trace: one input file's own problem
    (a ``TraceError``: "x.json: not a trace: traceEvents is null,
    ...", "x.json: an empty trace: ...") when it is the only thing skipped, else "no trace files found in ..." with the first skipped file's
    reason (``skipped``: "path: reason" lines)."""
    names = [str(i) for i in inputs]
    if len(skipped) == 1 and len(names) == 1 and os.path.isfile(names[0]):
        line = skipped[0].removesuffix(SKIPPED)
        prefix = f"{names[0]}: "
        return TraceError(names[0], line[len(prefix):]) if line.startswith(prefix) else StreamtraceError(line)
    why = f" ({skipped[0]}{f'; and {len(skipped) - 1} more' if len(skipped) > 1 else ''})" if skipped else ""
    return StreamtraceError(f"no trace files found in {', '.join(names)}{why}")


def no_events_text(reader) -> str:
    """What a file whose head ``TraceReader`` read holds instead of
    events, in words: "not a trace: traceEvents is null, not an array of events", "an empty
    trace: traceEvents holds no events", "an empty trace: {} (no traceEvents)", "no traceEvents
    array (an unfinished trace?)" (issue 33)."""
    if reader.has_events:
        return "an empty trace: traceEvents holds no events"
    if "traceEvents" in reader.metadata:
        v = reader.metadata["traceEvents"]
        kind = "null" if v is None else {dict: "an object", str: "a string", bool: "a boolean",
                                          list: "an array"}.get(type(v), "a number")
        return f"not a trace: traceEvents is {kind}, not an array of events"
    if not reader.metadata:
        return "an empty trace: {} (no traceEvents, no events)"
    return "no traceEvents array, no events (an unfinished trace?)"


def identify(path, rank_map=None, default_rank=None, warn=None) -> TraceFile | None:
    """Read the head of ``path`` and work out its rank and iteration.

    Returns None when the file is JSON but not a trace (no ``traceEvents`` array); when it
    looks like one all the same (``no_events_reason``), ``warn(path, message)`` is told.
    A file with no rank gets ``default_rank`` when one is given (``rank_source`` ``LONE_FILE``).
    Raises ``UnknownRankError`` when no rank can be found, and
    ``TraceError`` for unreadable files."""
    if is_nsys_report(path):
        raise StreamtraceError(report_hint(path))
    if is_sqlite(path):
        return _identify_export(path, rank_map, default_rank, warn)
    r = TraceReader(path)
    head = r.read_head()
    if not r.has_events or r.events_empty:
        reason = no_events_reason(path, r)
        if reason and warn is not None:
            warn(str(path), reason)
        return None
    if "distributedInfo" not in head:
        # Some writers put distributedInfo after traceEvents: read the keys there from
        # the file's tail, or (gzip, unreadable tail) skim the whole file (events are
        # skipped by the byte scanner, not decoded; a truncated tail is reported by
        # the pass that reads the events, with --salvage honoured there).
        tail = read_trailer(path)
        head = {**head, **tail} if tail is not None else TraceReader(path, salvage=True).read_metadata()
    rank, source = None, None
    di = head.get("distributedInfo")
    if isinstance(di, dict) and type(di.get("rank")) is int and 0 <= di["rank"] <= MAX_RANK:
        rank, source = di["rank"], "distributedInfo"      # (else not a rank: the file name's, the map's)
    if rank is None:
        rank = rank_from_name(path)
        source = "file name" if rank is not None else None
    if rank is None and rank_map:
        for key in (str(path), os.path.basename(str(path))):
            if key in rank_map:
                rank, source = rank_map[key], "rank map"
                break
    if rank is None and default_rank is not None:
        rank, source = default_rank, LONE_FILE
    if rank is None:
        raise UnknownRankError(path)
    if not 0 <= rank <= MAX_RANK:
        raise TraceError(path, f"rank {rank:,} (from its {source}) is not a rank from 0 to {MAX_RANK:,}; "
                               f"pass --rank-map FILE")
    return TraceFile(str(path), rank, iteration_from_path(path), source, share_head(head), os.path.getsize(path))


NSYS_EXPORT = "nsys export"
NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def _identify_export(path, rank_map, default_rank, warn) -> TraceFile | None:
    """An SQLite file: an Nsight Systems export (its ranks are its processes', told when it is
    read: ``rank`` here is the first rank its processes ranked by order take), or None (with a
    word to ``warn``) for another database."""
    conn = open_export(path)
    try:
        tables = table_columns(conn)
    finally:
        conn.close()
    if not any(t in tables for t in NSYS_TABLES):
        if warn is not None:
            warn(str(path), "an SQLite database without Nsight Systems tables; the file is skipped")
        return None
    rank = rank_map.get(str(path), rank_map.get(os.path.basename(str(path)))) if rank_map else None
    rank = rank if rank is not None else (default_rank or 0)
    return TraceFile(str(path), int(rank), iteration_from_path(path), NSYS_EXPORT, {}, os.path.getsize(path), NSYS)


def discover(inputs, rank_map=None, warn=None) -> list[TraceFile]:
    """Identify every trace among ``inputs``; files that are not traces are skipped (those that
    look like one, and unreadable folders, are reported to ``warn(path, message)``).  A single
    input file with no rank information is rank 0 (``rank_source`` ``LONE_FILE``), as a
    single-GPU run's trace.

    Raises ``RankConflictError`` naming both files when two claim one rank in
    the same iteration, ``UnknownRankError`` when one of several files
    carries no rank."""
    rmap = load_rank_map(rank_map) if isinstance(rank_map, (str, os.PathLike)) else rank_map
    paths = expand_inputs(inputs, warn)
    lone = 0 if len(paths) == 1 else None
    files = [tf for p in paths if (tf := identify(p, rmap, lone, warn)) is not None]
    seen = {}
    for tf in files:
        key = (tf.iteration, tf.rank)
        if not tf.source.rank_per_file:          # an export's ranks are its processes': told when read
            continue
        if key in seen:
            it = f" in iteration {tf.iteration}" if tf.iteration is not None else ""
            raise RankConflictError(f"rank {tf.rank}{it} is claimed by two files: {seen[key].path} and {tf.path}")
        seen[key] = tf
    return sorted(files, key=lambda t: (t.iteration if t.iteration is not None else -1, t.rank))
