"""The report's first section, "What bounds each step": the critical path of each step
(``critical_path.parquet`` and ``critical_path_summary.parquet``, :mod:`streamtrace.aggregate.critical_path`)
told in three sentences, the table behind them, and the chart of the path across the ranks it
visits (:mod:`streamtrace.report.critical_chart`).

The sentences are built from the tables only: (1) the step's length, the ranks the path visits
and the category holding most of it; (2) the longest single piece of the path (a segment, or a
run of consecutive segments of one rank and category), what it is and its share of the step;
(3) the rank holding most of the path and how much later the other ranks could be (their slack).
"""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from .units import fmt_time

SHOWN_STEPS = 4
PHRASE = {"cpu_op": "CPU ops", "launch_delay": "launch delays", "compute_kernel": "compute kernels",
          "comm_transfer": "communication transfers", "memcpy": "memory copies", "kernel_gap": "gaps between kernels",
          "sync": "GPU -> CPU synchronisation", "host_gap": "host gaps (CPU outside any profiled op)",
          "wait": "unexplained waits", "queued": "GPU work queued behind earlier GPU work (the CPU ran ahead)"}


def _rows(path) -> list:
    return pq.read_table(path).to_pylist() if Path(path).is_file() else []


def _runs(segs) -> list:
    """Consecutive segments of one rank and category joined: ``[(rank, category, ns, start, name, lane)]``
    (the name of the run's longest segment)."""
    out = []
    for s in segs:
        if out and out[-1][0] == s["rank"] and out[-1][1] == s["category"]:
            r = out[-1]
            name = r[4] if r[6] >= s["weight_ns"] else s["name"]
            out[-1] = (r[0], r[1], r[2] + s["weight_ns"], r[3], name, r[5], max(r[6], s["weight_ns"]))
        else:
            out.append((s["rank"], s["category"], s["weight_ns"], s["start_ns"], s["name"], s["lane"], s["weight_ns"]))
    return out


def _piece(run, span, short) -> str:
    rank, cat, ns, _, name, lane, _ = run
    pct = f"{100 * ns / span:.0f} % of the step" if span else ""
    nm = f"`{short(name)}`" if name else ""
    ms = fmt_time(ns)
    return {"host_gap": f"rank {rank}'s CPU spends {ms} outside any profiled op (data loading, Python) on {lane}",
            "cpu_op": f"rank {rank}'s CPU spends {ms} in {nm}",
            "launch_delay": f"rank {rank}'s GPU starts {nm} {ms} after its launch",
            "compute_kernel": f"rank {rank}'s compute kernels run {ms} back to back (longest {nm})",
            "comm_transfer": f"rank {rank}'s {nm} transfers for {ms} after the last member arrived",
            "memcpy": f"rank {rank}'s memory copies take {ms} ({nm})",
            "kernel_gap": f"rank {rank}'s GPU waits {ms} between kernels ({nm})",
            "sync": f"rank {rank}'s CPU waits {ms} for the GPU in {nm}",
            "queued": f"rank {rank}'s GPU is still busy with earlier work when {nm} is launched: it queues {ms} "
                      "(the CPU runs ahead; the GPU bounds the step)",
            }.get(cat, f"rank {rank} waits {ms}") + f": {pct}"


def critical_section(aggdir, short=lambda s: s) -> dict:
    """``{"steps": [{"iteration", "step", "span_ns", "path_ns", "sentences": [3 str], "categories":
    [(category, ns, pct)], "ranks": [(rank, ns, pct)], "kernel", "cpu_op", "slack": [(rank, ns,
    on_path)]}], "from": ...}``; ``steps`` empty when aggregate wrote no critical path.  ``short``
    shortens kernel names for the sentences."""
    d = Path(aggdir)
    summ = _rows(d / "critical_path_summary.parquet")
    segs = _rows(d / "critical_path.parquet")
    steps = []
    for key in sorted({(r["iteration"], r["step"]) for r in summ}):
        rows = [r for r in summ if (r["iteration"], r["step"]) == key]
        ss = [s for s in segs if (s["iteration"], s["step"]) == key]
        by = lambda w: [r for r in rows if r["what"] == w]  # noqa: E731
        total = by("total")[0]
        cats = [(r["key"], r["ns"], r["pct"]) for r in by("category")]
        ranks = [(r["rank"], r["ns"], r["pct"]) for r in by("rank")]
        slack = sorted(((r["rank"], r["ns"], r["on_path"]) for r in by("slack")), key=lambda x: -x[1])
        kern, cpu = by("kernel"), by("cpu_op")
        steps.append({"iteration": key[0], "step": key[1], "span_ns": total["span_ns"], "path_ns": total["path_ns"],
                      "categories": cats, "ranks": ranks, "slack": slack,
                      "kernel": (kern[0]["key"], kern[0]["ns"], kern[0]["pct"]) if kern else None,
                      "cpu_op": (cpu[0]["key"], cpu[0]["ns"], cpu[0]["pct"]) if cpu else None,
                      "sentences": step_sentences(total, cats, ranks, slack, _runs(ss), short)})
    return {"steps": steps, "from": "critical_path.parquet, critical_path_summary.parquet"}


