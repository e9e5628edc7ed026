"""A topology given to ``aggregate`` names the communication of the timeline (``comm:<dim>``) as it
names the collectives (``streamtrace.aggregate.collective_rows.fill_dims``), on the real Megatron TP=2
job whose traces name no dimension (``pg_desc`` "undefined"): its all-reduces run on the process
group whose ranks (``Process Group Ranks`` in the raw JSON) are the topology's TP group."""
from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.run import aggregate
from streamtrace.aggregate.options import AggregateOptions

from support import SHARED

MEGATRON = SHARED / "traces" / "real-multi" / "megatron_tp2_v100x2"


@pytest.mark.parametrize("jobs", [1, 2])
def test_timeline_comm_labels_use_the_topologys_dimension(tmp_path, jobs):
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    groups = set()
    for f in MEGATRON.glob("*.json.gz"):
        with gzip.open(f) as fh:
            groups |= {e["args"]["Process Group Ranks"] for e in json.load(fh)["traceEvents"]
                       if e.get("cat") == "kernel" and "Process Group Ranks" in e.get("args", {})}
    assert groups == {"[0, 1]"}
    topo = {"format": "streamtrace-topology", "version": 1, "world_size": 2, "order": "tp-cp-ep-dp-pp",
            "sizes": {"tp": 2, "cp": 1, "ep": 1, "dp": 1, "pp": 1}, "tp": [[0, 1]], "cp": [[0], [1]],
            "ep": [[0], [1]], "dp": [[0], [1]], "pp": [[0], [1]], "replicas": [[0, 1]]}
    (tmp_path / "topo.json").write_text(json.dumps(topo))
    analyze([MEGATRON], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "plain", AggregateOptions(jobs=jobs))
    aggregate([tmp_path / "an"], tmp_path / "topo", AggregateOptions(jobs=jobs, topology=tmp_path / "topo.json"))
    plain = set(pq.read_table(tmp_path / "plain" / "timeline.parquet")["category"].to_pylist())
    named = set(pq.read_table(tmp_path / "topo" / "timeline.parquet")["category"].to_pylist())
    assert {c for c in plain if c.startswith("comm:")} == {"comm:unknown"}
    assert {c for c in named if c.startswith("comm:")} == {"comm:TP"}
    assert set(pq.read_table(tmp_path / "topo" / "collectives.parquet")["parallel_dim"].to_pylist()) == {"TP"}
