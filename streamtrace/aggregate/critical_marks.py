"""``merge --critical-path AGGDIR``: mark the critical path of ``streamtrace aggregate``
(``AGGDIR/critical_path.parquet``, ``streamtrace.aggregate.critical_path``) in a merged trace, so that it
can be followed in Perfetto: every event on the path gets ``args.critical_path`` (its first
segment's position on the path, per step), and consecutive marked events are joined by flow arrows
of category ``critical_path`` (``ph`` ``s`` on the earlier event's thread at its start, ``f`` with
``bp`` ``e`` on the later one's).

An event is on the path when (ids as merge writes them: ``rank * 2**40 + id``,
``streamtrace.merge.pids.unique_id``): a GPU event whose ``args.correlation`` is a segment's
(compute, memory copy, communication transfer), the runtime call of a ``launch_delay`` segment's
kernel (same correlation), or a CPU op whose ``args["External id"]`` and name are a segment's
(``cpu_op``, ``sync``).  Host gaps and waits are no event: the arrows jump over them.

A trace marked before (by another aggregate) loses the old marks and arrows first. The trace is copied
byte for byte except the ``args`` of the marked events (the member is inserted into the event's text:
times keep their digits); the top-level keys after the events are written back in their order, merge's
``streamtrace`` header as its text, never parsed (``TraceReader(raw_keys=...)``: at 4,096 synthetic ranks
an older header was 99 MB of JSON, 855 MB once parsed). Only the few events that can be on the path are
parsed: a batch's ``correlation`` and ``External id`` integers are read by the column kernel
(``streamtrace.kernels.extract.scan_columns``, in the pass that finds the events) and looked up in the path's ids
(``streamtrace.events.sortedsets.in_sorted``); an event whose value is no integer literal (never in a
trace streamtrace merged) is not matched. Runs of untouched events are copied as one slice of the batch.
O(events) time, memory O(path segments + one batch).

A gzip trace in the layout ``merge`` writes (``streamtrace.merge.output.write_merged``: a gzip member
per rank segment, ``,`` members between them; ``mark_members``) is walked member by member
(``streamtrace.trace.members``): only the segments of the ranks on the path (the ranks of its merged
ids, the segment's rank read from its first event's ``pid``) and those holding an earlier run's marks
are inflated, marked as above and compressed again; the others are copied as their compressed bytes,
unparsed; the arrows are written as a member of their own before the last, where a later run finds
and replaces them.  The text is the whole pass's byte for byte (test).  At 1,024 synthetic ranks
(543 MB of JSON, the path on 32 ranks) 9.3 -> 2.0 CPU-s; any other trace (one member, plain JSON, a
member that does not inflate) takes the whole pass.
"""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import orjson

from ..events.columns import scanned_batches
from ..events.dataset import read_arrow
from ..events.sortedsets import in_sorted
from ..kernels import extract
from ..runtime.errors import StreamtraceError
from ..trace.reader import TraceReader
from ..trace.members import MembersError, gzip_members, member_text, members_at
from ..trace.source import is_gzip
from ..trace.writer import TraceWriter, dumps_events, us_fragment
from ..merge.output import copy_runs
from ..merge.pids import GPU_CATS, ID_BITS, PID_STRIDE, unique_id
from ..runtime.files import atomic_output, remove_quietly
from .folder import CRITICAL_PATH, columns, table_path

CATEGORY = "critical_path"
FLOW_BASE = 1 << 60            # flow ids above every merged id (rank * 2**40 + id, rank < 2**20)
_ARGS = re.compile(rb'"args"\s*:\s*\{\s*')
_OLD_MARK = re.compile(rb'"critical_path"\s*:\s*-?\d+\s*,?\s*')       # a mark of an earlier run (always first)
_OLD_FLOW = b'"cat":"critical_path"'
_MARKED = b'"critical_path"'
HEADER = "streamtrace"         # merge's header: copied as its text


