"""Kineto metadata: the top-level keys of a trace besides ``traceEvents``, read in one place.

* ``read_trailer`` / ``find_trailer`` -- the keys after ``traceEvents`` (Kineto writes
  ``baseTimeNanoseconds``, ``traceName`` and, in some versions, ``distributedInfo`` there) read
  from the file's tail, without the events;
* accessors of a metadata dict: ``host_name``, ``device_names``, ``pg_config``
  (process groups of ``distributedInfo.pg_config`` by name), ``pg_config_entries`` (every
  entry, for the topology), each also for one rank of a streamtrace-merged trace (whose header
  keeps every rank's ``distributedInfo``, its process groups listed once for the job:
  ``streamtrace.trace.merged_groups``, and ``deviceProperties``);
* ``trace_facts`` -- what a later stage needs of one rank's metadata, kept by ``analyze``
  in ``summary.json`` so that ``aggregate`` need not read the trace again.
"""
from __future__ import annotations


import orjson

from .merged_groups import group_key, rank_distributed_info
from .source import GZIP_MAGIC

_WS = b" \t\r\n"


def read_trailer(path, tail: int = 1 << 16) -> dict | None:
    """The top-level keys after ``traceEvents`` of a PLAIN (not gzip) trace, read
    from its last ``tail`` bytes without reading the events (Kineto writes
    ``baseTimeNanoseconds``, ``traceName`` and, in some versions, more there).

    The closing ``]`` of ``traceEvents`` is not known from the tail alone (the
    trailer may hold arrays too), so every ``]`` of the window is tried from the
    end and the LONGEST text after one that parses as the rest of the document
    wins.  Returns that dict (``{}`` when the document ends right after the
    array), or None when nothing parses or the file is gzip / unreadable: the
    caller then reads the whole file (``TraceReader.read_metadata``).
    Never raises for bad input."""
    found = find_trailer(path, tail)
    return None if found is None else found[0]


