"""The report's "Process groups" section: what is known without a topology, from the collectives
themselves (``process_groups.parquet``, ``streamtrace.aggregate.groups``): each group's size, ranks,
collectives, bytes and time, and the layout inferred where it is unambiguous (``aggregate.json``'s
``inferred_layout``), said as inferred."""
from __future__ import annotations

from ..aggregate.folder import PROCESS_GROUPS, table_file, table_path
from ..events.dataset import read_table
from .section import ReportInput, SectionBase, md_table
from .units import fmt_bytes, fmt_count, fmt_time


def groups_section(aggdir, meta: dict) -> dict:
    """``{"rows": [...], "inferred_layout": dict | None, "from": "process_groups.parquet"}``
    (``rows``: the table's rows as dicts, int ns and bytes; empty without group collectives)."""
    path = table_path(aggdir, PROCESS_GROUPS)
    t = read_table(path) if path.is_file() else {}
    rows = [{k: (v.item() if hasattr(v, "item") else v) for k, v in zip(t, vals)} for vals in zip(*t.values())] \
        if t else []
    return {"rows": rows, "inferred_layout": meta.get("inferred_layout"), "from": table_file(PROCESS_GROUPS)}


def groups_markdown(sec: dict, table, topology_known: bool, ranks: int = 2) -> list:
    """The section's Markdown lines; ``table(head, rows)`` formats as the report does;
    ``topology_known``: the job has a topology (the layout is then not inferred); ``ranks``: how
    many ranks the job's folders hold."""
    L = ["## Process groups", ""]
    if not sec["rows"] and ranks < 2:
        return L + ["One rank: the process groups are seen when the other ranks are analysed too.", ""]
    if not sec["rows"]:
        return L + ["No group collective was matched across ranks.", ""]
    L += ["The process groups seen on the collectives themselves (ranks from the process group the kernels "
          "name, else the ranks seen taking part); time = sum over its collectives of the transfer "
          "(the shortest member's kernel).", ""]
    L += [table(["group (ranks)", "size", "ranks from", "name", "dim", "collectives", "kinds", "bytes", "time"],
                [[r["group"], fmt_count(r["group_size"]), r["ranks_from"], r["pg_name"] or "-", r["parallel_dim"],
                  fmt_count(r["instances"]), r["kinds"], fmt_bytes(r["bytes"] if r["bytes"] >= 0 else None),
                  fmt_time(r["time_ns"])]
                 for r in sec["rows"]]), ""]
    lay = sec.get("inferred_layout")
    if lay and not topology_known:
        L += [f"**Layout, inferred**: {lay['text']}.", ""]
    return L


class GroupsSection(SectionBase):
    """``process_groups``: ``groups_section``."""
    key = "process_groups"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: groups_section(inp.aggdir, inp.meta)}

    def markdown(self, rep: dict, charts: list) -> list:
        c = rep["configuration"]
        return groups_markdown(rep[self.key], md_table, bool(c.get("topology_from")), c["ranks"])