def path_ids(aggdir, iteration=None) -> tuple[dict, dict, dict]:
    """``(gpu, launch, cpu)``: ``{merged correlation: order}``, ``{merged correlation: order}``,
    ``{(merged external id, name): order}`` of the path segments of ``aggdir`` (of ``iteration``
    only when given); ``order`` = the step's index x 10**7 + the segment's position; a key on the path
    twice keeps its first row's order."""
    p = table_path(aggdir, CRITICAL_PATH)
    if not p.is_file():
        raise StreamtraceError(f"{p}: missing (run streamtrace aggregate without --no-critical-path first)")
    want = columns(CRITICAL_PATH, "iteration", "step", "order", "rank", "category", "name", "correlation",
                   "external_id")
    t = read_arrow(p, want)
    c = {n: t[n].to_numpy() for n in ("iteration", "step", "order", "rank", "correlation", "external_id")}
    _, step = np.unique(np.stack([c["iteration"], c["step"]], 1), axis=0, return_inverse=True)
    order = step.reshape(-1).astype(np.int64) * 10**7 + c["order"]
    cat = np.asarray(t["category"].to_pylist(), dtype=object)
    mine = np.ones(len(order), bool) if iteration is None else c["iteration"] == iteration

    def first(sel, raw, names=None) -> dict:
        """``{key: order}`` of the rows ``sel`` (key: the merged id of ``raw``, with the name when given),
        the first row of a key winning."""
        rows = np.flatnonzero(sel & (raw >= 0))[::-1].tolist()
        r, v = c["rank"].tolist(), raw.tolist()
        keys = [unique_id(r[k], v[k]) for k in rows]
        if names is not None:
            keys = list(zip(keys, (names[k] for k in rows)))
        return dict(zip(keys, order[rows].tolist()))
    gpu = first(mine & np.isin(cat, ["compute_kernel", "memcpy", "comm_transfer"]), c["correlation"])
    launch = first(mine & (cat == "launch_delay"), c["correlation"])
    cpu = first(mine & np.isin(cat, ["cpu_op", "sync"]), c["external_id"], t["name"].to_pylist())
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


def candidates(b, ph, cols, flags, corr_keys, ext_keys) -> np.ndarray:
    """Indices (ascending) of the events of batch ``b`` (a ``RawBatch`` with the column kernel's
    ``ph``, ``cols``, ``flags``, as ``streamtrace.events.columns.scanned_batches`` yields them) that
    may be on the path or hold an earlier run's mark:
    ``X`` events whose ``correlation`` is in ``corr_keys`` or whose ``External id`` is in ``ext_keys``
    (sorted int64; -1 in them: also the events where the kernel read no integer, for ids merge wrote as
    strings), events the column kernel cannot read, and events whose text holds ``"critical_path"``."""
    corr, ext = cols[extract.CORR], cols[extract.EXT]
    hit = (((ph == ord("X")) & (in_sorted(corr, corr_keys) | in_sorted(ext, ext_keys)))
           | ((flags & extract.F_PYTHON) != 0))
    raw, pos, end = b.buf, int(b.starts[0]), int(b.ends[-1])
    while (pos := raw.find(_MARKED, pos, end)) >= 0:
        hit[np.searchsorted(b.starts, pos, "right") - 1] = True
        pos += len(_MARKED)
    return np.flatnonzero(hit)


def _copy(raw, starts, ends, a, z, tight) -> list:
    """Events ``a`` to ``z - 1`` of a batch as pieces to join with ``,``: one slice when they stand
    separated by single commas (``tight``), else one piece each."""
    if a >= z:
        return []
    if tight[a:z - 1].all():
        return [raw[starts[a]:ends[z - 1]]]
    return [raw[starts[k]:ends[k]] for k in range(a, z)]


