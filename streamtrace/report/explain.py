"""The report's explaining sections, from aggregate's ``kernel_stats``, ``op_stats``,
``launch_stats`` and ``idle_breakdown`` tables (``streamtrace.aggregate.explain``; never the traces):
top kernels with their duration statistics, top CPU ops by self time, kernel launch delay and
overhead, and the GPU idle-time breakdown (HolisticTraceAnalysis'
``BreakdownAnalysis.get_idle_time_breakdown`` rule, ``streamtrace.aggregate.idle``) with its chart
``charts/idle_breakdown.png (SVG with the chart format option)``.

``build_explain`` gives the ``explain`` part of ``report.json`` (times int/float ns),
``explain_markdown`` its Markdown lines (ms / us), ``idle_chart`` the chart.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..aggregate.folder import IDLE_BREAKDOWN, KERNEL_STATS, LAUNCH_STATS, OP_STATS, table_file, table_path
from ..events.dataset import iter_arrow, read_arrow
from .charts import bars_h, margins, pyplot, save
from .escape import md_cell
from .section import ChartJob, ReportInput, SectionBase
from .units import fmt_count, fmt_time, short_names, time_axis

IDLE_COLORS = {"host_wait_ns": "#C44E52", "kernel_wait_ns": "#DD8452", "other_ns": "#8C8C8C"}
IDLE_LABELS = {"host_wait_ns": "host wait (launch late)", "kernel_wait_ns": "kernel wait (< threshold)",
               "other_ns": "other"}


def _table(d, name, columns, strings=()) -> pa.Table | None:
    """Table ``name`` of the aggregate folder ``d`` (None when aggregate wrote none): ``columns`` only
    (None: all, as written), the ``strings`` among them read as one dictionary per file (``read_arrow``'s
    ``read_dictionary``, then ``unify_dictionaries``, which ``group_by`` needs).  Read whole, as plain
    strings, the 331,776 rows of a 16,384-rank ``kernel_stats`` were 153 MB of Arrow (its kernel names);
    read so, 27 MB."""
    p = table_path(d, name)
    if not p.is_file():
        return None
    if columns is None:
        return read_arrow(p)
    return read_arrow(p, columns, read_dictionary=[c for c in strings if c in columns]).unify_dictionaries()


def _keys(g: pa.Table, names) -> pa.Table:
    """The grouped table ``g`` with its key columns ``names`` as plain strings (one row per group:
    small), so that sorting and ``to_pylist`` see the values, not dictionary codes."""
    for c in names:
        g = g.set_column(g.schema.get_field_index(c), c, g[c].cast(pa.string()))
    return g


def _rows(t: pa.Table, n=None) -> list:
    rows = t.to_pylist() if n is None else t.slice(0, n).to_pylist()
    return [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()} for r in rows]


def _cells(t: pa.Table) -> dict:
    """The rank-steps a stats table sums over: ``cells`` = distinct (iteration, step, rank) with
    a step (step >= 0), ``ranks`` and ``steps`` among them, and ``outside_ranks`` = the ranks
    with rows outside any ``ProfilerStep#`` (step -1: not a step of their own)."""
    g = t.select(["iteration", "step", "rank"]).group_by(["iteration", "step", "rank"]).aggregate([]).to_pylist()
    inside = [r for r in g if r["step"] is not None and r["step"] >= 0]
    return {"cells": len(inside), "ranks": len({r["rank"] for r in inside}),
            "steps": len({(r["iteration"], r["step"]) for r in inside}),
            "outside_ranks": len({r["rank"] for r in g if r["step"] is None or r["step"] < 0})}


def cells_text(c: dict) -> str:
    """``8 rank-steps (1 step x 8 ranks)``, plus what lies outside any step."""
    n = c["cells"]
    text = f"{n:,} rank-step{'s' if n != 1 else ''} ({c['steps']:,} step{'s' if c['steps'] != 1 else ''} x " \
           f"{c['ranks']:,} rank{'s' if c['ranks'] != 1 else ''})" if n else "no step"
    if c["outside_ranks"]:
        text += f", plus the time of {c['outside_ranks']:,} rank{'s' if c['outside_ranks'] != 1 else ''} " \
                "outside any ProfilerStep"
    return text


