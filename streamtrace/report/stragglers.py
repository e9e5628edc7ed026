"""The report's stragglers (``## Stragglers``; ``stragglers.parquet``): per group-collective kind, the
ranks that were last to arrive most (the lag they caused), and the clock offsets estimated."""
from __future__ import annotations

from ..aggregate.folder import STRAGGLERS, read_aggregate_table, table_file
from .section import ReportInput, SectionBase, md_table, missing_line, plain
from .units import fmt_count, fmt_time

SHOWN = 5
"""Rows of the stragglers' table (the largest lag first)."""


class StragglersSection(SectionBase):
    """``stragglers``: ``{"top": [rows of stragglers.parquet, the largest lag first], "clock_offsets_ns":
    {rank: ns}}``."""
    key = "stragglers"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        st = read_aggregate_table(inp.aggdir, STRAGGLERS)
        rows = [{k: plain(st[k][i]) for k in st} for i in range(len(st.get("rank", [])))]
        rows.sort(key=lambda r: (-r["straggler_lag_ns"], r["rank"], r["collective"], r["parallel_dim"]))
        return {"stragglers": {"top": rows[:SHOWN], "clock_offsets_ns": inp.meta.get("clock_offsets_ns") or {},
                               "from": table_file(STRAGGLERS)}}

    def markdown(self, rep: dict, charts: list) -> list:
        L = ["## Stragglers", ""]
        if "stragglers" in rep.get("missing", {}):
            L += missing_line(rep, "stragglers")
        else:
            L += ["Ranks last to arrive at group collectives, per collective kind (lag = their lead over the "
                  "next-latest rank; wait = over that kind's collectives; point-to-point is in its own section):", ""]
            L += [md_table(["rank", "collective", "dim", "times last", "lag caused", "times first (waited longest)",
                            "wait"],
                           [[r["rank"], r["collective"], r["parallel_dim"], fmt_count(r["straggler_count"]),
                             fmt_time(r["straggler_lag_ns"]), fmt_count(r["waiter_count"]), fmt_time(r["wait_ns"])]
                            for r in rep["stragglers"]["top"]]), ""]
        off = rep["stragglers"]["clock_offsets_ns"]
        if off:
            L += ["Estimated clock offsets: " + ", ".join(f"rank {r}: {fmt_time(v, sign=True)}"
                                                          for r, v in off.items()), ""]
        return L
