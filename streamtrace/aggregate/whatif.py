"""What a fix buys: the step replayed with one thing changed (``streamtrace whatif AGG --change ...``,
``streamtrace.load(AGG).whatif(...)``, ``whatif.parquet`` and the report's "What a fix buys").

**The model** (docs/whatif.md).  The critical path's graph of each rank's step
(``streamtrace.aggregate.critical_local``) with every edge's *cost* separated from the waits
(``streamtrace.aggregate.whatif_local``), reduced per rank to the longest paths between its anchors
that no collective dominates, joined across ranks through the matched collectives (a barrier at the
last arrival; ``streamtrace.aggregate.whatif_job``) and solved forward from every rank's measured
step start: the critical-path method (Kelley & Walker, 1959) used as a replay, as Lumos (Liang et al.,
MLSys 2025) replays a Kineto-derived execution graph.  A change (``streamtrace.aggregate.whatif_changes``)
re-weighs costs; the ranks whose own costs it changes are reduced again from their analysed tables
(only those), the job level is the small graph.

**What a prediction says.**  The step's *span* (last rank's end - first rank's start, the critical
path's length) and the median rank's step, measured and predicted; the saving is the replay's own
difference (the unmodified replay against the changed one), so an error of the model in the
unmodified step is never counted as a saving; a change whose saving is smaller than that error is
flagged (``flag``), as is every change of a step the unmodified replay does not reproduce within
``FIDELITY_PCT``.

``whatif.parquet`` (per change and step): ``iteration``, ``step``, ``change`` (the command-line
spelling), ``description``, ``source`` (``candidate``: the report's, ``asked``), ``ranks_touched``,
``measured_span_ns``, ``replay_span_ns`` (the unmodified replay), ``predicted_span_ns`` (measured -
saving), ``saving_ns``, ``saving_pct`` (of the measured span), ``measured_step_ns``,
``predicted_step_ns`` (median rank), ``bound_rank`` (the rank holding most of the new path),
``bound_ns``, ``bound_what`` (``CPU``, ``GPU``, ``collectives``: what of it is on the path),
``top_rank``, ``top_category``, ``top_name``, ``top_ns`` (the new path's heaviest segment),
``fidelity_pct`` (the unmodified replay's worst rank error in the step), ``flag``.
"""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from ..events.dataset import iter_arrow, parquet_file, read_table, write_table
from ..runtime.errors import DataError, UsageError
from ..runtime.parallel import run_tasks
from ..runtime.tuning import trim
from .alignment import Job, JobParts, Part
from .critical_members import PartMembers
from .folder import (COLLECTIVES, COLLECTIVES_RANKS, WHATIF, WHATIF_ANCHORS, WHATIF_ANCHORS_COLUMNS as ANCHOR_COLUMNS,
                     WHATIF_COLUMNS, WHATIF_EDGES, WHATIF_EDGES_COLUMNS as EDGE_COLUMNS, WHATIF_RANKS,
                     KERNEL_STATS, OP_STATS, Aggregate, columns, table_path)
from .steps import step_patterns_of
from .whatif_changes import AtMedian, Comm, HostGaps, Kernels, Launches, Ops, as_changes
from .whatif_job import LOCAL_COLUMNS, JobStep, StepTables, sparse_factors
from .whatif_members import InstanceFacts, Members
from .whatif_graphs import kept_graphs
from .whatif_local import RANK_COLUMNS, part_replay, part_replays
from .whatif_spill import ParquetLazy, SpilledRows

FIDELITY_PCT = 5.0
"""A step whose unmodified replay misses a rank's measured end by more than this share of its step is flagged."""
COLUMNS = WHATIF_COLUMNS
TABLES = (WHATIF_ANCHORS, WHATIF_EDGES, WHATIF_RANKS)


PartsJob = JobParts
"""What a rank's re-reduction needs of the job: ``PartsJob(steps)`` (``alignment.JobParts``, its former name)."""