def step_sentences(total, cats, ranks, slack, runs, short) -> list:
    """The three sentences of one step: ``total`` its summary row (``step``, ``path_ns``), ``cats``
    ``[(category, ns, pct)]`` largest first, ``ranks`` ``[(rank, ns, pct)]``, ``slack`` ``[(rank, ns,
    on_path)]``, ``runs`` the path's runs (:func:`_runs`), ``short`` a name shortener."""
    step, path = total["step"], total["path_ns"]
    visit = [str(r[0]) for r in ranks]
    where = (f"rank {visit[0]}" if len(visit) == 1 else
             f"ranks {', '.join(visit[:6])}{' and others' if len(visit) > 6 else ''}")
    top = cats[0] if cats else ("wait", 0, 0.0)
    s1 = (f"Step {step} lasts {fmt_time(path)} along its critical path, which runs through {where}; "
          f"{top[2]:.0f} % of it is {PHRASE.get(top[0], top[0])}.")
    q = next((c for c in cats if c[0] == "queued"), None)
    if q and q[2] >= 10:
        rest = next((c for c in cats if c[0] != "queued"), None)
        s1 = (f"Step {step}'s work lasts {fmt_time(path)} along its critical path, from its start on the CPU to its "
              f"last GPU event through {where}: longer than the step, since the CPU runs ahead and steps overlap; "
              f"{q[2]:.0f} % of it is queued behind the previous step's GPU work"
              + (f", {rest[2]:.0f} % {PHRASE.get(rest[0], rest[0])}." if rest else "."))
    big = max(runs, key=lambda r: r[2]) if runs else None
    s2 = (f"The longest piece: {_piece(big, path, short)}." if big else "The path has no segments.")
    dom = ranks[0] if ranks else (None, 0, 0.0)
    others = [x for x in slack if x[0] != dom[0]][:3]
    if dom[0] is None:
        s3 = "No rank holds the path."
    elif not others:
        s3 = f"Rank {dom[0]} is the only rank of the step: its own work is the whole path."
    else:
        most = ", ".join(f"rank {r}: {fmt_time(ns)}" for r, ns, _ in others)
        s3 = (f"Rank {dom[0]} holds {dom[2]:.0f} % of the path; the other ranks have slack ({most}"
              f"{', ...' if len(slack) > 4 else ''}): making them faster buys nothing until rank {dom[0]}'s part "
              "shrinks.")
    return [s1, s2, s3]


def critical_markdown(sec: dict | None, table, short, png=None) -> list:
    """The section's Markdown lines (``table(head, rows)`` and ``short(names)`` as the report
    formats; times in the unit that fits, :func:`streamtrace.report.units.fmt_time`); ``png``: the chart's path relative to the report, or None."""
    L = ["## What bounds each step", ""]
    steps = (sec or {}).get("steps") or []
    if not steps:
        return L + ["*No critical path: aggregate wrote no critical_path.parquet (or no step had a "
                    "ProfilerStep window).*", ""]
    for s in steps[:SHOWN_STEPS]:
        L += [" ".join(s["sentences"]), ""]
    if len(steps) > SHOWN_STEPS:
        L += [f"({len(steps) - SHOWN_STEPS} more steps in critical_path_summary.parquet.)", ""]
    rows = []
    for s in steps:
        cats = ", ".join(f"{c} {p:.0f} %" for c, _, p in s["categories"][:3])
        rk = ", ".join(f"{r} ({p:.0f} %)" for r, _, p in s["ranks"][:4])
        k = f"{short([s['kernel'][0]])[0]} ({s['kernel'][2]:.0f} %)" if s["kernel"] else "-"
        c = f"{s['cpu_op'][0]} ({s['cpu_op'][2]:.0f} %)" if s["cpu_op"] else "-"
        most = next(((r, ns) for r, ns, on in s["slack"] if not on), None)
        rows.append([s["step"], fmt_time(s["span_ns"]), fmt_time(s["path_ns"]), cats, rk, k.replace("|", "\\|"), c,
                     f"rank {most[0]}: {fmt_time(most[1])}" if most else "-"])
    L += [table(["step", "span", "critical path", "path by category", "ranks on the path (share)",
                 "top kernel on the path", "top CPU op on the path", "most slack"], rows), ""]
    if png:
        L += [f"![critical path]({png})", ""]
    return L
