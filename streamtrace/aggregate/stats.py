"""The statistics a performance engineer asks for first, per (iteration, step, rank), from one
rank's ``kernels`` and ``ops`` rows (``streamtrace analyze``'s Parquet; never the trace):

* **kernel_stats** -- per kernel name (with its ``kind`` and ``collective``): ``count``,
  ``total_ns``, ``mean_ns``, ``p50_ns``, ``p95_ns``, ``max_ns``, ``min_ns``, ``std_ns``,
  ``share_pct`` (of the rank-step's kernel time).  Quantiles are exact, linear interpolation
  between the order statistics (numpy's default ``percentile``, Hyndman-Fan type 7: position
  ``p x (n - 1)``); ``std_ns`` is the sample standard deviation (ddof = 1, as
  HolisticTraceAnalysis' ``BreakdownAnalysis._aggr_gpu_kernel_time``; 0 for one kernel).
* **op_stats** -- per CPU op name and category (``ProfilerStep#N`` named ``ProfilerStep#*``):
  ``count``, ``nested_count`` (occurrences inside an op of the same name, e.g. a Python frame
  inside itself), ``inclusive_ns`` / ``inclusive_mean_ns`` / ``inclusive_max_ns`` (duration
  of the occurrences *not* nested in a same-name op, so nothing counts twice), ``self_ns`` /
  ``self_mean_ns`` (duration minus the durations of the direct children, PyTorch's
  ``FunctionEvent.self_cpu_time_total`` in ``torch/autograd/profiler_util.py``; clamped at 0,
  ``self_clamped`` counts the clamped rows: children that overrun their parent), ``kernels``,
  ``kernel_time_ns``, ``gpu_busy_ns`` (analyze's roll-up of the GPU work the op launched,
  over the non-nested occurrences).  An op's step is the ``ProfilerStep#N`` whose window
  ``[ts, ts + dur)`` holds its start (HolisticTraceAnalysis' rule), -1 outside every step.
* **launch_stats** -- per ``kind`` (``all``, ``compute``, ``communication``, ``memory``):
  every GPU event is joined to its runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``,
  ``hipLaunchKernel``, ...: the ops row of the rank with the same ``correlation``; as
  HolisticTraceAnalysis' ``CudaKernelAnalysis.cuda_kernel_launch_stats``).  **launch delay** =
  GPU start - launch end, negative values (the kernel started before its launch call returned)
  counted in ``early_start_count`` and taken as 0, as HTA clips them; **launch overhead** = the
  launch call's duration; **launch-bound** = a kernel shorter than its launch call.  Kernels
  of a CUDA graph (``cudaGraphLaunch``: one launch, many kernels) are counted in
  ``graph_kernels`` and left out of the delay and overhead numbers; GPU events without a
  launch row (launched before the profiling window) in ``unlinked``.
  ``launch_delay_outliers`` counts delays over 100 us and ``launch_overhead_outliers``
  overheads over 50 us (HTA's ``launch_delay_cutoff`` and ``runtime_cutoff``).

Every kernel row belongs to the step of its ``step`` column (the ProfilerStep around its launch).
Times are int64 ns; means, quantiles and standard deviations float64 ns.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..kernels.ancestry import same_name_ancestor
from .steps import step_names

KINDS = ("all", "compute", "communication", "memory")
GRAPH_LAUNCH = "graphlaunch"
"""A launch op whose name holds this (any case) launches a CUDA graph (``cudaGraphLaunch``, ``hipGraphLaunch``)."""
DELAY_OUTLIER_NS = 100_000          # HTA launch_delay_cutoff (100 us)
OVERHEAD_OUTLIER_NS = 50_000        # HTA runtime_cutoff (50 us)
OPS_COLUMNS = ["name", "cat", "ts_ns", "dur_ns", "parent", "correlation", "kernel_count", "kernel_time_ns",
               "gpu_busy_ns"]


# -- grouping --------------------------------------------------------------------------

def codes(values) -> tuple[np.ndarray, list]:
    """Dictionary codes of a column (pyarrow array/ChunkedArray or numpy array): ``(int64[N]
    codes, distinct values in code order)``."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(values))
    enc = pc.dictionary_encode(arr)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def group_ids(*cols) -> tuple[np.ndarray, np.ndarray]:
    """One group id per row for the combination of the columns ``cols`` (numpy int arrays or
    code arrays of equal length N): ``(gid int64[N] in 0..G-1, first row of each group
    int64[G])``.  Groups are numbered in order of their key tuples.  One stable ``lexsort`` of the
    rows by their tuples (a group's rows in row order: its first is its lowest), not two
    ``np.unique`` a column (the explaining tables group each rank's rows 11 columns at a time:
    22 sorts a rank)."""
    n = len(cols[0]) if cols else 0
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = [np.asarray(c, np.int64) for c in cols]
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for k in keys:
        k = k[order]
        new[1:] |= k[1:] != k[:-1]
    gid = np.empty(n, np.int64)
    gid[order] = np.cumsum(new) - 1
    return gid, order[new]


