"""``streamtrace report``: one Markdown report per run (``<name>.md``) plus ``report.json`` and the
charts (:mod:`streamtrace.report.charts`), from the tables ``streamtrace aggregate`` wrote.

Every number in the report is read from, or computed in one step from, an aggregate output file,
named beside each section of ``report.json`` (``"from"``):

* configuration: world size, TP/CP/EP/DP/PP and rank order (topology), GPU names, ranks, iterations;
* throughput (when ``tokens_per_step``, or ``global_batch`` and ``seq_len``, are given):
  tokens/s = tokens per step x profiled steps / the sum of their step times, a step's time being
  the median over ranks of its ``ProfilerStep#N`` duration (``iterations.parquet``:
  ``step_ns_median``; the GPU span when no step annotation exists) — the profiled steps only;
* per rank (``ranks.parquet``, each rank's mean over the iterations): compute, comm, overlap,
  exposed comm, idle, busy and wall time, min / median / max across ranks and which rank;
* collectives (``collectives_summary.parquet``): count, bytes, time, bus bandwidth distribution
  per collective type and parallel dimension; traffic share per dimension;
* stragglers (``stragglers.parquet``): per group-collective kind, the ranks that were last to arrive
  most (lag caused);
* point-to-point (``p2p.parquet``, :mod:`streamtrace.report.p2p`): waiting per pipeline stage pair;
* pipeline bubbles (``pipeline.parquet``): per PP group and stage, and the mean per stage;
* top kernels by total time over all ranks (``top_kernels.parquet``).

Times in ``report.json`` are int ns (``*_ns``) or as stored; the Markdown shows ms.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np

from ..runtime.errors import StreamtraceError
from ..aggregate.folder import (CHARTS, COLLECTIVES_SUMMARY, ITERATIONS, RANKS, STRAGGLERS, TOP_KERNELS, Aggregate,
                                read_aggregate_table, table_file)
from ..runtime.files import atomic_output
from .critical_chart import critical_chart
from .critical_path import critical_markdown, critical_section
from .whatif import whatif_markdown, whatif_section
from .effcharts import efficiency_charts
from .escape import md_cell, md_code, md_text
from .efficiency import efficiency_markdown, efficiency_section
from .explain import build_explain, explain_markdown, idle_chart
from .render import ChartOptions, render_all
from .config import configuration_md, inferred_phases, iteration_cell, step_patterns_used
from .p2p import p2p_markdown, p2p_section
from .groups import groups_markdown, groups_section
from .pipeline import pipeline_markdown, pipeline_section
from .outputs import Report
from .units import fmt_bytes, fmt_count, fmt_gbps, fmt_pct, fmt_time, short_names

DIMS = ("tp", "cp", "ep", "dp", "pp")
RANK_METRICS = ("compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "busy_ns", "wall_ns")


_read = read_aggregate_table


def _py(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _step_patterns(inputs) -> dict:
    """``{"step_patterns": [...]}`` for the configuration when analyze took other step names than
    ``ProfilerStep#N`` (:func:`~streamtrace.report.config.step_patterns_used`), else ``{}``."""
    used = step_patterns_used(inputs)
    return {"step_patterns": used} if used else {}