def step_tables(rows: dict) -> dict:
    """``{(iteration, step): StepTables}`` from the ``whatif_*`` columns of every part."""
    a, e, r = rows["anchors"], rows["edges"], rows["ranks"]
    out = {}
    keys = sorted(set(zip(r["iteration"].tolist(), r["step"].tolist())))
    if len(keys) == 1:                                # one step: its tables as they are, no copy
        return {keys[0]: StepTables(a, e, r)}
    e = e() if callable(e) else e                     # (read now: each step's rows picked from them)
    for it, st in keys:
        pick = lambda c: {k: v[(c["iteration"] == it) & (c["step"] == st)] for k, v in c.items()}  # noqa: E731
        out[(it, st)] = StepTables(pick(a), pick(e), pick(r))
    return out


def join_rows(results: list, consume: bool = False) -> dict:
    """The parts' ``result`` dicts joined (the tables and columns the first one holds: all of
    ``ReplayRows.result``'s, or ``_reduce_many_task``'s edges); with
    ``consume`` each part's column is dropped once joined (the parts' rows and the joined ones are
    never held whole at once)."""
    results = [x for x in results if x]
    out = {}
    for name, cols in (("anchors", ANCHOR_COLUMNS), ("edges", EDGE_COLUMNS), ("ranks", RANK_COLUMNS)):
        if results and name not in results[0]:
            continue
        got = [x[name] for x in results if len(x[name]["part"])]
        if not got:
            out[name] = {c: np.zeros(0, object if c.startswith("top_") and c != "top_ns" else np.int64) for c in cols}
            continue
        out[name] = {}
        for c in (c for c in cols if c in got[0]):
            out[name][c] = np.concatenate([g[c] for g in got])
            if consume:
                for g in got:
                    g[c] = None
    return out


def read_members(outdir, meta: dict, batch_rows: int = 1 << 15) -> Members:
    """The matched collectives of an aggregate folder (``collectives_ranks``: the members of instances
    of two or more, by part, ``critical_members.PartMembers``; ``collectives``: their facts, read
    ``batch_rows`` instances at a time, the rank lists' text never held for the whole table: 90 MB of
    the replay's peak at 4,096 synthetic ranks) with their link peaks
    (``streamtrace.topology.hardware.gpu_spec`` of the job's device)."""
    if not table_path(outdir, COLLECTIVES_RANKS).is_file():
        return Members.empty()
    key = PartMembers.read(outdir)
    q = table_path(outdir, COLLECTIVES)
    if not q.is_file():
        return Members(key, InstanceFacts([]))
    gpu, nic = _peaks(meta)
    facts = InstanceFacts.read(q, gpu, nic, batch_rows)
    trim()                     # (the batches' Arrow buffers and codes, freed)
    return Members(key, facts)


LINK_KEYS = ("devices", "sources")
"""What ``read_members`` reads of an aggregate's ``meta`` (its links' peaks: ``_peaks``)."""


def _peaks(meta) -> tuple:
    """(NVLink, network) peak per direction of the job's GPU (GB/s, NaN unknown): the report's links
    (``meta``: a dict with ``LINK_KEYS``, e.g. ``aggregate.json``'s)."""
    from ..topology.hardware import gpu_spec
    spec = next((gpu_spec(d) for d in meta.get("devices") or [] if gpu_spec(d)), None)
    if spec is None or meta.get("sources") == ["cpu"]:
        return math.nan, math.nan
    return float(spec.link_gbps or math.nan), float(spec.nic_gbps or math.nan)