def build_explain(aggdir, top=15) -> dict:
    """The ``explain`` section of ``report.json`` for the aggregate folder ``aggdir``: ``kernels``,
    ``ops``, ``launches``, ``idle`` (each None when aggregate wrote no such table).  Kernel and op
    rows are summed over every (iteration, step, rank) cell; ``per_cell`` divides by the cells."""
    return {"kernels": _kernel_summary(aggdir, top), "ops": _op_summary(aggdir, top),      # (one table at a time)
            "launches": _launch_summary(aggdir, top), "idle": _idle_summary(aggdir, top)}


def _kernel_summary(aggdir, top) -> dict | None:
    """``kernels``: ``kernel_stats`` per (name, kind) over the cells, the top ``top`` by total time."""
    ks = _table(aggdir, KERNEL_STATS, ["iteration", "step", "rank", "name", "kind", "count", "total_ns", "p50_ns",
                                       "p95_ns", "max_ns", "std_ns"], ("name", "kind"))
    if ks is None or not ks.num_rows:
        return None
    # (one thread: the t-digest's approximate median depends on the order the values reach it)
    g = ks.group_by(["name", "kind"], use_threads=False).aggregate([("count", "sum"), ("total_ns", "sum"),
                                                                   ("p50_ns", "approximate_median"),
                                                                   ("p95_ns", "max"), ("max_ns", "max"),
                                                                   ("std_ns", "max")])
    g = _keys(g.rename_columns(["name", "kind", "count", "total_ns", "p50_ns_median", "p95_ns_max", "max_ns",
                                "std_ns_max"]), ("name", "kind"))
    g = g.sort_by([("total_ns", "descending"), ("name", "ascending")])
    total = pc.sum(g["total_ns"]).as_py() or 0
    rows = _rows(g, top)
    for r in rows:
        r["mean_ns"] = r["total_ns"] / r["count"] if r["count"] else None
        r["share_pct"] = 100.0 * r["total_ns"] / total if total else None
    return {**_cells(ks), "total_ns": total, "rows": rows, "from": table_file(KERNEL_STATS)}


OP_SUMS = ("count", "inclusive_ns", "self_ns", "kernels", "kernel_time_ns")
"""The ``op_stats`` columns summed per (name, cat) in the report's top CPU ops."""
OP_BATCH_ROWS = 1 << 16
"""``op_stats`` rows read at a time for the top CPU ops."""


def _op_summary(aggdir, top) -> dict | None:
    """``ops``: ``op_stats`` summed per (name, cat) over the cells, the top ``top`` by self time.  Read a
    batch at a time (sums and distinct cells of each batch, then of those): at 16,384 ranks the table is
    962,560 rows, 70 MB of Arrow even with its names as dictionaries."""
    p = table_path(aggdir, OP_STATS)
    if not p.is_file():
        return None
    keys, sums, cell = ["name", "cat"], [(c, "sum") for c in OP_SUMS], ["iteration", "step", "rank"]
    parts, cells = [], []
    for b in iter_arrow(p, [*cell, *keys, *OP_SUMS], read_dictionary=keys, batch_rows=OP_BATCH_ROWS):
        if not b.num_rows:
            continue
        t = pa.Table.from_batches([b])
        parts.append(_keys(t.group_by(keys).aggregate(sums).rename_columns([*keys, *OP_SUMS]), keys))
        cells.append(t.select(cell).group_by(cell).aggregate([]))
    if not parts:
        return None
    g = pa.concat_tables(parts).group_by(keys).aggregate(sums).rename_columns([*keys, *OP_SUMS])
    g = g.sort_by([("self_ns", "descending"), ("name", "ascending")])
    return {**_cells(pa.concat_tables(cells)), "rows": _rows(g, top), "from": table_file(OP_STATS)}