def build_report(aggdir, name=None, tokens_per_step=None, global_batch=None, seq_len=None, top=15,
                 shown=None, efficiency=None) -> dict:
    """The report as a dict (the content of ``report.json``; ``shown``: the aggregate folder's
    path to record, default ``aggdir``).  Raises :class:`StreamtraceError` when ``aggdir`` holds
    no ``aggregate.json`` or the throughput options are incomplete, and
    :class:`~streamtrace.runtime.errors.DataError` naming a damaged or missing file of ``aggdir``."""
    d = Path(aggdir)
    meta = Aggregate.read(d).summary
    if tokens_per_step is None and (global_batch is None) != (seq_len is None):
        raise StreamtraceError("give --tokens-per-step, or both --global-batch and --seq-len")
    topo = meta.get("topology") or {}
    sizes = (topo.get("sizes") or {k: max((len(g) for g in topo.get(k) or []), default=1) for k in DIMS}) if topo \
        else dict.fromkeys(DIMS)          # unknown without a topology, not 1
    cpu_only = meta.get("sources") == ["cpu"]
    rep = {"name": name or meta.get("job_name") or _default_name(meta, Path(shown or d)),
           "generated": _dt.datetime.now().isoformat(timespec="seconds"),
           "aggregate": str(shown or d), "inputs": meta["inputs"],
           "configuration": {"world_size": meta.get("world_size"), "world_size_from": meta.get("world_size_from"),
                             **{k: sizes.get(k) for k in DIMS}, "topology_from": topo.get("source") if topo else None,
                             "order": topo.get("order"), "devices": meta.get("devices") or [],
                             "ranks": len(meta["ranks"]), "iterations": meta["iterations"],
                             "cpu_only": cpu_only, "phases_inferred": inferred_phases(meta["inputs"]),
                             **_step_patterns(meta["inputs"]),
                             "time_alignment": meta["time_alignment"], "clock_sync": meta["clock_sync"],
                             "from": Aggregate.marker}}
    it = _read(d, "iterations")
    tps = tokens_per_step if tokens_per_step is not None else (
        global_batch * seq_len if global_batch is not None else None)
    steps = it.get("step", np.full(len(it.get("iteration", [])), -1))
    rep["steps"] = [{"iteration": int(i), "step": int(n), "step_ns": _py(s) if s is not None and not _isnan(s) else _py(sp)}
                    for i, n, s, sp in zip(it["iteration"], steps, it["step_ns_median"], it["span_ns"])]
    if any(s["step"] >= 0 for s in rep["steps"]):    # GPU work outside every ProfilerStep window is no step
        rep["outside_steps"] = [s for s in rep["steps"] if s["step"] < 0]
        rep["steps"] = [s for s in rep["steps"] if s["step"] >= 0]
    rep["efficiency"] = efficiency_section(meta, rep["steps"], efficiency, tokens_per_step, global_batch, seq_len, d)
    tps = tps if tps is not None else rep["efficiency"]["inputs"]["tokens_per_step"]
    if tps is not None:
        total = sum(s["step_ns"] for s in rep["steps"] if s["step_ns"])
        rep["throughput"] = {"tokens_per_step": int(tps), "steps": len(rep["steps"]), "time_ns": int(total),
                             "tokens_per_s": tps * len(rep["steps"]) / (total / 1e9) if total else None,
                             "from": table_file(ITERATIONS)}
    rk = _read(d, "ranks")
    rep["ranks"] = _rank_stats(rk)
    cs = _read(d, "collectives_summary")
    rep["collectives"] = {"instances": meta["collectives"], "by_type": [
        {k: _py(cs[k][i]) for k in cs} for i in range(len(cs.get("collective", [])))],
        "from": table_file(COLLECTIVES_SUMMARY)}
    traffic: dict = {}
    for row in rep["collectives"]["by_type"]:
        t = traffic.setdefault(row["parallel_dim"], {"bytes": 0, "traffic_pct": 0.0, "time_ns": 0})
        t["bytes"] += row["bytes"]
        t["traffic_pct"] += row["traffic_pct"]
        t["time_ns"] += row["time_ns"]
    rep["traffic"] = {"by_dim": traffic, "from": table_file(COLLECTIVES_SUMMARY)}
    st = _read(d, "stragglers")
    rows = [{k: _py(st[k][i]) for k in st} for i in range(len(st.get("rank", [])))]
    rows.sort(key=lambda r: (-r["straggler_lag_ns"], r["rank"], r["collective"], r["parallel_dim"]))
    rep["stragglers"] = {"top": rows[:5], "clock_offsets_ns": meta.get("clock_offsets_ns") or {},
                         "from": table_file(STRAGGLERS)}
    rep["p2p"] = p2p_section(d)
    rep["process_groups"] = groups_section(d, meta)
    rep["pipeline"] = pipeline_section(d, sizes.get("pp"))
    tk = _read(d, "top_kernels")
    total = int(tk["total_ns"].sum()) if len(tk.get("total_ns", [])) else 0
    rep["top_kernels"] = {"total_ns": total, "rows": [
        {"name": tk["name"][i], "kind": tk["kind"][i], "count": int(tk["count"][i]), "total_ns": int(tk["total_ns"][i]),
         "share_pct": 100 * int(tk["total_ns"][i]) / total if total else None}
        for i in range(min(top, len(tk.get("name", []))))], "from": table_file(TOP_KERNELS)}
    rep["explain"] = build_explain(d, top)
    rep["critical_path"] = critical_section(d, lambda x: short_names([x], 80)[0])
    rep["whatif"] = whatif_section(d)
    rep["missing"] = _missing(rep, meta, cpu_only)
    rep["warnings"] = meta.get("warnings", [])
    return rep


