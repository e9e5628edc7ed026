"""The report opens with "What bounds each step" (:mod:`streamtrace.report.critical_path`): on a
synthetic job with a data-loader stall injected on one rank, the sentences name that rank and the
stall, the table and the chart are there; the expected facts are the injected fault's."""
from __future__ import annotations

import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.report.markdown import write_report
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.synth.faults import LOADER, Fault


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cprep")
    generate_job(tmp / "traces", SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1,
                                           faults=(Fault("cpu_stall", 3, delay_ns=8_000_000),)))
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1))
    rep = write_report(tmp / "agg", name="stall")
    return tmp, rep, (tmp / "agg" / "stall.md").read_text()


def test_section_is_first_and_tells_the_fault(report):
    tmp, rep, md = report
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[0] == "## What bounds each step"
    story = md.split("## What bounds each step", 1)[1].split("\n\n")[1]
    # three sentences: the step and its path, the longest piece (the 8 ms stall on rank 3), the slack
    assert story.count(". ") >= 2
    assert "rank 3's CPU spends 8.00 ms in `" + LOADER[:40] in story
    assert "Rank 3 holds" in story and "until rank 3's part shrinks" in story
    assert "| step | span | critical path | path by category |" in md   # the report's units: "16.5 ms" in the cells
    sec = rep["critical_path"]["steps"][0]
    assert sec["cpu_op"][0] == LOADER
    assert any(r == 3 for r, _, _ in sec["ranks"])


def test_chart_is_written_and_shown(report):
    tmp, rep, md = report
    assert (tmp / "agg" / "charts" / "critical_path.png").stat().st_size > 0
    assert "![critical path](charts/critical_path.png)" in md
    assert md.index("charts/critical_path.png") < md.index("## Configuration")


def test_a_queued_step_says_the_cpu_runs_ahead():
    """A GPU-bound step (the real H200 check's numbers): the sentence says why the path is longer
    than the step and splits it into the queue and the compute."""
    from streamtrace.report.critical_path import step_sentences
    total = {"step": 3, "path_ns": 237_000_000}
    cats = [("queued", 133_000_000, 56.1), ("compute_kernel", 103_000_000, 43.5), ("kernel_gap", 1_000_000, 0.4)]
    runs = [(0, "queued", 133_000_000, 0, "gather", "device 0 stream 7", 133_000_000)]
    s1, s2, _ = step_sentences(total, cats, [(0, 237_000_000, 100.0)], [], runs, lambda x: x)
    assert s1.startswith("Step 3's work lasts 237 ms") and "the CPU runs ahead" in s1
    assert "56 % of it is queued behind the previous step's GPU work, 44 % compute kernels." in s1
    assert "queues 133 ms" in s2 and "56 % of the step" in s2