def find_trailer(path, tail: int = 1 << 16, bare: bool = False):
    """``read_trailer`` with the place it was found: ``(trailer dict, offset of
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


def host_name(meta):
    """The host a trace was recorded on (``host_name``/``hostname``, or ``distributedInfo.host_name``), or None."""
    h = meta.get("host_name") or meta.get("hostname")
    if h:
        return h
    di = meta.get("distributedInfo")
    return di.get("host_name") if isinstance(di, dict) else None


def device_names(meta) -> dict:
    """``{device id: GPU name}`` from ``deviceProperties``."""
    out = {}
    for d in meta.get("deviceProperties") or []:
        if isinstance(d, dict) and "id" in d:
            out[d["id"]] = d.get("name")
    return out


def pg_config(meta, rank) -> dict:
    """Process groups by name from ``distributedInfo.pg_config`` (for a merged trace,
    from the rank's recorded distributedInfo)."""
    di = meta.get("distributedInfo")
    st = meta.get("streamtrace")
    if isinstance(st, dict):
        for r in st.get("ranks") or []:
            if r.get("rank") == rank:
                di = rank_distributed_info(st, r)
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    if isinstance(cfg, dict):      # some versions write a dict keyed by name
        cfg = [dict(v, pg_name=k) for k, v in cfg.items() if isinstance(v, dict)]
    return {str(p.get("pg_name")): p for p in cfg or [] if isinstance(p, dict)}


_SHARED: dict = {}
_SHARED_MAX = 1 << 16       # distinct entries kept (a process that reads many jobs starts again past it)


def share_head(metadata: dict) -> dict:
    """``metadata`` (a trace's top-level keys, parsed) with the parts that repeat from rank to rank
    replaced, in place, by equal ones shared between the traces a process reads (keyed by their JSON
    text, ``group_key``): each ``distributedInfo.pg_config`` entry (a group's member list held once, not
    once per member) and the ``deviceProperties`` list (the node's GPUs, the same on every rank of a
    node type).  At 4,096 synthetic ranks each file's groups took ~185 KB of Python objects (755 MB for
    a job's headers, held by discovery and merge) and its device list ~7 KB (twice in merge's parent, a
    rank's survey and its result: ~60 MB).  The stages read these entries and never change them."""
    if len(_SHARED) > _SHARED_MAX:
        _SHARED.clear()
    props = metadata.get("deviceProperties")
    if isinstance(props, list) and props:
        metadata["deviceProperties"] = _shared(props)
    di = metadata.get("distributedInfo")
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    if isinstance(cfg, dict):
        di["pg_config"] = {k: _shared(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    elif isinstance(cfg, list):
        di["pg_config"] = [_shared(e) if isinstance(e, dict) else e for e in cfg]
    return metadata


def _shared(value):
    """The shared object equal to ``value`` (a JSON value; ``value`` itself when first seen or not
    writable as JSON)."""
    key = group_key(value)
    return value if key is None else _SHARED.setdefault(key, value)


def pg_config_entries(metadata: dict, rank: int | None = None) -> tuple[list, int | None]:
    """``(entries, world_size)`` from one trace's metadata: the ``distributedInfo.pg_config`` list
    (``{"pg_name", "pg_desc", "ranks", ...}``; a dict keyed by name is accepted) — for a
    streamtrace merged trace, every recorded rank's (or only ``rank``'s)."""
    infos = []
    st = metadata.get("streamtrace")
    if isinstance(st, dict) and st.get("kind") == "merged":
        infos = [rank_distributed_info(st, r) for r in st.get("ranks") or [] if rank is None or r.get("rank") == rank]
    infos.append(metadata.get("distributedInfo"))
    entries, world = [], None
    for di in infos:
        if not isinstance(di, dict):
            continue
        world = world or world_size_of(di.get("world_size"))
        cfg = di.get("pg_config")
        if isinstance(cfg, dict):
            cfg = [dict(v, pg_name=k) for k, v in cfg.items() if isinstance(v, dict)]
        entries += [e for e in cfg or [] if isinstance(e, dict)]
    return entries, world


MAX_RANK = (1 << 20) - 1
"""The largest rank streamtrace takes (a world of 1,048,576; the largest jobs run ~10^5 GPUs): the later
stages size arrays by rank, and a hostile ``distributedInfo.rank`` of 10^9 asked aggregate for 7.5 GiB."""


def world_size_of(v) -> int | None:
    """A stated world size ``v`` when it is one (an int from 1 to ``MAX_RANK`` + 1), else None."""
    return v if type(v) is int and 1 <= v <= MAX_RANK + 1 else None


MAX_BASE_TIME_NS = 1 << 62
"""The latest ``baseTimeNanoseconds`` taken (ns since the Unix epoch: the year 2116); a later one, or a
negative one, is not a clock (a hostile or damaged header: 1e30 overflowed the ranks' int64 shifts)."""


def base_time_ns(metadata: dict) -> int | None:
    """``metadata``'s ``baseTimeNanoseconds`` as int ns (``clock_ns``); None when absent or not a clock."""
    return clock_ns(metadata.get("baseTimeNanoseconds") if isinstance(metadata, dict) else None)


def clock_ns(v) -> int | None:
    """``v`` as a clock reading in int ns: an integer (or an integral float) from 0 to
    ``MAX_BASE_TIME_NS``; None for anything else (None, text, a bool, NaN, out of range)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not v.is_integer():        # (NaN and inf too)
        return None
    return int(v) if 0 <= v <= MAX_BASE_TIME_NS else None


def trace_facts(metadata: dict, rank: int) -> dict:
    """What ``aggregate`` needs of rank ``rank``'s trace metadata, JSON-able:
    ``base_time_ns`` (``baseTimeNanoseconds``: int ns, or None), ``merged`` (a streamtrace-merged
    trace), ``device_name`` (the first ``deviceProperties`` entry's ``name``, for a merged trace
    the rank's own, "" when absent), ``pg_entries`` and ``world_size`` (``pg_config_entries``,
    for a merged trace the rank's only).  ``analyze`` stores it per rank in ``summary.json``
    (``"trace_metadata"``); for older folders ``aggregate`` reads the trace's metadata again."""
    st = metadata.get("streamtrace") if isinstance(metadata.get("streamtrace"), dict) else {}
    merged = st.get("kind") == "merged"
    base = base_time_ns(metadata)
    props = metadata.get("deviceProperties")
    if merged:
        for r in st.get("ranks") or []:
            if isinstance(r, dict) and r.get("rank") == rank:
                props = r.get("deviceProperties") or props
    name = props[0].get("name", "") if isinstance(props, list) and props and isinstance(props[0], dict) else ""
    entries, world = pg_config_entries(metadata, rank if merged else None)
    return {"base_time_ns": base, "merged": merged,
            "device_name": name if isinstance(name, str) else str(name), "pg_entries": entries, "world_size": world}
