"""The report's pipeline section, drawn only for a job with pipeline parallelism (PP > 1): a job
without it (PP = 1, e.g. tensor parallel only) has no pipeline bubble, and a "bubble" of its
ranks would only be the time they do not compute.

The rows are ``pipeline.parquet``'s as ``aggregate`` wrote them (``streamtrace.aggregate.pipeline``,
the one definition of the bubble: the time a stage waits for its neighbour stage within its PP
group's span, however it waits -- outside any micro-batch or blocked in a pipeline receive or send
inside one -- the figure (p - 1) / (m + p - 1) predicts; the other split, outside any micro-batch
only, beside it);
nothing here computes it again.  The Gantt charts' labels read the same table
(``stage_bubbles``).
"""
from __future__ import annotations

import numpy as np

from ..aggregate.folder import PIPELINE, read_aggregate_table, table_file
from .config import iteration_cell
from .section import ReportInput, SectionBase, md_table
from .units import fmt_pct, fmt_time

PHASES = ("forward", "backward", "recompute")
ROW_KEYS = ("iteration", "step", "pp_group", "stage", "rank", "span_ns", "microbatch_ns", "busy_ns", "p2p_wait_ns",
            "bubble_ns", "bubble_pct", "outside_microbatch_ns", "outside_microbatch_pct", "ideal_bubble_pct",
            "microbatches")


def stage_bubbles(pipe, iteration, step, ranks) -> dict:
    """``{rank: bubble %}`` of one PP group's ``ranks`` (its stages) in one (``iteration``, ``step``),
    from ``pipeline.parquet``'s columns ``pipe`` (dict of arrays): the table's ``bubble_pct``, for the
    Gantt charts' labels; None for a rank without a row."""
    out = {r: None for r in ranks}
    if not len(pipe.get("rank", [])):
        return out
    m = (np.asarray(pipe["iteration"]) == iteration) & (np.asarray(pipe["step"]) == step)
    for j in np.flatnonzero(m & np.isin(pipe["rank"], list(ranks))).tolist():
        out[int(pipe["rank"][j])] = _py(pipe["bubble_pct"][j])
    return out


def pipeline_section(aggdir, pp_size) -> dict:
    """The ``pipeline`` part of ``report.json``: ``rows`` (``pipeline.parquet``'s columns of
    ``ROW_KEYS``; None for one a table of before lacks), the mean bubble %
    per stage, the ideal 1F1B bubble %, and ``shown`` (False unless ``pp_size`` > 1: no section)."""
    pipe = read_aggregate_table(aggdir, PIPELINE)
    shown = bool(pp_size) and pp_size > 1 and len(pipe.get("rank", [])) > 0
    if not shown:
        return {"shown": False, "rows": [], "mean_bubble_pct_by_stage": {}, "ideal_bubble_pct": None,
                "pp": pp_size, "from": table_file(PIPELINE)}
    rows = [{k: _py(pipe[k][i]) if k in pipe else None for k in ROW_KEYS} for i in range(len(pipe["rank"]))]
    per_stage = {}
    for s in sorted({r["stage"] for r in rows}):
        v = [r["bubble_pct"] for r in rows if r["stage"] == s and r["bubble_pct"] is not None]
        per_stage[str(s)] = float(np.mean(v)) if v else None
    return {"shown": True, "rows": rows, "mean_bubble_pct_by_stage": per_stage,
            "ideal_bubble_pct": rows[0]["ideal_bubble_pct"] if rows else None, "pp": pp_size,
            "from": table_file(PIPELINE)}


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
         f"PP = {sec['pp']}. Bubble = the time a stage waits for its neighbour stage within its PP group's span, "
         "however it waits: with no micro-batch (forward, backward, recompute) to work on, or blocked in a pipeline "
         "receive or send inside one (a tensor-parallel collective stays the stage's own work): what the ideal "
         f"1F1B bubble, (p - 1) / (m + p - 1) = {fmt_pct(sec['ideal_bubble_pct'])} % of the span, counts. "
         "Mean bubble per stage: "
         + ", ".join(f"stage {s}: {fmt_pct(v)} %" for s, v in sec["mean_bubble_pct_by_stage"].items())
         + ". The other split, \"outside micro-batches\", leaves the pipeline waits inside a micro-batch out.", ""]
    L += [table(["iteration", "step", "PP group", "stage", "rank", "span", "in micro-batches", "computing",
                 "pipeline waits inside", "bubble", "bubble %", "outside micro-batches %"],
                [[iteration_cell(r["iteration"]), r["step"], r["pp_group"], r["stage"], r["rank"],
                  fmt_time(r["span_ns"]), fmt_time(r["microbatch_ns"]), fmt_time(r["busy_ns"]),
                  fmt_time(r["p2p_wait_ns"]), fmt_time(r["bubble_ns"]), fmt_pct(r["bubble_pct"]),
                  fmt_pct(r["outside_microbatch_pct"])] for r in sec["rows"][:64]]), ""]
    if len(sec["rows"]) > 64:
        L += [f"({len(sec['rows']) - 64:,} more rows in {table_file(PIPELINE)})", ""]
    return L


class PipelineSection(SectionBase):
    """``pipeline``: ``pipeline_section`` for the job's pipeline-parallel size."""
    key = "pipeline"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: pipeline_section(inp.aggdir, inp.sizes.get("pp"))}

    def markdown(self, rep: dict, charts: list) -> list:
        return pipeline_markdown(rep[self.key], md_table, iteration_cell)
