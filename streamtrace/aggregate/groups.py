"""What is known without a topology: the process groups seen on the collectives themselves
(``process_groups`` table) and, where it is unambiguous, the layout they imply.

**Table** (``process_groups``, from ``collectives.parquet``, group collectives only: point-to-
point transfers are in ``p2p``), one row per group: ``group`` (the ranks, comma-separated),
``ranks_from`` ("process group": the ``Process Group Ranks`` the kernels carry; "topology": a gloo
collective's group, from the dimension around the call and the job's topology,
``streamtrace.aggregate.gloo``; "members seen": the ranks whose kernels were matched into its
instances, when the trace names no group), ``pg_name``
(NCCL's process-group name, "" unknown), ``group_size`` (ranks), ``parallel_dim`` (the dimensions
its collectives were given, "unknown" without names or topology), ``instances`` (its collectives),
``kinds`` (e.g. ``AllReduce 13, AllToAll 5``), ``bytes`` (sum of the instances' known ``msg_bytes``;
-1 when no instance's size is known), ``time_ns`` (sum of the instances' latency: the transfer, int ns),
``kernel_time_ns`` (sum over members of their kernel time).  Groups of two or more ranks (a
collective seen on one rank only, its group unnamed, is no group seen); rows by size (largest
first), then group.

**Inferred layout** (``inferred_layout``): said only when unambiguous: every group collective
of the job runs across all its ranks (one group spanning the world), so the ranks hold no
tensor-, pipeline- or context-parallel group that communicates; which dimension the one group is
cannot be told from the collectives (data parallel, or a model-parallel group of the whole world).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .folder import COLLECTIVES, PROCESS_GROUPS, PROCESS_GROUPS_COLUMNS, table_path
from ..events.dataset import iter_arrow, write_table

COLUMNS = PROCESS_GROUPS_COLUMNS
_P2P = ("Send", "Recv", "SendRecv")
_READ = ("collective", "pg_ranks", "pg_name", "ranks", "group_size", "msg_bytes", "latency_ns", "kernel_time_ns",
         "parallel_dim", "src", "source")


GROUP_BATCH_ROWS = 16_384
"""Rows of ``collectives.parquet`` ``process_groups`` groups at once: the table's rank lists are text per
instance (a data-parallel group of 256 ranks, ~1.3 KB an instance), and the whole table read at once was
the parent's peak in aggregate at 4,096 synthetic ranks (+22 MB)."""


def process_groups(aggdir, singles: bool = False, batch_rows: int = GROUP_BATCH_ROWS) -> dict:
    """The module docstring's table as ``{column: numpy array}`` (``COLUMNS``) from
    ``aggdir/collectives.parquet``; empty columns when there is none or no group collective.
    ``singles``: keep the one-rank groups too.  The file is read ``batch_rows`` (>= 1) rows at a
    time.  Raises ``DataError`` when the file is not readable Parquet or lacks a column."""
    return _table(_group_sums(aggdir, batch_rows), singles)


def _group_sums(aggdir, batch_rows: int = GROUP_BATCH_ROWS) -> dict:
    """``{group text: its sums}`` over the group collectives of ``aggdir/collectives.parquet``, a
    batch of rows at a time (each batch grouped by group and collective, the groups' sums added)."""
    p = table_path(aggdir, COLLECTIVES)
    rows: dict = {}
    if not p.is_file():
        return rows
    for batch in iter_arrow(p, _READ, batch_rows=batch_rows):
        for r in _batch_groups(pa.Table.from_batches([batch])):
            a = rows.setdefault(r["group"], {"kinds": {}, "collectives": 0, "bytes": 0, "time_ns": 0,
                                             "kernel_time_ns": 0, "named": False, "topo": False, "pg_name": "",
                                             "dims": set(), "sized": False})
            a["sized"] |= (r["msg_bytes_max"] or -1) >= 0
            a["kinds"][r["collective"]] = a["kinds"].get(r["collective"], 0) + r["collective_count"]
            a["collectives"] += r["collective_count"]
            a["bytes"] += r["bytes_sum"] or 0
            a["time_ns"] += r["latency_ns_sum"] or 0
            a["kernel_time_ns"] += r["kernel_time_ns_sum"] or 0
            a["named"] |= bool(r["named_any"])
            a["topo"] |= bool(r["topo_any"])
            a["pg_name"] = max(a["pg_name"], r["pg_name_max"] or "")
            a["dims"] |= {d for d in r["parallel_dim_distinct"] if d}
    return rows