def quantile_sorted(v, starts, count, p) -> np.ndarray:
    """Exact ``p`` quantile (0..1) of each group of ``v`` (sorted within groups, groups at
    ``starts`` with ``count`` > 0 rows): linear interpolation at position ``p x (n - 1)``, as
    ``numpy.percentile``'s default.  float64[G]."""
    pos = p * (count - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, count - 1)
    a, b = v[starts + lo].astype(np.float64), v[starts + hi].astype(np.float64)
    return a + (b - a) * (pos - lo)


def duration_stats(gid, values, ngroups) -> dict:
    """Per group ``0..ngroups-1`` (every group non-empty) of int64 ``values``: ``count``,
    ``total_ns``, ``mean_ns``, ``p50_ns``, ``p95_ns``, ``max_ns``, ``min_ns``, ``std_ns`` (ddof 1,
    0 for one value).  O(N log N)."""
    v = np.asarray(values, np.int64)
    if not ngroups:
        z, f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return {"count": z, "total_ns": z, "mean_ns": f, "p50_ns": f, "p95_ns": f, "max_ns": z, "min_ns": z,
                "std_ns": f}
    order = np.lexsort((v, gid))
    g, v = gid[order], v[order]
    starts = np.searchsorted(g, np.arange(ngroups))
    count = np.diff(np.append(starts, len(v)))
    total = np.add.reduceat(v, starts)
    mean = total / count
    dev = v - mean[g]
    ss = np.add.reduceat(dev * dev, starts)
    std = np.where(count > 1, np.sqrt(ss / np.maximum(count - 1, 1)), 0.0)
    return {"count": count.astype(np.int64), "total_ns": total.astype(np.int64), "mean_ns": mean,
            "p50_ns": quantile_sorted(v, starts, count, 0.5), "p95_ns": quantile_sorted(v, starts, count, 0.95),
            "max_ns": v[starts + count - 1], "min_ns": v[starts], "std_ns": std}


def sums(gid, ngroups, **cols) -> dict:
    """Per group ``0..ngroups-1``: the int64 sum of each column of ``cols`` (int arrays of the
    rows); a column given as None counts the rows."""
    out = {}
    for k, v in cols.items():
        out[k] = np.zeros(ngroups, np.int64)
        np.add.at(out[k], gid, 1 if v is None else np.asarray(v, np.int64))
    return out


# -- kernels ---------------------------------------------------------------------------------

