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
from hypothesis import given, settings, strategies as st

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


def _groups_by_hand(rows: list) -> dict:
    """The process_groups table of ``rows`` (collectives.parquet rows as dicts), in plain Python from the
    table's definition (streamtrace.aggregate.groups' docstring)."""
    acc: dict = {}
    for r in rows:
        if r["src"] >= 0 or r["collective"] in ("Send", "Recv", "SendRecv"):
            continue
        named = bool(r["pg_ranks"])
        g = acc.setdefault(r["pg_ranks"] if named else r["ranks"],
                           {"kinds": {}, "n": 0, "bytes": 0, "sized": False, "t": 0, "k": 0, "named": False,
                            "topo": False, "pg": "", "dims": set()})
        g["kinds"][r["collective"]] = g["kinds"].get(r["collective"], 0) + 1
        g["n"] += 1
        g["bytes"] += max(r["msg_bytes"], 0)
        g["sized"] |= r["msg_bytes"] >= 0
        g["t"] += r["latency_ns"]
        g["k"] += r["kernel_time_ns"]
        g["named"] |= named
        g["topo"] |= named and r["source"] == "cpu ops"
        g["pg"] = max(g["pg"], r["pg_name"])
        g["dims"] |= {r["parallel_dim"]} if r["parallel_dim"] else set()
    out = {c: [] for c in ("group", "ranks_from", "pg_name", "group_size", "parallel_dim", "instances", "kinds",
                           "bytes", "time_ns", "kernel_time_ns")}
    keep = [k for k in acc if len(k.split(",")) >= 2]
    for k in sorted(keep, key=lambda k: (-len(k.split(",")), [int(x) for x in k.split(",")])):
        g = acc[k]
        for c, v in (("group", k), ("ranks_from", "topology" if g["topo"] else "process group" if g["named"]
                                    else "members seen"), ("pg_name", g["pg"]), ("group_size", len(k.split(","))),
                     ("parallel_dim", ", ".join(sorted(g["dims"] - {"unknown"}) or ["unknown"])),
                     ("instances", g["n"]), ("kinds", ", ".join(f"{n} {c}" for n, c in sorted(g["kinds"].items()))),
                     ("bytes", g["bytes"] if g["sized"] else -1), ("time_ns", g["t"]), ("kernel_time_ns", g["k"])):
            out[c].append(v)
    return out


_ROW = st.fixed_dictionaries({
    "collective": st.sampled_from(["AllReduce", "AllGather", "Send", "Recv", "ReduceScatter"]),
    "pg_ranks": st.sampled_from(["", "0,1", "0,1,2,3", "2,3", "5"]),
    "pg_name": st.sampled_from(["", "0", "1", "tp"]),
    "ranks": st.sampled_from(["0,1", "0,2", "1,3", "0,1,2,3", "4"]),
    "group_size": st.integers(1, 4), "msg_bytes": st.sampled_from([-1, 1, 2, 3]),
    "latency_ns": st.integers(0, 10**9), "kernel_time_ns": st.integers(0, 10**9),
    "parallel_dim": st.sampled_from(["", "TP", "DP", "unknown"]), "src": st.sampled_from([-1, -1, 0, 1]),
    "source": st.sampled_from(["cpu ops", "kernels"])})


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(_ROW, max_size=30), batch=st.integers(1, 8))
def test_process_groups_a_batch_at_a_time_equals_the_table_by_hand(tmp_path_factory, rows, batch):
    """``process_groups`` reads collectives.parquet ``batch_rows`` rows at a time: the table equals the one
    computed from the rows in plain Python, whatever the batch."""
    from streamtrace.aggregate.groups import process_groups
    d = tmp_path_factory.mktemp("pg")
    types = {"collective": pa.string(), "pg_ranks": pa.string(), "pg_name": pa.string(), "ranks": pa.string(),
             "group_size": pa.int64(), "msg_bytes": pa.int64(), "latency_ns": pa.int64(), "kernel_time_ns": pa.int64(),
             "parallel_dim": pa.string(), "src": pa.int64(), "source": pa.string()}
    cols = {c: [r[c] for r in rows] for c in types}
    pq.write_table(pa.table({c: pa.array(v, types[c]) for c, v in cols.items()}), d / "collectives.parquet",
                   row_group_size=3)
    got = {c: v.tolist() for c, v in process_groups(d, batch_rows=batch).items()}
    assert got == _groups_by_hand(rows)