class Marker:
    """The path of an aggregate folder (``path_ids``) and the marks made with it so far: ``batch``
    marks one batch of ``streamtrace.events.columns.scanned_batches``, ``flows`` gives the arrows between the marks."""

    def __init__(self, aggdir, iteration=None):
        self.gpu, self.launch, self.cpu = gpu, launch, cpu = path_ids(aggdir, iteration)
        ids = list(gpu) + list(launch) + [k[0] for k in cpu]
        corr_keys = np.unique(np.asarray([k for k in list(gpu) + list(launch) if type(k) is int] + [-1], np.int64))
        ext_keys = np.unique(np.asarray([k[0] for k in cpu if type(k[0]) is int] + [-1], np.int64))
        self.strings = any(type(k) is str for k in ids)       # ids merge wrote as strings: -1 matches too
        if not self.strings:
            corr_keys, ext_keys = corr_keys[corr_keys >= 0], ext_keys[ext_keys >= 0]
        self.corr_keys, self.ext_keys = corr_keys, ext_keys
        self.ranks = None if self.strings else {k >> ID_BITS for k in ids}     # (merged ids: rank * 2**40 + id)
        self.marks: dict = {}

    def batch(self, b, ph, cols, flags) -> tuple[bytes, int]:
        """Batch ``b``'s events (with the column kernel's ``ph``, ``cols``, ``flags``: ``candidates``)
        with the path's marked and an earlier run's marks and arrows taken out, joined by ``,``:
        ``(bytes, events kept)``."""
        starts, ends = b.starts.tolist(), b.ends.tolist()
        tight = (b.starts[1:] - b.ends[:-1]) == 1
        parts, kept, a = [], 0, 0
        for k in candidates(b, ph, cols, flags, self.corr_keys, self.ext_keys).tolist():
            parts += _copy(b.buf, starts, ends, a, k, tight)
            kept += k - a
            a = k + 1
            raw = b.buf[starts[k]:ends[k]]
            if _MARKED in raw:                            # marked before: the old marks and flows go
                if _OLD_FLOW in raw.replace(b" ", b""):
                    continue
                raw = _OLD_MARK.sub(b"", raw, count=1)
            order = None
            if b'"correlation"' in raw or b'"External id"' in raw:
                ev = orjson.loads(raw)
                order = _order(ev, self.gpu, self.launch, self.cpu)
            if order is not None:
                raw = _marked(raw, order)
                if order not in self.marks:
                    self.marks[order] = (ev.get("pid"), ev.get("tid"), int(b.ts_ns[k]))
            parts.append(raw)
            kept += 1
        parts += _copy(b.buf, starts, ends, a, len(starts), tight)
        kept += len(starts) - a
        return b",".join(parts), kept

    def flows(self) -> list:
        """The arrows (``ph`` ``s`` / ``f`` event dicts) joining consecutive marks of one step."""
        flows = []
        seq = sorted(self.marks.items())
        for n, ((o1, a), (o2, z)) in enumerate(zip(seq, seq[1:])):
            if o1 // 10**7 != o2 // 10**7:                  # not across steps
                continue
            for ph, (pid, tid, ts) in (("s", a), ("f", z)):
                flows.append({"ph": ph, "id": FLOW_BASE + n, "pid": pid, "tid": tid, "ts": us_fragment(ts),
                              "cat": CATEGORY, "name": CATEGORY} | ({"bp": "e"} if ph == "f" else {}))
        return flows