def _missing(rep, meta, cpu_only) -> dict:
    """Why a section of the report is empty: ``{section: reason}``."""
    out = {}
    nranks = len(meta["ranks"])
    if rep["configuration"]["tp"] is None:
        out["configuration"] = ("no topology (no pg_config naming TP/DP/PP groups in the traces and no topology file): "
                                "parallel sizes unknown; give --topology")
    if not rep["collectives"]["by_type"]:
        out["collectives"] = ("no GPU communication kernels: a CPU-only run (gloo); its c10d::/gloo: ops count as "
                              "communication in the per-rank table" if cpu_only else
                              "no communication kernels in the traces")
    if not rep["stragglers"]["top"] or not any(r["straggler_count"] or r["waiter_count"] for r in rep["stragglers"]["top"]):
        out["stragglers"] = (out.get("collectives") or
                             ("one rank: stragglers need collectives matched across at least 2 ranks" if nranks < 2
                              else "no group collective was matched across 2 or more ranks"))
    if not rep["pipeline"]["shown"]:
        pp = rep["configuration"]["pp"]
        out["pipeline"] = ("pipeline-parallel size not named in the trace: give --topology" if pp is None else
                           "no pipeline parallelism (PP = 1): no bubble" if pp == 1 else "no forward/backward work")
    if not rep["top_kernels"]["rows"]:
        out["top_kernels"] = "no GPU kernels: a CPU-only run" if cpu_only else "no GPU kernels in the traces"
    return out


def _isnan(v):
    try:
        return bool(np.isnan(v))
    except TypeError:
        return False


def _default_name(meta, d):
    ins = meta.get("inputs") or []
    p = Path(ins[0]) if ins else d
    name = p.resolve().name
    return name if name not in ("", ".") else d.resolve().name


def _rank_stats(rk) -> dict:
    """Per-rank means over the iterations, then min / median / max across ranks (with the ranks)."""
    if not len(rk.get("rank", [])):
        return {"per_rank": [], "stats": {}, "from": table_file(RANKS)}
    ranks = sorted(set(rk["rank"].tolist()))
    per = []
    for r in ranks:
        m = rk["rank"] == r
        row = {"rank": int(r), "iterations": int(m.sum())}
        for k in RANK_METRICS:
            row[k] = float(np.mean(rk[k][m]))
        row["overlap_pct"] = 100.0 * row["overlap_ns"] / row["comm_ns"] if row["comm_ns"] else None
        per.append(row)
    stats = {}
    for k in RANK_METRICS + ("overlap_pct",):
        vals = [(p[k], p["rank"]) for p in per if p[k] is not None]
        if not vals:
            continue
        v = np.asarray([x[0] for x in vals])
        lo, hi = min(vals), max(vals, key=lambda x: (x[0], -x[1]))
        stats[k] = {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max()),
                    "min_rank": lo[1], "max_rank": hi[1], "ranks": len(vals)}
    return {"per_rank": per, "stats": stats, "from": table_file(RANKS)}


# -- Markdown -------------------------------------------------------------------------------

_ms = fmt_time          # every time in the report in the unit that fits it (report/units.py)
_f = fmt_pct


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]      # names escaped (issue 49)
    return "\n".join(out)


