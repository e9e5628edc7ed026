"""The report's first section, "What bounds each step": the critical path of each step
(``critical_path.parquet``, ``critical_path_summary.parquet``, ``critical_path_ranks.parquet``,
``streamtrace.aggregate.critical_path``) told in three sentences
(``streamtrace.report.critical_story``: the step's lengths reconciled, the cause, what bounds it
next and the slack), the table behind them, and the chart of the path across the ranks it visits
(``streamtrace.report.critical_chart``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..aggregate.folder import (CRITICAL_PATH, CRITICAL_PATH_RANKS, CRITICAL_PATH_SUMMARY, CRITICAL_PATH_TABLES,
                                IDLE_BREAKDOWN, ITERATIONS, KERNEL_STATS, NEXT_MIN_GAIN, OP_STATS, RANKS, WHATIF,
                                columns, read_aggregate_table, table_file)
from .critical_story import PEERS, cause_sentence, compare_kernels, compare_ops, lengths_sentence, next_sentence
from .critical_chart import critical_chart
from .section import ChartJob, ReportInput, SectionBase, md_table
from .units import fmt_time, short_names

SHOWN_STEPS = 4
PHRASE = {"cpu_op": "CPU ops", "launch_delay": "launch delays", "compute_kernel": "compute kernels",
          "comm_transfer": "communication transfers", "memcpy": "memory copies", "kernel_gap": "gaps between kernels",
          "sync": "GPU -> CPU synchronisation", "host_gap": "host gaps (CPU outside any profiled op)",
          "wait": "unexplained waits", "queued": "GPU work queued behind earlier GPU work (the CPU ran ahead)",
          "thread_wait": "hand-overs between threads"}
SOURCES = ", ".join(map(table_file, CRITICAL_PATH_TABLES))


def _rows(aggdir, name, where=None) -> list:
    cols = read_aggregate_table(aggdir, name, where=where)
    n = len(next(iter(cols.values()))) if cols else 0
    return [{c: (v[i].item() if hasattr(v[i], "item") else v[i]) for c, v in cols.items()} for i in range(n)]


def _step_ns(aggdir) -> dict:
    """``{(iteration, step): median step annotation ns}`` (``iterations.parquet``)."""
    it = read_aggregate_table(aggdir, ITERATIONS)
    if not it or "step_ns_median" not in it:
        return {}
    return {(int(a), int(b)): (None if c is None or (isinstance(c, float) and np.isnan(c)) else int(c))
            for a, b, c in zip(it["iteration"], it["step"], it["step_ns_median"])}


def _stages(aggdir) -> dict:
    """``{rank: pipeline stage}`` (``ranks.parquet``; empty without a topology)."""
    t = read_aggregate_table(aggdir, RANKS, columns=columns(RANKS, "rank", "stage"))
    if not t or "stage" not in t:
        return {}
    return {int(r): int(s) for r, s in zip(t["rank"], t["stage"]) if s is not None and s == s}


def _peer_ranks(ranks, top, stages) -> list:
    """The bounding rank and at most ``PEERS`` others of its pipeline stage (``stages``: ``{rank:
    stage}``, empty: any rank; the stages run different layers), spread over the job."""
    others = sorted(r["rank"] for r in ranks if r["rank"] != top and stages.get(r["rank"]) == stages.get(top))
    if len(others) > PEERS:
        others = [others[i] for i in np.linspace(0, len(others) - 1, PEERS).astype(int)]
    return [top] + others


def _gpu_wait(ib, it, step, rank) -> int | None:
    """The rank's GPU time waiting for launches in the step (``ib``: ``idle_breakdown`` columns of
    at least that rank; its device rows, stream -1, ``host_wait_ns``)."""
    if not ib or "host_wait_ns" not in ib:
        return None
    m = (ib["rank"] == rank) & (ib["iteration"] == it) & (ib["step"] == step) & (ib["stream"] == -1)
    return int(np.nansum(ib["host_wait_ns"][m])) if m.any() else None


def replayed_next(t, key, rank, total) -> list | None:
    """What bounds the step next as the what-if replay says it (``whatif.parquet``'s row of
    ``median:rank=R`` for the step, R the rank holding most of the path), in the shape of the
    ``next`` summary rows (the first-order estimate of ``streamtrace.aggregate.critical_ranks``,
    which it replaces); [] when the replay saves under ``NEXT_MIN_GAIN``
    of the path (nothing is said), None when the aggregate replayed no such change.  ``t``:
    ``whatif.parquet``'s columns of at least that change."""
    if not t or not len(t["step"]):
        return None
    m = (t["change"] == f"median:rank={rank}") & (t["iteration"] == key[0]) & (t["step"] == key[1])
    if not m.any():
        return None
    i = int(np.flatnonzero(m)[0])
    if t["saving_ns"][i] < NEXT_MIN_GAIN * total["path_ns"]:
        return []                   # the replay says it buys nothing: no first-order estimate instead
    new = int(total["path_ns"] - t["saving_ns"][i])
    return [{"key": f"rank {rank}'s compute at the median rank's speed (replayed)", "path_ns": new,
             "rank": int(t["bound_rank"][i]), "ns": int(t["bound_ns"][i]),
             "pct": 100.0 * int(t["bound_ns"][i]) / max(new, 1)}]