def _batch_groups(t) -> list:
    """One batch's group collectives (no point-to-point transfer) grouped by (group, collective): a
    row dict each of the counts, sums, maxima and distinct dimensions ``_group_sums`` adds up."""
    if not t.num_rows:                    # (an empty table's columns carry no types)
        return []
    t = t.filter(pc.and_(pc.less(t["src"], 0), pc.invert(pc.is_in(t["collective"], pc.cast(_P2P, "string")))))
    if not t.num_rows:
        return []
    named = pc.not_equal(pc.fill_null(t["pg_ranks"], ""), "")
    t = t.append_column("group", pc.if_else(named, t["pg_ranks"], t["ranks"]))
    t = t.append_column("named", named)
    t = t.append_column("topo", pc.and_(named, pc.equal(t["source"], "cpu ops")))
    t = t.append_column("bytes", pc.max_element_wise(t["msg_bytes"], 0))
    return t.group_by(["group", "collective"]).aggregate(
        [("collective", "count"), ("bytes", "sum"), ("msg_bytes", "max"), ("latency_ns", "sum"),
         ("kernel_time_ns", "sum"), ("named", "any"), ("topo", "any"), ("pg_name", "max"),
         ("parallel_dim", "distinct")]).to_pylist()


def _table(rows: dict, singles: bool) -> dict:
    """The table's columns from ``_group_sums``' rows (the one-rank groups too with ``singles``),
    largest group first, then by its ranks."""
    rows = {k: v for k, v in rows.items() if singles or len([x for x in k.split(",") if x.strip()]) >= 2}
    order = sorted(rows, key=lambda k: (-len(k.split(",")), [int(x) for x in k.split(",") if x.strip()]))
    out = {c: [] for c in COLUMNS}
    for k in order:
        a = rows[k]
        dims = sorted(a["dims"] - {"unknown"}) or ["unknown"]
        for c, v in (("group", k), ("ranks_from", "topology" if a["topo"] else "process group" if a["named"]
                                       else "members seen"),
                     ("pg_name", a["pg_name"]), ("group_size", len([x for x in k.split(",") if x.strip()])),
                     ("parallel_dim", ", ".join(dims)), ("instances", a["collectives"]),
                     ("kinds", ", ".join(f"{n} {c}" for n, c in sorted(a["kinds"].items()))),
                     ("bytes", a["bytes"] if a["sized"] else -1),
                     ("time_ns", a["time_ns"]), ("kernel_time_ns", a["kernel_time_ns"])):
            out[c].append(v)
    return {c: np.asarray(v, object if c in ("group", "ranks_from", "pg_name", "parallel_dim", "kinds") else np.int64)
            for c, v in out.items()}


def inferred_layout(groups: dict, ranks: list) -> dict | None:
    """``{"inferred": True, "kind": "one group spanning the world", "size": N, "text": ...}`` when
    every group collective spans all ``ranks`` of the job (two or more), else None (nothing
    unambiguous to say)."""
    world = ",".join(map(str, sorted(int(r) for r in ranks)))
    if len(ranks) < 2 or not len(groups["group"]) or set(groups["group"].tolist()) != {world}:
        return None
    n = len(ranks)
    return {"inferred": True, "kind": "one group spanning the world", "size": n,
            "text": f"inferred from the collectives: every collective runs across all {n} ranks (one process group "
                    f"spanning the world); no smaller group communicates, so no tensor-, pipeline- or context-"
                    f"parallel group of fewer ranks is seen; which dimension this group is (data parallel, or one "
                    f"model-parallel group of the whole world) needs a topology"}


def write_groups(outdir, ranks: list, paths: list) -> dict | None:
    """Write ``process_groups.parquet`` / ``.csv`` into ``outdir`` (after ``collectives.parquet``),
    their paths appended to ``paths``; returns ``inferred_layout``."""
    sums = _group_sums(outdir)                       # (read once: both tables are made of its sums)
    groups = _table(sums, singles=False)
    if len(groups["group"]):
        paths += write_table(outdir, PROCESS_GROUPS, groups, COLUMNS, csv=True)
    return inferred_layout(_table(sums, singles=True), ranks)
