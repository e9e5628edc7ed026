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