def kernel_stats(k: pa.Table) -> dict:
    """kernel_stats columns (see the module docstring) of one rank's kernel rows ``k`` (columns
    ``step``, ``name``, ``kind``, ``collective``, ``dur_ns``), one row per (step, name), sorted
    by step then total time (descending)."""
    step = k["step"].to_numpy()
    name, names = codes(k["name"])
    kind, kinds = codes(k["kind"])
    coll, colls = codes(k["collective"])
    gid, first = group_ids(step, name)
    out = duration_stats(gid, k["dur_ns"].to_numpy(), len(first))
    s = step[first]
    step_total = {st: int(out["total_ns"][s == st].sum()) for st in np.unique(s).tolist()}
    den = np.asarray([step_total[x] for x in s.tolist()], np.float64)
    out["share_pct"] = np.where(den > 0, 100.0 * out["total_ns"] / np.maximum(den, 1), np.nan)
    cols = {"step": s, "name": _take(names, name[first]), "kind": _take(kinds, kind[first]),
            "collective": _take(colls, coll[first]), **out}
    order = np.lexsort((cols["name"].astype(str), -cols["total_ns"], cols["step"]))
    return {c: v[order] for c, v in cols.items()}


def _take(dictionary, idx) -> np.ndarray:
    return np.asarray(dictionary, object)[idx] if len(idx) else np.zeros(0, object)


# -- CPU ops ---------------------------------------------------------------------------------

def step_windows(name, ts, dur, steps=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start, end, number)`` int64 arrays of the step rows among ops (sorted by start): the
    ``ProfilerStep#N`` rows, or those ``steps`` (``StepNames``) names."""
    steps = steps or step_names()
    name = np.asarray(name, object)
    every = steps.numbers(name.tolist())
    m = every >= 0
    num = every[m]
    s, e = np.asarray(ts, np.int64)[m], (np.asarray(ts, np.int64) + np.asarray(dur, np.int64))[m]
    o = np.argsort(s, kind="stable")
    return s[o], e[o], num[o]


def step_of(ts, windows) -> np.ndarray:
    """The step (int64[N], -1 none) of events starting at ``ts``: the ProfilerStep window
    ``[start, end)`` holding ``ts`` (the latest-starting one when windows overlap)."""
    s, e, num = windows
    ts = np.asarray(ts, np.int64)
    if not len(s):
        return np.full(len(ts), -1, np.int64)
    i = np.searchsorted(s, ts, "right") - 1
    j = np.maximum(i, 0)
    return np.where((i >= 0) & (ts < e[j]), num[j], -1).astype(np.int64)


def op_rows(ops: pa.Table, steps=None) -> dict:
    """Per ops row of one rank (all its rows, in analyze's order, so ``parent`` indexes them):
    ``code`` (name code, ``ProfilerStep#N`` -> ``ProfilerStep#*``; a step name of ``steps``, the part's
    ``StepNames`` (default ``ProfilerStep#N``), with its number as ``*``)
    and ``names`` (the code's names), ``cat`` codes and ``cats``, ``step``, ``self_ns`` (clamped at 0),
    ``clamped`` (bool: self time was negative), ``nested`` (bool: inside an op of the same name)."""
    steps = steps or step_names()
    raw = ops["name"]
    enc = pc.dictionary_encode(raw).combine_chunks()          # (each test on the distinct names, not the rows)
    if steps.default:
        generic = pc.replace_substring_regex(enc.dictionary, r"^ProfilerStep#\d+$", "ProfilerStep#*")
        step_name = pc.starts_with(enc.dictionary, "ProfilerStep#")
    else:
        uniq = enc.dictionary.to_pylist()
        generic = pa.array([steps.generic(x) for x in uniq], pa.string())
        step_name = pa.array(steps.numbers(uniq) >= 0, pa.bool_())
    is_step = pc.take(step_name, enc.indices)
    if raw.null_count:
        code, names = codes(pc.take(generic, enc.indices))
    else:                          # (the generic names' codes by distinct name, in order of first row, as
        gcode, names = codes(generic)    # codes() of the rows would number them)
        code = gcode[enc.indices.to_numpy(zero_copy_only=False)]
    cat, cats = codes(ops["cat"])
    ts, dur, parent = (ops[c].to_numpy().astype(np.int64) for c in ("ts_ns", "dur_ns", "parent"))
    child = np.zeros(len(dur), np.int64)
    m = parent >= 0
    np.add.at(child, parent[m], dur[m])
    self_ns = dur - child
    windows = step_windows(raw.filter(is_step).to_pylist(), ops["ts_ns"].filter(is_step).to_numpy(),
                           ops["dur_ns"].filter(is_step).to_numpy(), steps)
    return {"code": code, "names": names, "cat": cat, "cats": cats, "step": step_of(ts, windows),
            "self_ns": np.maximum(self_ns, 0), "clamped": self_ns < 0, "nested": same_name_ancestor(parent, code),
            "dur_ns": dur, "windows": windows}