def _launch_summary(aggdir, top) -> dict | None:
    """``launches``: the ``launch_stats`` rows of every kernel (kind ``all``), the top ``top`` by p95
    launch delay, and the launch-bound share."""
    ls = _table(aggdir, LAUNCH_STATS, None)
    if ls is None or not ls.num_rows:
        return None
    a = ls.filter(pc.equal(ls["kind"], "all"))
    a = a.sort_by([("launch_delay_p95_ns", "descending"), ("rank", "ascending"), ("step", "ascending")])
    lb = pc.sum(a["launch_bound_count"]).as_py() or 0
    linked = pc.sum(a["linked"]).as_py() or 0
    return {"rows": _rows(a, top), "kernels": pc.sum(a["kernels"]).as_py(), "linked": linked,
            "launch_bound_count": lb, "launch_bound_pct": 100.0 * lb / linked if linked else None,
            "from": table_file(LAUNCH_STATS)}


def _idle_summary(aggdir, top) -> dict | None:
    """``idle``: ``idle_breakdown`` per (rank, device) over every step (stream -1 rows), and the top
    streams by idle time."""
    ib = _table(aggdir, IDLE_BREAKDOWN, None)
    if ib is None or not ib.num_rows:
        return None
    cols = ["idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "span_ns", "busy_ns"]
    dev = ib.filter(pc.equal(ib["stream"], -1))
    g = dev.group_by(["rank", "device"]).aggregate([(c, "sum") for c in cols] + [("step", "count")])
    g = g.rename_columns(["rank", "device", *cols, "steps"]).sort_by([("rank", "ascending"), ("device", "ascending")])
    rows = _rows(g)
    tot = {c: sum(r[c] for r in rows) for c in cols}
    st = ib.filter(pc.not_equal(ib["stream"], -1))
    sg = st.group_by(["rank", "device", "stream"]).aggregate([(c, "sum") for c in cols])
    sg = sg.rename_columns(["rank", "device", "stream", *cols])
    sg = sg.sort_by([("idle_ns", "descending"), ("rank", "ascending"), ("stream", "ascending")])
    return {"devices": rows, "total": tot, "streams": _rows(sg, top), "from": table_file(IDLE_BREAKDOWN)}


# -- Markdown ---------------------------------------------------------------------------------

_ms = _us = fmt_time           # each value in the unit that fits it (report/units.py)


def _pct(part, whole):
    return "-" if not whole else f"{100.0 * part / whole:.1f}"


def _tab(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]      # names escaped (issue 49)


def explain_markdown(ex: dict | None, idle_chart_png=None, shorten=lambda names: list(names)) -> list:
    """Markdown lines of ``build_explain``'s dict (empty for None: an older report); ``shorten``
    maps a list of kernel/op names to the names shown (the report's ``short_names``)."""
    if not ex:
        return []
    L = []
    k = ex.get("kernels")
    if k:
        names = shorten([r["name"] for r in k["rows"]])
        L += ["## Kernel statistics", "", f"Top kernels by total time over {cells_text(k)} "
              f"({table_file(KERNEL_STATS)} has every rank and step). p50 is the (approximate) median over rank-steps "
              "of each one's median, p95 and max the largest over rank-steps.", ""]
        L += _tab(["kernel", "kind", "count", "total", "% of kernel time", "mean", "p50", "p95", "max"],
                  [[n, r["kind"], f"{r['count']:,}", _ms(r["total_ns"]), f"{r['share_pct']:.1f}", _us(r["mean_ns"]),
                    _us(r["p50_ns_median"]), _us(r["p95_ns_max"]), _us(r["max_ns"])] for n, r in zip(names, k["rows"])])
        L += [""]
    o = ex.get("ops")
    if o:
        names = shorten([r["name"] for r in o["rows"]])
        gpu = any(r["kernels"] for r in o["rows"])          # a CPU-only run launches nothing: no such columns
        L += ["## CPU ops by self time", "", f"Summed over {cells_text(o)}. Self time = duration minus the "
              "direct children's (PyTorch's self CPU time); inclusive time counts an op nested in one of the same "
              "name once" + ("; GPU time = the kernels the op launched" if gpu else "")
              + f" ({table_file(OP_STATS)}).", ""]
        head = ["op", "cat", "count", "self", "inclusive"] + (["kernels launched", "GPU time"] if gpu
                                                                        else [])
        L += _tab(head, [[n, r["cat"], f"{r['count']:,}", _ms(r["self_ns"]), _ms(r["inclusive_ns"])]
                         + ([f"{r['kernels']:,}", _ms(r["kernel_time_ns"])] if gpu else [])
                         for n, r in zip(names, o["rows"])]) + [""]
    la = ex.get("launches")
    if la:
        L += ["## Kernel launches", "", f"{la['linked']:,} of {la['kernels']:,} GPU events joined to their launch "
              f"call; {la['launch_bound_count']:,} ({_pct(la['launch_bound_count'], la['linked'])} %) are "
              "launch-bound (shorter than their launch call). Launch delay = GPU start - launch end (a large delay: "
              "the GPU was busy, work queued; HTA's CudaKernelAnalysis); overhead = the launch call's duration. "
              f"Rank-steps with the largest p95 delay ({table_file(LAUNCH_STATS)}):", ""]
        known = any(r["iteration"] is not None and r["iteration"] >= 0 for r in la["rows"])
        L += _tab((["iteration"] if known else []) + ["step", "rank", "linked", "delay p50", "delay p95", "delay max", "overhead p50",
                   "overhead p95", "launch-bound %"],
                  [([r["iteration"]] if known else []) + [r["step"] if r["step"] is not None and r["step"] >= 0 else "-",
                                                           r["rank"], f"{r['linked']:,}", _us(r["launch_delay_p50_ns"]),
                    _us(r["launch_delay_p95_ns"]), _us(r["launch_delay_max_ns"]), _us(r["launch_overhead_p50_ns"]),
                    _us(r["launch_overhead_p95_ns"]),
                    "-" if r["launch_bound_pct"] is None else f"{r['launch_bound_pct']:.1f}"] for r in la["rows"]])
        L += [""]
    L += _idle_md(ex.get("idle"), idle_chart_png)
    return L


MAX_IDLE_ROWS = 64
"""The most devices the idle table and chart show: beyond it, those with the most idle time (a bar per
device of 4,096 ranks made a PNG 90,000 pixels tall, ~1.1 GB of canvas to draw)."""


def shown_devices(rows: list) -> list:
    """The per-device idle rows (``_idle_summary``'s ``devices``, in rank order) the report shows: all
    of them up to ``MAX_IDLE_ROWS``, else the ``MAX_IDLE_ROWS`` with the most idle time (ties: the lower
    rank, device), in rank order."""
    if len(rows) <= MAX_IDLE_ROWS:
        return rows
    top = sorted(range(len(rows)), key=lambda i: (-rows[i]["idle_ns"], i))[:MAX_IDLE_ROWS]
    return [rows[i] for i in sorted(top)]


def _idle_md(idle, png) -> list:
    if not idle:
        return []
    t = idle["total"]
    L = ["## GPU idle-time breakdown", "",
         "Idle gaps on each GPU, split by HolisticTraceAnalysis' rule (`get_idle_time_breakdown`): **host wait** "
         "when the next kernel's launch started after the previous work ended (the CPU was late), else **kernel "
         "wait** when the gap is shorter than the threshold (`--consecutive-kernel-delay-us`, 30 us), else "
         f"**other**. All devices: idle {_ms(t['idle_ns'])} = host wait {_pct(t['host_wait_ns'], t['idle_ns'])} % "
         f"+ kernel wait {_pct(t['kernel_wait_ns'], t['idle_ns'])} % + other {_pct(t['other_ns'], t['idle_ns'])} % "
         f"({table_file(IDLE_BREAKDOWN)}: per rank, device, stream and step).", ""]
    shown = shown_devices(idle["devices"])
    if len(shown) < len(idle["devices"]):
        L += [f"The {len(shown)} of {len(idle['devices']):,} devices with the most idle time, by rank:", ""]
    L += _tab(["rank", "device", "steps", "span", "busy", "idle", "host wait", "kernel wait", "other", "host wait %"],
              [[r["rank"], r["device"], r["steps"], _ms(r["span_ns"]), _ms(r["busy_ns"]), _ms(r["idle_ns"]),
                _ms(r["host_wait_ns"]), _ms(r["kernel_wait_ns"]), _ms(r["other_ns"]),
                _pct(r["host_wait_ns"], r["idle_ns"])] for r in shown])
    if len(shown) < len(idle["devices"]):
        L += [f"| ... {len(idle['devices']) - len(shown):,} more | | | | | | | | | |"]
    L += ["", "Streams with the most idle time:", ""]
    L += _tab(["rank", "device", "stream", "idle", "host wait", "kernel wait", "other"],
              [[r["rank"], r["device"], r["stream"], _ms(r["idle_ns"]), _ms(r["host_wait_ns"]),
                _ms(r["kernel_wait_ns"]), _ms(r["other_ns"])] for r in idle["streams"]])
    L += [""] + ([f"![idle_breakdown]({png})", ""] if png else [])
    return L


# -- chart ------------------------------------------------------------------------------------

def idle_chart(ex: dict | None, stem, formats=("png",)) -> list:
    """``<stem>.png`` / ``.svg``: per rank and device (``shown_devices``: at most ``MAX_IDLE_ROWS``),
    idle time (ms, summed over the steps) stacked as host wait, kernel wait, other.  [] without idle
    rows.  Returns the paths."""
    idle = (ex or {}).get("idle")
    if not idle or not idle["devices"]:
        return []
    plt = pyplot()
    rows = shown_devices(idle["devices"])
    multi = len({r["device"] for r in rows}) > 1 and len({r["rank"] for r in rows}) < len(rows)
    labels = [f"rank {r['rank']}" + (f" dev {r['device']}" if multi else "") for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.22 * len(rows) + 2.45))
    margins(fig, bottom=1.05, top=0.4)               # the legend under the axis label, on the canvas
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    div, unit = time_axis(max(r["idle_ns"] for r in rows))
    for c, color in IDLE_COLORS.items():
        v = np.asarray([r[c] / div for r in rows])
        bars_h(ax, y, v, left, 0.8, color, IDLE_LABELS[c])      # (one collection: 1,024 ranks are 3,072 bars)
        left += v
    step = max(1, len(rows) // 40)
    ax.set_yticks(y[::step], labels[::step], fontsize=7)
    ax.set_xlim(0, max(float(left.max()), 1e-9) * 1.08)     # headroom: the longest bar ends inside the frame
    ax.set_ylim(-0.4 - IDLE_PAD_ROWS, len(rows) - 0.6 + IDLE_PAD_ROWS)   # (autoscale's 5 % margins: 3 empty rows
                                                                      # above and below 64 bars)
    ax.set_xlabel(f"GPU idle time ({unit}, summed over the profiled steps)")
    ax.set_title("GPU idle-time breakdown per rank" if len(rows) == len(idle["devices"]) else
                 f"GPU idle-time breakdown: the {len(rows)} of {len(idle['devices']):,} devices with the most idle time")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.6 / ax.get_position().height
                                                              / fig.get_figheight()), ncol=3)
    return save(fig, stem, formats)


IDLE_PAD_ROWS = 0.3
"""Space above the first and below the last bar of the idle chart, in bar rows."""

IDLE_CHART = "idle_breakdown"
"""The file stem of the idle-time chart."""


class ExplainSection(SectionBase):
    """``explain``: ``build_explain`` (kernel, op and launch statistics, the GPU idle-time
    breakdown), its chart (``idle_chart``) shown in the section."""
    key, shown_charts, chart_rank = "explain", (IDLE_CHART,), 0

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: build_explain(inp.aggdir, inp.top)}

    def markdown(self, rep: dict, charts: list) -> list:
        return explain_markdown(rep.get(self.key), self.chart(charts, IDLE_CHART), short_names)

    def charts(self, job: ChartJob, rep: dict) -> list:
        return [(idle_chart, (rep.get(self.key), job.folder / IDLE_CHART, job.formats))]
