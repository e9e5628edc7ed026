"""``streamtrace validate``: check what Perfetto's JSON importer relies on, in one streaming,
columnar pass in flat memory.

Not a trace (``"traceEvents"`` null, an object or a number) and ``{}`` are errors naming what the
file holds (``TraceError``, issue 33).  Problems counted (any
makes the check fail): events missing ``ph``/``ts``/``pid``/``tid`` (``missing_field``), ``X`` events with a
missing or negative ``dur`` (``negative_dur``), a flow ``(cat, id)`` with more than one ``s`` or ``f`` end (``duplicate_flow``: ids colliding, as in a naive
multi-rank merge: Perfetto then binds arrows to the wrong events), flows joining events of two ranks
(``cross_rank_flow``, by ``args.rank``), and ``X`` slices that overlap their enclosing slice on the
same (pid, tid) track without nesting in it (``bad_nesting``).  Notices (reported, not failing):
flow ends without a partner (``unmatched_flow``; Kineto writes lone ``f`` ends itself).  Invalid
JSON is an error (``TraceError``), as for every reader.

How: the byte scanner finds each event (``TraceReader``, bounds
only); ``streamtrace.kernels.validate.event_fields`` reads the fields of a batch from the bytes
(checking each event's JSON strictly); the rare events it cannot read are decoded here
(``fields_of_event``).  Every ``X`` slice becomes a record (track, start, end) and every flow
end a record (key, file order, rank), int64 only; each kind goes through an external sort
(``ExternalSorter``, runs spilled to ``spill_dir``) and is checked
in order by ``nesting_chunk`` /
``flow_chunk``.  Memory: one batch plus one sort run per kind;
the merge of the runs holds ``sort_rows`` records (a multi-pass merge past 64 runs).

With ``jobs`` > 1, a plain or gzip trace of at least ``split_threshold`` bytes is read by worker
processes in byte ranges (``guess_ranges``, as ``analyze --jobs``
cuts one big file, ranges of at most 256 MB): each worker sorts its range's records into sorted
runs (flow ends numbered from ``range * 2**40``, which keeps file order across ranges) and this
process merges the runs of every range in the one external sort, so the nesting and flow checks
across range boundaries are exactly those of one pass.  A file that
cannot be cut that way (a bare array, a truncated or odd tail, too few likely cuts) or a range
that does not parse exactly is read by one process, which reports any error as ``jobs=1`` does.
"""
from __future__ import annotations

import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass

import numpy as np
import orjson

from ..runtime.errors import TraceError
from ..events.sort import ExternalSorter
from ..kernels import scan
from ..kernels import validate as validate_kernels
from ..kernels.validator import BatchRecords
from ..runtime.files import input_file_problem, remove_quietly
from ..runtime.parallel import InWorker, pool
from ..runtime.warmup import warm_trace
from ..trace.decode import decode_value, loads
from ..trace.discover import no_events_text
from ..trace.ranges import RANGES_PER_JOB, SPLIT_THRESHOLD, clean_joints, likely_ranges, prove_range
from ..trace.reader import BATCH_EVENTS, TraceReader
from ..trace.source import LEAN_BLOCK, InflateBoundError, plain_copy, size_hint
from .ordered import SEQ_STRIDE, OutFilter, run_flows, run_nesting

PROBLEMS = ("missing_field", "negative_dur", "duplicate_flow", "cross_rank_flow", "bad_nesting")
# Reported but not failing: Kineto itself writes lone ``f`` ends for runtime calls
# that launched nothing, and Perfetto ignores them.
# ``gpu_stream_overlap``: X slices of a GPU activity (kernel, memcpy, memset) overlapping another
# on the same stream without nesting in it (clock jitter, CUDA graphs): Perfetto draws them on an
# overflow track (issue 33, class 8); counted apart from ``bad_nesting`` (the CPU tracks).
NOTICES = ("unmatched_flow", "gpu_stream_overlap")

NEST_DTYPE = np.dtype([("tkind", "i8"), ("pid", "i8"), ("tid", "i8"), ("start", "i8"), ("end", "i8"),
                       ("view", "i8")])
FLOW_DTYPE = np.dtype([("kinds", "i8"), ("cat", "i8"), ("id", "i8"), ("seq", "i8"), ("ph", "i8"),
                       ("rankk", "i8"), ("rank", "i8"), ("view", "i8")])
