"""``streamtrace diff BASE TEST``: what changed between two runs, from their analysed Parquet
(``streamtrace.report.diff.inputs`` resolves the sides and pairs the ranks).

Every number is a **mean per rank-step**: a *cell* is one (iteration, rank, step) of a side -- a
ProfilerStep of one rank in one trace file -- and a side's value for a name is its sum over the
side's cells divided by their number ``N``.  So one step of 8 ranks compares with three steps of
one rank, and a job with twice the steps is no slower for it.  Kernels count in the step of their
``step`` column (the ProfilerStep around the launch), CPU ops in the ProfilerStep window holding
their start; kernels and ops outside the selected steps are left out.  A side whose traces have
no ``ProfilerStep#`` at all is one cell per (iteration, rank), step -1, with a notice.

For a name with count ``C`` and total duration ``S`` (ns) over a side's ``N`` cells:
``<side>_count`` = C / N, ``<side>_total_ns`` = S / N, ``<side>_mean_ns`` = S / C (null when C = 0);
``delta_ns`` = test_total_ns - base_total_ns, ``delta_count`` = test_count - base_count,
``delta_pct`` = 100 x delta_ns / base_total_ns (null when 0).  ``change`` is by **count**, the
categories of HolisticTraceAnalysis' ``TraceDiff.ops_diff`` (``hta/trace_diff.py``; there
``cc`` / ``tc`` are the control / test counts): ``added`` C_base = 0 < C_test; ``deleted`` C_test = 0
< C_base; ``increased`` / ``decreased`` / ``unchanged`` the per-cell counts compared exactly
(C_test x N_base against C_base x N_test).  A kernel 20 % slower at the same count is
``unchanged``, with its positive ``delta_ns`` -- rank the rows by ``delta_ns``, not by ``change``.

CPU ops: ``ProfilerStep#N`` is named ``ProfilerStep#*`` (HTA shows every step number as added and
deleted); ``total_ns`` is inclusive over the occurrences not nested in an op of the same name
(``streamtrace.aggregate.stats``), ``self_ns`` is self time (inclusive minus direct children, clamped
at 0), ``kernel_time_ns`` the GPU time the op launched (analyze's roll-up).

Tables (Parquet + CSV), sorted by their ``delta`` (largest regression first), then name:
``kernels`` (name, kind), ``ops`` (name, cat; by ``delta_self_ns``), ``groups`` (``dimension``:
kind, phase, phase_microbatch ``"backward:3"``, collective, parallel_dim, collective_dim
``"AllReduce/DP"``; ``value``), ``ranks`` (one row per rank pair: the analyze/aggregate metrics
per rank-step -- ``step_ns`` the ProfilerStep's duration, or the GPU span without one -- sorted
by ``delta_compute_ns``).
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ...runtime.errors import StreamtraceError
from ...events.dataset import csv_table, read_partition
from ...runtime.files import atomic_output
from ...runtime.parallel import run_tasks
from ...aggregate.rank_metrics import KIND_CODE, interval_metrics
from .unrelated import unrelated_jobs
from .inputs import DiffOptions, list_text, open_side, pair_ranks
from .outputs import TABLES, table_path
from ...aggregate.stats import OPS_COLUMNS, op_rows
from ...analyze.outputs import KERNELS, OPS, schema_of

KERNEL_COLUMNS = ["name", "kind", "dur_ns", "ts_ns", "end_ns", "device", "step", "phase", "microbatch", "collective",
                  "parallel_dim"]
DIMENSIONS = ("kind", "phase", "phase_microbatch", "collective", "parallel_dim", "collective_dim")
RANK_METRICS = ("step_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "kernel_time_ns")
_GROUP = re.compile(r"\(anonymous namespace\)")
#: below this much analysed Parquet (bytes, both sides) diff reads the ranks in one process: on 64 ranks
#: (2 x 3.5 MB) one process took 2.4 CPU-s, two workers 3.3 (bench/bench_diff.py)
INLINE_BYTES = 64 << 20


def short_name(name: str) -> str:
    """A kernel or op name without template arguments, argument lists and a leading ``void``:
    ``void at::native::foo<float, 4>(int, float*)`` -> ``at::native::foo``;
    ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)`` ->
    ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``.  ``(anonymous namespace)`` is kept; a ``>`` with no
    open ``<`` (``->``) is text.  A name that would become empty stays whole."""
    s = _GROUP.sub("\x00", name)
    out, angle, paren = [], 0, 0
    for ch in s:
        if ch == "<":
            angle += 1
        elif ch == ">" and angle:
            angle -= 1
        elif ch == "(" and not angle:
            paren += 1
        elif ch == ")" and paren and not angle:
            paren -= 1
        elif not angle and not paren:
            out.append(ch)
    r = " ".join("".join(out).replace("\x00", "(anonymous namespace)").split())
    r = r[5:] if r.startswith("void ") else r
    r = r[:-6] if r.endswith(" const") else r
    return r.strip() or name


def _names(arr, key) -> pa.Array:
    """The name column under ``key`` (``"full"`` or ``"short"``), computed once per distinct name."""
    if key == "full":
        return arr
    enc = pc.dictionary_encode(arr).combine_chunks() if isinstance(arr, pa.ChunkedArray) else pc.dictionary_encode(arr)
    short = pa.array([short_name(x) for x in enc.dictionary.to_pylist()], pa.string())
    return pc.take(short, enc.indices)


# -- one rank of one side --------------------------------------------------------------------

def part_partial(part, steps, name_key) -> dict:
    """Sums of one part (a rank of one analysed iteration; ``steps``: the side's selected step
    numbers or None): ``cells`` (its step numbers), ``whole`` (no ProfilerStep: one cell, step -1),
    ``kernels`` / ``ops`` / ``groups`` (pyarrow Tables of per-key counts and sums), ``metrics``
    (``{metric: sum over the cells}``)."""
    kf, of = part.files(KERNELS), part.files(OPS)
    k = read_partition(kf, KERNEL_COLUMNS, schema_of(KERNELS))
    ops = read_partition(of, OPS_COLUMNS, schema_of(OPS))
    rows = op_rows(ops, part.steps) if ops.num_rows else None
    win = rows["windows"] if rows else (np.zeros(0, np.int64),) * 3
    kstep = k["step"].to_numpy()
    present = sorted(set(kstep[kstep >= 0].tolist()) | set(win[2].tolist()))
    whole = not present
    cells = [-1] if whole and steps is None else [s for s in present if steps is None or s in steps]
    kin = np.ones(len(kstep), bool) if whole else np.isin(kstep, cells)
    kk = k.filter(pa.array(kin))
    names = _names(kk["name"], name_key)
    dur = kk["dur_ns"]
    kt = pa.table({"name": names, "kind": kk["kind"], "count": pa.array(np.ones(kk.num_rows, np.int64)),
                   "total_ns": dur}).group_by(["name", "kind"]).aggregate([("count", "sum"), ("total_ns", "sum")])
    out = {"cells": cells, "whole": whole, "present": present,
           "kernels": kt.rename_columns(["name", "kind", "count", "total_ns"]),
           "groups": _groups(kk), "ops": _ops(ops, rows, cells, whole, name_key),
           "metrics": _metrics(kk, win, cells, whole)}
    return out


def _groups(kk) -> pa.Table:
    phase = kk["phase"].to_numpy(zero_copy_only=False).astype(object)
    mb = kk["microbatch"].to_numpy()
    coll = kk["collective"].to_numpy(zero_copy_only=False).astype(object)
    dim = kk["parallel_dim"].to_numpy(zero_copy_only=False).astype(object)
    vals = {"kind": kk["kind"].to_numpy(zero_copy_only=False).astype(object), "phase": phase,
            "phase_microbatch": np.asarray([p if m < 0 else f"{p}:{m}" for p, m in zip(phase, mb.tolist())], object),
            "collective": coll, "parallel_dim": dim,
            "collective_dim": np.asarray([f"{c}/{d or 'unknown'}" if c else "" for c, d in zip(coll, dim)], object)}
    dur = kk["dur_ns"].to_numpy()
    tabs = []
    for d in DIMENSIONS:
        v = vals[d]
        m = v != ""
        if m.any():
            tabs.append(pa.table({"dimension": pa.array([d] * int(m.sum()), pa.string()),
                                  "value": pa.array(v[m].tolist(), pa.string()),
                                  "count": np.ones(int(m.sum()), np.int64), "total_ns": dur[m]}))
    if not tabs:
        return pa.table({"dimension": pa.array([], pa.string()), "value": pa.array([], pa.string()),
                         "count": pa.array([], pa.int64()), "total_ns": pa.array([], pa.int64())})
    g = pa.concat_tables(tabs).group_by(["dimension", "value"]).aggregate([("count", "sum"), ("total_ns", "sum")])
    return g.rename_columns(["dimension", "value", "count", "total_ns"])


def _ops(ops, rows, cells, whole, name_key) -> pa.Table:
    if rows is None:
        return pa.table({"name": pa.array([], pa.string()), "cat": pa.array([], pa.string()),
                         **{c: pa.array([], pa.int64()) for c in ("count", "outer_count", "total_ns", "self_ns",
                                                                  "kernel_time_ns")}})
    sel = np.ones(len(rows["code"]), bool) if whole else np.isin(rows["step"], cells)
    outer = ~rows["nested"][sel]
    dur, kt = rows["dur_ns"][sel], ops["kernel_time_ns"].to_numpy()[sel]
    names = pa.array(rows["names"], pa.string())
    t = pa.table({"name": _names(pc.take(names, pa.array(rows["code"][sel])), name_key),
                  "cat": pc.take(pa.array(rows["cats"], pa.string()), pa.array(rows["cat"][sel])),
                  "count": np.ones(int(sel.sum()), np.int64), "outer_count": outer.astype(np.int64),
                  "total_ns": np.where(outer, dur, 0), "self_ns": rows["self_ns"][sel],
                  "kernel_time_ns": np.where(outer, kt, 0)})
    cols = ["count", "outer_count", "total_ns", "self_ns", "kernel_time_ns"]
    g = t.group_by(["name", "cat"]).aggregate([(c, "sum") for c in cols])
    return g.rename_columns(["name", "cat", *cols])


def _metrics(kk, win, cells, whole) -> dict:
    """Sums over the part's cells of ``RANK_METRICS`` (per device, summed over devices)."""
    s, e, step = (kk[c].to_numpy() for c in ("ts_ns", "end_ns", "step"))
    dev = kk["device"].to_numpy()
    code = np.asarray([KIND_CODE.get(x, 0) for x in kk["kind"].to_numpy(zero_copy_only=False).tolist()], np.int8)
    out = dict.fromkeys(RANK_METRICS, 0)
    for c in cells:
        m = np.ones(len(s), bool) if whole else step == c
        wall = 0
        for d in np.unique(dev[m]).tolist():
            md = m & (dev == d)
            r = interval_metrics(s[md], e[md], code[md])
            for key in RANK_METRICS[1:]:
                out[key] += r[key]
            wall = max(wall, r["wall_ns"])
        w = win[2] == c
        out["step_ns"] += int((win[1][w] - win[0][w]).sum()) if (w.any() and not whole) else wall
    return out


