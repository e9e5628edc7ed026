"""One rank's rows of ``streamtrace aggregate`` (``rank_phase``, ``ranks``, the pipeline's
forward / backward windows, the timeline's intervals, the top kernels), from its GPU kernels
(``gpu_rows``) or, for a rank without GPU events, its CPU ops (``cpu_rows``; see
``streamtrace.aggregate.run``'s module docstring), and its steps (``step_ops``).  Called by
aggregate's per-rank task (``streamtrace.aggregate.run``), in a worker process.  Times int64 ns,
aligned (``Part.align``)."""
from __future__ import annotations

import re

import numpy as np
import pyarrow.compute as pc

from ..analyze import classify
from ..analyze.outputs import OPS
from ..analyze.patterns import Patterns
from ..kernels import intervals
from .alignment import kernel_columns
from .collective_rows import fill_dims
from .collectives import P2P
from .rank_metrics import KIND_CODE, clipped_length, interval_metrics

FB = ("forward", "backward", "recompute")
CPU_COMM = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms)")
P2P_OP = re.compile(r"send|recv", re.I)          # a communication op that is a pipeline send / receive


STEP_COLUMNS = ["name", "ts_ns", "dur_ns"]


def step_ops(part, ops=None) -> dict:
    """``{step number: (ts_ns, dur_ns)}`` of the part's step ops (rank-local): ``ProfilerStep#N``, or
    the step names analyze used for it (``steps``); the last
    op of a number wins.  ``ops``: the part's ops table already read (with ``STEP_COLUMNS``), or None."""
    t = part.read(OPS, STEP_COLUMNS) if ops is None else ops.select(STEP_COLUMNS)
    if t is None:
        return {}
    steps = part.steps
    if steps.default:                        # a cheap filter first: most ops are no step
        t = t.filter(pc.starts_with(t["name"], "ProfilerStep#"))
    out = {}
    for n, s, d in zip(t["name"].to_pylist(), t["ts_ns"].to_pylist(), t["dur_ns"].to_pylist()):
        num = steps.number(n)
        if num >= 0:
            out[num] = (s, d)
    return out


GPU_PART_COLUMNS = ("device", "ts_ns", "end_ns", "kind", "phase", "microbatch", "iteration", "step", "name",
                    "parallel_dim", "pg_ranks", "collective")


def gpu_rows(job, part, kernels=None):
    """``kernels``: the part's kernels table already read (with ``GPU_PART_COLUMNS``), or None."""
    k = job.read_kernels(part, columns=GPU_PART_COLUMNS) if kernels is None else \
        kernel_columns(kernels, GPU_PART_COLUMNS, job, part)
    s, e = part.align(k["ts_ns"]), part.align(k["end_ns"])
    code = _per_row(k["kind"], lambda x: KIND_CODE.get(x, 0), np.int8)
    dim = np.asarray(k["parallel_dim"], object).copy()
    comm = code == 1                    # the collectives' dimension: a topology names what analyze did not
    dim[comm] = fill_dims(dim[comm], np.asarray(k["pg_ranks"], object)[comm], getattr(job, "rank_dims", None))
    phase_rows, rank_rows, fb, timeline = [], [], {}, []
    it_dev = sorted(set(zip(k["iteration"].tolist(), k["step"].tolist(), k["device"].tolist())))
    for it, st, dev in it_dev:
        m = (k["step"] == st) & (k["device"] == dev)         # one part: one iteration
        rank_rows.append({"iteration": it, "step": st, "rank": part.rank, "device": dev, "source": "gpu",
                          **interval_metrics(s[m], e[m], code[m])})
        keys = sorted(set(zip(k["phase"][m].tolist(), k["microbatch"][m].tolist())),
                      key=lambda x: (x[1], x[0]))
        for ph, mb in keys:
            r = m & (k["phase"] == ph) & (k["microbatch"] == mb)
            row = {"iteration": it, "step": st, "rank": part.rank, "device": dev, "phase": ph, "microbatch": mb,
                   "source": "gpu",
                   **interval_metrics(s[r], e[r], code[r])}
            c = r & (code == 0)
            row["compute_start_ns"] = int(s[c].min()) if c.any() else None
            row["compute_end_ns"] = int(e[c].max()) if c.any() else None
            phase_rows.append(row)
        c = m & (code == 0) & np.isin(k["phase"], FB)
        if c.any():
            us, ue = intervals.union(s[c], e[c])
            pp = m & comm & (np.isin(dim, ("PP", "pp")) | np.isin(k["collective"], P2P))
            fb[(it, st, dev)] = (int(s[c].min()), int(e[c].max()), intervals.union_length(us, ue),
                                 int(len(set(k["microbatch"][c & (k["phase"] == "forward")].tolist()))),
                                 pipeline_wait(phase_rows, st, dev, s, e, m & (code == 0), pp))
        cat = np.where(code == 0, "compute", np.where(code == 2, "memory", "comm:" + dim.astype(str)))
        for cname in sorted(set(cat[m].tolist())):
            cm = m & (cat == cname)
            us, ue = intervals.union(s[cm], e[cm])
            timeline.append((it, st, dev, cname, us, ue))
    top: dict = {}
    if len(k["name"]):
        names = sorted({str(x) for x in dict.fromkeys(k["name"].tolist())})   # (np.unique of the names as str,
        place = {n: i for i, n in enumerate(names)}                              # without a <U(longest name)
        inv = _per_row(k["name"], lambda x: place[str(x)], np.int64)            # copy: 44 MB a rank)
        tot = np.bincount(inv, weights=(e - s).astype(np.float64), minlength=len(names))
        cnt = np.bincount(inv, minlength=len(names))
        first = np.zeros(len(names), np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]
        for j, n in enumerate(names):
            top[n] = (k["kind"][first[j]], int(cnt[j]), int(tot[j]))
    return phase_rows, rank_rows, fb, timeline, top