SORT_ROWS = 1 << 16          # records per sorted run (one run per kind in memory at a time)
SUB_BLOCKS = 64              # compressed sub-blocks per run: the merge holds one per run, at most 64 runs
                             # (SORT_ROWS records in all) whatever the number of runs
# the records' compression (sorted runs): LZ4, not the stores' zstd -- they live for one check,
# and packing and unpacking them was ~0.17 of the ~0.6 CPU-s the check adds to merging one 296 MB rank
CODEC = "lz4"
NAN = 6                      # kind of a NaN


@dataclass
class ValidateOptions:
    """Options of ``validate``.

    Attributes:
        salvage: on a truncated file, check every complete event before the cut (with a warning).
        spill_dir: folder for the sorted runs of large traces (default: the system's temporary
            folder); a trace whose records fit one run writes nothing.
        sort_rows: records per sorted run (memory: ~50-64 bytes each, one run per kind at a time);
            the merge of the runs holds as many records, decompressed, whatever the trace's size.
        jobs: worker processes reading byte ranges of one big trace (0: all cores; 1: this
            process only).  The report is the same whatever ``jobs``.
        split_threshold: traces of fewer (uncompressed) bytes are read by this process alone.
    """
    salvage: bool = False
    spill_dir: str | None = None
    sort_rows: int = SORT_ROWS
    jobs: int = 1
    split_threshold: int = SPLIT_THRESHOLD


def validate(path, salvage=False, opt: ValidateOptions | None = None) -> dict:
    """Validate one trace file (plain or gzip JSON) for what Perfetto's importer relies on.

    Parameters
    ----------
    path : str or Path
        The trace.
    salvage : bool, optional
        Read a truncated file up to its last complete event (default False); ``opt.salvage`` when
        ``opt`` is given.
    opt : ValidateOptions, optional
        The options (default ``ValidateOptions(salvage=salvage)``).

    Returns
    -------
    dict
        ``{"path", "events", "problems": {name: count}, "notices": {name: count}, "ok": bool,
        "tracks", "flows", "warnings"}`` (``tracks``: (pid, tid) tracks holding a checked ``X`` slice;
        ``flows``: distinct flow ``(cat, id)`` keys; the problems' names: ``PROBLEMS``).
        ``"traceEvents": []`` is a report of 0 events (``require_events`` makes it an error, as
        the CLI does).  Validate writes nothing, so its result is a plain dict, not an output folder.

    Raises
    ------
    TraceError
        When the file is not readable JSON (truncated, corrupt gzip, invalid UTF-8 or JSON), is not a
        trace (``traceEvents`` null, an object, a number) or is ``{}``, naming what it holds
        (``no_events_text``).
    """
    opt = opt or ValidateOptions(salvage=salvage)
    problem = input_file_problem(path)
    if problem is not None:                # one line naming the path, before its size is asked
        raise TraceError(path, problem)
    jobs = opt.jobs or os.cpu_count() or 1
    if jobs > 1 and not opt.salvage and size_hint(path, os.path.getsize(path)) >= opt.split_threshold:
        rep = validate_split(path, opt, jobs)
        if rep is not None:
            return rep
    reader = TraceReader(path, salvage=opt.salvage, block=LEAN_BLOCK)
    with Checker(opt) as chk:
        for b in reader.raw_batches(decode="bounds"):
            chk.add(b.buf, b.starts, b.ends, b.offset, reader.path)
        rep = chk.report()
    problems, ok = rep["problems"], rep["ok"]
    if not reader.has_events:          # {}, "traceEvents": null, an object, a number: not a trace (issue 33)
        raise TraceError(path, no_events_text(reader))
    notices = rep["notices"]
    if reader.repaired:                  # Kineto's unescaped quotes (issue 33): named only when some were
        notices = {**notices, "repaired_event": reader.repaired}
    if reader.too_deep:                  # nested deeper than trace.deep.MAX_DEPTH (issue 49)
        notices = {**notices, "deep_event": reader.too_deep}
    return {"path": str(path), "events": rep["events"], "problems": problems, "notices": notices,
            "ok": ok, "tracks": rep["tracks"], "flows": rep["flows"], "warnings": reader.warnings}