# -- the comparison ---------------------------------------------------------------------------

@dataclass
class DiffTables:
    """The comparison: ``kernels``, ``ops``, ``groups``, ``ranks`` (pyarrow Tables, see the module
    docstring), ``meta`` (the ``diff.json`` dict without its ``files``)."""
    kernels: pa.Table
    ops: pa.Table
    groups: pa.Table
    ranks: pa.Table
    meta: dict


def compare(base, test, outdir, opt: DiffOptions | None = None) -> DiffTables:
    """Compare ``base`` with ``test`` (paths: analysed folders, aggregate or epilogue folders,
    traces; see ``streamtrace.report.diff.inputs``); traces are analysed into ``outdir``.
    Raises ``UsageError`` on contradicting options,
    ``StreamtraceError`` on bad input."""
    opt = opt or DiffOptions()
    opt.check()
    t0, c0 = time.time(), time.process_time()
    bs = opt.steps if opt.steps is not None else opt.base_steps
    ts_ = opt.steps if opt.steps is not None else opt.test_steps
    b = open_side("base", base, outdir, opt, bs)
    t = open_side("test", test, outdir, opt, ts_)
    pairs, notices = pair_ranks(b, t, opt)
    tasks = [(p, side.steps, opt.name_key) for side in (b, t) for p in side.parts]
    res = _run_parts(tasks, opt.jobs)
    rb, rt = res[:len(b.parts)], res[len(b.parts):]
    for side, rs in ((b, rb), (t, rt)):
        n = sum(len(r["cells"]) for r in rs)
        if not n:
            have = sorted({x for r in rs for x in r["present"]})
            raise StreamtraceError(f"{side.given}: no step {list_text(side.steps or [])} on the {side.label} side "
                                   f"(it has {('steps ' + list_text(have)) if have else 'no ProfilerStep'})")
        if any(r["whole"] for r in rs):
            notices.append(f"{side.label}: {sum(r['whole'] for r in rs)} rank trace(s) without ProfilerStep#: "
                           f"each compared as one step (step -1)")
    nb, nt = sum(len(r["cells"]) for r in rb), sum(len(r["cells"]) for r in rt)
    kernels = _join(_side(rb, "kernels", ["name", "kind"]), _side(rt, "kernels", ["name", "kind"]),
                    ["name", "kind"], nb, nt)
    ops = _join(_side(rb, "ops", ["name", "cat"]), _side(rt, "ops", ["name", "cat"]), ["name", "cat"], nb, nt,
                extra=("self_ns", "kernel_time_ns"), mean_count="outer_count")
    groups = _join(_side(rb, "groups", ["dimension", "value"]), _side(rt, "groups", ["dimension", "value"]),
                   ["dimension", "value"], nb, nt, change=False)
    ranks = _ranks(pairs, b, t, rb, rt)
    kernels = kernels.sort_by([("delta_ns", "descending"), ("name", "ascending"), ("kind", "ascending")])
    ops = ops.sort_by([("delta_self_ns", "descending"), ("name", "ascending"), ("cat", "ascending")])
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    groups = groups.append_column("_o", pa.array([order[d] for d in groups["dimension"].to_pylist()], pa.int64()))
    groups = groups.sort_by([("_o", "ascending"), ("delta_ns", "descending"), ("value", "ascending")])
    groups = groups.drop_columns("_o")
    meta = {"kind": "streamtrace-diff", "version": 1, "labels": list(opt.labels), "name_key": opt.name_key,
            "base": _side_meta(b, rb), "test": _side_meta(t, rt),
            "pairs": [list(p) for p in pairs], "summary": _summary(rb, rt, nb, nt),
            "changes": {"kernels": _counts(kernels), "ops": _counts(ops)}, "notices": notices,
            "warnings": unrelated_jobs(b.dirs, t.dirs, kernels, tuple(opt.labels)),
            "seconds": round(time.time() - t0, 3), "cpu_seconds": round(time.process_time() - c0, 3)}
    return DiffTables(kernels, ops, groups, ranks, meta)