SEGMENT_COLUMNS = columns(CRITICAL_PATH, "iteration", "step", "rank", "lane", "weight_ns", "category", "name")
"""The columns of ``critical_path.parquet`` the section reads (kept as columns: 50,000 segments on 8 ranks)."""


def _top_part(segs, top) -> tuple[dict, list]:
    """Of one step's segments (columns, file order), those of rank ``top`` (its ``critical_path_ranks``
    row): ``({category: weight ns}`` in the order first seen``, [row dicts of its segments on threads
    other than the step's, waits between threads aside, one per lane and name with their weights
    summed, in the order first seen])`` (``critical_story.cause_sentence``'s)."""
    m = segs["rank"] == top["rank"]
    cats, w = segs["category"][m].astype(str), segs["weight_ns"][m].astype(np.int64)
    names, first, inv = np.unique(cats, return_index=True, return_inverse=True)
    sums = np.zeros(len(names), np.int64)
    np.add.at(sums, inv, w)
    by_cat = {str(names[i]): int(sums[i]) for i in np.argsort(first, kind="stable")}
    main, lanes, seg_names = f"thread {top['thread']}", segs["lane"][m].astype(str), segs["name"][m]
    other = np.flatnonzero(np.char.startswith(lanes, "thread ") & (lanes != main) & (cats != "thread_wait"))
    if not len(other):
        return by_cat, []
    codes = [pa.array(["" if v is None else str(v) for v in x.tolist()], pa.string()).dictionary_encode()
             for x in (lanes[other], seg_names[other])]                # (hashed: no fixed-width text arrays)
    _, at, group = np.unique(codes[0].indices.to_numpy().astype(np.int64) * len(codes[1].dictionary)
                             + codes[1].indices.to_numpy(), return_index=True, return_inverse=True)
    sums = np.zeros(len(at), np.int64)
    np.add.at(sums, group.reshape(-1), w[other])
    rows = [{"rank": top["rank"], "lane": str(lanes[other[i]]), "category": str(cats[other[i]]),
             "name": seg_names[other[i]], "weight_ns": int(sums[g])}
            for g, i in sorted(enumerate(at.tolist()), key=lambda x: x[1])]
    return by_cat, rows


