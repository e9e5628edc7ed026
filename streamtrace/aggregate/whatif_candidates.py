"""The changes the report's "What a fix buys" replays (``candidates``), suggested by the critical
path (``critical_path_ranks``, ``critical_path_summary``) and the ranks' lateness:

* for the rank holding most of the path, and for the rank that held the collectives longest alone
  (``lead_ns``: it arrived last): its compute at the median rank's speed, its host gaps removed when
  they are on the path, its collectives at the median of the same collective when its transfers are,
  and a data-loading op on the path (``DataLoader``, ``data_load``...) removed;
* across the job: launches with no delay when launch delays hold at least ``MIN_SHARE`` of a
  path; GEMMs twice as fast when compute kernels do; every collective at the median of the same
  collective when transfers do.

At most one of each, in that order, ``MAX_CANDIDATES`` in all; a change touching every rank
re-reduces every rank (the job-wide ones are left out above ``MAX_RANKS_GLOBAL`` ranks).
"""
from __future__ import annotations

import re

from .folder import CRITICAL_PATH_RANKS, CRITICAL_PATH_SUMMARY, table_path
from ..events.dataset import read_table
from .whatif_changes import AtMedian, Comm, HostGaps, Kernels, Launches, Ops

MIN_SHARE = 5.0
"""A category suggests a change when it holds at least this % of some step's path."""
MAX_CANDIDATES = 8
MAX_RANKS_GLOBAL = 64
"""Job-wide changes (which re-reduce every rank) are suggested only up to this many ranks."""
LOADER = re.compile(r"DataLoader|data_?load|dataloader|get_batch", re.IGNORECASE)


def _rows(outdir, name) -> list:
    p = table_path(outdir, name)
    if not p.is_file():
        return []
    t = read_table(p)
    n = len(next(iter(t.values()))) if t else 0
    return [{c: (v[i].item() if hasattr(v[i], "item") else v[i]) for c, v in t.items()} for i in range(n)]


def candidates(outdir, tabs: dict) -> list:
    """The candidate changes (module docstring) of an aggregate being written in ``outdir`` (its
    critical-path tables already there); ``tabs``: the what-if tables by step (the number of ranks)."""
    ranks = _rows(outdir, CRITICAL_PATH_RANKS)
    summ = _rows(outdir, CRITICAL_PATH_SUMMARY)
    if not ranks:
        return []
    nranks = len({r["rank"] for r in ranks})
    path = {}
    for r in ranks:
        path[r["rank"]] = path.get(r["rank"], 0) + r["path_ns"]
    lead = {}
    for r in ranks:
        lead[r["rank"]] = lead.get(r["rank"], 0) + r["lead_ns"]
    cats = {}
    for r in summ:
        if r["what"] == "category":
            cats[r["key"]] = max(cats.get(r["key"], 0.0), r["pct"])
    cpu_ops = [r["key"] for r in summ if r["what"] == "cpu_op"]
    focus = [max(path, key=path.get)]
    if max(lead.values()) > 0 and max(lead, key=lead.get) not in focus:
        focus.append(max(lead, key=lead.get))
    out = []
    for rank in focus:
        if nranks > 1:
            out.append(AtMedian((rank,), "compute"))
        if cats.get("host_gap", 0) >= MIN_SHARE:
            out.append(HostGaps((rank,)))
        if nranks > 1 and cats.get("comm_transfer", 0) >= MIN_SHARE:
            out.append(AtMedian((rank,), "comm"))
    loader = next((n for n in cpu_ops if LOADER.search(str(n))), None)
    if loader:
        out.append(Ops((focus[0],), re.escape(str(loader)), 0.0))
    if nranks <= MAX_RANKS_GLOBAL:
        if cats.get("launch_delay", 0) >= MIN_SHARE:
            out.append(Launches())
        if cats.get("compute_kernel", 0) >= MIN_SHARE:
            out.append(Kernels(None, "gemm", 0.5))
    if nranks > 1 and cats.get("comm_transfer", 0) >= MIN_SHARE:
        out.append(Comm(median=True))
    seen, uniq = set(), []
    for c in out:
        if c.text() not in seen:
            seen.add(c.text())
            uniq.append(c)
    return uniq[:MAX_CANDIDATES]
