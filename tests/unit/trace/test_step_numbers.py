"""A step number past int64 (``ProfilerStep#99999999999999999999``, a fuzzing pass): the name is no
step, as a name whose number is no number is none; ``analyze`` and ``merge`` read the trace (the
name's ops kept, outside any step) instead of ending on ``OverflowError`` or listing the number."""
from __future__ import annotations

import json
import re

import pytest

from kineto import KinetoDoc
from streamtrace.aggregate.steps import StepNames
from streamtrace.trace.steps import STEP_PATTERNS, profiler_step_number, step_number, step_regex
from support import run_cli

INT64_MAX = 9223372036854775807
HUGE = "99999999999999999999"                 # > 2^63 - 1


@pytest.mark.parametrize("name, want", [("ProfilerStep#7", 7), (f"ProfilerStep#{INT64_MAX}", INT64_MAX),
                                        (f"ProfilerStep#{INT64_MAX + 1}", -1), (f"ProfilerStep#{HUGE}", -1),
                                        (f"iteration {HUGE}", -1), ("step_0", 0)])
def test_a_step_number_is_an_int64(name, want):
    m = step_regex(STEP_PATTERNS).search(name)
    assert step_number(m) == want
    assert StepNames(STEP_PATTERNS).number(name) == want
    assert (StepNames(STEP_PATTERNS).generic(name) == name) == (want < 0)
    if name.startswith("ProfilerStep#"):
        assert profiler_step_number(name) == want


def _trace(path, rank):
    d = KinetoDoc(rank)
    d.cpu("ProfilerStep#1", 0, 100).launch(10, 20, 5)
    d.cpu(f"ProfilerStep#{HUGE}", 150, 100).launch(160, 170, 5)       # after step 1, apart
    return d.write(path)


def test_analyze_and_merge_read_a_trace_with_such_a_name(tmp_path):
    a, b = _trace(tmp_path / "rank0.json", 0), _trace(tmp_path / "rank1.json", 1)
    r = run_cli("analyze", a, b, "-o", tmp_path / "out")
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [sorted(x["iterations"]) for x in summary["ranks"]] == [["1"], ["1"]]
    assert [sum(d["gpu_events"] for d in x["devices"].values()) for x in summary["ranks"]] == [2, 2]
    m = run_cli("merge", a, b, "-o", tmp_path / "m.json", "--steps", "1-2", "-q")
    assert m.returncode == 1 and "Traceback" not in m.stderr
    assert m.stderr.strip().splitlines()[-1].endswith("--steps 1-2 not in this rank's ProfilerSteps (1)")
    ok = run_cli("merge", a, b, "-o", tmp_path / "m1.json", "--steps", "1", "-q")
    assert ok.returncode == 0, ok.stderr
    evs = json.loads((tmp_path / "m1.json").read_text())["traceEvents"]
    assert sorted(e["name"] for e in evs if e.get("cat") == "user_annotation") == ["ProfilerStep#1"] * 2


@pytest.mark.parametrize("name", ["ProfilerStep# 3", "ProfilerStep#+3", "ProfilerStep#1_000", "ProfilerStep#3 ",
                                  "ProfilerStep#-3", "ProfilerStep#3x"])
def test_merge_reads_a_step_name_as_analyze_does(name):
    """``int()`` of the text after ``#`` (merge's pre-passes) took these for steps; the Kineto pattern
    (``^ProfilerStep#(\\d+)$``, what analyze reads) does not: none is a step, for either."""
    assert re.fullmatch(r"ProfilerStep#[0-9]+", name) is None       # (the expected answer, by plain re)
    assert profiler_step_number(name) == -1
    assert StepNames(STEP_PATTERNS).number(name) == -1