def _step(tables, key, summ, segs, ranks, step_ns, short, stages=None) -> dict:
    """One step's section data and sentences; ``segs``: the step's path segments as columns
    (``SEGMENT_COLUMNS``); ``tables``: the other tables' rows of every step (``_StepTables``)."""
    by = lambda w: [r for r in summ if r["what"] == w]  # noqa: E731
    total = dict(by("total")[0])
    nseg = len(segs["rank"])
    total["origin_rank"] = int(segs["rank"][0]) if nseg else None
    cats = [(r["key"], r["ns"], r["pct"]) for r in by("category")]
    shares = [(r["rank"], r["ns"], r["pct"]) for r in by("rank")]
    kern, cpu, nxt = by("kernel"), by("cpu_op"), by("next")
    out = {"iteration": key[0], "step": key[1], "span_ns": total["span_ns"], "path_ns": total["path_ns"],
           "step_ns": step_ns, "categories": cats, "ranks": shares,
           "slack": [(r["rank"], r["slack_ns"], r["on_path"], r["wait_ns"]) for r in ranks],
           "kernel": (kern[0]["key"], kern[0]["ns"], kern[0]["pct"]) if kern else None,
           "cpu_op": (cpu[0]["key"], cpu[0]["ns"], cpu[0]["pct"]) if cpu else None,
           "next": {"change": nxt[0]["key"], "path_ns": nxt[0]["path_ns"],
                    "ranks": [(r["rank"], r["ns"], r["pct"]) for r in nxt]} if nxt else None}
    s1 = lengths_sentence(key[1], total, ranks, step_ns)
    if not ranks or not nseg:
        return out | {"sentences": [s1, "The path has no segments.", ""]}
    top = max(ranks, key=lambda r: r["path_ns"])
    replayed = replayed_next(tables.whatif, key, top["rank"], total)
    nxt = replayed if replayed is not None else nxt
    out["next"] = {"change": nxt[0]["key"], "path_ns": nxt[0]["path_ns"],
                   "ranks": [(r["rank"], r["ns"], r["pct"]) for r in nxt]} if nxt else None
    cats_top, threads = _top_part(segs, top)
    peers = _peer_ranks(ranks, top["rank"], stages)
    ops = tables.of(tables.ops, key[0], peers) if len(peers) > 1 else {}
    kern = tables.of(tables.kernels, key[0], peers) if len(peers) > 1 else {}
    stages = stages or {}
    others = [r for r in ranks if r["rank"] != top["rank"]]
    cmp = {"cpu": compare_ops(ops, top["rank"], key[1]) if ops else None,
           "gpu": compare_kernels(kern, top["rank"], key[1]) if kern else None}
    s2 = cause_sentence(top, threads, cats_top, cmp, _gpu_wait(tables.idle, key[0], key[1], top["rank"]),
                        (len(others), sum(r["wait_ns"] for r in others)), short,
                        [(r, p) for r, _, p in shares if r != top["rank"]])
    out["bound_by"] = {"rank": top["rank"], "categories": cats_top}
    return out | {"sentences": [s1, s2, next_sentence(total, nxt, ranks)]}


def critical_section(aggdir, short=lambda s: s) -> dict:
    """``{"steps": [{"iteration", "step", "span_ns", "path_ns", "step_ns", "sentences": [3 str],
    "categories": [(category, ns, pct)], "ranks": [(rank, ns, pct)], "kernel", "cpu_op", "slack":
    [(rank, slack ns, on_path, wait ns)], "next", "bound_by"}], "from": ...}``; ``steps`` empty when
    aggregate wrote no critical path.  ``short`` shortens names for the sentences."""
    summ = _rows(aggdir, CRITICAL_PATH_SUMMARY)
    segs = read_aggregate_table(aggdir, CRITICAL_PATH, SEGMENT_COLUMNS) or {c: np.zeros(0) for c in SEGMENT_COLUMNS}
    ranks = _rows(aggdir, CRITICAL_PATH_RANKS)
    lengths = _step_ns(aggdir)
    stages = _stages(aggdir) if ranks else {}
    keys = sorted({(r["iteration"], r["step"]) for r in summ})
    pick = lambda rows, key: [r for r in rows if (r["iteration"], r["step"]) == key]  # noqa: E731
    tables = _StepTables.read(aggdir, [pick(ranks, key) for key in keys], stages)
    steps = []
    for key in keys:
        m = (segs["iteration"] == key[0]) & (segs["step"] == key[1])
        steps.append(_step(tables, key, pick(summ, key), {c: v[m] for c, v in segs.items()}, pick(ranks, key),
                           lengths.get(key), short, stages))
    return {"steps": steps, "from": SOURCES}


