"""The report's top kernels (``## Top kernels by time``; ``top_kernels.parquet``): the kernels with
the most total time over all ranks, their share of the kernel time."""
from __future__ import annotations

from ..aggregate.folder import TOP_KERNELS, read_aggregate_table, table_file
from .section import ReportInput, SectionBase, md_table, missing_line
from .units import fmt_count, fmt_pct, fmt_time, short_names


class TopKernelsSection(SectionBase):
    """``top_kernels``: ``{"total_ns", "rows": [{"name", "kind", "count", "total_ns", "share_pct"}]}``,
    the first ``top`` rows (ns; share of ``total_ns``, the kernel time of every listed kernel)."""
    key = "top_kernels"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        tk = read_aggregate_table(inp.aggdir, TOP_KERNELS)
        total = int(tk["total_ns"].sum()) if len(tk.get("total_ns", [])) else 0
        return {"top_kernels": {"total_ns": total, "rows": [
            {"name": tk["name"][i], "kind": tk["kind"][i], "count": int(tk["count"][i]),
             "total_ns": int(tk["total_ns"][i]), "share_pct": 100 * int(tk["total_ns"][i]) / total if total else None}
            for i in range(min(inp.top, len(tk.get("name", []))))], "from": table_file(TOP_KERNELS)}}

    def markdown(self, rep: dict, charts: list) -> list:
        L = ["## Top kernels by time", ""]
        rows = rep["top_kernels"]["rows"]
        if not rows:
            return L + missing_line(rep, "top_kernels")
        names = short_names([r["name"] for r in rows])
        return L + [md_table(["kernel", "kind", "count", "total", "% of kernel time"],
                             [[n, r["kind"], fmt_count(r["count"]), fmt_time(r["total_ns"]), fmt_pct(r["share_pct"])]
                              for n, r in zip(names, rows)]), ""]