def op_stats(ops: pa.Table, rows: dict | None = None, keep=None, steps=None) -> dict:
    """op_stats columns (see the module docstring) of one rank's ops ``ops`` (all its rows,
    ``OPS_COLUMNS``); ``rows``: ``op_rows`` of them (computed when None); ``keep``:
    a function of the step array giving the rows to keep (default all).  One row per
    (step, name, cat), sorted by step then self time (descending)."""
    r = rows if rows is not None else op_rows(ops, steps)
    sel = np.ones(len(r["code"]), bool) if keep is None else keep(r["step"])
    outer = sel & ~r["nested"]
    gid, first = group_ids(r["step"][sel], r["code"][sel], r["cat"][sel])
    g = len(first)
    idx = np.flatnonzero(sel)
    dur, o = r["dur_ns"][idx], outer[idx]
    kc, kt, busy = (ops[c].to_numpy()[idx].astype(np.int64) for c in ("kernel_count", "kernel_time_ns", "gpu_busy_ns"))
    s = sums(gid, g, count=None, nested_count=(~o).astype(np.int64), inclusive_ns=np.where(o, dur, 0),
             self_ns=r["self_ns"][idx], self_clamped=r["clamped"][idx].astype(np.int64), kernels=np.where(o, kc, 0),
             kernel_time_ns=np.where(o, kt, 0), gpu_busy_ns=np.where(o, busy, 0))
    imax = np.zeros(g, np.int64)
    np.maximum.at(imax, gid, np.where(o, dur, 0))
    outer_n = s["count"] - s["nested_count"]
    rows_first = idx[first]
    cols = {"step": r["step"][rows_first], "name": _take(r["names"], r["code"][rows_first]),
            "cat": _take(r["cats"], r["cat"][rows_first]), "count": s["count"], "nested_count": s["nested_count"],
            "inclusive_ns": s["inclusive_ns"],
            "inclusive_mean_ns": np.where(outer_n > 0, s["inclusive_ns"] / np.maximum(outer_n, 1), np.nan),
            "inclusive_max_ns": imax, "self_ns": s["self_ns"], "self_mean_ns": s["self_ns"] / np.maximum(s["count"], 1),
            "self_clamped": s["self_clamped"], "kernels": s["kernels"], "kernel_time_ns": s["kernel_time_ns"],
            "gpu_busy_ns": s["gpu_busy_ns"]}
    order = np.lexsort((cols["name"].astype(str), -cols["self_ns"], cols["step"]))
    return {c: v[order] for c, v in cols.items()}


# -- launches ---------------------------------------------------------------------------------

