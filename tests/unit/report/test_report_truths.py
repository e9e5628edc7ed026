"""The report states what the traces say (issue 17): world size from distributedInfo without a
topology, unknown parallel sizes shown as unknown, "matched" only across >= 2 ranks, CPU-only runs
labelled as such with the reason for every empty section; different jobs are refused; units in
every column name, fractions as percent, CSV floats short, kernel names never cut alike."""
from __future__ import annotations

import csv
import json
import re

import pytest

from support import REAL, need_shared, run_cli
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.report import write_report
from streamtrace.report.options import ReportOptions
from streamtrace.report.markdown import short_names


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    need_shared()
    tmp = tmp_path_factory.mktemp("truths")
    for name in ("a100_rank3_of8", "a100_resnet_ddp_rank0_of2", "cpu_only_gloo_rank34_of300"):
        analyze([REAL / f"{name}.json.gz"], tmp / name, AnalyzeOptions(jobs=1))
    return tmp


def test_world_size_from_distributed_info_and_unknown_sizes(real, tmp_path):
    aggregate([real / "a100_rank3_of8"], tmp_path / "agg", AggregateOptions(jobs=1))
    rep = write_report(tmp_path / "agg", opt=ReportOptions(charts=False))
    c = rep["configuration"]
    assert c["world_size"] == 8 and c["world_size_from"] == "distributedInfo.world_size"
    assert all(c[k] is None for k in ("tp", "cp", "ep", "dp", "pp"))        # unknown, not 1
    md = open(rep["files"][0]).read()
    assert "| 8 | 1 |" in md and "not named in the trace" in md and "None" not in md.split("## Steps")[0]
    assert "?" not in md.split("## Steps")[0]                  # said, not "?" per dimension
    assert "give --topology" in md
    # one rank: nothing was matched across ranks, and the report does not say so
    assert rep["collectives"]["instances"]["instances"] > 0
    assert "matched across ranks" not in md and "of one rank" in md
    assert "one rank" in rep["missing"]["stragglers"]


def test_cpu_only_run_says_cpu_time_and_why_sections_are_empty(real, tmp_path):
    aggregate([real / "cpu_only_gloo_rank34_of300"], tmp_path / "agg", AggregateOptions(jobs=1))
    rep = write_report(tmp_path / "agg", opt=ReportOptions(charts=False))
    c = rep["configuration"]
    assert c["cpu_only"] and c["world_size"] == 300
    md = open(rep["files"][0]).read()
    assert "CPU time (a CPU-only run" in md and "GPU time" not in md
    assert "CPU-only" in rep["missing"]["top_kernels"]
    # its gloo collectives are collectives (from the CPU ops), of one rank: no straggler to name
    assert "collectives" not in rep["missing"] and "one rank" in rep["missing"]["stragglers"]
    assert rep["collectives"]["by_type"][0]["collective"] == "AllReduce"
    assert md.count("*Nothing to show:") >= 2


def test_different_jobs_are_refused_unless_forced(real, tmp_path):
    dirs = [real / "a100_rank3_of8", real / "a100_resnet_ddp_rank0_of2", real / "cpu_only_gloo_rank34_of300"]
    with pytest.raises(StreamtraceError, match=r"different jobs \(world size 2 .* vs 8 .* vs 300"):
        aggregate(dirs, tmp_path / "no", AggregateOptions(jobs=1))
    assert not (tmp_path / "no" / "aggregate.json").exists()
    r = run_cli("aggregate", *dirs, "-o", tmp_path / "no2", "-j", 1)
    assert r.returncode == 1 and "different jobs" in r.stderr and "--force" in r.stderr
    for d in dirs:
        assert str(d) in r.stderr
    m = aggregate(dirs, tmp_path / "yes", AggregateOptions(jobs=1, force=True))
    assert any("different jobs" in w for w in m["warnings"])
    # one rank of one iteration in two folders
    import shutil
    shutil.copytree(real / "a100_rank3_of8", tmp_path / "copy")
    with pytest.raises(StreamtraceError, match="rank 3 is in both"):
        aggregate([real / "a100_rank3_of8", tmp_path / "copy"], tmp_path / "twice", AggregateOptions(jobs=1))


UNITS = ("_ns", "_pct", "_bytes", "_gbps", "_gbps_min", "_gbps_p10", "_gbps_median", "_gbps_mean", "_gbps_p90",
         "_gbps_max", "_ns_mean", "_ns_median", "_ns_max", "_pct_mean", "_us")
COUNTS = {"iteration", "step", "rank", "device", "replica", "pp_group", "stage", "microbatch", "kernels", "ranks",
          "n_ranks", "stages", "microbatches", "instances", "count", "complete", "straggler_count", "waiter_count",
          "bytes", "group_size", "part", "instance", "src", "dst", "straggler_rank", "waiter_rank", "correlation",
          "stream", "consistent", "most", "shift",
          # counts of aggregate's kernel_stats, op_stats, launch_stats, idle_breakdown
          "nested_count", "self_clamped", "linked", "unlinked", "graph_kernels", "early_start_count",
          "launch_delay_outliers", "launch_overhead_outliers", "launch_bound_count", "host_wait_gaps",
          "kernel_wait_gaps", "other_gaps", "no_launch_gaps", "overlapped_kernels"}


def test_csv_columns_carry_units_and_floats_are_short(real, tmp_path):
    aggregate([real / "a100_rank3_of8"], tmp_path / "agg", AggregateOptions(jobs=1))
    files = sorted((tmp_path / "agg").glob("*.csv"))
    assert {f.stem for f in files} >= {"ranks", "rank_phase", "iterations", "collectives_summary"}
    for f in files:
        rows = list(csv.DictReader(f.open()))
        for col in rows[0]:
            vals = [r[col] for r in rows if r[col] != ""]
            numeric = vals and all(re.fullmatch(r"-?[\d.e+-]+", v) for v in vals)
            if numeric:
                assert col in COUNTS or col.endswith(UNITS), (f.name, col)
                for v in vals:
                    digits = re.sub(r"e.*$", "", v).replace("-", "").replace(".", "").lstrip("0")
                    assert "." not in v or len(digits) <= 6, (f.name, col, v)
    head = next(csv.reader((tmp_path / "agg" / "collectives_summary.csv").open()))
    assert "busbw_gbps_median" in head and "traffic_pct" in head and "busbw_median" not in head


def test_kernel_names_never_print_alike():
    a = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::AddFunctor<float>>" \
        "(at::TensorIteratorBase&, at::native::AddFunctor<float> const&)::{lambda(int)#1}>(int, T3)"
    b = a.replace("AddFunctor<float> const&)", "AddFunctor<c10::Half> const&)")
    c = "x" * 300
    out = short_names([a, b, c, "short"])
    assert len(set(out)) == 4 and out[3] == "short" and len(out[2]) < 100
    assert out[0] != out[1]