def _per_row(col, f, dtype) -> np.ndarray:
    """``f(x)`` of each row ``x`` of the object array ``col`` (``alignment.column_numpy``'s: a value
    repeated on many rows), as ``dtype``: ``f`` called once a distinct value, not once a row."""
    rows = col.tolist()
    of = {x: f(x) for x in dict.fromkeys(rows)}
    return np.fromiter(map(of.__getitem__, rows), dtype, len(rows))


def pipeline_wait(phase_rows, step, dev, s, e, compute, p2p) -> int:
    """ns a GPU spends inside its forward / backward / recompute windows (``phase_rows`` of ``step``
    on ``dev``) in pipeline sends and receives (mask ``p2p``) while it computes nothing (mask
    ``compute``): its wait for the neighbour stage inside a micro-batch
    (``streamtrace.aggregate.pipeline``)."""
    w = [(r["start_ns"], r["end_ns"]) for r in phase_rows
         if r["step"] == step and r["device"] == dev and r["phase"] in FB and r["start_ns"] is not None]
    if not w or not p2p.any():
        return 0
    ws, we = intervals.union(np.asarray([a for a, _ in w], np.int64), np.asarray([b for _, b in w], np.int64))
    inside = intervals.intersect(*intervals.union(s[p2p], e[p2p]), ws, we)
    return intervals.subtract_length(*inside, *intervals.union(s[compute], e[compute]))


def outermost(s, e, sel) -> list:
    """The outermost of the windows ``sel`` (int64 indices into the start / end arrays ``s``, ``e``, ns),
    by start: a window inside one kept before it is left out (optimizer > Optimizer.step#...)."""
    sel = sel[np.lexsort((-e[sel], s[sel]))]
    outer, reach = [], None
    for j in sel.tolist():
        if reach is None or s[j] >= reach:
            outer.append(j)
            reach = e[j]
    return outer