def _missing_line(rep, section):
    why = rep.get("missing", {}).get(section)
    return [f"*Nothing to show: {why}.*", ""] if why else []


def _ranked(v, rank, stats):
    """A min/max cell with its rank; ``(all ranks)`` when every rank has the same value."""
    same = stats["min"] == stats["max"] and stats.get("ranks", 1) > 1
    return f"{v} (all ranks)" if same else f"{v} (rank {rank})"


def to_markdown(rep: dict, charts=()) -> str:
    """The report as Markdown: times, bytes and bandwidths each in the unit that fits it
    (:mod:`streamtrace.report.units`; KB/MB/GB = 1e3/1e6/1e9 bytes), counts with thousands
    separators, unknown cells ``-`` (:mod:`streamtrace.report.config`)."""
    c = rep["configuration"]
    unit = "CPU" if c.get("cpu_only") else "GPU"
    L = [f"# {md_text(rep['name'])}", "",          # names and paths escaped for Markdown (report/escape.py)
         f"Generated {rep['generated']} by streamtrace from {md_code(rep['aggregate'])} "
         f"(time alignment: {c['time_alignment']}, clock sync: {c['clock_sync']}). Times, sizes and bandwidths are "
         "shown in the unit that fits each value (us, ms, s; B, KB, MB, GB = powers of 1,000); report.json and the "
         "Parquet tables hold the exact values (ns, bytes).", ""]
    cp_png = next((p for p in charts if Path(p).stem == "critical_path"), None)
    L += critical_markdown(rep.get("critical_path"), _table, short_names, cp_png)
    L += whatif_markdown(rep.get("whatif"), _table, lambda xs: short_names(xs, 80))
    L += configuration_md(c, _table)
    L += ["## Steps and throughput", ""]
    known_it = any(s["iteration"] >= 0 for s in rep["steps"])
    named = bool(c.get("step_patterns"))         # steps analyze found by other names than ProfilerStep#N
    L += [_table((["iteration"] if known_it else []) + ["step" if named else "step (ProfilerStep#)", "step time"],
                 [([iteration_cell(s["iteration"])] if known_it else []) + [s["step"] if s["step"] >= 0 else "-",
                                                                             _ms(s["step_ns"], 4)]
                  for s in rep["steps"]]), ""]
    if rep.get("outside_steps"):
        L += ["GPU work outside every " + ("step" if named else "`ProfilerStep#`") + " window (" + ", ".join(
              _ms(s["step_ns"], 4) for s in rep["outside_steps"]) + ": work launched before the profiler's first "
              "step, or after its last) is no step: left out of the table, the throughput and the efficiency.", ""]
    tp = rep.get("throughput")
    if tp:
        L += [f"**{_f(tp['tokens_per_s'], 0)} tokens/s** ({tp['tokens_per_step']:,} tokens per step, {tp['steps']:,} "
              f"profiled step(s), {_ms(tp['time_ns'], 4)}).", ""]
    else:
        L += ["Throughput: give `--tokens-per-step`, or `--global-batch` and `--seq-len`, or `--torchtitan-config`.",
              ""]
    L += efficiency_markdown(rep.get("efficiency"))
    st = rep["ranks"]["stats"]
    L += ["## Where the time went, per rank", "",
          f"Per rank (mean over steps), across ranks: {unit} time"
          + (" (a CPU-only run: compute = CPU ops, communication = c10d::/gloo: ops)." if unit == "CPU" else
             " (CPU time for ranks without GPU events)."), ""]
    rows = []
    for k, lab in (("compute_ns", "compute"), ("comm_ns", "communication"), ("overlap_ns", "overlap"),
                   ("exposed_comm_ns", "exposed communication"), ("idle_ns", "idle"), ("busy_ns", "busy"),
                   ("wall_ns", "wall clock")):
        if k in st:
            s = st[k]
            rows.append([lab, _ranked(_ms(s["min"]), s["min_rank"], s), _ms(s["median"]),
                         _ranked(_ms(s["max"]), s["max_rank"], s)])
    if "overlap_pct" in st:
        s = st["overlap_pct"]
        rows.append(["overlap, % of communication time", _ranked(_f(s["min"]), s["min_rank"], s), _f(s["median"]),
                     _ranked(_f(s["max"]), s["max_rank"], s)])
    L += [_table(["metric", "min", "median", "max"], rows), ""]
    L += _collectives_md(rep)
    L += ["## Stragglers", ""]
    if "stragglers" in rep.get("missing", {}):
        L += _missing_line(rep, "stragglers")
    else:
        L += ["Ranks last to arrive at group collectives, per collective kind (lag = their lead over the "
              "next-latest rank; wait = over that kind's collectives; point-to-point is in its own section):", ""]
        L += [_table(["rank", "collective", "dim", "times last", "lag caused", "times first (waited longest)",
                      "wait"],
                     [[r["rank"], r["collective"], r["parallel_dim"], fmt_count(r["straggler_count"]),
                       _ms(r["straggler_lag_ns"]), fmt_count(r["waiter_count"]), _ms(r["wait_ns"])]
                      for r in rep["stragglers"]["top"]]), ""]
    off = rep["stragglers"]["clock_offsets_ns"]
    if off:
        L += ["Estimated clock offsets: " + ", ".join(f"rank {r}: {fmt_time(v, sign=True)}" for r, v in off.items()),
              ""]
    L += groups_markdown(rep["process_groups"], _table, bool(c.get("topology_from")), c["ranks"])
    L += p2p_markdown(rep["p2p"], _table, _ms, rep["configuration"]["ranks"])
    L += pipeline_markdown(rep["pipeline"], _table, iteration_cell)
    L += ["## Top kernels by time", ""]
    if rep["top_kernels"]["rows"]:
        names = short_names([r["name"] for r in rep["top_kernels"]["rows"]])
        L += [_table(["kernel", "kind", "count", "total", "% of kernel time"],
                     [[n, r["kind"], fmt_count(r["count"]), _ms(r["total_ns"]), _f(r["share_pct"])]
                      for n, r in zip(names, rep["top_kernels"]["rows"])]), ""]
    else:
        L += _missing_line(rep, "top_kernels")
    idle_png = next((p for p in charts if Path(p).stem == "idle_breakdown"), None)
    L += explain_markdown(rep.get("explain"), idle_png, short_names)
    charts = [p for p in charts if p not in (idle_png, cp_png)]
    if charts:
        L += ["## Charts", ""]
        L += [f"![{Path(p).stem}]({p})" for p in charts]
        L += [""]
    if rep["warnings"]:
        L += ["## Warnings", ""] + [f"- {md_text(w, None)}" for w in rep["warnings"]] + [""]
    return "\n".join(L)


