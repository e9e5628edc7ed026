"""The report's pipeline section, drawn only for a job with pipeline parallelism (PP > 1): a job
without it (PP = 1, e.g. tensor parallel only) has no pipeline bubble, and a "bubble" of its
ranks would only be the time they do not compute.

Per (iteration, step, PP group, stage), from ``pipeline.parquet`` (the group's stages) and
``rank_phase.parquet`` (each stage's forward / backward / recompute micro-batch windows,
``start_ns`` .. ``end_ns`` on the aggregate's time axis):

* span = the group's first micro-batch window start to its last window end (all stages);
* in micro-batches = |union of the stage's windows|: the time the stage works on a micro-batch,
  computing or communicating inside it (a receive waited on inside ``forward_step``, a tensor
  parallel all-reduce: that is the stage's communication, in the per-rank and point-to-point
  tables, not bubble);
* bubble = span - in micro-batches: the time the stage has no micro-batch to work on, the
  pipeline bubble of the 1F1B schedule (PipeDream-Flush / Megatron-LM: ideal fraction
  (p - 1) / (m + p - 1), p stages, m micro-batches; Narayanan et al., SC'21, section 2.2);
* computing = ``pipeline.parquet``'s ``busy_ns`` (the union of the stage's compute inside its
  windows), shown beside it.
"""
from __future__ import annotations

import numpy as np

from ..job.folder import read_aggregate_table
from .units import fmt_pct, fmt_time

PHASES = ("forward", "backward", "recompute")
ROW_KEYS = ("iteration", "step", "pp_group", "stage", "rank", "span_ns", "busy_ns", "bubble_ns", "bubble_pct",
            "ideal_bubble_pct", "microbatches")


def _union(starts, ends) -> int:
    """Length of the union of intervals (int ns)."""
    total, reach = 0, None
    for s, e in sorted(zip(starts, ends)):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return int(total)


def _windows(rp) -> dict:
    """``{(iteration, step, rank): [(start, end)]}`` of the forward / backward / recompute rows."""
    out: dict = {}
    if not len(rp.get("rank", [])):
        return out
    for j in np.flatnonzero(np.isin(rp["phase"], PHASES)).tolist():
        s, e = rp["start_ns"][j], rp["end_ns"][j]
        if s is None or e is None or np.isnan(float(s)) or np.isnan(float(e)):
            continue
        key = (int(rp["iteration"][j]), int(rp["step"][j]), int(rp["rank"][j]))
        out.setdefault(key, []).append((int(s), int(e)))
    return out


def stage_bubbles(rp, mask, ranks) -> dict:
    """``{rank: bubble %}`` of one PP group's ``ranks`` (its stages) over the ``rank_phase`` rows
    ``mask`` (bool; one step): the module docstring's bubble, for the Gantt charts' labels; None
    for a rank without windows."""
    win: dict = {}
    sel = mask & np.isin(rp["rank"], list(ranks)) & np.isin(rp["phase"], PHASES)
    for j in np.flatnonzero(sel).tolist():
        s, e = rp["start_ns"][j], rp["end_ns"][j]
        if s is not None and e is not None and not np.isnan(float(s)) and not np.isnan(float(e)):
            win.setdefault(int(rp["rank"][j]), []).append((int(s), int(e)))
    every = [w for v in win.values() for w in v]
    if not every:
        return {}
    span = max(w[1] for w in every) - min(w[0] for w in every)
    return {r: (100.0 * (span - _union([w[0] for w in win[r]], [w[1] for w in win[r]])) / span
                if r in win and span > 0 else None) for r in ranks}


def pipeline_section(aggdir, pp_size) -> dict:
    """The ``pipeline`` part of ``report.json``: ``rows`` (``pipeline.parquet``'s columns of
    :data:`ROW_KEYS`, plus ``microbatch_ns`` = in micro-batches, ``outside_ns`` = the bubble and
    ``outside_pct`` = its % of the span, as the module docstring defines them), the mean bubble %
    per stage, the ideal 1F1B bubble %, and ``shown`` (False unless ``pp_size`` > 1: no section)."""
    pipe = read_aggregate_table(aggdir, "pipeline")
    shown = bool(pp_size) and pp_size > 1 and len(pipe.get("rank", [])) > 0
    if not shown:
        return {"shown": False, "rows": [], "mean_bubble_pct_by_stage": {}, "ideal_bubble_pct": None,
                "pp": pp_size, "from": "pipeline.parquet"}
    win = _windows(read_aggregate_table(aggdir, "rank_phase"))
    rows = []
    for i in range(len(pipe["rank"])):
        r = {k: _py(pipe[k][i]) for k in ROW_KEYS}
        rows.append(r)
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["iteration"], r["step"], r["pp_group"]), []).append(r)
    for (it, st, _), rs in groups.items():
        ws = {r["rank"]: win.get((it, st, r["rank"]), []) for r in rs}
        every = [w for v in ws.values() for w in v]
        lo, hi = (min(w[0] for w in every), max(w[1] for w in every)) if every else (0, 0)
        for r in rs:
            inside = _union([w[0] for w in ws[r["rank"]]], [w[1] for w in ws[r["rank"]]])
            span = hi - lo
            r.update(window_span_ns=span, microbatch_ns=inside, outside_ns=span - inside,
                     outside_pct=100.0 * (span - inside) / span if span > 0 else None)
    per_stage = {}
    for s in sorted({r["stage"] for r in rows}):
        v = [r["outside_pct"] for r in rows if r["stage"] == s and r["outside_pct"] is not None]
        per_stage[str(s)] = float(np.mean(v)) if v else None
    return {"shown": True, "rows": rows, "mean_bubble_pct_by_stage": per_stage,
            "ideal_bubble_pct": rows[0]["ideal_bubble_pct"] if rows else None, "pp": pp_size,
            "from": "pipeline.parquet, rank_phase.parquet"}


def _py(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    return v


def pipeline_markdown(sec: dict, table, iteration_cell) -> list:
    """The section's Markdown lines ([] when not shown: PP = 1 or unknown); ``table(head, rows)``
    formats a table, ``iteration_cell(i)`` an iteration number as the report does."""
    if not sec.get("shown"):
        return []
    L = ["## Pipeline bubbles", "",
         f"PP = {sec['pp']}. Bubble = the time a stage works on no micro-batch (forward, backward, recompute) "
         "within its PP group's span; waiting inside a micro-batch (a receive, a tensor-parallel collective) is the "
         "stage's communication, not bubble. Ideal 1F1B bubble: "
         f"{fmt_pct(sec['ideal_bubble_pct'])} % of the span. Mean bubble per stage: "
         + ", ".join(f"stage {s}: {fmt_pct(v)} %" for s, v in sec["mean_bubble_pct_by_stage"].items()), ""]
    L += [table(["iteration", "step", "PP group", "stage", "rank", "span", "in micro-batches", "computing", "bubble",
                 "bubble %"],
                [[iteration_cell(r["iteration"]), r["step"], r["pp_group"], r["stage"], r["rank"],
                  fmt_time(r["window_span_ns"]), fmt_time(r["microbatch_ns"]), fmt_time(r["busy_ns"]),
                  fmt_time(r["outside_ns"]), fmt_pct(r["outside_pct"])] for r in sec["rows"][:64]]), ""]
    if len(sec["rows"]) > 64:
        L += [f"({len(sec['rows']) - 64:,} more rows in pipeline.parquet)", ""]
    return L
