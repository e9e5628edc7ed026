"""Traces that other tools merged from several ranks (issue 33, class 6).

Given to ``merge`` as one rank, such a file would have every rank folded into one.  Two peers'
outputs are recognised by the marks they leave (read from their public source, not copied):

* **TraceLens TraceFusion** (``TraceLens/TraceFusion/trace_fuse.py``, AMD-AGI/TraceLens) writes
  ``{"traceEvents": [...]}`` only, and gives every event it keeps ``args.rank`` and the original
  ``pid`` as ``args.pid_raw`` (the pid itself is offset by rank): a ``"pid_raw"`` member.
* **Megatron-LM** ``tools/merge_profiler_traces.py`` writes ``traceEvents``, ``displayTimeUnit`` and
  ``baseTimeInSeconds`` only, overwrites every event's ``pid`` with rank + 1 and appends, after each
  rank's events, one ``process_name`` metadata event whose ``args.name`` is ``"Rank N"``.

Both drop the Kineto head (``schemaVersion``, ``deviceProperties``, ``distributedInfo``), so only
a file without any of those is searched: a rank trace as the profiler wrote it costs nothing.
The search is over the uncompressed bytes, block by block (no JSON decoding).
"""
from __future__ import annotations

import re

from .source import LEAN_BLOCK, ByteSource

KINETO_HEAD = ("schemaVersion", "deviceProperties", "distributedInfo")
_TRACEFUSION = re.compile(rb'"pid_raw"\s*:')
_MEGATRON = re.compile(rb'"process_name"[^{}]{0,200}"args"\s*:\s*\{\s*"name"\s*:\s*"Rank (\d+)"')
_OVERLAP = 512        # bytes kept from the previous block: a mark cut by a block boundary is still found


def peer_merged(path, head: dict) -> str | None:
    """The peer tool that merged ``path`` ("TraceLens TraceFusion", "Megatron-LM
    merge_profiler_traces.py"), else None.  ``head``: the file's top-level keys but its events
    (``read_metadata``); a file whose head holds a
    Kineto key is a rank trace and is not read.  Megatron's mark counts only when the file
    names at least one ``"Rank N"`` process.  Raises
    ``TraceError`` for an unreadable file."""
    if any(k in head for k in KINETO_HEAD) or "streamtrace" in head:
        return None
    src = ByteSource(path, block=LEAN_BLOCK)
    try:
        tail = b""
        while True:
            block = src.read()
            if not block:
                return None
            data = tail + block
            if _TRACEFUSION.search(data):
                return "TraceLens TraceFusion"
            if _MEGATRON.search(data):
                return "Megatron-LM merge_profiler_traces.py"
            tail = data[-_OVERLAP:]
    finally:
        src.close()
