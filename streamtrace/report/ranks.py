"""The report's time per rank (``## Where the time went, per rank``; ``ranks.parquet``, each rank's
mean over the iterations): compute, communication, overlap, exposed communication, idle, busy and
wall time, their min / median / max across ranks and which rank."""
from __future__ import annotations

import numpy as np

from ..aggregate.folder import RANKS, read_aggregate_table, table_file
from .section import ReportInput, SectionBase, md_table
from .units import fmt_pct, fmt_time

RANK_METRICS = ("compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "busy_ns", "wall_ns")
LABELS = (("compute_ns", "compute"), ("comm_ns", "communication"), ("overlap_ns", "overlap"),
          ("exposed_comm_ns", "exposed communication"), ("idle_ns", "idle"), ("busy_ns", "busy"),
          ("wall_ns", "wall clock"))


def rank_stats(rk: dict) -> dict:
    """Per-rank means over the iterations of the ``ranks`` table's columns ``rk``, then min / median /
    max across ranks (with the ranks): ``{"per_rank": [...], "stats": {metric: {...}}, "from"}`` (ns;
    ``overlap_pct`` = 100 x overlap / communication)."""
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


def _ranked(v, rank, stats):
    """A min/max cell with its rank; ``(all ranks)`` when every rank has the same value."""
    same = stats["min"] == stats["max"] and stats.get("ranks", 1) > 1
    return f"{v} (all ranks)" if same else f"{v} (rank {rank})"


class RanksSection(SectionBase):
    """``ranks``: ``rank_stats`` of ``ranks.parquet``."""
    key = "ranks"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {"ranks": rank_stats(read_aggregate_table(inp.aggdir, RANKS))}

    def markdown(self, rep: dict, charts: list) -> list:
        unit = "CPU" if rep["configuration"].get("cpu_only") else "GPU"
        st = rep["ranks"]["stats"]
        L = ["## Where the time went, per rank", "",
             f"Per rank (mean over steps), across ranks: {unit} time"
             + (" (a CPU-only run: compute = CPU ops, communication = c10d::/gloo: ops)." if unit == "CPU" else
                " (CPU time for ranks without GPU events)."), ""]
        rows = []
        for k, lab in LABELS:
            if k in st:
                s = st[k]
                rows.append([lab, _ranked(fmt_time(s["min"]), s["min_rank"], s), fmt_time(s["median"]),
                             _ranked(fmt_time(s["max"]), s["max_rank"], s)])
        if "overlap_pct" in st:
            s = st["overlap_pct"]
            rows.append(["overlap, % of communication time", _ranked(fmt_pct(s["min"]), s["min_rank"], s),
                         fmt_pct(s["median"]), _ranked(fmt_pct(s["max"]), s["max_rank"], s)])
        return L + [md_table(["metric", "min", "median", "max"], rows), ""]