class _StepTables:
    """The rows of ``whatif``, ``idle_breakdown``, ``op_stats`` and ``kernel_stats`` that the steps'
    sentences read, each table read once for every step (the bounding ranks, their peers, the
    steps' iterations), not once per step."""

    def __init__(self, whatif, idle, ops, kernels):
        self.whatif, self.idle, self.ops, self.kernels = whatif, idle, ops, kernels

    @classmethod
    def read(cls, aggdir, step_ranks: list, stages: dict) -> _StepTables:
        """``step_ranks``: each step's ``critical_path_ranks`` rows."""
        tops, peers, iters = set(), set(), set()
        for rk in (rk for rk in step_ranks if rk):
            top = max(rk, key=lambda r: r["path_ns"])["rank"]
            tops.add(top)
            p = _peer_ranks(rk, top, stages)
            if len(p) > 1:
                peers.update(p)
                iters.add(rk[0]["iteration"])
        if not tops:
            return cls({}, {}, {}, {})
        tops = sorted(tops)
        wi = read_aggregate_table(aggdir, WHATIF, where={"change": [f"median:rank={r}" for r in tops]})
        ib = read_aggregate_table(aggdir, IDLE_BREAKDOWN, where={"rank": tops})
        where = {"rank": sorted(peers), "iteration": sorted(iters)}
        ops = read_aggregate_table(aggdir, OP_STATS, columns(OP_STATS, "iteration", "step", "rank", "name", "cat",
                                                             "self_ns"), where=where) if peers else {}
        kern = read_aggregate_table(aggdir, KERNEL_STATS, columns(KERNEL_STATS, "iteration", "step", "rank", "kind",
                                                                  "total_ns"), where=where) if peers else {}
        return cls(wi, ib, ops, kern)

    @staticmethod
    def of(t: dict, iteration, ranks) -> dict:
        """``t``'s rows of ``iteration`` and ``ranks``."""
        if not t:
            return {}
        m = (t["iteration"] == iteration) & np.isin(t["rank"], ranks)
        return {c: v[m] for c, v in t.items()}


def _step_label(step) -> str:
    return "whole capture" if step < 0 else str(step)


def critical_markdown(sec: dict | None, table, short, png=None) -> list:
    """The section's Markdown lines (``table(head, rows)`` and ``short(names)`` as the report
    formats; times in the unit that fits, ``streamtrace.report.units.fmt_time``); ``png``: the
    chart's path relative to the report, or None."""
    L = ["## What bounds each step", ""]
    steps = (sec or {}).get("steps") or []
    if not steps:
        return L + [f"*No critical path: aggregate wrote no {table_file(CRITICAL_PATH)} (`--no-critical-path`, or no "
                    "rank had CPU ops to build it from).*", ""]
    for s in steps[:SHOWN_STEPS]:
        L += [" ".join(x for x in s["sentences"] if x), ""]
    if len(steps) > SHOWN_STEPS:
        L += [f"({len(steps) - SHOWN_STEPS} more steps in {table_file(CRITICAL_PATH_SUMMARY)}.)", ""]
    rows = []
    for s in steps:
        cats = ", ".join(f"{c} {p:.0f} %" for c, _, p in s["categories"][:3])
        rk = ", ".join(f"{r} ({p:.0f} %)" for r, _, p in s["ranks"][:4])
        k = f"{short([s['kernel'][0]])[0]} ({s['kernel'][2]:.0f} %)" if s["kernel"] else "-"
        c = f"{s['cpu_op'][0]} ({s['cpu_op'][2]:.0f} %)" if s["cpu_op"] else "-"
        off = [x for x in s["slack"] if not x[2]]
        most = max(off, key=lambda x: x[1]) if off else None
        nxt = s.get("next")
        rows.append([_step_label(s["step"]), fmt_time(s["path_ns"]), fmt_time(s["span_ns"]),
                     fmt_time(s["step_ns"]) if s.get("step_ns") else "-", cats, rk, k.replace("|", "\\|"),
                     c.replace("|", "\\|"),
                     f"{fmt_time(nxt['path_ns'])}, rank {nxt['ranks'][0][0]}" if nxt else "-",
                     f"rank {most[0]}: {fmt_time(most[1])}" if most else "-"])
    L += [table(["step", "critical path", "span", "step annotation", "path by category", "ranks on the path (share)",
                 "top kernel on the path", "top CPU op on the path", "next bound", "most slack (off the path)"],
                rows), ""]
    if png:
        L += [f"![critical path]({png})", ""]
    return L


CHART = "critical_path"
"""The file stem of the section's chart."""


class CriticalPathSection(SectionBase):
    """``critical_path``: ``critical_section`` (names shortened to 80 characters), its chart
    (``critical_chart``) shown in the section."""
    key, shown_charts, chart_rank = "critical_path", (CHART,), 1

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: critical_section(inp.aggdir, lambda x: short_names([x], 80)[0])}

    def markdown(self, rep: dict, charts: list) -> list:
        return critical_markdown(rep.get(self.key), md_table, short_names, self.chart(charts, CHART))

    def charts(self, job: ChartJob, rep: dict) -> list:
        return [(critical_chart, (job.aggdir, job.folder / CHART, job.formats))]