def _collectives_md(rep) -> list:
    L = ["## Collectives", ""]
    if "collectives" in rep.get("missing", {}):
        return L + _missing_line(rep, "collectives")
    ci = rep["collectives"]["instances"]
    if rep["configuration"]["ranks"] >= 2:
        alone = ci.get("single_rank", 0)
        lone = (f"; {alone:,} seen on one rank only, not matched (the trace names neither their process group nor "
                f"their peer)" if alone else "")
        L += [f"{ci.get('instances', 0) - alone:,} collective instances matched across ranks "
              f"({ci.get('complete', 0):,} with every member, {ci.get('inconsistent', 0):,} inconsistent){lone}. "
              f"Bus bandwidth as nccl-tests defines it.", ""]
    else:
        L += [f"{ci.get('instances', 0):,} collective instances of one rank (nothing to match them with: analyse "
              f"the other ranks too). Bus bandwidth as nccl-tests defines it.", ""]
    skew = [r["start_skew_mean_ns"] for r in rep["collectives"]["by_type"]]
    rows = [[r["collective"], r["parallel_dim"] or "-", fmt_count(r["count"]), _coll_bytes(r["bytes"]),
             _f(r["traffic_pct"]) if r["bytes"] else "-", _ms(r["time_ns"]), fmt_gbps(r["busbw_gbps_min"]), fmt_gbps(r["busbw_gbps_median"]),
             fmt_gbps(r["busbw_gbps_max"]), _ms(k)]
            for r, k in zip(rep["collectives"]["by_type"], skew)]
    L += [_table(["collective", "dim", "count", "bytes", "traffic %", "time", "busbw min", "busbw median",
                  "busbw max", "mean skew"], rows), ""]
    L += ["Traffic by parallel dimension:", ""]
    L += [_table(["dim", "bytes", "traffic %", "time"],
                 [[k or "-", _coll_bytes(v["bytes"]), _f(v["traffic_pct"]) if v["bytes"] else "-", _ms(v["time_ns"])]
                  for k, v in sorted(rep["traffic"]["by_dim"].items())]), ""]
    if any(not r["bytes"] for r in rep["collectives"]["by_type"]):
        L += ["Bytes `unknown`: the traces give no message size for those collectives' kernels (older PyTorch "
              "versions wrote none on the NCCL kernel); their bus bandwidth is unknown too.", ""]
    return L