def medians(aggdir, tabs: StepTables, it: int, st: int, rank: int) -> dict:
    """The at-median factors of ``rank`` in one step: per CPU op name (``op_stats.self_ns``) and
    kernel name (``kernel_stats.total_ns``), min(1, median over its peers / its own), the peers being
    the other ranks that ran it as many times (the same work; all that ran it when none did; 0 when
    no other rank ran it: the median rank does not); and its host gaps' (``whatif_ranks.host_gap_ns``,
    over every other rank)."""
    out = {}
    for kind, table, col in (("cpu", OP_STATS, "self_ns"), ("gpu", KERNEL_STATS, "total_ns")):
        p = table_path(aggdir, table)
        if p.is_file():
            out.update({(kind, n): f for n, f in _name_factors(p, table, col, it, st, rank).items()})
    r = tabs.ranks
    hg = dict(zip(r["rank"].tolist(), r["host_gap_ns"].tolist()))
    if rank in hg and hg[rank] > 0 and len(hg) > 1:
        out[("host", None)] = min(1.0, float(np.median([v for k, v in hg.items() if k != rank])) / hg[rank])
    return out


STEP_BATCH_ROWS = 1 << 14
"""Rows of a statistics table ``_step_rows`` reads at once."""


def _step_rows(path, table, col, it, st) -> tuple:
    """The rows of statistics table ``table`` (at ``path``) of step ``(it, st)``: ``(name code int32,
    names in code order, rank int64, count int64, value float64 of column col)``, read ``STEP_BATCH_ROWS``
    at a time into arrays of the file's rows, each batch's names coded as it comes (Parquet's dictionaries,
    in the order pyarrow would join them), not the step's rows held as one table, nor as batches joined
    after (a 4,096-rank job's op statistics, 240 k rows: +40 MB over the replay's level, its peak, where a
    table and its codes were read).  Names read as strings were +84-106 MB that the allocator kept."""
    of: dict = {}
    want = columns(table, "rank", "name", "count", col)
    f = parquet_file(path, want + columns(table, "iteration", "step"))      # (its footer read once)
    n = f.metadata.num_rows             # (at most: the arrays' pages past the step's rows are never touched)
    code, rk, cnt, val = np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n)
    k = 0
    for b in iter_arrow(path, want, ["name"], STEP_BATCH_ROWS, {"iteration": [it], "step": [st]}, f):
        name, j = b.column("name"), slice(k, k + b.num_rows)
        look = np.asarray([of.setdefault(x, len(of)) for x in name.dictionary.to_pylist()], np.int32)
        code[j] = look[name.indices.to_numpy(zero_copy_only=False)]
        for out, c in ((rk, "rank"), (cnt, "count"), (val, col)):
            out[j] = b.column(c).to_numpy(zero_copy_only=False)
        k += b.num_rows
        del b, name
    code, rk, cnt, val = code[:k], rk[:k], cnt[:k], val[:k]
    return code, list(of), rk, cnt, val


