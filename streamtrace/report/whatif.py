"""The report's second section, "What a fix buys": the changes the critical path and the ranks'
lateness suggest (``streamtrace.aggregate.whatif_candidates``), each replayed
(``streamtrace.aggregate.whatif``), ranked by the predicted saving, in sentences and a table, all
read from ``whatif.parquet`` (and ``whatif_ranks.parquet`` for the replay's fidelity and host gaps).

A change's figures are means over the steps: the measured span (first rank's step start to last
rank's end), the predicted one (measured - the replay's own saving) and the saving; the rank that
then bounds the step is the one holding most of the new path in most steps.  A change flagged in any
step (its saving within the unmodified replay's error, or a step the replay does not reproduce) says
so.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..aggregate.folder import WHATIF, WHATIF_RANKS, columns, read_aggregate_table, table_file
from .section import ReportInput, SectionBase, md_table
from .units import fmt_time, short_names

SHOWN = 5
"""Sentences for at most this many changes (the table has them all)."""
SOURCES = ", ".join(map(table_file, (WHATIF, WHATIF_RANKS)))
MIN_PCT = 0.5
"""A change saving less than this % of the step gets no sentence of its own."""


def whatif_section(aggdir) -> dict:
    """``{"changes": [{"change", "description", "steps", "measured_ns", "predicted_ns", "saving_ns",
    "saving_pct", "bound_rank", "bound_what", "top", "flag"}], "fidelity_pct", "host_gap_pct",
    "from"}``, changes by saving (largest first); ``changes`` empty when the aggregate replayed none."""
    t = read_aggregate_table(aggdir, WHATIF)
    if not t or not len(t["change"]):
        return {"changes": [], "fidelity_pct": None, "host_gap_pct": None, "from": SOURCES, "replayed": bool(t)}
    out = []
    for ch in dict.fromkeys(t["change"].tolist()):
        m = t["change"] == ch
        meas, pred = float(np.mean(t["measured_span_ns"][m])), float(np.mean(t["predicted_span_ns"][m]))
        bound = Counter(zip(t["bound_rank"][m].tolist(), t["bound_what"][m].tolist())).most_common(1)[0][0]
        i = int(np.flatnonzero(m)[np.argmax(t["top_ns"][m])])
        flags = sorted({f for f in t["flag"][m].tolist() if f})
        out.append({"change": ch, "description": str(t["description"][m][0]), "steps": int(m.sum()),
                    "measured_ns": int(meas), "predicted_ns": int(pred), "saving_ns": int(meas - pred),
                    "saving_pct": 100.0 * (meas - pred) / meas if meas else 0.0,
                    "bound_rank": int(bound[0]), "bound_what": str(bound[1]),
                    "top": (int(t["top_rank"][i]), str(t["top_category"][i]), str(t["top_name"][i]),
                            int(t["top_ns"][i])), "flag": "; ".join(flags)})
    out.sort(key=lambda c: -c["saving_ns"])
    r = read_aggregate_table(aggdir, WHATIF_RANKS,
                             columns(WHATIF_RANKS, "start_ns", "end_ns", "host_gap_ns", "replay_end_ns"))
    fid = hg = None
    if r and len(r["end_ns"]):
        step = np.maximum(r["end_ns"] - r["start_ns"], 1)
        ok = r["replay_end_ns"] >= 0
        fid = float(np.max(100.0 * np.abs(r["replay_end_ns"][ok] - r["end_ns"][ok]) / step[ok])) if ok.any() else None
        hg = float(100.0 * r["host_gap_ns"].sum() / step.sum())
    return {"changes": out, "fidelity_pct": fid, "host_gap_pct": hg, "from": SOURCES}


def _sentence(c) -> str:
    s = (f"{c['description'][:1].upper()}{c['description'][1:]}: step {fmt_time(c['measured_ns'])} -> "
         f"{fmt_time(c['predicted_ns'])} ({-c['saving_pct']:+.1f} %)")
    if c["bound_rank"] >= 0:
        s += f"; then rank {c['bound_rank']}'s {c['bound_what']} bounds it"
    return s + (f" ({c['flag']})" if c["flag"] else "") + "."


def whatif_markdown(sec: dict | None, table, short) -> list:
    """The section's Markdown lines (``table(head, rows)``, ``short(names)`` as the report formats)."""
    L = ["## What a fix buys", ""]
    changes = (sec or {}).get("changes") or []
    if not changes and (sec or {}).get("replayed"):
        return L + ["*Nothing to replay: the critical path suggests no change here (a single rank's host gaps, "
                    "launch delays and kernels each hold under 5 % of its path, or there is one rank); "
                    "`streamtrace whatif` replays any change.*", ""]
    if not changes:
        return L + [f"*No replay: aggregate wrote no {table_file(WHATIF)} (`--no-critical-path`, `--no-whatif`, or no "
                    "rank had CPU ops to build the step's graph from).*", ""]
    fid, hg = sec.get("fidelity_pct"), sec.get("host_gap_pct")
    intro = ("Each change below is replayed over the step's graph (the critical path's, every wait derived again "
             "from its dependencies; `streamtrace whatif` replays any other)")
    if fid is not None:
        intro += f"; the unmodified replay reproduces every rank's step end within {fid:.2f} % of its step"
    if hg:
        intro += (f"; host gaps (CPU time outside any profiled op, {hg:.1f} % of the ranks' steps) stay as measured "
                  "unless a change removes them")
    L += [intro + ".", ""]
    worth = [c for c in changes if c["saving_pct"] >= MIN_PCT]
    L += ["- " + _sentence(c) for c in worth[:SHOWN]]
    if len(worth) < len(changes):
        L += [f"- {'The other' if worth else 'Each of the'} {len(changes) - len(worth)} change"
              f"{'s' if len(changes) - len(worth) > 1 else ''} in the table buy{'s' if len(changes) - len(worth) == 1 else ''}"
              f" less than {MIN_PCT:g} %: {'it does' if len(changes) - len(worth) == 1 else 'they do'} not bound the step."]
    L += [""]
    rows = [[c["description"], f"`{c['change']}`", fmt_time(c["measured_ns"]), fmt_time(c["predicted_ns"]),
             f"{-c['saving_pct']:+.1f} %", f"rank {c['bound_rank']} ({c['bound_what']})" if c["bound_rank"] >= 0
             else "-", f"rank {c['top'][0]}: {short([c['top'][2]])[0]} ({fmt_time(c['top'][3])})".replace("|", "\\|"),
             c["flag"] or "-"] for c in changes]
    L += [table(["change", "as --change", "step (span)", "predicted", "saving", "then bound by",
                 "heaviest on the new path", "flag"], rows), ""]
    return L


class WhatIfSection(SectionBase):
    """``whatif``: ``whatif_section`` (the replayed changes, largest saving first)."""
    key = "whatif"

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: whatif_section(inp.aggdir)}

    def markdown(self, rep: dict, charts: list) -> list:
        return whatif_markdown(rep.get(self.key), md_table, lambda xs: short_names(xs, 80))