def require_events(rep: dict) -> dict:
    """``rep`` (a ``validate`` report) when its trace holds events; raises
    ``TraceError`` "an empty trace: traceEvents holds no events"
    naming the file otherwise (``validate``'s CLI: an empty trace is no usable trace, issue 33)."""
    if not rep["events"]:
        raise TraceError(rep["path"], "an empty trace: traceEvents holds no events")
    return rep


class Checker:
    """The validate checks over batches of event bytes (use as a context manager, or ``close``).

    ``add`` reads a batch's fields and records it in the view ``V_IN``; ``account`` records
    fields already read, in the views its ``view`` says (``streamtrace merge`` counts its input in
    ``V_IN`` and its output in ``V_OUT`` from one read).  ``report`` sorts and checks.

    The checker of one byte range of a trace (``for_range``) sorts its records in memory and
    saves them as sorted runs (``save_runs``); ``gather_ranges`` merges the ranges' runs
    into one checker.  With ``keep`` (a path prefix) the sorted runs are stored in the files
    ``keep + "0"`` / ``keep + "1"``, so that ``hand_over`` can pass the whole checker to
    ``take_over`` in another process."""

    def __init__(self, opt: ValidateOptions | None = None, keep: str | None = None):
        opt = opt or ValidateOptions()
        folder = opt.spill_dir or tempfile.gettempdir()
        sub = max(1, opt.sort_rows // SUB_BLOCKS)
        self.nest = ExternalSorter(NEST_DTYPE, _nest_key, opt.sort_rows, folder=folder, sub_rows=sub,
                                   delta=("start", "end"), codec=CODEC, merge_rows=opt.sort_rows,
                                   path=keep and keep + "0")
        self.flows = ExternalSorter(FLOW_DTYPE, _flow_key, opt.sort_rows, folder=folder, sub_rows=sub, delta=("seq",),
                                    codec=CODEC, merge_rows=opt.sort_rows, path=keep and keep + "1")
        self.fields = np.empty((BATCH_EVENTS, validate_kernels.NF), np.int64)
        self._records = BatchRecords()
        self.events = [0, 0]
        self.missing = [0, 0]
        self.negdur = [0, 0]
        self.seq = 0
        self.seq0 = 0
        self.range_starts = None    # gathered byte ranges: int64, the file-order index of each one's first event

    @classmethod
    def for_range(cls, index: int, opt: ValidateOptions | None = None) -> "Checker":
        """The checker of byte range ``index`` (file order) of a trace: its sorted runs kept in memory
        (a range is at most ``split_threshold`` bytes), its events numbered from ``index *
        SEQ_STRIDE``, so that the ranges' flow ends keep file order when merged."""
        chk = cls(opt)
        chk.nest.folder = chk.flows.folder = None
        chk.seq = chk.seq0 = index * SEQ_STRIDE
        return chk

    def save_runs(self, log: str) -> dict:
        """Write the records as sorted runs to the file ``log`` (``write_runs``; the checker is
        emptied) and return what ``gather_ranges`` needs: ``{"log", "events", "missing", "negdur",
        "seq"}`` (``seq``: the events accounted)."""
        write_runs(log, self)
        return {"log": log, "events": self.events, "missing": self.missing, "negdur": self.negdur,
                "seq": self.seq - self.seq0}

    def take_range(self, part: dict) -> None:
        """Add the next byte range (file order) of a trace: its ``save_runs`` ``part`` (the log is
        read, not removed); its start goes to ``range_starts``."""
        for v in range(2):
            self.events[v] += part["events"][v]
            self.missing[v] += part["missing"][v]
            self.negdur[v] += part["negdur"][v]
        read_runs(part["log"], self)
        self.range_starts = np.append(self.range_starts if self.range_starts is not None else
                                      np.zeros(0, np.int64), self.seq)
        self.seq += part["seq"]

    def hand_over(self) -> dict:
        """The checker's whole state as a small picklable dict (its sorted runs stay in their files,
        see ``keep``), for ``take_over``; this checker is emptied."""
        return {"nest": self.nest.hand_over(), "flows": self.flows.hand_over(), "events": self.events,
                "missing": self.missing, "negdur": self.negdur, "seq": self.seq}

    @classmethod
    def take_over(cls, handed: dict, opt: ValidateOptions | None = None) -> "Checker":
        """A checker holding what ``hand_over`` passed (to call ``reports`` on)."""
        chk = cls(opt)
        chk.nest.take_over(handed["nest"])
        chk.flows.take_over(handed["flows"])
        chk.events, chk.missing, chk.negdur, chk.seq = handed["events"], handed["missing"], handed["negdur"], \
            handed["seq"]
        return chk

    def _put(self, which: int, rec):
        """Sort records (``which``: 0 X slices, 1 flow ends)."""
        (self.nest if which == 0 else self.flows).add(rec)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.nest.close()
        self.flows.close()

    def read(self, buf: bytes, starts, ends, offset: int, path) -> np.ndarray:
        """The fields (int64[n, NF], see ``streamtrace.kernels.validate``) of the events
        ``buf[starts[i]:ends[i]]``; ``offset``: file offset of ``buf[starts[0]]`` (for errors).
        Raises ``TraceError`` for an event that is not valid JSON."""
        f = self.buffer(len(starts))
        validate_kernels.event_fields(np.frombuffer(buf, np.uint8), starts, ends, f)
        return self.finish_read(f, buf, starts, ends, offset, path)

    def buffer(self, n: int) -> np.ndarray:
        """A reused int64[n, NF] array for a batch's fields."""
        if len(self.fields) < n:
            self.fields = np.empty((n, validate_kernels.NF), np.int64)
        return self.fields[:n]

    def finish_read(self, f: np.ndarray, buf: bytes, starts, ends, offset: int, path) -> np.ndarray:
        """Fill the rows of ``f`` that the kernel left to Python (``C_PY``) by decoding those
        events (see ``read``); returns ``f``."""
        rows = np.flatnonzero(f[:, validate_kernels.C_PY])
        if len(rows):
            arr = np.frombuffer(buf, np.uint8)
            for i in rows.tolist():
                s, e = int(starts[i]), int(ends[i])
                f[i] = fields_of_event(arr, buf, s, e, path, offset + s - int(starts[0]))
        return f

    def add(self, buf: bytes, starts, ends, offset: int, path):
        """Read and record one batch (view ``V_IN``)."""
        self.account(self.read(buf, starts, ends, offset, path), validate_kernels.V_IN)

    def account(self, f: np.ndarray, view, out_pid: bool = False):
        """Record events with fields ``f`` (int64[n, NF]) in the views of ``view`` (int, or an int64
        array per event, of V_IN / V_OUT bits).  ``out_pid``: in the V_OUT view every event has a
        pid, a missing one being ``null`` (merge's output: ``streamtrace.validate.merged``); the V_OUT
        view otherwise sees the same fields, and its flow ends' ranks are not compared (one rank's
        output: merge writes that rank on every event)."""
        nest, flows, counts = self._records.records(f, view, out_pid, self.seq)   # reused: the sorters copy them
        self.seq += len(f)
        for v in range(2):
            self.events[v] += int(counts[v, validate_kernels.BC_EVENTS])
            self.missing[v] += int(counts[v, validate_kernels.BC_MISSING])
            self.negdur[v] += int(counts[v, validate_kernels.BC_NEGDUR])
        if len(nest):
            self._put(0, nest.view(NEST_DTYPE).reshape(len(nest)))
        if len(flows):
            self._put(1, flows.view(FLOW_DTYPE).reshape(len(flows)))

    def report(self, v: int = 0, out_filter: OutFilter | None = None) -> dict:
        """Sort and check the records; ``{"events", "problems", "notices", "ok", "tracks", "flows"}``
        of view ``v`` (0: V_IN, 1: V_OUT) — ``reports`` gives both."""
        return self.reports(out_filter)[v]

    def reports(self, out_filter: OutFilter | None = None) -> list[dict]:
        """Both views' reports (see ``report``); the records are consumed.  ``out_filter``
        (``OutFilter``): events dropped from V_OUT after they
        were recorded (merge's time filter); raises ValueError when its counts exceed V_OUT's."""
        nest = run_nesting(self.nest, out_filter)
        if out_filter is not None and out_filter.pending is not None:
            out_filter = out_filter.pending()
        flows = run_flows(self.flows, out_filter, self.range_starts)
        events, missing, negdur = ((self.events, self.missing, self.negdur) if out_filter is None
                                   else out_filter.counters(self.events, self.missing, self.negdur))
        out = []
        for v in range(2):
            problems = {"missing_field": missing[v], "negative_dur": negdur[v],
                        "duplicate_flow": int(flows[v, 2]), "cross_rank_flow": int(flows[v, 3]),
                        "bad_nesting": int(nest[v][0])}
            out.append({"events": events[v], "problems": problems,
                        "notices": {"unmatched_flow": int(flows[v, 1]), "gpu_stream_overlap": int(nest[v][2])},
                        "ok": not any(problems.values()),
                        "tracks": int(nest[v][1]), "flows": int(flows[v, 0])})
        return out


def gather_ranges(parts: list, opt: ValidateOptions | None = None) -> Checker:
    """A checker holding the records of every byte range of one trace: ``parts`` are the ranges'
    ``Checker.save_runs`` (file order; their logs are read, not removed).  Its flow ends keep the
    ranges' numbering (``Checker.for_range``); ``Checker.range_starts`` maps them to the file
    order an ``OutFilter`` names.  Call ``Checker.reports`` on it."""
    chk = Checker(opt)
    for p in parts:
        chk.take_range(p)
    return chk


@dataclass(frozen=True)
class RangeTask:
    """One worker's share of ``validate_split``: bytes ``byte_range`` of the plain trace
    ``path`` (whole events: proven by the parse, see ``check_range``), its records' ``log``
    file, ``index`` (file order), ``first`` (the range starts the array) and the options of its
    sort (``spill_dir``, ``sort_rows``)."""
    path: str
    byte_range: tuple
    log: str
    index: int
    first: bool
    opt: ValidateOptions


def check_range(task: RangeTask) -> dict:
    """Worker: read one byte range, sort its records and write the sorted runs to ``task.log``
    (``Checker.save_runs``); returns what that returns, plus ``"warnings"`` and ``"repaired"``.  Raises
    ``TraceError`` when the range is not whole events that the ``]`` appended to it closes
    exactly, or a range after a comma holds no event (the log is then removed)."""
    distinct_nans(task.byte_range[0])
    reader = TraceReader(task.path, byte_range=task.byte_range, block=LEAN_BLOCK)
    chk = Checker.for_range(task.index, task.opt)
    try:
        for b in reader.raw_batches(decode="bounds"):
            chk.add(b.buf, b.starts, b.ends, b.offset, reader.path)
        prove_range(reader, task.path, task.byte_range, task.first)
        part = chk.save_runs(task.log)
    except BaseException:
        remove_quietly(task.log)
        raise
    finally:
        chk.close()
    return dict(part, warnings=reader.warnings, repaired=reader.repaired, too_deep=reader.too_deep)


def write_runs(log: str, chk: Checker):
    """Write ``chk``'s records, as sorted runs, to the file ``log``: per run int64 ``[kind (0 X
    slices, 1 flow ends), sub-blocks]``, int64 ``[records, bytes]`` per sub-block, the bytes."""
    with open(log, "wb") as f:
        for which, sorter in enumerate((chk.nest, chk.flows)):
            for run in sorter.export_runs():
                head = [which, len(run)] + [x for n, d in run for x in (n, len(d))]
                f.write(np.array(head, np.int64).tobytes())
                for _, d in run:
                    f.write(d)


def read_runs(log: str, chk: Checker):
    """Add the sorted runs of a ``write_runs`` file to ``chk``'s sorters, one run at a time."""
    with open(log, "rb") as f:
        while True:
            head = f.read(16)
            if not head:
                break
            which, k = np.frombuffer(head, np.int64).tolist()
            sizes = np.frombuffer(f.read(16 * k), np.int64).reshape(k, 2).tolist()
            (chk.nest if which == 0 else chk.flows).add_runs([[(n, f.read(size)) for n, size in sizes]])


def split_plan(src, parts: int) -> list | None:
    """Byte ranges ``[(start, end)]`` of the plain trace ``src`` for ``validate_split``
    (``guess_ranges``, about ``parts`` of them), or None when it is
    not worth or not safe to cut: a bare array, no whole-trace head or tail, fewer than two
    ranges, a ``traceEvents`` key besides the array, anything but one comma between ranges."""
    with open(src, "rb") as f:
        lead = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not lead.startswith(b"{"):
        return None
    plan = likely_ranges(src, parts)
    if plan is None:
        return None
    ranges, meta = plan
    if len(ranges) < 2 or "traceEvents" in meta or not clean_joints(src, ranges):
        return None
    return ranges


def validate_split(path, opt: ValidateOptions, jobs: int) -> dict | None:
    """``validate`` with ``jobs`` worker processes over byte ranges of one trace (a gzip input
    is decompressed to a temporary file first).  Returns the report, or None when the trace is
    not cut (``split_plan``) or a range does not parse (the caller reads it in one process)."""
    folder = opt.spill_dir or tempfile.gettempdir()
    try:
        plain = plain_copy(path, folder)
    except InflateBoundError:        # a gzip bomb: read as a stream, in one process (issue 49)
        return None
    logs = None
    try:
        src = plain or str(path)
        parts = max(jobs * RANGES_PER_JOB, -(-os.path.getsize(src) // SPLIT_THRESHOLD))     # ranges <= 256 MB
        ranges = split_plan(src, parts)
        if ranges is None:
            return None
        with warm_trace(folder) as (_, warm):     # load every kernel here: the forked workers inherit it
            validate(warm)
        logs = tempfile.mkdtemp(prefix=".streamtrace-validate-", dir=folder)
        sort = ValidateOptions(spill_dir=opt.spill_dir, sort_rows=opt.sort_rows)
        tasks = [RangeTask(src, r, os.path.join(logs, f"{i}.log"), i, i == 0, sort) for i, r in enumerate(ranges)]
        try:
            rep, warnings = _run_ranges(tasks, opt, jobs)
        except TraceError:
            return None
    finally:
        remove_quietly(plain)
        if logs:
            shutil.rmtree(logs, ignore_errors=True)
    return {"path": str(path), "events": rep["events"], "problems": rep["problems"], "notices": rep["notices"],
            "ok": rep["ok"], "tracks": rep["tracks"], "flows": rep["flows"], "warnings": warnings}


def _run_ranges(tasks, opt: ValidateOptions, jobs: int):
    """The ranges' sorted runs merged and checked here; each range's runs are taken (and its log
    removed) as soon as it and those before it are done, while the workers read on.  Returns
    ``(report, warnings)``; raises what a worker raised (the rest cancelled)."""
    warnings, repaired, deep = [], 0, 0
    with pool(min(jobs, len(tasks))) as ex, Checker(tasks[0].opt) as chk:
        futures = [ex.submit(InWorker(check_range), t) for t in tasks]
        try:
            for t, fut in zip(tasks, futures):
                res = fut.result()
                warnings.extend(res["warnings"])
                repaired += res["repaired"]
                deep += res.get("too_deep", 0)
                chk.take_range(res)
                remove_quietly(t.log)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
        rep = chk.report()
    if repaired:
        rep["notices"]["repaired_event"] = repaired
    if deep:
        rep["notices"]["deep_event"] = deep
    return rep, warnings


def _nest_key(r):
    return [r["tkind"], r["pid"], r["tid"], r["start"], -r["end"]]


def _flow_key(r):
    return [r["kinds"], r["cat"], r["id"], r["seq"]]


# -- the events the kernel leaves to Python -------------------------------------------

def fields_of_event(arr, buf: bytes, s: int, e: int, path, offset: int) -> np.ndarray:
    """The fields of the event ``buf[s:e]`` decoded in Python (``arr``: ``buf`` as uint8), as
    ``streamtrace.kernels.validate.event_fields`` would read them; the plain-Python twin of
    that kernel.  ts/dur and their flags are read by the byte scanner, exactly as for a batch.
    Raises ``TraceError`` for invalid JSON (at file ``offset``)."""
    one = [np.zeros(1, np.int64) for _ in range(4)]
    flags = np.zeros(1, np.uint8)
    scan.scan_events(arr, s, e, one[0], one[1], one[2], one[3], flags, np.zeros(1, np.int64))
    raw = buf[s:e]
    ev = decode_value(raw, path, offset) if flags[0] & scan.BIG_INT else loads(raw, path, offset)
    return fields_from_dict(ev, int(one[2][0]), int(one[3][0]), int(flags[0]))


def fields_from_dict(ev: dict, ts: int, dur: int, flags: int) -> np.ndarray:
    """Fields (int64[NF]) of a decoded event; ``ts``/``dur`` int64 ns and the scanner's
    ``flags`` (HAS_TS, HAS_DUR, TS_BAD, DUR_BAD)."""
    row = np.zeros(validate_kernels.NF, np.int64)
    ph = ev.get("ph")
    row[validate_kernels.C_PH] = (validate_kernels.PH_NONE if ph is None else validate_kernels.PH_X if ph == "X"
                                  else validate_kernels.PH_S if ph == "s" else validate_kernels.PH_F if ph == "f"
                                  else validate_kernels.PH_OTHER)
    for key, ck, cv in (("pid", validate_kernels.C_PIDK, validate_kernels.C_PIDV),
                        ("tid", validate_kernels.C_TIDK, validate_kernels.C_TIDV),
                        ("cat", validate_kernels.C_CATK, validate_kernels.C_CATV),
                        ("id", validate_kernels.C_IDK, validate_kernels.C_IDV)):
        if key in ev:
            row[ck], row[cv] = key_of(ev[key])
    args = ev.get("args")
    if isinstance(args, dict) and "rank" in args:
        row[validate_kernels.C_RANKK], row[validate_kernels.C_RANKV] = rank_of(args["rank"])
    row[validate_kernels.C_TS], row[validate_kernels.C_DUR] = ts, dur
    row[validate_kernels.C_TFLAGS] = flags & (scan.HAS_TS | scan.HAS_DUR | scan.TS_BAD | scan.DUR_BAD)
    return row


def fnv1a_text(data: bytes) -> int:
    """64-bit FNV-1a of ``data`` as int64 (the kernels' string hash,
    ``streamtrace.kernels.extract.fnv1a``)."""
    h = 14695981039346656037
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


_NAN_SEQ = [0]


def distinct_nans(start: int):
    """Call in a worker that reads the byte range starting at file offset ``start``: the NaN
    ranks it reads (each a fresh value, see ``rank_of``) then differ from those of every
    other range of the file, as they do in one pass (each NaN takes 3 bytes or more)."""
    _NAN_SEQ[0] = (start + 1) << 2


def key_of(v) -> tuple:
    """Canonical ``(kind, value)`` of a pid, tid, cat or flow id as the checks compare them, as
    dict keys: Python equality of the value, containers by their ``repr`` text (as a string).  A
    NaN is one key (the decoder gives every ``NaN`` the same object, which a dict finds again)."""
    if v is None:
        return validate_kernels.NULL, 0
    if isinstance(v, bool):
        return validate_kernels.INT, int(v)
    if isinstance(v, int):
        if -(1 << 63) <= v < (1 << 63):
            return validate_kernels.INT, v
        return validate_kernels.OTHER, fnv1a_text(b"i%d" % v)
    if isinstance(v, float):
        if math.isnan(v):
            return NAN, 0
        if v.is_integer():
            return key_of(int(v))
        return validate_kernels.FLOAT, struct.unpack("<q", struct.pack("<d", v))[0]
    if isinstance(v, str):
        return validate_kernels.STR, fnv1a_text(v.encode("utf-8", "surrogatepass"))
    return key_of(repr(v))


def rank_of(v) -> tuple:
    """Canonical ``(kind, value)`` of ``args.rank``: equal pairs for values that ``!=`` finds equal
    (containers by their content: integral floats as ints, dict keys sorted).  A NaN is unequal to
    everything (a fresh value each time); inside a container it equals itself (the decoder gives
    every NaN one object, which container comparison finds identical)."""
    if isinstance(v, (list, dict)):
        return validate_kernels.OTHER, fnv1a_text(b"c" + orjson.dumps(_plain(v), option=orjson.OPT_SORT_KEYS))
    if isinstance(v, float) and math.isnan(v):
        _NAN_SEQ[0] += 1
        return NAN, _NAN_SEQ[0]
    return key_of(v)


def _plain(v):
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, float):
        if math.isnan(v):
            return "\0nan"
        return int(v) if v.is_integer() else v
    if isinstance(v, bool):
        return int(v)
    return v
