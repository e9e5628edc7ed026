"""The report's collectives (``## Collectives``; ``collectives_summary.parquet``): count, bytes, time
and bus bandwidth (as nccl-tests defines it) per collective type and parallel dimension, and the
traffic per dimension."""
from __future__ import annotations

from ..aggregate.folder import COLLECTIVES_SUMMARY, read_aggregate_table, table_file
from .section import ReportInput, SectionBase, md_table, missing_line, plain
from .units import fmt_bytes, fmt_count, fmt_gbps, fmt_pct, fmt_time


class CollectivesSection(SectionBase):
    """``collectives``: ``{"instances": aggregate.json's counts, "by_type": [row of
    collectives_summary]}``; ``traffic``: ``{"by_dim": {dim: {"bytes", "traffic_pct", "time_ns"}}}``."""
    key = "collectives"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        cs = read_aggregate_table(inp.aggdir, COLLECTIVES_SUMMARY)
        coll = {"instances": inp.meta["collectives"], "by_type": [
            {k: plain(cs[k][i]) for k in cs} for i in range(len(cs.get("collective", [])))],
            "from": table_file(COLLECTIVES_SUMMARY)}
        traffic: dict = {}
        for row in coll["by_type"]:
            t = traffic.setdefault(row["parallel_dim"], {"bytes": 0, "traffic_pct": 0.0, "time_ns": 0})
            t["bytes"] += row["bytes"]
            t["traffic_pct"] += row["traffic_pct"]
            t["time_ns"] += row["time_ns"]
        return {"collectives": coll, "traffic": {"by_dim": traffic, "from": table_file(COLLECTIVES_SUMMARY)}}

    def markdown(self, rep: dict, charts: list) -> list:
        L = ["## Collectives", ""]
        if "collectives" in rep.get("missing", {}):
            return L + missing_line(rep, "collectives")
        ci = rep["collectives"]["instances"]
        if rep["configuration"]["ranks"] >= 2:
            alone = ci.get("single_rank", 0)
            lone = (f"; {alone:,} seen on one rank only, not matched (the trace names neither their process group "
                    f"nor their peer)" if alone else "")
            L += [f"{ci.get('instances', 0) - alone:,} collective instances matched across ranks "
                  f"({ci.get('complete', 0):,} with every member, {ci.get('inconsistent', 0):,} inconsistent){lone}. "
                  f"Bus bandwidth as nccl-tests defines it.", ""]
        else:
            L += [f"{ci.get('instances', 0):,} collective instances of one rank (nothing to match them with: analyse "
                  f"the other ranks too). Bus bandwidth as nccl-tests defines it.", ""]
        skew = [r["start_skew_mean_ns"] for r in rep["collectives"]["by_type"]]
        rows = [[r["collective"], r["parallel_dim"] or "-", fmt_count(r["count"]), _bytes(r["bytes"]),
                 fmt_pct(r["traffic_pct"]) if r["bytes"] else "-", fmt_time(r["time_ns"]),
                 fmt_gbps(r["busbw_gbps_min"]), fmt_gbps(r["busbw_gbps_median"]), fmt_gbps(r["busbw_gbps_max"]),
                 fmt_time(k)]
                for r, k in zip(rep["collectives"]["by_type"], skew)]
        L += [md_table(["collective", "dim", "count", "bytes", "traffic %", "time", "busbw min", "busbw median",
                        "busbw max", "mean skew"], rows), ""]
        L += ["Traffic by parallel dimension:", ""]
        L += [md_table(["dim", "bytes", "traffic %", "time"],
                       [[k or "-", _bytes(v["bytes"]), fmt_pct(v["traffic_pct"]) if v["bytes"] else "-",
                         fmt_time(v["time_ns"])] for k, v in sorted(rep["traffic"]["by_dim"].items())]), ""]
        if any(not r["bytes"] for r in rep["collectives"]["by_type"]):
            L += ["Bytes `unknown`: the traces give no message size for those collectives' kernels (older PyTorch "
                  "versions wrote none on the NCCL kernel); their bus bandwidth is unknown too.", ""]
        return L


def _bytes(n) -> str:
    """A collective's bytes; ``unknown`` for 0 (no message size in the trace, not an empty message)."""
    return fmt_bytes(n) if n else "unknown"