def _name_factors(path, table, col, it, st, rank) -> dict:
    """``{name: factor}`` of ``medians`` from one statistics table (pyarrow, then numpy by name
    code: a 1,024-rank job's table is never turned into Python rows); ``col``: table ``table``'s
    value column."""
    code, names, rk, cnt, val = _step_rows(path, table, col, it, st)
    mine = rk == rank
    own_v = np.full(len(names), np.nan)
    own_c = np.full(len(names), -1, np.int64)
    own_v[code[mine]], own_c[code[mine]] = val[mine], cnt[mine]
    peer = ~mine & (own_c[code] >= 0)
    out = {}
    for same in (True, False):                        # the peers that ran it as often, else all that ran it
        m = peer & ((cnt == own_c[code]) if same else True)
        c, v = code[m], val[m]
        o = np.lexsort((v, c))
        c, v = c[o], v[o]
        if not len(c):
            continue
        a = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])   # each name's run of sorted values [a, b)
        b = np.r_[a[1:], len(c)]
        med = (v[a + (b - a - 1) // 2] + v[a + (b - a) // 2]) / 2     # np.median of the run, to the bit
        n = c[a]
        new = own_v[n] > 0
        for k, f in zip(n[new].tolist(), np.minimum(1.0, med[new] / own_v[n[new]]).tolist()):
            out.setdefault(names[k], f)
    others = len(np.unique(rk[~mine]))
    for n in np.flatnonzero(own_c >= 0).tolist():     # no other rank runs it: the median rank does not
        if names[n] not in out and others and own_v[n] > 0:
            out[names[n]] = 0.0
    return out


def _transfer_factors(g, changes) -> tuple | None:
    """The product of ``changes``' transfer factors per matched member of ``g``'s step (``g.members()``),
    as ``whatif_job.sparse_factors``' ``(index, factor)`` of the members whose factor is not 1 (None:
    no change has one).  Each change's factors are let go once multiplied in, and the product once made
    sparse, so that none is held under the replay's solve (three member-long temporaries were 16 MB of
    the what-if's peak at 4,096 synthetic ranks, the product another 5.2)."""
    view = g.members()
    f = None
    for c in changes:
        x = c.transfer_factor(view)
        if x is not None:
            f = np.array(x, float) if f is None else np.multiply(f, x, out=f)
        del x
    return None if f is None else sparse_factors(f)


class Replayer:
    """Replays changes over one aggregate's steps: ``tabs`` ``{(iteration, step): StepTables}``,
    ``members`` the matched collectives, ``parts`` ``{part index: Part}`` (to re-reduce a touched
    rank), ``aggdir`` (the at-median figures), ``jobs`` processes for many touched ranks, ``steps``
    the job's selected steps, ``spilled`` ``{part index: path}`` the step graphs the rank pass spilled
    (``whatif_graphs.GraphSpill``: read instead of built again), ``folder`` where the steps' graphs keep
    their edges (``JobStep``; None: the system's temporary folder).  ``tabs``' anchors and edges are let go
    once each step's graph is built (its entries replaced by ones holding only ``ranks``: the graphs hold
    what they need)."""

    def __init__(self, tabs: dict, members: Members, parts: dict, aggdir, jobs=1, steps=None, spilled=None,
                 folder=None):
        self.members, self.parts, self.aggdir = members.facts(), parts, aggdir     # (the keys: the graphs')
        self.spilled = spilled or {}
        self.jobs, self.steps = jobs, steps
        self.graphs = {}
        trim()                                          # (what reading the tables left in glibc's heap)
        keys = list(tabs)
        for i, k in enumerate(keys):                    # (the last one lets the members' keys go, joined)
            self.graphs[k] = JobStep(tabs[k], members, release_keys=i == len(keys) - 1, folder=folder)
            tabs[k] = StepTables({}, {}, tabs[k].ranks)
        del members
        self.tabs = tabs
        self.base = {k: g.solve() for k, g in self.graphs.items()}

    def fidelity(self, key) -> float:
        """The unmodified replay's worst error over the step's ranks, % of the rank's measured step."""
        r, base = self.tabs[key].ranks, self.base[key]
        worst = 0.0
        for p, s, e in zip(r["part"].tolist(), r["start_ns"].tolist(), r["end_ns"].tolist()):
            got = base.end.get(p)
            if got is not None and e > s:
                worst = max(worst, 100.0 * abs(got - e) / (e - s))
        return worst

    def replay(self, changes, source="asked", touched_rows=None) -> list:
        """Rows of ``whatif.parquet`` (module docstring) for ``changes`` (applied together), one per
        step; ``touched_rows``: the touched parts' re-reduced rows when already at hand."""
        changes = as_changes(changes)
        touched = [p for p, part in self.parts.items() if any(c.touches(part.rank) for c in changes)]
        if touched_rows is None and touched:
            touched_rows = self._reduce(touched, changes)
        out = []
        comm = any(not c.local or isinstance(c, AtMedian) for c in changes)
        for key, g in self.graphs.items():
            if touched:
                g = g.with_parts(touched, _only(touched_rows["edges"], key))
            r = g.solve(_transfer_factors(g, changes) if comm else None)     # (the factors not held under the pass)
            out.append(self._row(key, changes, source, len(touched), r))
        return out

    def replay_many(self, change_sets, source="asked") -> list:
        """``replay`` of each of ``change_sets`` (each a list of changes applied together), rows in
        their order.  Those without an at-median change are re-reduced together: one task per part
        they touch, building each of its step graphs once for all of them (the report's candidates:
        launches with no delay and faster GEMMs both touch every rank).  The parts' re-reduced edges
        are joined for one change set at a time, as it is replayed, and let go after it (a job-wide
        change's are every rank's edges)."""
        sets = [as_changes(c) for c in change_sets]
        if any(not c.local or isinstance(c, AtMedian) for s in sets for c in s):
            for g in self.graphs.values():            # each step's members as a change of transfers sees them,
                g.members()                           # built before any rank's re-reduction is held (its
            trim()                                    # temporaries were the replay's peak at 4,096 ranks)
        batch = [k for k, s in enumerate(sets) if not any(isinstance(c, AtMedian) for c in s)]
        touched = {k: [p for p, part in self.parts.items() if any(c.touches(part.rank) for c in sets[k])]
                   for k in batch}
        parts = [p for p in self.parts if any(p in touched[k] for k in batch)]
        tasks = [(PartsJob(self.steps), self.parts[p], [sets[k] for k in batch if p in touched[k]], self.spilled.get(p))
                 for p in parts]
        got = run_tasks(_reduce_many_task, tasks, max(1, min(self.jobs, len(tasks)))) if tasks else []
        res = {p: dict(zip([k for k in batch if p in touched[k]], r)) for p, r in zip(parts, got)}  # part -> set -> rows
        del got
        out = []
        for k, s in enumerate(sets):
            rows = None
            if k in touched and touched[k]:
                rows = join_rows([res[p].pop(k) for p in touched[k]], consume=True)
            out += self.replay(s, source, rows)
            del rows
            trim()                                    # (each replay's graph and rows, freed)
        return out

    def _reduce(self, touched, changes) -> dict:
        """The touched parts re-reduced with ``changes`` (worker processes for several)."""
        tasks = []
        for p in touched:
            part = self.parts[p]
            meds = {}
            if any(isinstance(c, AtMedian) and c.touches(part.rank) for c in changes):
                meds = {k: medians(self.aggdir, t, k[0], k[1], part.rank) for k, t in self.tabs.items()
                        if k[0] == Job.iteration_of(part)}           # the part's own iteration's steps
            tasks.append((PartsJob(self.steps), part, changes, meds, self.spilled.get(p)))
        trim()                                  # (the statistics tables ``medians`` read: ~60 MB at 4,096 ranks)
        res = run_tasks(_reduce_task, tasks, max(1, min(self.jobs, len(tasks))))
        return join_rows(res)

    def _row(self, key, changes, source, ntouched, r) -> dict:
        tabs, base = self.tabs[key], self.base[key]
        rk = tabs.ranks
        measured = int(rk["end_ns"].max() - rk["start_ns"].min()) if len(rk["part"]) else 0
        mstep = int(np.median(rk["end_ns"] - rk["start_ns"])) if len(rk["part"]) else 0
        saving = base.span_ns - r.span_ns
        fid = self.fidelity(key)
        bound = max(r.by_part.items(), key=lambda kv: kv[1]) if r.by_part else (-1, 0)
        p = bound[0]
        kinds = {"CPU": r.host_ns.get(p, 0), "GPU": r.gpu_ns.get(p, 0), "collectives": r.comm_ns.get(p, 0)}
        flag = ""
        if fid > FIDELITY_PCT:
            flag = f"the unmodified replay misses a rank's end by {fid:.1f} % of its step"
        elif abs(saving) < fid / 100.0 * max(mstep, 1):
            flag = "within the replay's error"
        rank_of = dict(zip(rk["part"].tolist(), rk["rank"].tolist()))
        return {"iteration": key[0], "step": key[1], "change": "; ".join(c.text() for c in changes),
                "description": "; ".join(c.describe() for c in changes), "source": source, "ranks_touched": ntouched,
                "measured_span_ns": measured, "replay_span_ns": base.span_ns, "predicted_span_ns": measured - saving,
                "saving_ns": saving, "saving_pct": round(100.0 * saving / measured, 3) if measured else 0.0,
                "measured_step_ns": mstep, "predicted_step_ns": mstep - (base.step_ns - r.step_ns),
                "bound_rank": rank_of.get(p, -1), "bound_ns": int(bound[1]),
                "bound_what": max(kinds, key=kinds.get) if bound[1] else "",
                "top_rank": rank_of.get(r.top[0], -1), "top_category": r.top[1], "top_name": r.top[2],
                "top_ns": int(r.top[3]), "fidelity_pct": round(fid, 4), "flag": flag}


REPLAY_EDGES = ("iteration", "step") + LOCAL_COLUMNS
"""The ``whatif_edges`` columns of a touched part's re-reduction that a replay reads (``JobStep.with_parts``)."""


def _only(cols: dict, key) -> dict:
    """The columns ``cols`` (one ``whatif_*`` table's, with ``iteration`` and ``step``) of step ``key``'s rows."""
    it, st = key
    at = (cols["iteration"] == it) & (cols["step"] == st)
    if at.all():                                      # (one step: its columns as they are, no copy)
        return cols
    return {c: v[at] for c, v in cols.items()}


def _reduce_many_task(job, part, change_sets, spilled=None) -> list:
    """One touched part re-reduced with each of ``change_sets`` (a worker's task; ``part_replays``;
    ``spilled``: its spilled step graphs): per set, the ``edges`` columns a replay reads (``REPLAY_EDGES``)."""
    return [{"edges": {c: r["edges"][c] for c in REPLAY_EDGES}}
            for r in part_replays(job, part, change_sets, spilled=spilled)]


def _reduce_task(job, part, changes, meds, spilled=None) -> dict:
    """One touched part re-reduced (a worker's task): every step of ``job``, or with at-median
    factors ``meds`` (``{(iteration, step): factors}``) each step with its own."""
    if not meds:
        return part_replay(job, part, changes, spilled=spilled)
    return join_rows([part_replay(PartsJob({key[1]}), part, changes, m, spilled) for key, m in meds.items()])


# -- the aggregate's side ------------------------------------------------------------------------

GRAPH_ANCHORS = tuple(columns(WHATIF_ANCHORS, "part", "anchor", "kind", "t_ns", "correlation", "stream"))
"""The ``whatif_anchors`` columns the job's graph reads (``JobStep``), with ``iteration`` and ``step``
when the tables hold several steps."""
SMALL_ANCHORS = ("part", "anchor", "kind")
"""The anchors' columns the job's graph holds as int32 (part indices, a part's anchor ids, ``Anchor``
kinds: known to fit; 15 MB less at 4,096 synthetic ranks' 1.3 M anchors)."""


def _step_key(ranks: dict) -> tuple:
    """``("iteration", "step")`` when the ``whatif_ranks`` columns ``ranks`` hold several steps (the
    graph's rows are then told apart by them), else ``()``."""
    return ("iteration", "step") if len(set(zip(ranks["iteration"].tolist(), ranks["step"].tolist()))) > 1 else ()


def graph_rows(spilled: SpilledRows, ranks: dict) -> dict:
    """The rows ``step_tables`` needs from the parts' spilled rows: the anchors' and edges' columns
    the job graph reads (``GRAPH_ANCHORS``, ``LOCAL_COLUMNS``: ``part``, ``src``, ``dst``, ``w_ns`` loaded,
    the others read from the files for the few edges on a path, ``SpilledRows.lazy``), ``ranks`` the
    ``whatif_ranks`` columns.  The edges as a function that loads them (``StepTables``: called once the
    graph's collectives are built, their temporaries not beside the edges), for one step as ``batches`` of
    a few parts' rows (``SpilledRows.batches``: ``JobStep`` writes them to disk as read; 4,096 synthetic
    ranks' 3.7 M edges loaded whole were 74 MB)."""
    by = _step_key(ranks)

    def edges() -> dict:
        if by:                                        # (several steps: each step's rows picked from them)
            out = spilled.load("edges", by + LOCAL_COLUMNS[:4], small=("part", "src", "dst"))   # (< 2^31)
        else:                                         # (one: read a batch of parts at a time, to disk)
            out = {"batches": spilled.batches("edges", LOCAL_COLUMNS[:4], small=("part", "src", "dst"))}
        out.update({c: spilled.lazy("edges", c) for c in LOCAL_COLUMNS[4:]})    # (read for the path's edges only)
        return out
    return {"anchors": spilled.load("anchors", by + GRAPH_ANCHORS, small=SMALL_ANCHORS), "edges": edges,
            "ranks": ranks}


def graph_tables(aggdir) -> dict:
    """The rows ``step_tables`` needs from an aggregate folder's ``whatif_*`` tables, as ``graph_rows``
    takes them from the spilled rows: the anchors' and edges' columns the job graph reads loaded (the
    edges' ``part``, ``src``, ``dst`` as int32), the other edge columns read from the file for the few
    edges on a path (``ParquetLazy``), ``ranks`` whole.  Raises ``DataError`` when a table is missing
    (an aggregate written before the what-if replay) or unreadable."""
    paths = {}
    for name in TABLES:
        paths[name] = table_path(aggdir, name)
        if not paths[name].is_file():
            raise DataError(paths[name], "missing: run streamtrace aggregate again (a version with the what-if replay)")
    ranks = dict(read_table(paths[WHATIF_RANKS]))
    by = _step_key(ranks)
    edges = dict(read_table(paths[WHATIF_EDGES], list(by + LOCAL_COLUMNS[:4])))
    for c in ("part", "src", "dst"):                                  # (parts, anchors < 2^31)
        edges[c] = edges[c].astype(np.int32)
    edges.update({c: ParquetLazy(paths[WHATIF_EDGES], c) for c in LOCAL_COLUMNS[4:]})
    anchors = dict(read_table(paths[WHATIF_ANCHORS], list(by + GRAPH_ANCHORS)))
    for c in SMALL_ANCHORS:
        anchors[c] = anchors[c].astype(np.int32)
    return {"anchors": anchors, "edges": edges, "ranks": ranks}


def parts_of(meta: dict) -> dict:
    """``{part index: Part}`` of an aggregate's ``aggregate.json`` (``parts``: folder, rank,
    iteration, alignment shift and clock offset; step patterns from the analysed folder)."""
    from ..analyze.outputs import Analysis
    from ..analyze.rank_entries import read_rank_entries
    patterns: dict = {}                       # per folder: {(rank, iteration): step patterns}, its entries read one
    out = {}                                  # at a time (not every rank's entry held)
    for p in meta.get("parts") or []:
        d = Path(p["dir"])
        if d not in patterns:
            patterns[d] = {(r["rank"], r.get("iteration")): step_patterns_of(d, r) for r in read_rank_entries(d, {})} \
                if (d / Analysis.marker).is_file() else {}
        out[int(p["index"])] = Part(int(p["index"]), d, int(p["rank"]), p.get("iteration"), str(p.get("source", "")),
                                    shift_ns=int(p.get("shift_ns", 0)), clock_offset_ns=int(p.get("clock_offset_ns", 0)),
                                    step_patterns=patterns[d].get((p["rank"], p.get("iteration"))))
    return out


def replay_steps(aggdir, changes, jobs: int = 0) -> "object":
    """Replay the steps of the aggregate folder ``aggdir`` with ``changes`` (records of
    ``streamtrace.aggregate.whatif_changes`` or their ``KIND:key=value,...`` text, applied together).

    Returns a pyarrow Table of ``COLUMNS`` (one row per step; ns int64).  Raises
    ``UsageError`` for a bad change, and
    ``DataError`` when the aggregate has no replay tables or a
    touched rank's analysed folder is gone."""
    import pyarrow as pa
    changes = as_changes(changes)
    if not changes:
        raise UsageError("give at least one change (--change KIND[:key=value,...])")
    agg = Aggregate.read(aggdir)
    meta = agg.summary
    parts = parts_of(meta)
    ranks = {p.rank for p in parts.values()}
    for c in changes:
        bad = sorted(set(c.ranks or ()) - ranks)
        if bad:
            raise UsageError(f"--change {c.text()!r}: no rank {bad[0]} in {aggdir} (ranks {min(ranks)}-{max(ranks)})")
    from ..analyze.outputs import Analysis
    for p in parts.values():
        if any(c.touches(p.rank) for c in changes) and not (p.dir / Analysis.marker).is_file():
            raise DataError(p.dir, f"rank {p.rank}'s analysed folder is gone: the change must rebuild its graph")
    steps = {int(s[1]) for s in meta.get("steps") or []} or None
    with tempfile.TemporaryDirectory(prefix=".whatif-edges.") as folder:    # (the graphs' edges; removed after)
        members = read_members(aggdir, meta)          # (first: its reads' transients not under the graph tables)
        rep = Replayer(step_tables(graph_tables(aggdir)), members, parts, aggdir, jobs or os.cpu_count() or 1, steps,
                       folder=folder)
        del members
        rows = rep.replay(changes)
        del rep
    return pa.table({c: [r[c] for r in rows] for c in COLUMNS})


def write_whatif(job, outdir, spilled: SpilledRows, meta: dict, jobs: int = 1) -> list:
    """In ``aggregate``: the ``whatif_*`` tables from the parts' spilled rows ``spilled`` (in part
    order; its folder removed here; ``meta``: the aggregate's, or only its ``LINK_KEYS``), the report's
    candidate changes (``streamtrace.aggregate.whatif_candidates.candidates``) replayed into
    ``whatif.parquet``.
    ``job``: the ``Job``, or its ``JobParts``.  Returns the files written."""
    from .whatif_candidates import candidates
    try:
        ranks = spilled.ranks()
        if not len(ranks["part"]):
            return []
        files = spilled.write(outdir, "anchors") + spilled.write(outdir, "edges")     # (before the graph is held)
        trim()
        members = read_members(outdir, meta)          # (its reads' transients under the process's level, not
        with tempfile.TemporaryDirectory(prefix=".whatif-edges.", dir=outdir) as folder:    # under the graph rows')
            rep = Replayer(step_tables(graph_rows(spilled, ranks)), members,
                           {p.index: p for p in job.parts}, outdir, jobs, job.steps, spilled.graphs(), folder)
            del members
            _replay_ends(ranks, rep)
            files += write_table(outdir, WHATIF_RANKS, ranks)
            with kept_graphs():                       # (a rank replayed again: its graphs not rebuilt)
                out = rep.replay_many([[change] for change in candidates(outdir, rep.tabs)], "candidate")
            del rep
    finally:
        spilled.close()
    text = ("change", "description", "source", "bound_what", "top_category", "top_name", "flag")
    cols = {c: np.asarray([r[c] for r in out], object if c in text else float if c.endswith("pct") else np.int64)
            if out else np.zeros(0, str if c in text else float if c.endswith("pct") else np.int64) for c in COLUMNS}
    return files + write_table(outdir, WHATIF, cols)        # (no change: typed empty columns, still readable)


def _replay_ends(r, rep: Replayer):
    """``whatif_ranks.replay_end_ns`` (added to the ranks' columns ``r``): each rank's step end in the
    unmodified replay (-1 unreached)."""
    r["replay_end_ns"] = np.asarray([rep.base[(it, st)].end.get(p, -1) for it, st, p in
                                     zip(r["iteration"].tolist(), r["step"].tolist(), r["part"].tolist())], np.int64)


__all__ = ["LINK_KEYS", "replay_steps", "write_whatif", "Replayer", "HostGaps", "Ops", "AtMedian", "Kernels", "Comm",
           "Launches", "FIDELITY_PCT"]
