"""The report's seam: a ``Section`` is one part of ``streamtrace report``'s output, its data
(entries of ``report.json``), its Markdown and its charts.  ``streamtrace.report.markdown`` builds
the report's frame (name, inputs, configuration, what is missing, warnings) and asks every section
of ``streamtrace.report.sections.SECTIONS``, in that order, for the rest; a new section is one
module with a class like ``SectionBase``'s subclasses and one line in that list.

Also here: what every section's Markdown uses (``md_table``, ``missing_line``) and
``plain`` (numpy scalars as JSON values).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from .escape import md_cell


@dataclass(frozen=True)
class ReportInput:
    """What a section's data is read from: the aggregate folder ``aggdir``, its ``aggregate.json``
    (``meta``), the parallel ``sizes`` (``{"tp": int | None, ...}``: None without a topology),
    ``cpu_only`` (a run without GPU events), ``top`` (rows of the top-N tables) and the options of
    the throughput and the efficiency (``streamtrace report``'s: tokens per step, or global batch and
    sequence length; ``EfficiencyOptions`` or None)."""
    aggdir: Path
    meta: dict
    sizes: dict
    cpu_only: bool = False
    top: int = 15
    tokens_per_step: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    efficiency: Any = None


@dataclass(frozen=True)
class ChartJob:
    """Where a section's charts go: the aggregate folder ``aggdir`` (with its ``aggregate.json``,
    ``meta``), the report's charts ``folder`` and the image ``formats`` (``("png",)``, ``("svg",)``
    or both)."""
    aggdir: Path
    folder: Path
    meta: dict
    formats: tuple = ("png",)


ChartTask = tuple[Callable[..., list], tuple]
"""One chart drawn with ``streamtrace.report.render.render_all``'s ``extra``: ``(function, args)``;
the function returns the paths it wrote."""


@runtime_checkable
class Section(Protocol):
    """One section of the report.

    ``key``: its entry in ``report.json`` (and in ``missing``); ``shown_charts``: the stems of the
    charts its Markdown shows itself (left out of the report's closing ``## Charts`` list);
    ``chart_rank``: where its charts are drawn and listed among the sections' (``report.json``'s
    ``charts`` order)."""
    key: str
    shown_charts: tuple
    chart_rank: int

    def data(self, inp: ReportInput, rep: dict) -> dict:
        """The section's entries of ``report.json`` (``{key: JSON value}``), read from ``inp``; ``rep``
        holds the frame and the entries of the sections before it.  Raises
        ``DataError`` naming a damaged table."""

    def markdown(self, rep: dict, charts: list) -> list:
        """The section's Markdown lines, from ``rep`` (all of ``report.json``); ``charts``: the
        report's chart images (paths relative to the report's folder)."""

    def charts(self, job: ChartJob, rep: dict) -> list:
        """The section's charts to draw (``ChartTask`` list; ``[]``: none)."""


class SectionBase:
    """Defaults of the ``Section`` protocol: no data, no charts."""
    key = ""
    shown_charts: tuple = ()
    chart_rank = 0

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {}

    def markdown(self, rep: dict, charts: list) -> list:
        return []

    def charts(self, job: ChartJob, rep: dict) -> list:
        return []

    @staticmethod
    def chart(charts: list, stem: str):
        """The image of ``charts`` named ``stem`` (None when there is none)."""
        return next((p for p in charts if Path(p).stem == stem), None)


def md_table(head, rows) -> str:
    """A Markdown table: ``head`` (column titles) and ``rows`` (cells escaped: ``md_cell``)."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]      # names escaped (issue 49)
    return "\n".join(out)


def missing_line(rep: dict, section: str) -> list:
    """``*Nothing to show: WHY.*`` when ``rep["missing"]`` says why ``section`` is empty, else ``[]``."""
    why = rep.get("missing", {}).get(section)
    return [f"*Nothing to show: {why}.*", ""] if why else []


def plain(v):
    """``v`` as a JSON value: numpy integers as int, floats as float (NaN as None), bools as bool."""
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def is_nan(v) -> bool:
    """Whether ``v`` is a NaN (False for what is no number)."""
    try:
        return bool(np.isnan(v))
    except TypeError:
        return False