def mark_critical_path(trace, aggdir, output=None, iteration=None, by_member=True, members=None) -> dict:
    """Copy the merged trace ``trace`` to ``output`` (default: ``trace`` itself, replaced atomically)
    with the path of ``aggdir`` marked (module docstring).  A gzip trace in the layout ``merge`` writes
    (``by_member``: ``mark_members``) has only the members of the ranks on the
    path, and those of an earlier run's marks, inflated, marked and compressed again; the others are
    copied as their compressed bytes.  ``members``: the trace's gzip members as merge wrote them
    (its summary's ``members``; only for the file as merge left it, unmarked): the members are then
    not each inflated to be found (``streamtrace.trace.members.members_at``).
    Returns ``{"output", "marked", "flows"}``.
    Raises ``StreamtraceError`` when ``aggdir`` has no critical path,
    ``TraceError`` for a damaged trace (a member copied as is is not parsed)."""
    marker = Marker(aggdir, iteration)
    out = Path(output or trace)
    if by_member and marker.ranks is not None and is_gzip(trace):
        done = mark_members(trace, out, marker, members)
        if done is not None:
            return done
        marker.marks.clear()
    reader = TraceReader(trace, raw_keys=(HEADER,))
    with TraceWriter(out, compresslevel=1) as w:
        for batch in scanned_batches(reader):
            w.write_raw(*marker.batch(*batch))
        w.metadata = reader.metadata
        flows = marker.flows()
        w.write_many(flows)
    return {"output": str(out), "marked": len(marker.marks), "flows": len(flows) // 2}


# -- merge's layout: one gzip member a rank segment -------------------------------------------------

_HEAD = b'{"traceEvents":['
_PID = re.compile(rb'^\{[^{}]*?"pid"\s*:\s*(\d+)\s*[,}]')


class _NotLayout(Exception):
    """The trace is not in merge's layout after all (found while writing): marked the whole way."""


def _layout(members: list) -> list | None:
    """``[(member, kind, rank)]`` of a gzip trace in the layout ``merge`` (``write_merged``) and
    ``mark_members`` write: ``{"traceEvents":[`` alone, then rank segments (events of one rank,
    ``"pid"`` first-level in the first) between members holding one ``,``, then an earlier run's
    arrows (``,`` + events), then ``]`` and the top-level keys; None for any other."""
    if len(members) < 2 or members[0].head != _HEAD or members[0].size != len(_HEAD) \
            or not members[-1].head.startswith(b"]"):
        return None
    out, prev = [(members[0], "head", -1)], "head"
    for k, m in enumerate(members[1:-1], 1):
        if m.size == 1 and m.head == b"," and prev == "segment":
            kind, rank = "comma", -1
        elif m.head.startswith(b",{") and m.found and prev == "segment" and k == len(members) - 2:
            kind, rank = "arrows", -1
        elif m.head.startswith(b"{") and prev in ("head", "comma") and (pid := _PID.match(m.head)):
            kind, rank = "segment", (int(pid.group(1)) - 1) // PID_STRIDE
        else:
            return None
        out.append((m, kind, rank))
        prev = kind
    if prev == "comma":
        return None
    return out + [(members[-1], "tail", -1)]


def mark_members(trace, out: Path, marker: Marker, members=None) -> dict | None:
    """``mark_critical_path`` of a gzip trace in merge's layout (``_layout``): the members of the
    ranks on the path (``marker.ranks``) and those holding an earlier run's marks marked (each
    inflated into a plain file beside ``out``, read by batches, compressed again as one member),
    the others copied as their compressed bytes, an earlier run's arrows dropped, the new ones
    written as a member of their own before the last.  Returns None when ``trace`` is not in that
    layout (nothing written).  ``members``: the compressed byte ranges merge recorded (``members_at``;
    walked and inflated, ``gzip_members``, when None or not the file's)."""
    if members:
        try:
            plan = _layout(list(members_at(trace, members)))
            done = _write_members(trace, out, marker, plan) if plan else None
            if done is not None:
                return done
        except MembersError:             # not the file's members after all: walked, as without
            pass
        marker.marks.clear()
    try:
        plan = _layout(list(gzip_members(trace, _MARKED)))
    except MembersError:
        plan = None
    return _write_members(trace, out, marker, plan) if plan else None


def _write_members(trace, out: Path, marker: Marker, plan: list) -> dict | None:
    """``mark_members``' output from the members ``plan`` (``_layout``); None when a member shows
    the trace is not in merge's layout after all (nothing written)."""
    flows: list = []
    try:
        with atomic_output(out, compress=False) as f:
            run: list = []
            for m, kind, rank in plan:
                if kind == "arrows":
                    _arrows_only(trace, m)
                elif kind == "segment" and (rank in marker.ranks or m.found):
                    _flush(trace, run, f)
                    _mark_member(trace, m, out, marker, f)
                    continue
                if kind == "tail":
                    _flush(trace, run, f)
                    flows = marker.flows()
                    if flows:
                        f.write(zlib.compress(b"," + dumps_events(flows), 1, 31))
                if kind != "arrows":
                    run = [run[0] if run else m.start, m.end]
            _flush(trace, run, f)
    except _NotLayout:
        return None
    return {"output": str(out), "marked": len(marker.marks), "flows": len(flows) // 2}


def _flush(trace, run: list, f):
    """Copy the compressed bytes ``run`` (``[start, end]``, or empty) of ``trace`` to ``f``; empty it."""
    if run:
        copy_runs(str(trace), np.asarray([run], np.int64), f, True)
        run.clear()


def _arrows_only(trace, m):
    """Raise ``_NotLayout`` unless member ``m`` holds nothing but arrows of this module's category."""
    text = b"".join(member_text(trace, m))
    try:
        evs = orjson.loads(b"[" + text[1:] + b"]")
    except orjson.JSONDecodeError:
        raise _NotLayout from None
    if not all(isinstance(e, dict) and e.get("cat") == CATEGORY and e.get("ph") in ("s", "f") for e in evs):
        raise _NotLayout


def _mark_member(trace, m, out: Path, marker: Marker, f):
    """Member ``m`` (a rank segment) marked and written to ``f`` as one gzip member: inflated into a
    plain trace beside ``out`` (removed after), read by batches (``Marker.batch``)."""
    tmp = out.parent / f".{out.name}.segment-{m.start}.json"
    try:
        with open(tmp, "wb") as t:
            t.write(_HEAD)
            for piece in member_text(trace, m):
                t.write(piece)
            t.write(b"]}")
        z = zlib.compressobj(1, zlib.DEFLATED, 31)
        first = True
        for batch in scanned_batches(TraceReader(tmp)):
            data, _ = marker.batch(*batch)
            if data:
                f.write(z.compress(data if first else b"," + data))
                first = False
        if first:                      # every event of the segment dropped (an earlier run's arrows only)
            raise _NotLayout
        f.write(z.flush())
    finally:
        remove_quietly(str(tmp))
