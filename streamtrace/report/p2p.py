"""The report's point-to-point section: pipeline Send / Recv apart from the group collectives,
from ``p2p.parquet`` (``streamtrace.aggregate.p2p``): waiting and transfer time per pipeline stage
pair, and the rank pairs whose receiver waited longest."""
from __future__ import annotations

from ..aggregate.folder import COLLECTIVES, P2P, table_file, table_path
from ..events.dataset import read_table
from .section import ReportInput, SectionBase, md_table
from .units import fmt_bytes, fmt_count, fmt_time

SUMS = ("count", "bytes", "time_ns", "recv_wait_ns", "send_wait_ns")


def p2p_section(aggdir, top=8) -> dict:
    """``{"by_stage_pair": [...], "top_pairs": [...], "from": "p2p.parquet"}`` (int ns; empty lists
    without point-to-point transfers)."""
    path = table_path(aggdir, P2P)
    t = read_table(path) if path.is_file() else {}
    rows = [{k: (v.item() if hasattr(v, "item") else v) for k, v in zip(t, vals)}
            for vals in zip(*t.values())] if t else []
    by: dict = {}
    for r in rows:
        a = by.setdefault((r["src_stage"], r["dst_stage"]), {"src_stage": r["src_stage"], "dst_stage": r["dst_stage"],
                                                            "direction": r["direction"], "pairs": 0,
                                                            **dict.fromkeys(SUMS, 0)})
        a["pairs"] += 1
        for k in SUMS:
            a[k] += r[k]
    keep = ("src", "dst", "src_stage", "dst_stage", "direction", *SUMS)
    ranked = sorted(rows, key=lambda r: (-r["recv_wait_ns"], r["src"], r["dst"]))[:top]
    return {"by_stage_pair": [by[k] for k in sorted(by)], "top_pairs": [{k: r[k] for k in keep} for r in ranked],
            "two_way": two_way_exchanges(aggdir), "from": table_file(P2P)}


def two_way_exchanges(aggdir) -> int:
    """How many ``SendRecv`` instances of ``collectives.parquet`` were matched between two ranks
    without a direction (``src`` -1, 2 members: a batched exchange each way,
    ``streamtrace.aggregate.collectives``); 0 without the table."""
    path = table_path(aggdir, COLLECTIVES)
    if not path.is_file():
        return 0
    t = read_table(path, ["collective", "src", "n_ranks"])
    if not len(t["src"]):
        return 0
    return int(((t["collective"] == "SendRecv") & (t["src"] < 0) & (t["n_ranks"] == 2)).sum())


def p2p_markdown(sec: dict, table, ms, ranks: int = 2) -> list:
    """The section's Markdown lines; ``table(head, rows)`` and ``ms(ns)`` (a time in the unit that
    fits it) format as the report does;
    ``ranks``: how many ranks the job's folders hold (one rank: nothing could be matched)."""
    L = ["## Point-to-point (pipeline)", ""]
    if ranks < 2:
        return L + ["One rank: a Send/Recv is matched with its peer's only when the other ranks are analysed too.", ""]
    two = sec.get("two_way", 0)
    both = (f"{two:,} two-way Send/Recv exchanges (`SendRecv` kernels: each rank sends to and receives from the "
            f"other in one kernel) matched across ranks, counted under Collectives." if two else "")
    if not sec["by_stage_pair"]:
        return L + [both or "No point-to-point transfers matched across ranks.", ""]
    if both:
        L += [both, ""]
    L += ["Send/Recv transfers matched sender to receiver, kept apart from the group collectives. Whoever posts "
          "first waits: the receiver for the sender's data (receiver waited), or the sender for a late receiver.", ""]
    L += [table(["stages", "direction", "rank pairs", "transfers", "bytes", "transfer", "receiver waited",
                 "sender waited"],
                [[_stages(r), r["direction"] or "-", fmt_count(r["pairs"]),
                  fmt_count(r["count"]), fmt_bytes(r["bytes"]), ms(r["time_ns"]), ms(r["recv_wait_ns"]),
                  ms(r["send_wait_ns"])]
                 for r in sec["by_stage_pair"]]), ""]
    L += ["Rank pairs whose receiver waited longest:", ""]
    L += [table(["sender -> receiver", "stages", "transfers", "receiver waited", "sender waited"],
                [[f"{r['src']} -> {r['dst']}", _stages(r), fmt_count(r["count"]),
                  ms(r["recv_wait_ns"]), ms(r["send_wait_ns"])] for r in sec["top_pairs"]]), ""]
    return L


def _stages(r) -> str:
    """``0 -> 1``; an unknown stage (-1: no PP group holds the rank) as ``-``, as every table."""
    def one(s):
        return "-" if s is None or s < 0 else f"{s}"
    return f"{one(r['src_stage'])} -> {one(r['dst_stage'])}"


class P2PSection(SectionBase):
    """``p2p``: ``p2p_section``."""
    key = "p2p"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: p2p_section(inp.aggdir)}

    def markdown(self, rep: dict, charts: list) -> list:
        return p2p_markdown(rep[self.key], md_table, fmt_time, rep["configuration"]["ranks"])
