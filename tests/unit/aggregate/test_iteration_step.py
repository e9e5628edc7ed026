"""One iteration number end to end (issue 17): ``iteration`` is the trace file's (``iteration_11/``,
analyze's ``iteration=11`` partition), ``step`` the ProfilerStep number, in aggregate's tables, its
options, the report and the chart names.  The job here is the Megatron patch's layout, where the
folder's number is one more than the ProfilerStep's: ``iteration_11/`` holds ``ProfilerStep#10``."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from support import load_json, run_cli
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.events.dataset import read_table
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.report import write_report
from streamtrace.report.options import ReportOptions
from streamtrace.synth.job import SynthSpec, generate_job


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("itstep")
    run = tmp / "job42"
    generate_job(run, SynthSpec(world_size=4, tp=2, pp=2, microbatches=2))       # ProfilerStep#10
    (run / "iteration_10").rename(run / "iteration_11")
    for f in sorted((run / "iteration_11").iterdir()):
        f.rename(f.with_name(f.name.replace("_iter_10", "_iter_11")))
    analyze([run / "iteration_11"], tmp / "an", AnalyzeOptions(jobs=1))
    return tmp, run


def test_the_trace_says_iteration_11_step_10(job):
    tmp, run = job
    raw = load_json(run / "iteration_11" / "rank_0000_iter_11.pt.trace.json")
    assert {e["name"] for e in raw["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")} == \
        {"ProfilerStep#10"}
    assert (tmp / "an" / "kernels" / "iteration=11").is_dir()


def test_aggregate_tables_carry_the_file_iteration_and_the_step(job, tmp_path):
    tmp, _ = job
    meta = aggregate([tmp / "an"], tmp_path / "agg", AggregateOptions(iterations=[11]))
    assert meta["iterations"] == [11] and meta["steps"] == [[11, 10]]
    for name in ("ranks", "rank_phase", "pipeline", "replicas", "iterations", "timeline", "collectives",
                 "collectives_ranks"):
        t = read_table(tmp_path / "agg" / f"{name}.parquet")
        assert set(t["iteration"].tolist()) == {11}, name
        assert set(t["step"].tolist()) <= {10, -1} and 10 in t["step"], name
    csv = (tmp_path / "agg" / "ranks.csv").read_text().splitlines()[0].split(",")
    assert csv[:3] == ['"iteration"', '"step"', '"rank"']


def test_iterations_option_means_the_file_iteration(job, tmp_path):
    tmp, _ = job
    with pytest.raises(StreamtraceError, match=r"iteration\(s\) 10: the folders hold iteration\(s\) 11"):
        aggregate([tmp / "an"], tmp_path / "a", AggregateOptions(iterations=[10]))
    m = aggregate([tmp / "an"], tmp_path / "b", AggregateOptions(steps=[10]))      # the ProfilerStep number
    assert m["steps"] == [[11, 10]]
    with pytest.raises(StreamtraceError, match=r"step\(s\) \[99\]"):
        aggregate([tmp / "an"], tmp_path / "c", AggregateOptions(steps=[99]))
    r = run_cli("aggregate", tmp / "an", "-o", tmp_path / "d", "--iterations", "11", "-j", "1")
    assert r.returncode == 0, r.stderr
    assert "iteration 11 (ProfilerStep#10)" in r.stdout                # both numbers, where they differ
    r = run_cli("aggregate", tmp / "an", "-o", tmp_path / "e", "--iterations", "10")
    assert r.returncode == 1 and "hold iteration(s) 11" in r.stderr


def test_report_and_charts_name_the_file_iteration(job, tmp_path):
    tmp, _ = job
    aggregate([tmp / "an"], tmp_path / "agg", AggregateOptions())
    rep = write_report(tmp_path / "agg", tmp_path / "r", ReportOptions(chart_ranks=[0]))
    assert rep["steps"][0]["iteration"] == 11 and rep["steps"][0]["step"] == 10
    assert rep["configuration"]["iterations"] == [11]
    charts = sorted(p.name for p in (tmp_path / "r" / "charts").glob("*.png"))
    assert "ranks_overview_iter11.png" in charts and "rank_0_timeline_iter11.png" in charts
    assert not any("iter10" in c for c in charts)
    md = (tmp_path / "r" / "job42.md").read_text()          # named after the job, not the analysis folder
    assert "| 11 | 10 |" in md


def test_two_steps_in_one_iteration_get_one_row_each(tmp_path):
    run = tmp_path / "run"
    generate_job(run, SynthSpec(world_size=4, tp=2, pp=2, microbatches=2, steps=2))    # ProfilerStep#10, #11
    analyze([run], tmp_path / "an", AnalyzeOptions(jobs=1))
    meta = aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    assert meta["iterations"] == [10] and meta["steps"] == [[10, 10], [10, 11]]
    it = read_table(tmp_path / "agg" / "iterations.parquet")
    assert it["iteration"].tolist() == [10, 10] and it["step"].tolist() == [10, 11]
    from streamtrace.report.render import render_all
    names = {p.name for p in render_all(tmp_path / "agg", tmp_path / "charts", chart_ranks=[0])}
    assert {"ranks_overview_iter10_step10.png", "ranks_overview_iter10_step11.png"} <= names
    ranks = read_table(tmp_path / "agg" / "ranks.parquet")
    for st in (10, 11):
        m = ranks["step"] == st
        assert m.sum() == 4 and np.all(ranks["step_ns"][m] > 0)
    shutil.rmtree(tmp_path / "charts")
    assert json.loads((tmp_path / "agg" / "aggregate.json").read_text())["steps"] == [[10, 10], [10, 11]]