def _coll_bytes(n) -> str:
    """A collective's bytes; ``unknown`` for 0 (no message size in the trace, not an empty message)."""
    return fmt_bytes(n) if n else "unknown"


def write_report(aggdir, outdir=None, name=None, tokens_per_step=None, global_batch=None, seq_len=None,
                 charts=True, chart_ranks=None, log=None, progress=None, final=None, shown=None,
                 chart_formats=("png",), jobs=0, efficiency=None) -> dict:
    """Write ``<outdir>/<name>.md``, ``<outdir>/report.json`` and (``charts``) ``<outdir>/charts/``
    into the existing folder ``outdir`` (default ``aggdir``): the files one by one, see
    :func:`streamtrace.report.run.report` for the report as one unit.  ``name`` defaults to the
    job's (the folder of its traces); ``progress``: a bar over the charts (None: on a terminal);
    ``final``: the path ``outdir`` will have (a staging folder's), for the paths returned and
    printed; ``shown``: the aggregate folder's path to record; ``chart_formats``: ``png`` and/or
    ``svg``; ``jobs``: processes drawing charts (0 = all cores).  The Markdown shows the PNGs (the
    SVGs when only those were written).  Returns the report dict (with ``files``)."""
    rep = build_report(aggdir, name, tokens_per_step, global_batch, seq_len, shown=shown, efficiency=efficiency)
    out = Path(outdir or aggdir)
    files = []
    if charts:
        fmts = tuple(chart_formats)
        extra = [(idle_chart, (rep.get("explain"), out / CHARTS / "idle_breakdown", fmts)),
                 (critical_chart, (aggdir, out / CHARTS / "critical_path", fmts)),
                 (efficiency_charts, (rep.get("efficiency"), aggdir, out / CHARTS, Aggregate.read(aggdir).summary,
                                      fmts))]
        files = render_all(aggdir, out / CHARTS, extra=extra,
                           opt=ChartOptions(chart_formats=fmts, jobs=jobs, chart_ranks=chart_ranks, progress=progress))
    shown = ".png" if "png" in chart_formats else ".svg"
    pngs = [str(Path(p).relative_to(out)) for p in files if str(p).endswith(shown)]
    rep["charts"] = pngs
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in rep["name"]) or "report"
    md = out / f"{safe}.md"
    with atomic_output(md, compress=False) as f:
        f.write(to_markdown(rep, pngs).encode())
    with atomic_output(out / Report.marker, compress=False) as f:
        f.write(json.dumps(rep, indent=1, default=_py).encode())
    fin = Path(final or out)
    rep["files"] = [str(fin / md.name), str(fin / Report.marker)] + [str(fin / Path(p).relative_to(out)) for p in files]
    if log:
        log(f"report: {rep['files'][0]} and {rep['files'][1]}"
            + (f", {len(files)} chart files in {fin / CHARTS}" if files else ""))
    return rep