def cpu_rows(job, part):
    """Rows from the CPU ops of a rank without GPU events (see the module docstring)."""
    t = part.read(OPS, ["name", "cat", "ts_ns", "dur_ns", "parent"])
    if t is None:
        return [], [], {}, [], {}
    name = t["name"].to_numpy(zero_copy_only=False).astype(str)
    cat = t["cat"].to_numpy(zero_copy_only=False).astype(str)
    ts, dur, parent = (t[c].to_numpy() for c in ("ts_ns", "dur_ns", "parent"))
    if not len(ts):
        return [], [], {}, [], {}
    pats = Patterns.load()
    pats.step = part.steps.regex              # the step names analyze used (streamtrace.aggregate.steps)
    uniq, inv = np.unique(name, return_inverse=True)
    inv = inv.reshape(-1)
    ph_code, _, _, step_no, _ = classify.name_flags(uniq.tolist(), pats)
    ph, step = ph_code[inv], step_no[inv]
    is_comm = np.asarray([bool(CPU_COMM.search(x)) for x in uniq.tolist()])[inv]
    in_comm = is_comm.copy()
    for _ in range(64):            # inside a communication op: propagate down the tree
        nxt = in_comm | ((parent >= 0) & in_comm[np.maximum(parent, 0)])
        if (nxt == in_comm).all():
            break
        in_comm = nxt
    s, e = part.align(ts), part.align(ts + dur)
    comp = (cat == "cpu_op") & ~in_comm
    cu = intervals.union(s[comp], e[comp])
    co = intervals.union(s[is_comm], e[is_comm])
    p2p_op = is_comm & np.asarray([bool(P2P_OP.search(x)) for x in uniq.tolist()])[inv]
    p2p = intervals.union(s[p2p_op], e[p2p_op])
    both = intervals.intersect(co[0], co[1], cu[0], cu[1])
    allu = intervals.union(np.concatenate([cu[0], co[0]]), np.concatenate([cu[1], co[1]]))
    ws, we = s[step >= 0], e[step >= 0]
    wnum = step[step >= 0]
    o = np.argsort(ws)
    ws, we, wnum = ws[o], we[o], wnum[o]
    phase_rows, rank_rows, fb = [], [], {}

    def window_row(lo, hi):
        compute, comm = clipped_length(*cu, lo, hi), clipped_length(*co, lo, hi)
        overlap, busy = clipped_length(*both, lo, hi), clipped_length(*allu, lo, hi)
        return {"kernels": 0, "start_ns": int(lo), "end_ns": int(hi), "wall_ns": int(hi - lo), "busy_ns": busy,
                "idle_ns": int(hi - lo) - busy, "compute_ns": compute, "comm_ns": comm, "memory_ns": 0,
                "overlap_ns": overlap, "exposed_comm_ns": comm - overlap, "compute_only_ns": compute - overlap,
                "kernel_time_ns": 0}
    it = job.iteration_of(part)
    for lo, hi, num in zip(ws.tolist(), we.tolist(), wnum.tolist()):
        st = int(num)
        if job.steps is not None and st not in job.steps:
            continue
        rank_rows.append({"iteration": it, "step": st, "rank": part.rank, "device": -1, "source": "cpu",
                          **window_row(lo, hi)})
        first = last = None
        busy_fb = []
        for code in range(1, len(classify.PHASES)):
            sel = outermost(s, e, np.flatnonzero((ph == code) & (s >= lo) & (e <= hi)))
            for mb, j in enumerate(sel):
                row = {"iteration": it, "step": st, "rank": part.rank, "device": -1, "phase": classify.PHASES[code],
                       "microbatch": mb if classify.PHASES[code] in ("forward", "backward") else -1, "source": "cpu",
                       **window_row(s[j], e[j])}
                row["compute_start_ns"], row["compute_end_ns"] = int(s[j]), int(e[j])
                phase_rows.append(row)
                if classify.PHASES[code] in FB:
                    first = s[j] if first is None else min(first, s[j])
                    last = e[j] if last is None else max(last, e[j])
                    busy_fb.append((s[j], e[j]))
        if busy_fb:
            bs, be = intervals.union(np.asarray([b[0] for b in busy_fb]), np.asarray([b[1] for b in busy_fb]))
            comp_fb = intervals.intersect(bs, be, cu[0], cu[1])
            p2p_fb = intervals.subtract(*intervals.intersect(bs, be, *p2p), *cu)
            fb[(it, st, -1)] = (int(first), int(last), intervals.union_length(*comp_fb),
                                sum(1 for r in phase_rows if r["step"] == st and r["phase"] == "forward"),
                                intervals.union_length(*p2p_fb))
    timeline = [(it, st, -1, name_, us[(us < hi) & (ue > lo)], ue[(us < hi) & (ue > lo)])
                for st, lo, hi in [(r["step"], r["start_ns"], r["end_ns"]) for r in rank_rows]
                for name_, (us, ue) in (("compute", cu), ("comm:cpu", co))]
    return phase_rows, rank_rows, fb, timeline, {}
