"""Every stage returns a typed result, the object ``streamtrace.load`` returns for its folder, that still
reads like the dict it returned before (issue 29, item 3)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

import streamtrace
from streamtrace.synth.job import SynthSpec, generate_job


def test_stages_return_their_folders_and_stay_dicts(tmp_path):
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1))
    an = streamtrace.analyze([d], tmp_path / "an", streamtrace.AnalyzeOptions(jobs=1, progress=False))
    on_disk = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert type(an) is type(streamtrace.load(tmp_path / "an")) and an.kind == "analysis"
    assert an == on_disk and an["ranks"] == on_disk["ranks"] and an.get("nope", 7) == 7 and "failed" in an
    assert json.loads(json.dumps(an.summary)) == on_disk and dict(an) == an.summary
    assert len(an.to_pandas("kernels")) == len(pd.read_parquet(tmp_path / "an" / "kernels"))

    agg = streamtrace.aggregate([tmp_path / "an"], tmp_path / "agg", streamtrace.AggregateOptions(jobs=1))
    assert agg.kind == "aggregate" and agg == json.loads((tmp_path / "agg" / "aggregate.json").read_text())
    assert set(agg.to_pandas("ranks")["rank"]) == {r["rank"] for r in on_disk["ranks"]}

    rep = streamtrace.report(tmp_path / "agg", opt=streamtrace.ReportOptions(charts=False))
    assert rep.kind == "report" and rep.path == tmp_path / "agg"
    assert rep["files"][0].endswith(".md") and all(Path(f).exists() for f in rep["files"])
    assert rep["aggregated"] is None

    (res,) = streamtrace.merge([d], tmp_path / "m.json.gz", streamtrace.MergeOptions(jobs=1, progress=False))
    assert isinstance(res, streamtrace.merge.MergeResult) and res.output == tmp_path / "m.json.gz"
    with gzip.open(res.output, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert res["events_out"] == len(events) and res.summary["output"] == str(res.output)
