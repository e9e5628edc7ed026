"""The report's steps and throughput (``## Steps and throughput``): each profiled step's time, the
median over ranks of its ``ProfilerStep#N`` duration (``iterations.parquet``: ``step_ns_median``; the
GPU span when no step annotation exists), the GPU work outside every step window, and the tokens/s
(``report.json``'s ``throughput``, written by ``EfficiencySection``:
it falls back on the efficiency's tokens per step)."""
from __future__ import annotations

import numpy as np

from ..aggregate.folder import ITERATIONS, read_aggregate_table
from .config import iteration_cell
from .section import ReportInput, SectionBase, is_nan, md_table, plain
from .units import fmt_pct, fmt_time


class StepsSection(SectionBase):
    """``steps``: ``[{"iteration", "step", "step_ns"}]`` (int; ns) of the profiled steps; ``outside_steps``
    (same shape) when the traces name steps and some GPU work lies outside them."""
    key = "steps"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        it = read_aggregate_table(inp.aggdir, ITERATIONS)
        steps = it.get("step", np.full(len(it.get("iteration", [])), -1))
        rows = [{"iteration": int(i), "step": int(n), "step_ns": plain(s) if s is not None and not is_nan(s)
                 else plain(sp)} for i, n, s, sp in zip(it["iteration"], steps, it["step_ns_median"], it["span_ns"])]
        out = {"steps": rows}
        if any(s["step"] >= 0 for s in rows):    # GPU work outside every ProfilerStep window is no step
            out["outside_steps"] = [s for s in rows if s["step"] < 0]
            out["steps"] = [s for s in rows if s["step"] >= 0]
        return out

    def markdown(self, rep: dict, charts: list) -> list:
        c = rep["configuration"]
        L = ["## Steps and throughput", ""]
        known_it = any(s["iteration"] >= 0 for s in rep["steps"])
        named = bool(c.get("step_patterns"))         # steps analyze found by other names than ProfilerStep#N
        L += [md_table((["iteration"] if known_it else []) + ["step" if named else "step (ProfilerStep#)",
                                                             "step time"],
                       [([iteration_cell(s["iteration"])] if known_it else [])
                        + [s["step"] if s["step"] >= 0 else "-", fmt_time(s["step_ns"], 4)]
                        for s in rep["steps"]]), ""]
        if rep.get("outside_steps"):
            L += ["GPU work outside every " + ("step" if named else "`ProfilerStep#`") + " window (" + ", ".join(
                  fmt_time(s["step_ns"], 4) for s in rep["outside_steps"]) + ": work launched before the profiler's "
                  "first step, or after its last) is no step: left out of the table, the throughput and the "
                  "efficiency.", ""]
        tp = rep.get("throughput")
        if tp:
            L += [f"**{fmt_pct(tp['tokens_per_s'], 0)} tokens/s** ({tp['tokens_per_step']:,} tokens per step, "
                  f"{tp['steps']:,} profiled step(s), {fmt_time(tp['time_ns'], 4)}).", ""]
        else:
            L += ["Throughput: give `--tokens-per-step`, or `--global-batch` and `--seq-len`, or "
                  "`--torchtitan-config`.", ""]
        return L
