"""The pre-pass of ``streamtrace merge`` over an Nsight Systems export (``survey_export``): per
rank what ``Survey`` holds for a Kineto rank (earliest start, step
windows, NCCL kernels for ``--align collectives``), and the launch -> GPU row pairs that become
``ac2g`` flow arrows (``FlowKeys``, ``kept_flow_keys``).

Owners: a row belongs to its process (``globalPid`` / ``globalTid`` >> 24; the GPU rows of an export
whose GPU tables name no process to its first process, as ``analyze`` reads it), the process to its
rank.  A flow key is ``process index << 40 | correlationId``: ``correlationId`` repeats across the
processes of one export.  Memory: one batch of rows, plus 16 bytes per launch and per GPU row with a
correlation id (the flow candidates), not a Python object per flow as a Kineto survey holds."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..events.sortedsets import sorted_distinct, sorted_intersect
from ..trace.nsys import KINDS, NsysExport
from ..trace.nsys.streams import DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, col, table_batches
from ..trace.steps import step_number
from .clocks import CollectiveLog
from .survey import Survey

FLOW_CAT = "ac2g"
KEY_SHIFT = 40                         # flow key: process index << 40 | correlationId
GPU_KINDS = (KERNEL, MEMCPY, MEMSET)
RUNTIME_T = "CUPTI_ACTIVITY_KIND_RUNTIME"
LAUNCH_KINDS = (RUNTIME, DRIVER)


class Owners:
    """Row -> (rank, process index) of one export; ``ranks``: the ranks kept (None: all)."""

    def __init__(self, ex: NsysExport, ranks=None):
        procs = [p for p in ex.processes if ranks is None or p.rank in ranks]
        self.keys = np.asarray(sorted(p.key for p in procs), np.int64)
        by_key = {p.key: (p.rank, i) for i, p in enumerate(ex.processes)}
        self.rank = np.asarray([by_key[k][0] for k in self.keys.tolist()] + [-1], np.int64)
        self.index = np.asarray([by_key[k][1] for k in self.keys.tolist()] + [-1], np.int64)
        first = ex.processes[0].key if ex.processes else -1
        self.default = None if ex.gpu_by_pid or not ex.processes else first

    def of(self, b, gpu: bool):
        """``(rank, process index)`` int64 arrays of batch ``b`` (-1: a process not kept)."""
        proc = np.full(len(b), self.default, np.int64) if gpu and self.default is not None else b["proc"]
        i = np.searchsorted(self.keys, proc)
        i[i >= len(self.keys)] = len(self.keys)
        hit = i < len(self.keys)
        hit[hit] = self.keys[i[hit]] == proc[hit]
        i[~hit] = len(self.keys)
        return self.rank[i], self.index[i]


@dataclass
class FlowKeys:
    """Flow candidates of one side (GPU rows or launches): key, start (ns), rank; in row order."""
    key: list = field(default_factory=list)
    ts: list = field(default_factory=list)
    rank: list = field(default_factory=list)

    def add(self, key, ts, rank):
        self.key.append(key)
        self.ts.append(ts)
        self.rank.append(rank)

    def arrays(self):
        cat = (lambda v: np.concatenate(v) if v else np.zeros(0, np.int64))  # noqa: E731
        return cat(self.key), cat(self.ts), cat(self.rank)


@dataclass
class ExportSurvey:
    """One export's pre-pass: ``surveys`` ``{rank: Survey}`` (``metadata`` filled by the caller),
    the flow candidates ``gpu`` / ``launch`` (``FlowKeys``), ``rows`` read."""
    surveys: dict
    gpu: FlowKeys
    launch: FlowKeys
    rows: int = 0


def survey_export(path, rank_map, base_rank, opt, step_rx, progress=None) -> ExportSurvey:
    """Read the export at ``path`` once (its own connection): per kept rank its earliest start,
    its step windows ``{N: (start, end)}`` (NVTX ranges whose name ``step_rx`` matches, number by
    ``step_number``), its NCCL kernels when ``opt.align ==
    "collectives"`` (grouped by stream: an export's kernels carry no process group), and the flow
    candidates unless ``opt`` drops flows (``gpu_only``, ``ac2g`` in ``drop_cat``).  Rows of a
    category in ``opt.drop_cat`` are no flow candidates.  ``progress(rows)``: called per batch."""
    ex = NsysExport(path, rank_map, base_rank)
    try:
        own = Owners(ex, opt.ranks)
        out = ExportSurvey({int(r): Survey({}, None, {}, {}, CollectiveLog() if opt.align == "collectives" else None)
                            for r in set(own.rank[:-1].tolist())}, FlowKeys(), FlowKeys())
        flows = not opt.gpu_only and FLOW_CAT not in opt.drop_cat
        dropped = np.asarray([k in opt.drop_cat for k in KINDS], bool)
        steps_of: dict = {}
        cpu = ex.cpu_batches() if reads_nvtx(opt) else launch_batches(ex) if flows else iter(())
        for gpu, batches in ((True, ex.gpu_batches()), (False, cpu)):
            for b in batches:
                rank, pidx = own.of(b, gpu)
                ok = rank >= 0
                _firsts(out.surveys, b["ts"][ok], rank[ok])
                if flows:
                    side = out.gpu if gpu else out.launch
                    sel = ok & (b["correlation"] >= 0) & ~dropped[b["kind"]] & \
                        np.isin(b["kind"], GPU_KINDS if gpu else LAUNCH_KINDS)
                    side.add((pidx[sel] << KEY_SHIFT) | b["correlation"][sel], b["ts"][sel], rank[sel])
                if gpu and opt.align == "collectives":
                    _collectives(ex, out.surveys, b[ok & (b["kind"] == KERNEL)], rank[ok & (b["kind"] == KERNEL)])
                if not gpu:
                    nv = ok & (b["kind"] == NVTX)
                    _steps(ex, out.surveys, steps_of, step_rx, b[nv], rank[nv])
                out.rows += len(b)
                if progress is not None:
                    progress(len(b))
        return out
    finally:
        ex.close()


def reads_nvtx(opt) -> bool:
    """True when the pre-pass reads every CPU row (steps, earliest starts), not only the launches."""
    return opt.steps is not None or opt.window_ms is not None or opt.align == "first-step"


def survey_tables(opt) -> tuple:
    """The tables ``survey_export`` reads under ``opt`` (the total of a progress bar)."""
    gpu = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
    if reads_nvtx(opt):
        return gpu + (RUNTIME_T, "NVTX_EVENTS")
    return gpu + ((RUNTIME_T,) if not opt.gpu_only and FLOW_CAT not in opt.drop_cat else ())


def launch_batches(ex):
    """The CUDA runtime/driver rows of ``ex`` that carry a correlation id, in no particular order
    (``ROW_DTYPE`` batches: ``ts``, ``dur``, ``kind``, ``proc``,
    ``correlation``; names not read): the flow candidates' launch side when no step, window or
    earliest start is asked for, without the NVTX ranges ``cpu_batches`` reads too.  Rows without a
    usable start and end are left out, as the reader leaves them out."""
    t = RUNTIME_T
    if t not in ex.tables or not {"correlationId", "globalTid"} <= ex.tables[t]:
        return
    sql = (f"SELECT start, coalesce([end] - start, -1), {RUNTIME} + ({col(ex.tables, t, 'eventClass')} = 1), "
           f"globalTid, correlationId FROM [{t}] WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL")
    for b in table_batches(ex.conn, sql, ["ts", "dur", "kind", "gtid", "correlation"], batch=ex.batch):
        yield b[(b["ts"] >= 0) & (b["dur"] >= 0)]


def _firsts(surveys, ts, rank):
    for r in np.unique(rank).tolist():
        t = int(ts[rank == r].min())
        s = surveys[r]
        s.first_ns = t if s.first_ns is None else min(s.first_ns, t)


def _steps(ex, surveys, steps_of, rx, b, rank):
    """Step windows from the NVTX rows ``b`` (``steps_of``: name id -> step number, -1 none)."""
    ids = np.unique(b["name"]).tolist()
    new = [i for i in ids if i not in steps_of]
    for i, text in ex.names(new).items():
        m = rx.search(text) if text else None
        steps_of[i] = step_number(m) if m else -1
    for j in np.flatnonzero(np.asarray([steps_of[i] >= 0 for i in b["name"].tolist()], bool)).tolist():
        n, t, e = steps_of[int(b["name"][j])], int(b["ts"][j]), int(b["ts"][j] + b["dur"][j])
        st = surveys[int(rank[j])].steps
        lo, hi = st.get(n, (t, e))
        st[n] = (min(lo, t), max(hi, e))


def _collectives(ex, surveys, b, rank):
    """The NCCL kernels among the kernel rows ``b`` into their rank's collective log."""
    ids = np.unique(b["name"])
    names = ex.names(ids.tolist())
    comm = np.asarray([("nccl" in names[i].lower() or "rccl" in names[i].lower()) for i in ids.tolist()], bool)
    if not comm.any():
        return
    for j in np.flatnonzero(comm[np.searchsorted(ids, b["name"])]).tolist():
        surveys[int(rank[j])].collectives.add(names[int(b["name"][j])], int(b["ts"][j]), int(b["dur"][j]), None,
                                              int(b["stream"][j]))


def kept_flow_keys(gpu: FlowKeys, launch: FlowKeys, keeps: dict):
    """The sorted int64 keys of the flows to write: a GPU row and a launch with the key whose starts
    both lie in their rank's keep-window ``keeps[rank]`` ((lo, hi) ns, or None: all), as merge keeps
    a Kineto rank's flows only when both ends are inside the window."""
    sides = []
    for side in (gpu, launch):
        key, ts, rank = side.arrays()
        ok = np.ones(len(key), bool)
        for r in np.unique(rank).tolist():
            w = keeps.get(r)
            if w is not None:
                m = rank == r
                ok[m] = (ts[m] >= w[0]) & (ts[m] <= w[1])
        sides.append(sorted_distinct(key[ok]))
    return sorted_intersect(sides[0], sides[1])
