"""The report opens with "What bounds each step" (``streamtrace.report.critical_path``): on a
synthetic job with a data-loader stall injected on one rank, the sentences name that rank and the
stall, the table and the chart are there; the expected facts are the injected fault's."""
from __future__ import annotations

import pytest

from streamtrace.report.markdown import write_report
from streamtrace.report.options import ReportOptions
from streamtrace.synth.faults import LOADER

from support import stalled_job


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = stalled_job(tmp_path_factory.mktemp("cprep"), rank=3, delay_ns=8_000_000)
    rep = write_report(tmp / "agg", opt=ReportOptions(name="stall"))
    return tmp, rep, (tmp / "agg" / "stall.md").read_text()


def test_section_is_first_and_tells_the_fault(report):
    tmp, rep, md = report
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[0] == "## What bounds each step"
    story = md.split("## What bounds each step", 1)[1].split("\n\n")[1]
    # three sentences: the step's lengths, the cause (rank 3's CPU: the 8 ms stall in its data
    # loader, against the other ranks' same op), what bounds next and the slack
    assert story.count(". ") >= 2
    assert "Rank 3's CPU bounds it: rank 3 holds" in story
    loader = story.split("on the same ops (", 1)[1]
    assert loader.startswith("`" + LOADER[:40]) and " 8.00 ms vs " in loader.split(",")[0]
    assert "| step | critical path | span | step annotation | path by category |" in md
    sec = rep["critical_path"]["steps"][0]
    assert sec["cpu_op"][0] == LOADER and sec["bound_by"]["rank"] == 3
    assert any(r == 3 for r, _, _ in sec["ranks"])


def test_chart_is_written_and_shown(report):
    tmp, rep, md = report
    assert (tmp / "agg" / "charts" / "critical_path.png").stat().st_size > 0
    assert "![critical path](charts/critical_path.png)" in md
    assert md.index("charts/critical_path.png") < md.index("## Configuration")


def test_a_queued_step_says_the_cpu_runs_ahead():
    """A GPU-bound step (the real H200 check's numbers: a 103 ms step whose path is 237 ms, 133 ms
    of it queued behind the previous step's GPU work): the sentences say why the path is longer than
    the step and that the GPU bounds it."""
    from streamtrace.report.critical_story import cause_sentence, lengths_sentence
    total = {"step": 3, "path_ns": 237_000_000, "span_ns": 237_000_000, "origin_rank": 0}
    ranks = [{"rank": 0, "start_ns": 0, "path_ns": 237_000_000, "path_pct": 100.0, "thread": 1, "on_path": True,
              "slack_ns": 0, "wait_ns": 0}]
    s1 = lengths_sentence(3, total, ranks, 103_000_000)
    assert s1.startswith("Step 3: its critical path is 237 ms, its step annotation 103 ms")
    assert "the path runs past the CPU's step: the GPU finishes the step's work after it" in s1
    cats = {"queued": 133_000_000, "compute_kernel": 103_000_000, "kernel_gap": 1_000_000}
    s2 = cause_sentence(ranks[0], [], cats, None, None, (0, 0), lambda x: x)
    assert s2 == ("The GPU bounds it (the CPU runs ahead of it): rank 0 holds 100 % of the path (queued GPU work "
                  "56 %, kernels 43 %).")
