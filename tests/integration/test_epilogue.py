"""``streamtrace epilogue``: the whole post-job pipeline, robust and idempotent."""
from __future__ import annotations

import json

from streamtrace.epilogue import run
from streamtrace.trace.synth import SynthSpec, generate_job
from streamtrace.trace.validate import validate

from support import run_cli


def make_run(tmp_path):
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=1, compress=True))
    (d / "iteration_10" / "rank_0007_iter_10.pt.trace.json").write_text('{"traceEvents": [{"ph": "X"')
    return d


def test_epilogue_end_to_end_keeps_going_and_reuses(tmp_path):
    d = make_run(tmp_path)
    s = run(d, jobs=2)
    out = d / "streamtrace"
    # the truncated rank is reported with its file, the four good ranks are processed
    bad = [f for f in s["failures"] if "rank_0007" in f["file"]]
    assert bad and all("truncated" in f["error"] for f in bad)
    summary = json.loads((out / "iteration_10" / "analysis" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    merged = out / "iteration_10" / "merged_gpu.json.gz"
    rep = validate(merged)
    assert rep["ok"] and rep["events"] > 0
    assert (out / "aggregate").is_dir()
    state = json.loads((out / "epilogue.json").read_text())
    assert state["summary"]["stages"]["iteration_10/analyze"] == "done"
    # second run: nothing changed, every successful stage is reused
    s2 = run(d, jobs=2)
    assert s2["stages"]["iteration_10/analyze"] == "reused" and s2["stages"]["iteration_10/merge"] == "reused"
    assert s2["stages"].get("aggregate") in ("reused", None) or s["stages"]["aggregate"] == "failed"


def test_epilogue_never_raises_and_exit_codes(tmp_path):
    s = run(tmp_path / "does-not-exist")
    assert s["failures"]
    d = make_run(tmp_path)
    r = run_cli("epilogue", d, "-j", "1")
    assert r.returncode == 0 and "FAILED" in r.stderr and "rank_0007" in r.stderr
    r = run_cli("epilogue", d, "-j", "1", "--strict")
    assert r.returncode == 1
