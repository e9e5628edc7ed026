"""``tools/whatif_rerun.py``, the real-rerun check of the what-if replay: a tiny real gloo DDP job (2
ranks, torch on the CPU) with a sleep in rank 0's data loading, run and scored, then scored again with
``--rescore`` (no job run).  The figures a run prints are the machine's (bench/RESULTS.md has them);
here: the faulty steps, read from the raw traces with json, hold the sleep; the what-if that removes it
predicts a shorter step; scoring the same traces again gives the same prediction."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import ROOT

pytestmark = pytest.mark.slow
TOOL = ROOT / "tools" / "whatif_rerun.py"


def _rows(out: str) -> list:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_a_rerun_and_its_rescore(tmp_path):
    pytest.importorskip("torch")
    args = [sys.executable, str(TOOL), str(tmp_path / "runs"), "--rounds", "1", "--faults", "sleep", "--steps", "4",
            "--hidden", "64", "--layers", "2", "--batch", "16", "--sleep-ms", "40"]
    first = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(args + ["--rescore"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    (clean, sleep), (clean2, sleep2) = _rows(first.stdout), _rows(again.stdout)
    assert (clean["fault"], sleep["fault"]) == ("clean", "sleep") and sleep["steps"] == clean["steps"] == 8
    assert sleep["min_ns"] >= 34_000_000 and sleep["min_ns"] > clean["median_ns"]   # each faulty step holds the sleep
    assert sleep["predicted_ns"] < sleep["median_ns"] - 20_000_000      # removing it saves most of it
    assert sleep2["predicted_ns"] == sleep["predicted_ns"] and clean2["median_ns"] == clean["median_ns"]
    assert "| 0 | sleep |" in again.stdout and "--rescore" in again.stdout


GPU_TOOL = ROOT / "tools" / "whatif_gpu_rerun.py"


def _gpu_tool():
    pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("whatif_gpu_rerun", GPU_TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_rerun_steps_from_the_raw_trace(tmp_path):
    """A hand-written trace: one ProfilerStep on the CPU (100-200 us) and its GPU-side copy, a GEMM
    launched inside it ending at 260 us, a kernel launched before it: the step is 100 -> 260 us."""
    d = tmp_path / "iteration_1"
    d.mkdir()
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 100, "dur": 100},
          {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "ts": 150, "dur": 110},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 120, "dur": 5, "args": {"correlation": 7}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 90, "dur": 5, "args": {"correlation": 6}},
          {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "ts": 200, "dur": 60,
           "args": {"correlation": 7}},
          {"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "ts": 260, "dur": 100, "args": {"correlation": 6}}]
    (d / "rank_0000_iter_1.pt.trace.json").write_text(json.dumps({"traceEvents": ev}))
    assert _gpu_tool().raw_steps(tmp_path) == [{"step_ns": 160_000, "gemm_ns": 60_000}]


def test_gpu_rerun_smoke_on_the_cpu(tmp_path):
    """``--small`` on the CPU: the three runs, the sleep's what-if saves most of the sleep."""
    _gpu_tool()
    r = subprocess.run([sys.executable, str(GPU_TOOL), str(tmp_path), "--small", "--rounds", "1", "--steps", "3",
                        "--sleep-ms", "40"], capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr[-2000:]        # 1: an error over 10 % (a CPU smoke run may)
    rows = json.loads((tmp_path / "rerun.json").read_text())
    assert [x["run"] for x in rows] == ["sleep", "fp32"]
    sleep = rows[0]
    assert sleep["faulty"]["steps"] == sleep["clean"]["steps"] == 3 and sleep["faulty"]["min_ns"] >= 40_000_000
    assert sleep["predicted_ns"] < sleep["faulty"]["step_ns"] - 30_000_000
    assert "| 0 | sleep |" in (tmp_path / "rerun.md").read_text()
