"""``streamtrace diff BASE TEST -o OUTDIR`` as a function, ``diff``: the comparison's tables
(``streamtrace.report.diff.compare``), ``diff.md`` (what changed per rank-step, times in the unit that fits), the chart
``charts/diff_top_deltas.png`` and ``diff.json`` (written last: a folder with ``diff.json``
is complete).  The folder is one unit (written beside it and swapped in at the end, as analyze's
and aggregate's are).  ``streamtrace.load(OUTDIR)`` opens the result.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np

from ...events.dataset import json_default
from .compare import DIMENSIONS, compare, write_tables
from .inputs import DiffOptions, list_text
from .outputs import RANKS, Diff, table_file
from ...runtime.files import atomic_output, output_folder, write_json
from ..charts import save
from ..escape import chart_text, md_cell, md_code, md_text
from ..units import fmt_time, short_names, time_axis

KIND_COLORS = {"compute": "#4C72B0", "communication": "#DD8452", "memory": "#8C8C8C"}
METRIC_LABELS = {"step_ns": "step time (ProfilerStep)", "busy_ns": "GPU busy", "idle_ns": "GPU idle",
                 "compute_ns": "compute", "comm_ns": "communication", "exposed_comm_ns": "exposed communication",
                 "kernel_time_ns": "kernel time (sum)"}


def diff(base, test, outdir=None, opt: DiffOptions | None = None, log=None):
    """Compare run ``base`` with run ``test`` and write ``outdir``: ``kernels``, ``ops``, ``groups``,
    ``ranks`` (``.parquet`` + ``.csv``), ``diff.md``, ``charts/diff_top_deltas.png`` (``opt.charts``),
    ``diff.json``.

    Parameters
    ----------
    base, test : str or Path
        Each an analysed folder, an aggregate or epilogue output, or traces (a path or glob), which are
        analysed into ``outdir/analysis-base|test`` first.
    outdir : str or Path, optional
        The diff folder (default ``streamtrace-diff``).
    opt : DiffOptions, optional
        The options (default ``DiffOptions()``).
    log : callable, optional
        A function taking one line of progress, or None.

    Returns
    -------
    streamtrace.report.diff.outputs.Diff
        The folder as ``streamtrace.load`` opens it (``.summary`` is ``diff.json``, ``.kernels``
        ... pyarrow Tables, ``.to_pandas(name)``).

    Raises
    ------
    UsageError
        On contradicting options.
    StreamtraceError
        On bad input (nothing to compare, no rank analysed).
    OutputError
        When ``outdir`` cannot be written.
    """
    opt = opt or DiffOptions()
    out = Path(outdir or "streamtrace-diff")
    with output_folder(out, owned=Diff.owns, inputs=[base, test]) as stage:
        tabs = compare(base, test, stage, opt)
        _where(tabs.meta, stage, out)
        files = [str(p) for p in write_tables(stage, tabs)]
        meta = dict(tabs.meta)
        meta["generated"] = _dt.datetime.now().isoformat(timespec="seconds")
        charts = (top_deltas_chart(tabs.kernels, stage / "charts" / "diff_top_deltas", meta["labels"])
                  if opt.charts else [])
        charts = [str(Path(p).relative_to(stage)) for p in charts]
        with atomic_output(stage / Diff.MARKDOWN, compress=False) as f:
            f.write(to_markdown(tabs, meta, opt.top, [p for p in charts if p.endswith(".png")]).encode())
        meta["files"] = sorted([Path(p).name for p in files] + [Diff.MARKDOWN, Diff.marker] + charts)
        meta["outdir"] = str(out)
        with atomic_output(stage / Diff.marker, compress=False) as f:
            write_json(f, meta, json_default)
    if log:
        log(f"diff: {out / Diff.MARKDOWN}, {len(files) // 2} tables"
            + (f", {len(charts)} chart files" if charts else ""))
    return Diff(out)


def _where(meta: dict, stage: Path, out: Path) -> None:
    """Name the folders traces were analysed into as they will be after the swap (``out``), not
    as they are while written (the staging folder)."""
    for side in ("base", "test"):
        m = meta.get(side, {})
        m["dirs"] = [str(out / Path(d).relative_to(stage)) if Path(d).is_relative_to(stage) else d
                     for d in m.get("dirs", [])]


# -- Markdown -----------------------------------------------------------------------------------

def _ms(ns, sign=False):
    """A time (ns) in the unit that fits it (report/units.py); ``sign``: a difference."""
    return fmt_time(ns, sign=sign)


def _pct(x):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:+.1f}"


def count_cell(x):
    """A count per rank-step as a whole number of calls (a mean over rank-steps rounded; ``<1`` for a
    call in fewer than half of them)."""
    if x is None:
        return "-"
    return "<1" if 0 < x < 0.5 else f"{int(float(x) + 0.5):,}"


CALLS = {"increased": "more calls", "decreased": "fewer calls", "unchanged": "as many calls"}


def direction(r) -> str:
    """A kernel row's change as the regression and improvement tables say it: ``added`` / ``deleted``,
    else the direction of its time and of its count (``more time, fewer calls``), never a count's
    ``decreased`` beside a kernel that takes more time."""
    if r["change"] in ("added", "deleted"):
        return r["change"]
    t = "more time" if r["delta_ns"] > 0 else "less time" if r["delta_ns"] < 0 else "same time"
    return f"{t}, {CALLS.get(r['change'], r['change'])}"


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(out + ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows])   # names escaped


def _esc(s):
    return str(s)          # (every table cell is escaped: report/escape.py)


def _side_line(meta, side, label) -> str:
    s = meta[side]
    an = " (analysed by diff)" if s["analysed"] else ""
    steps = f"steps {list_text(s['steps'])}" if any(x >= 0 for x in s["steps"]) else "no ProfilerStep"
    return (f"- **{label}**: {md_code(s['given'])}{an}: rank(s) {list_text(s['ranks'])}, {steps}, "
            f"{s['cells']} rank-step(s)")


def to_markdown(tabs, meta, top=10, charts=()) -> str:
    """``diff.md``: the comparison of ``DiffTables`` ``tabs`` (times per
    rank-step, each in the unit that fits it)."""
    lb, lt = (md_text(x) for x in meta["labels"])        # names and paths escaped (report/escape.py)
    L = [f"# streamtrace diff: {lb} vs {lt}", "",
         f"Generated {meta.get('generated', '')} by streamtrace. Every number is a mean per rank-step (one "
         f"ProfilerStep of one rank); times in the unit that fits each value (us, ms, s).", "", _side_line(meta, "base", lb), _side_line(meta, "test", lt)]
    pairs = meta["pairs"]
    same = all(a == b for a, b in pairs)
    L += [f"- ranks compared: {list_text([a for a, _ in pairs if a is not None])}" if same else
          "- rank pairs (base -> test): " + ", ".join(f"{a if a is not None else '-'}->{b if b is not None else '-'}"
                                                    for a, b in pairs[:32]) + (" ..." if len(pairs) > 32 else ""), ""]
    warn = meta.get("warnings", [])
    L += [f"**Warning: {md_text(w, None)}.**" for w in warn] + ([""] if warn else [])
    L += [f"*Notice: {md_text(n, None)}*" for n in meta["notices"]] + ([""] if meta["notices"] else [])
    L += ["## Per rank-step", "",
          _table(["metric", f"{lb}", f"{lt}", "delta", "delta %"],
                 [[METRIC_LABELS[k], _ms(v["base"]), _ms(v["test"]), _ms(v["delta"], True), _pct(v["delta_pct"])]
                  for k, v in meta["summary"].items()]), ""]
    L += _groups_md(tabs.groups, lb, lt)
    k = tabs.kernels.to_pylist()
    names = dict(zip([r["name"] for r in k], short_names([r["name"] for r in k])))
    head = ["kernel", "kind", "change", f"{lb} count", f"{lt} count", f"{lb}", f"{lt}", "delta",
            "delta %"]

    def krow(r):
        return [_esc(names[r["name"]]), r["kind"], direction(r), count_cell(r["base_count"]),
                count_cell(r["test_count"]),
                _ms(r["base_total_ns"]), _ms(r["test_total_ns"]), _ms(r["delta_ns"], True), _pct(r["delta_pct"])]
    up = [r for r in k if r["delta_ns"] > 0][:top]
    down = sorted([r for r in k if r["delta_ns"] < 0], key=lambda r: (r["delta_ns"], r["name"]))[:top]
    L += ["## Top regressions: kernels that take more time", ""]
    L += [_table(head, [krow(r) for r in up]), ""] if up else ["*None: no kernel takes more time.*", ""]
    L += ["## Top improvements: kernels that take less time", ""]
    L += [_table(head, [krow(r) for r in down]), ""] if down else ["*None: no kernel takes less time.*", ""]
    L += _ops_md(tabs.ops, lb, lt, top)
    L += _added_md(k, tabs.ops.to_pylist(), names, lb, lt, top)
    L += _ranks_md(tabs.ranks, lb, lt, top)
    if charts:
        L += ["## Chart", ""] + [f"![{Path(p).stem}]({p})" for p in charts] + [""]
    L += _definitions()
    return "\n".join(L)


def _groups_md(groups, lb, lt) -> list:
    L = ["## Where the time moved", "",
         "Kernel time by class, phase, phase:micro-batch, collective and parallel dimension.", ""]
    rows = []
    g = groups.to_pylist()
    for d in DIMENSIONS:
        sel = sorted([r for r in g if r["dimension"] == d], key=lambda r: (-abs(r["delta_ns"]), r["value"]))[:8]
        rows += [[d, _esc(r["value"]), count_cell(r["base_count"]), count_cell(r["test_count"]),
                  _ms(r["base_total_ns"]),
                  _ms(r["test_total_ns"]), _ms(r["delta_ns"], True), _pct(r["delta_pct"])] for r in sel]
    head = ["dimension", "value", f"{lb} count", f"{lt} count", f"{lb}", f"{lt}", "delta", "delta %"]
    return L + ([_table(head, rows), ""] if rows else ["*No kernels.*", ""])


def _ops_md(ops, lb, lt, top) -> list:
    L = ["## CPU ops by change in self time", "",
         "Self time = the op's duration minus its direct children's (PyTorch's self CPU time); inclusive time "
         "counts an op nested in one of the same name once.", ""]
    o = ops.to_pylist()
    sel = sorted([r for r in o if r["delta_self_ns"]], key=lambda r: (-abs(r["delta_self_ns"]), r["name"]))[:top]
    if not sel:
        return L + ["*No change in CPU self time.*", ""]
    names = dict(zip([r["name"] for r in sel], short_names([r["name"] for r in sel])))
    head = ["op", "cat", "change", f"{lb} count", f"{lt} count", f"{lb} self", f"{lt} self",
            "delta self", f"{lb} inclusive", f"{lt} inclusive"]
    return L + [_table(head, [[_esc(names[r["name"]]), r["cat"], r["change"], count_cell(r["base_count"]),
                               count_cell(r["test_count"]), _ms(r["base_self_ns"]), _ms(r["test_self_ns"]),
                               _ms(r["delta_self_ns"], True), _ms(r["base_total_ns"]), _ms(r["test_total_ns"])]
                              for r in sel]), ""]


def _added_md(k, o, names, lb, lt, top) -> list:
    L = ["## Added and deleted", "", f"By count, as HolisticTraceAnalysis' TraceDiff: present only in {lt} (added) "
         f"or only in {lb} (deleted).", ""]
    rows = []
    for what, rs in (("kernel", k), ("CPU op", o)):
        for ch in ("added", "deleted"):
            sel = [r for r in rs if r["change"] == ch]
            sel.sort(key=lambda r: (-max(r["base_total_ns"], r["test_total_ns"]), r["name"]))
            rows += [[what, ch, _esc(names.get(r["name"], r["name"])), count_cell(r["base_count"] or r["test_count"]),
                      _ms(r["base_total_ns"] or r["test_total_ns"])] for r in sel[:top]]
            if len(sel) > top:
                rows.append([what, ch, f"... {len(sel) - top} more", "", ""])
    return L + ([_table(["", "change", "name", "count", "time"], rows), ""] if rows else
                ["*Nothing added or deleted.*", ""])


def _ranks_md(ranks, lb, lt, top) -> list:
    r = ranks.to_pylist()
    L = ["## Ranks", "",
         f"Per rank pair, sorted by the change in compute time ({len(r)} pair(s); all in {table_file(RANKS)}).",
         ""]
    sel = r[:top] + r[max(top, len(r) - 3):]          # the largest increases, then the largest decreases
    head = [f"{lb} rank", f"{lt} rank", "rank-steps", "delta step", "delta compute", "delta comm",
            "delta exposed comm", "delta idle", "delta busy"]
    return L + [_table(head, [[x["base_rank"] if x["base_rank"] is not None else "-",
                               x["test_rank"] if x["test_rank"] is not None else "-",
                               f"{x['base_steps']} / {x['test_steps']}", _ms(x["delta_step_ns"], True),
                               _ms(x["delta_compute_ns"], True), _ms(x["delta_comm_ns"], True),
                               _ms(x["delta_exposed_comm_ns"], True), _ms(x["delta_idle_ns"], True),
                               _ms(x["delta_busy_ns"], True)] for x in sel]), ""]


def _definitions() -> list:
    return ["## Definitions", "",
            "- A *rank-step* is one ProfilerStep of one rank in one trace file; a side's number is its sum over its "
            "rank-steps divided by their count, so runs with different numbers of steps or ranks compare.",
            "- Kernels belong to the step of the ProfilerStep around their launch; CPU ops to the ProfilerStep window "
            "that holds their start (HolisticTraceAnalysis' rule).",
            "- `change` is by count per rank-step, HolisticTraceAnalysis' `TraceDiff.ops_diff` categories "
            "(hta/trace_diff.py): added, deleted, increased, decreased, unchanged (the tables' `change` column). "
            "The regression and improvement tables say it with the time's direction: `more time, fewer calls` "
            "is a kernel that takes more time in fewer calls (`decreased` by count). Counts are calls per "
            "rank-step, rounded to whole calls.",
            "- compute, communication, busy: length of the union of those kernels' intervals; exposed communication "
            "= communication not overlapped by compute; idle = GPU span - busy (streamtrace analyze's definitions).",
            "- `ProfilerStep#N` is shown as `ProfilerStep#*`.", ""]


# -- chart ----------------------------------------------------------------------------------------

def top_deltas_chart(kernels, stem, labels=("base", "test"), n=10) -> list:
    """``<stem>.png`` / ``.svg``: the ``n`` largest increases and decreases of kernel time
    (``delta_ns``, per rank-step, in the unit that fits), coloured by kind, added/deleted hatched.  [] when nothing
    changed.  Returns the paths."""
    k = kernels.to_pylist()
    up = [r for r in k if r["delta_ns"] > 0][:n]
    down = sorted([r for r in k if r["delta_ns"] < 0], key=lambda r: r["delta_ns"])[:n]
    rows = up + down[::-1]
    if not rows:
        return []
    import matplotlib            # lazy: heavy (~0.5 s), loaded only when the chart is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    names = [chart_text(n, None) for n in short_names([r["name"] for r in rows], 70)]
    fig, ax = plt.subplots(figsize=(12, 0.35 * len(rows) + 1.6))
    y = np.arange(len(rows))[::-1]
    div, unit = time_axis(max(abs(r["delta_ns"]) for r in rows))
    for yi, r in zip(y, rows):
        ax.barh(yi, r["delta_ns"] / div, color=KIND_COLORS.get(r["kind"], "#BBBBBB"),
                hatch="//" if r["change"] in ("added", "deleted") else None, edgecolor="black", linewidth=0.4)
    ax.set_yticks(y, names, fontsize=7)
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_xlabel(chart_text(f"kernel time change, {labels[1]} - {labels[0]} ({unit} per rank-step)", None))
    ax.set_title("Largest kernel time changes")
    ax.legend(handles=[Patch(color=c, label=kd) for kd, c in KIND_COLORS.items()]
              + [Patch(facecolor="white", edgecolor="black", hatch="//", label="added / deleted")],
              fontsize=8, loc="lower right")
    return save(fig, stem)
