"""What is known without a topology (the process groups seen on the collectives, the inferred layout),
and one topology file naming the same dimension in ``report --topology`` and ``epilogue --topology``;
on the real 2-rank Megatron TP=2 job (../shared/traces/real-multi).  Expected figures from the raw
JSON with plain Python."""
from __future__ import annotations

import gzip
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.run import aggregate
from streamtrace.aggregate.options import AggregateOptions

from support import SHARED, run_cli

MEGATRON = SHARED / "traces" / "real-multi" / "megatron_tp2_v100x2"
DTYPE_SIZE = {"Float": 4, "Half": 2, "BFloat16": 2}


@pytest.fixture(scope="module")
def megatron(tmp_path_factory):
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    tmp = tmp_path_factory.mktemp("groups")
    analyze([MEGATRON], tmp / "an", AnalyzeOptions(jobs=1))
    raw = {}
    for f in sorted(MEGATRON.glob("*.json.gz")):
        d = json.loads(gzip.open(f).read())
        raw[int(d["distributedInfo"]["rank"])] = [e for e in d["traceEvents"] if e.get("cat") == "kernel"
                                                  and "nccl" in e.get("name", "").lower()]
    return raw, tmp


def test_process_groups_and_inferred_layout(megatron):
    raw, tmp = megatron
    m = aggregate([tmp / "an"], tmp / "ag", AggregateOptions(jobs=1))
    g = pq.read_table(tmp / "ag" / "process_groups.parquet").to_pydict()
    args = [k["args"] for k in raw[0]]
    ranks = {",".join(x.strip() for x in a["Process Group Ranks"].strip("[]").split(",")) for a in args}
    names = {a["Process Group Name"] for a in args}
    assert len(ranks) == 1 and len(names) == 1
    assert g["group"] == [ranks.pop()] and g["group_size"] == [2] and g["ranks_from"] == ["process group"]
    assert g["pg_name"] == [names.pop()]
    assert g["instances"] == [len(raw[0])] and g["kinds"] == [f"AllReduce {len(raw[0])}"]
    assert g["bytes"] == [sum(a["In msg nelems"] * DTYPE_SIZE[a["dtype"]] for a in args)]
    assert m["inferred_layout"]["inferred"] and m["inferred_layout"]["size"] == 2
    md = run_cli("report", tmp / "ag", "--no-charts")
    assert md.returncode == 0, md.stderr
    text = next((tmp / "ag").glob("*.md")).read_text()
    assert "## Process groups" in text and "**Layout, inferred**" in text


def test_no_layout_said_when_groups_are_smaller_than_the_world(megatron, tmp_path):
    """Rank 1's kernels named as a group of one: not every collective spans the world, nothing inferred."""
    raw, tmp = megatron
    an = tmp_path / "an"
    shutil.copytree(tmp / "an", an)
    for path in an.glob("kernels/*/rank=1/part-0.parquet"):
        t = pq.read_table(path)
        ranks = ["1" if r else r for r in t["pg_ranks"].to_pylist()]
        t = t.set_column(t.schema.get_field_index("pg_ranks"), "pg_ranks", pa.array(ranks, pa.string()))
        pq.write_table(t, path)
    m = aggregate([an], tmp_path / "ag", AggregateOptions(jobs=1))
    assert m["inferred_layout"] is None


def test_report_and_epilogue_name_the_same_dimension(megatron, tmp_path):
    """One topology file (TP group = the ranks the kernels name), given to report on analysed folders
    and to the epilogue on the traces: every collective gets the same dimension, TP."""
    raw, tmp = megatron
    topo = tmp_path / "tp2.json"
    topo.write_text(json.dumps({"order": "tp-cp-ep-dp-pp", "world_size": 2, "tp": 2, "cp": 1, "ep": 1, "dp": 1,
                                "pp": 1, "tp_groups": [[0, 1]], "dp_groups": [[0], [1]], "pp_groups": [[0], [1]]}))
    r = run_cli("report", tmp / "an", "-o", tmp_path / "rep", "--topology", topo, "--no-charts", "-j", "1")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    shutil.copytree(MEGATRON, run)
    e = run_cli("epilogue", run, "-o", tmp_path / "epi", "--topology", topo, "--no-charts", "-j", "1")
    assert e.returncode == 0, e.stderr
    rep = pq.read_table(tmp_path / "rep" / "collectives.parquet").to_pydict()["parallel_dim"]
    epi = pq.read_table(next((tmp_path / "epi").rglob("collectives.parquet"))).to_pydict()["parallel_dim"]
    assert rep == epi == ["TP"] * len(raw[0])
