"""The report's sections as a seam (``streamtrace.report.section``, ``streamtrace.report.sections.SECTIONS``):
every registered section implements the protocol, the report's headings come in the registry's order, and a
new section (one class, one registration) gets its data into ``report.json``, its Markdown into the report and
its chart drawn and shown in it; the expected values are the test's own section's."""
from __future__ import annotations

import json

import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.report import markdown
from streamtrace.report.options import ReportOptions
from streamtrace.report.section import ChartJob, ReportInput, Section, SectionBase
from streamtrace.report.sections import SECTIONS
from streamtrace.synth.job import SynthSpec, generate_job


@pytest.fixture(scope="module")
def agg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sections")
    generate_job(tmp / "traces", SynthSpec(world_size=2, tp=2, pp=1, layers=1, microbatches=1))
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1))
    return tmp / "agg"


def test_every_section_is_one(agg):
    keys = [s.key for s in SECTIONS]
    assert all(isinstance(s, Section) for s in SECTIONS) and len(set(keys)) == len(keys) and all(keys)
    (agg / "plain").mkdir()
    rep = markdown.write_report(agg, agg / "plain", ReportOptions(name="plain", charts=False))
    assert all(k in rep for k in keys if k != "configuration") and "throughput" not in rep
    heads = [ln for ln in (agg / "plain" / "plain.md").read_text().splitlines() if ln.startswith("## ")]
    order = ["## What bounds each step", "## Configuration", "## Steps and throughput",
             "## Where the time went, per rank", "## Collectives", "## Stragglers", "## Top kernels by time"]
    assert [h for h in heads if h in order] == order


class Stamp(SectionBase):
    """A section of the test's own: the number of steps, and a chart file of its own."""
    key = "stamp"
    shown_charts = ("stamp",)

    def data(self, inp: ReportInput, rep: dict) -> dict:
        return {self.key: {"steps_seen": len(rep["steps"]), "ranks": len(inp.meta["ranks"])}}

    def markdown(self, rep: dict, charts: list) -> list:
        return ["## Stamp", "", f"{rep[self.key]['steps_seen']} step(s) of {rep[self.key]['ranks']} ranks; "
                f"chart {self.chart(charts, 'stamp')}", ""]

    def charts(self, job: ChartJob, rep: dict) -> list:
        return [(_draw, (job.folder / "stamp", job.formats))]


def _draw(stem, formats):
    out = []
    for f in formats:
        p = stem.with_suffix("." + f)
        p.write_bytes(b"not an image")
        out.append(p)
    return out


def test_a_new_section_is_one_class_and_one_line(agg, monkeypatch):
    monkeypatch.setattr(markdown, "SECTIONS", SECTIONS + (Stamp(),))
    out = agg / "stamped"
    out.mkdir()
    rep = markdown.write_report(agg, out, ReportOptions(name="stamped", jobs=1))
    meta = json.loads((agg / "aggregate.json").read_text())
    assert rep["stamp"] == {"steps_seen": len(rep["steps"]), "ranks": len(meta["ranks"])}
    assert json.loads((out / "report.json").read_text())["stamp"] == rep["stamp"]
    md = (out / "stamped.md").read_text()
    assert f"## Stamp\n\n{len(rep['steps'])} step(s) of {len(meta['ranks'])} ranks; chart charts/stamp.png" in md
    assert "charts/stamp.png" in rep["charts"] and (out / "charts" / "stamp.png").read_bytes() == b"not an image"
    assert "![stamp]" not in md                       # shown in its section, not listed again under ## Charts
