"""merge's output path, a lone trace without a rank, and --gpu-only of a CPU-only run (issue 17)."""
from __future__ import annotations

import shutil

import pytest

from support import REAL, load_json, need_shared, run_cli
from streamtrace.runtime.errors import UnknownRankError
from streamtrace.merge import MergeOptions, merge
from streamtrace.synth.job import SynthSpec, generate_job


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcli")
    generate_job(tmp / "runs" / "x", SynthSpec(world_size=4, tp=2, pp=2, microbatches=1))
    return tmp


def test_output_is_relative_to_the_current_folder(run, tmp_path):
    r = run_cli("merge", run / "runs" / "x" / "iteration_10", "-o", "demo.json.gz", "-j", 1, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "demo.json.gz").is_file()
    assert not (run / "runs" / "x" / "demo.json.gz").exists()
    assert len(load_json(tmp_path / "demo.json.gz")["streamtrace"]["ranks"]) == 4
    # no -o: <folder>_merged.json.gz, also in the current folder
    r = run_cli("merge", run / "runs" / "x" / "iteration_10", "-j", 1, "-q", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "iteration_10_merged.json.gz").is_file()
    assert r.stdout == ""                                                      # -q


def test_megatron_spelling_keeps_its_output_beside_the_input(run, tmp_path):
    src = tmp_path / "torch_profiler"
    shutil.copytree(run / "runs" / "x" / "iteration_10", src)
    r = run_cli("merge", "--input_dir", src, "--output_file", "m.json", "-j", 1, cwd=tmp_path / "..")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.json").is_file()                # beside the folder, as Megatron's script


def test_lone_trace_without_rank_is_rank_0_with_a_notice(tmp_path):
    need_shared()
    lone = REAL / "no_distributed_info.json.gz"
    r = run_cli("merge", lone, "-o", tmp_path / "one.json", "-j", 1)
    assert r.returncode == 0, r.stderr
    assert "notice:" in r.stderr and "rank 0" in r.stderr
    doc = load_json(tmp_path / "one.json")
    assert [x["rank"] for x in doc["streamtrace"]["ranks"]] == [0]
    assert doc["streamtrace"]["ranks"][0]["rank_source"] == "lone file"
    # several files without a rank: still an error naming the file
    with pytest.raises(UnknownRankError):
        merge([lone, REAL / "no_rank_metadata.json.gz"], tmp_path / "two.json", MergeOptions(jobs=1))
    r = run_cli("merge", lone, REAL / "no_rank_metadata.json.gz", "-o", tmp_path / "two.json")
    assert r.returncode == 1 and "cannot tell its rank" in r.stderr


def test_gpu_only_of_a_cpu_only_run_merges_the_cpu_processes(tmp_path):
    need_shared()
    src = REAL / "cpu_only_gloo_rank34_of300.json.gz"
    (res,) = merge([src], tmp_path / "g.json.gz", MergeOptions(gpu_only=True, jobs=1))
    assert res["cpu_only"] and res["events_out"] > 0
    assert any("CPU-only" in w for w in res["warnings"])
    raw = load_json(src)
    doc = load_json(tmp_path / "g.json.gz")
    assert sum(e.get("ph") == "X" for e in doc["traceEvents"]) == sum(e.get("ph") == "X" for e in raw["traceEvents"])
    r = run_cli("merge", src, "-o", tmp_path / "g2.json", "--gpu-only", "-j", 1)
    assert r.returncode == 0 and "warning:" in r.stderr and "CPU-only" in r.stderr
    # a GPU run keeps --gpu-only's meaning
    (res,) = merge([REAL / "mi250_rocm_minitoy.json.gz"], tmp_path / "gpu.json", MergeOptions(gpu_only=True, jobs=1))
    assert not res["cpu_only"] and not res["warnings"]
