"""``merge --critical-path AGGDIR``: mark the critical path of ``streamtrace aggregate``
(``AGGDIR/critical_path.parquet``, :mod:`streamtrace.aggregate.critical_path`) in a merged trace, so that it
can be followed in Perfetto: every event on the path gets ``args.critical_path`` (its first
segment's position on the path, per step), and consecutive marked events are joined by flow arrows
of category ``critical_path`` (``ph`` ``s`` on the earlier event's thread at its start, ``f`` with
``bp`` ``e`` on the later one's).

An event is on the path when (ids as merge writes them: ``rank * 2**40 + id``,
:func:`streamtrace.merge.pids.unique_id`): a GPU event whose ``args.correlation`` is a segment's
(compute, memory copy, communication transfer), the runtime call of a ``launch_delay`` segment's
kernel (same correlation), or a CPU op whose ``args["External id"]`` and name are a segment's
(``cpu_op``, ``sync``).  Host gaps and waits are no event: the arrows jump over them.

A trace marked before (by another aggregate) loses the old marks and arrows first.  The trace is
copied event by event, byte for byte except the ``args`` of the marked events (the
member is inserted into the event's text: times keep their digits); the top-level keys after the
events are written back in their order.  O(events) time, memory O(path segments).
"""
from __future__ import annotations

import re
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from ..runtime.errors import StreamtraceError
from ..trace.reader import TraceReader
from ..trace.writer import TraceWriter, us_fragment
from .pids import GPU_CATS, unique_id

CATEGORY = "critical_path"
FLOW_BASE = 1 << 60            # flow ids above every merged id (rank * 2**40 + id, rank < 2**20)
_ARGS = re.compile(rb'"args"\s*:\s*\{\s*')
_OLD_MARK = re.compile(rb'"critical_path"\s*:\s*-?\d+\s*,?\s*')       # a mark of an earlier run (always first)
_OLD_FLOW = b'"cat":"critical_path"'


def path_ids(aggdir, iteration=None) -> tuple[dict, dict, dict]:
    """``(gpu, launch, cpu)``: ``{merged correlation: order}``, ``{merged correlation: order}``,
    ``{(merged external id, name): order}`` of the path segments of ``aggdir`` (of ``iteration``
    only when given); ``order`` = the step's index x 10**7 + the segment's position."""
    p = Path(aggdir) / "critical_path.parquet"
    if not p.is_file():
        raise StreamtraceError(f"{p}: missing (run streamtrace aggregate without --no-critical-path first)")
    t = pq.read_table(p).to_pydict()
    steps = sorted(set(zip(t["iteration"], t["step"])))
    gpu, launch, cpu = {}, {}, {}
    for i in range(len(t["order"])):
        if iteration is not None and t["iteration"][i] != iteration:
            continue
        order = steps.index((t["iteration"][i], t["step"][i])) * 10**7 + t["order"][i]
        r, cat = t["rank"][i], t["category"][i]
        if cat in ("compute_kernel", "memcpy", "comm_transfer") and t["correlation"][i] >= 0:
            gpu.setdefault(unique_id(r, t["correlation"][i]), order)
        elif cat == "launch_delay" and t["correlation"][i] >= 0:
            launch.setdefault(unique_id(r, t["correlation"][i]), order)
        elif cat in ("cpu_op", "sync") and t["external_id"][i] >= 0:
            cpu.setdefault((unique_id(r, t["external_id"][i]), t["name"][i]), order)
    return gpu, launch, cpu


def _order(ev: dict, gpu, launch, cpu):
    args = ev.get("args") or {}
    if ev.get("ph") != "X":
        return None
    corr = args.get("correlation")
    if ev.get("cat") in GPU_CATS and corr in gpu:
        return gpu[corr]
    if ev.get("cat") == "cuda_runtime" and corr in launch:
        return launch[corr]
    return cpu.get((args.get("External id"), ev.get("name")))


def _marked(raw: bytes, order: int) -> bytes:
    """The event's bytes with ``"critical_path": order`` first in its ``args`` (added when absent)."""
    m = _ARGS.search(raw)
    if m is None:
        return raw[:1] + b'"args":{"critical_path":%d},' % order + raw[1:]
    sep = b"" if raw[m.end():m.end() + 1] == b"}" else b","
    return raw[:m.end()] + b'"critical_path":%d' % order + sep + raw[m.end():]


def mark_critical_path(trace, aggdir, output=None, iteration=None) -> dict:
    """Copy the merged trace ``trace`` to ``output`` (default: ``trace`` itself, replaced atomically)
    with the path of ``aggdir`` marked (module docstring).  Returns ``{"output", "marked", "flows"}``.
    Raises :class:`~streamtrace.runtime.errors.StreamtraceError` when ``aggdir`` has no critical path,
    :class:`~streamtrace.runtime.errors.TraceError` for a damaged trace."""
    gpu, launch, cpu = path_ids(aggdir, iteration)
    out = Path(output or trace)
    reader = TraceReader(trace)
    marks: dict = {}
    keys = (b'"correlation"', b'"External id"')
    with TraceWriter(out, compresslevel=1) as w:
        for b in reader.raw_batches(decode=False):
            parts = []
            for k, (s, e) in enumerate(zip(b.starts.tolist(), b.ends.tolist())):
                raw = bytes(b.buf[s:e])
                if b'"critical_path"' in raw:                # marked before: the old marks and flows go
                    if _OLD_FLOW in raw.replace(b" ", b""):
                        continue
                    raw = _OLD_MARK.sub(b"", raw, count=1)
                order = None
                if any(x in raw for x in keys):
                    ev = orjson.loads(raw)
                    order = _order(ev, gpu, launch, cpu)
                if order is not None:
                    raw = _marked(raw, order)
                    if order not in marks:
                        marks[order] = (ev.get("pid"), ev.get("tid"), int(b.ts_ns[k]))
                parts.append(raw)
            w.write_raw(b",".join(parts), len(parts))
        w.metadata = reader.metadata
        flows = []
        seq = sorted(marks.items())
        for n, ((o1, a), (o2, z)) in enumerate(zip(seq, seq[1:])):
            if o1 // 10**7 != o2 // 10**7:                  # not across steps
                continue
            for ph, (pid, tid, ts) in (("s", a), ("f", z)):
                flows.append({"ph": ph, "id": FLOW_BASE + n, "pid": pid, "tid": tid, "ts": us_fragment(ts),
                              "cat": CATEGORY, "name": CATEGORY} | ({"bp": "e"} if ph == "f" else {}))
        w.write_many(flows)
    return {"output": str(out), "marked": len(marks), "flows": len(flows) // 2}