def launch_rows(kcorr, ops: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For GPU events with correlation ids ``kcorr`` (int64[N]): ``(linked bool[N], launch
    start int64[N], launch duration int64[N])`` from the rank's ops rows with the same
    ``correlation`` (the runtime call; the first such row when ids repeat).  Unlinked rows
    (no launch row, or correlation < 0) have start and duration 0."""
    kcorr = np.asarray(kcorr, np.int64)
    oc = ops["correlation"].to_numpy().astype(np.int64)
    m = oc >= 0
    oc, ots, odur = oc[m], ops["ts_ns"].to_numpy()[m].astype(np.int64), ops["dur_ns"].to_numpy()[m].astype(np.int64)
    o = np.argsort(oc, kind="stable")
    oc, ots, odur = oc[o], ots[o], odur[o]
    i = np.searchsorted(oc, kcorr, "left")
    j = np.minimum(i, max(len(oc) - 1, 0))
    linked = (kcorr >= 0) & (i < len(oc)) & (oc[j] == kcorr) if len(oc) else np.zeros(len(kcorr), bool)
    return linked, np.where(linked, ots[j] if len(oc) else 0, 0), np.where(linked, odur[j] if len(oc) else 0, 0)


def launch_stats(k: pa.Table, linked, lts, ldur) -> list:
    """launch_stats rows, dicts (see the module docstring), of one rank's GPU events ``k`` (columns
    ``step``, ``kind``, ``ts_ns``, ``dur_ns``, ``launch_op``) and their launch rows
    (``launch_rows``): one row per (step, kind), kinds in ``KINDS`` order (``all`` first;
    a kind without events in a step has no row)."""
    step = k["step"].to_numpy()
    kind = np.asarray(k["kind"].to_numpy(zero_copy_only=False), object)
    ts, dur = k["ts_ns"].to_numpy().astype(np.int64), k["dur_ns"].to_numpy().astype(np.int64)
    graph = pc.match_substring(k["launch_op"], GRAPH_LAUNCH, ignore_case=True).fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool, copy=False)
    use = linked & ~graph
    raw_delay = ts - (lts + ldur)
    rows = []
    for st in np.unique(step).tolist():
        for kd in KINDS:
            m = (step == st) & ((kind == kd) if kd != "all" else True)
            if not m.any():
                continue
            u = m & use
            d, ov = np.maximum(raw_delay[u], 0), ldur[u]
            n = int(u.sum())
            bound = int((dur[u] < ov).sum())
            delay, overhead = _dists(("launch_delay", d), ("launch_overhead", ov))
            rows.append({"step": st, "kind": kd, "kernels": int(m.sum()), "linked": int((m & linked).sum()),
                         "unlinked": int((m & ~linked).sum()), "graph_kernels": int((m & graph).sum()),
                         **delay, "early_start_count": int((raw_delay[u] < 0).sum()),
                         "launch_delay_outliers": int((d > DELAY_OUTLIER_NS).sum()),
                         **overhead, "launch_overhead_total_ns": int(ov.sum()),
                         "launch_overhead_outliers": int((ov > OVERHEAD_OUTLIER_NS).sum()),
                         "launch_bound_count": bound, "launch_bound_pct": 100.0 * bound / n if n else None})
    return rows


def _dists(*named) -> list:
    """For each ``(prefix, v)`` of ``named`` (int64 arrays of one length): ``<prefix>_p50_ns``,
    ``_p95_ns`` (numpy's default, linear percentiles), ``_max_ns``, ``_mean_ns`` (None when empty).  One
    ``np.percentile`` call along the rows of the arrays stacked, not one an array: the same values
    (a row's percentiles are computed as the array's alone; tests/unit/aggregate/test_stats_dists.py),
    half the calls' overhead (~0.18 ms a call; 7,680 calls, 1.4 s, at 1,024 synthetic ranks)."""
    if not len(named[0][1]):
        return [{f"{prefix}_{k}_ns": None for k in ("p50", "p95", "max", "mean")} for prefix, _ in named]
    p = np.percentile(np.stack([v for _, v in named]), [50, 95], axis=1)
    return [{f"{prefix}_p50_ns": float(p[0, i]), f"{prefix}_p95_ns": float(p[1, i]), f"{prefix}_max_ns": int(v.max()),
             f"{prefix}_mean_ns": float(v.mean())} for i, (prefix, v) in enumerate(named)]