def _parts_chunk(tasks) -> list:
    return [part_partial(*t) for t in tasks]


def _run_parts(tasks, jobs) -> list:
    """``part_partial`` of every task, in order: in this process when the Parquet read is under
    ``INLINE_BYTES`` (a pool costs more than it saves there), else in ``jobs`` workers (0: all
    cores), in chunks of several parts (one round trip each)."""
    size = sum(os.path.getsize(f) for p, _, _ in tasks for ds in (KERNELS, OPS) for f in p.files(ds))
    jobs = 1 if size < INLINE_BYTES else max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    if jobs == 1:
        return _parts_chunk(tasks)
    n = max(1, -(-len(tasks) // (4 * jobs)))
    chunks = [(tasks[i:i + n],) for i in range(0, len(tasks), n)]
    return [r for rs in run_tasks(_parts_chunk, chunks, jobs) for r in rs]


def _side(results, name, keys) -> pa.Table:
    t = pa.concat_tables([r[name] for r in results])
    cols = [c for c in t.column_names if c not in keys]
    return t.group_by(keys).aggregate([(c, "sum") for c in cols]).rename_columns(keys + cols)


def _join(b, t, keys, nb, nt, extra=(), mean_count="count", change=True) -> pa.Table:
    """Full outer join of the two sides' sums on ``keys``, as the module docstring's columns."""
    j = b.join(t, keys, join_type="full outer", left_suffix="_b", right_suffix="_t", coalesce_keys=True)
    col = lambda c: pc.fill_null(j[c], 0).to_numpy().astype(np.int64) if c in j.column_names else \
        np.zeros(j.num_rows, np.int64)  # noqa: E731
    cb, ct, sb, st = col("count_b"), col("count_t"), col("total_ns_b"), col("total_ns_t")
    mb, mt = col(f"{mean_count}_b"), col(f"{mean_count}_t")
    out = {k: j[k] for k in keys}
    out |= {"base_count": cb / nb, "test_count": ct / nt, "base_total_ns": sb / nb, "test_total_ns": st / nt,
            "base_mean_ns": _div(sb, mb), "test_mean_ns": _div(st, mt)}
    delta = st / nt - sb / nb
    out["delta_ns"] = delta
    if change:
        out["change"] = pa.array(np.where(cb == 0, "added", np.where(ct == 0, "deleted", np.where(
            ct * nb > cb * nt, "increased", np.where(ct * nb < cb * nt, "decreased", "unchanged")))).tolist(),
            pa.string())
        out["delta_count"] = ct / nt - cb / nb
    out["delta_pct"] = _div(100.0 * delta, sb / nb)
    for c in extra:
        xb, xt = col(f"{c}_b") / nb, col(f"{c}_t") / nt
        out[f"base_{c}"], out[f"test_{c}"] = xb, xt
        if c == "self_ns":
            out["delta_self_ns"] = xt - xb
    return pa.table({k: v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v) for k, v in out.items()})


def _div(num, den) -> pa.Array:
    num, den = np.asarray(num, np.float64), np.asarray(den, np.float64)
    return pa.array(np.where(den != 0, num / np.where(den != 0, den, 1), 0.0), mask=den == 0)


def _ranks(pairs, b, t, rb, rt) -> pa.Table:
    """One row per rank pair: cells and the mean per cell of each metric on both sides."""
    def per_rank(side, results):
        acc = {}
        for p, r in zip(side.parts, results):
            a = acc.setdefault(p.rank, {"cells": 0, **dict.fromkeys(RANK_METRICS, 0)})
            a["cells"] += len(r["cells"])
            for k in RANK_METRICS:
                a[k] += r["metrics"][k]
        return acc
    pb, pt = per_rank(b, rb), per_rank(t, rt)
    rows = []
    for br, tr in pairs:
        x, y = pb.get(br), pt.get(tr)
        row = {"base_rank": br, "test_rank": tr, "base_steps": x["cells"] if x else 0,
               "test_steps": y["cells"] if y else 0}
        for k in RANK_METRICS:
            vb = x[k] / x["cells"] if x and x["cells"] else None
            vt = y[k] / y["cells"] if y and y["cells"] else None
            row[f"base_{k}"], row[f"test_{k}"] = vb, vt
            row[f"delta_{k}"] = vt - vb if vb is not None and vt is not None else None
        rows.append(row)
    cols = ["base_rank", "test_rank", "base_steps", "test_steps"] + [f"{s}_{k}" for k in RANK_METRICS
                                                                      for s in ("base", "test", "delta")]
    types = {"base_rank": pa.int64(), "test_rank": pa.int64(), "base_steps": pa.int64(), "test_steps": pa.int64()}
    t_ = pa.table({c: pa.array([r[c] for r in rows], types.get(c, pa.float64())) for c in cols})
    return t_.sort_by([("delta_compute_ns", "descending"), ("base_rank", "ascending"), ("test_rank", "ascending")])


def _side_meta(side, results) -> dict:
    return {"given": side.given, "dirs": side.dirs, "analysed": side.analysed, "ranks": side.ranks(),
            "steps": sorted({c for r in results for c in r["cells"]}), "cells": sum(len(r["cells"]) for r in results),
            "iterations": sorted({p.iteration for p in side.parts})}


def _summary(rb, rt, nb, nt) -> dict:
    """Per rank-step means of ``RANK_METRICS`` over every cell of each side."""
    out = {}
    for k in RANK_METRICS:
        vb = sum(r["metrics"][k] for r in rb) / nb
        vt = sum(r["metrics"][k] for r in rt) / nt
        out[k] = {"base": vb, "test": vt, "delta": vt - vb, "delta_pct": 100.0 * (vt - vb) / vb if vb else None}
    return out


def _counts(t) -> dict:
    return {c: int(n) for c, n in zip(*np.unique(np.asarray(t["change"].to_pylist(), object).astype(str),
                                                  return_counts=True))} if t.num_rows else {}


def write_tables(outdir, tabs: DiffTables) -> list:
    """Write ``kernels``, ``ops``, ``groups``, ``ranks`` as ``.parquet`` (zstd) and ``.csv`` (floats
    at 6 significant digits) into ``outdir``, each atomically; returns the paths."""
    files = []
    for name in TABLES:
        t = getattr(tabs, name)
        p = str(table_path(outdir, name))
        with atomic_output(p, compress=False) as f:
            pq.write_table(t, f, compression="zstd")
        c = str(table_path(outdir, name, "csv"))
        with atomic_output(c, compress=False) as f:
            pcsv.write_csv(csv_table(t), f)
        files += [p, c]
    return files
