"""The merged header lists each process group once (``streamtrace.pg_entries``; a rank's entry keeps
the indices of its groups, ``streamtrace.trace.merged_groups``), and every reader of a merged trace
still returns each rank's process groups as the rank's own trace lists them, for this header and
for one written by an older streamtrace (each rank's whole ``distributedInfo``).  The expected groups
are read with ``json`` from the raw rank files."""
from __future__ import annotations

import copy
import json

import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.analyze.outputs import Analysis, rank_trace_metadata
from streamtrace.merge import MergeOptions, merge
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.trace.merged_groups import rank_distributed_info, share_rank_groups
from streamtrace.trace.metadata import pg_config, pg_config_entries, trace_facts
from streamtrace.trace.reader import TraceReader

from support import load_json


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("groups")
    generate_job(d / "traces", SynthSpec(world_size=8, tp=2, pp=2, layers=1, microbatches=1))
    merge([d / "traces"], d / "merged.json", MergeOptions(jobs=1))
    raw = {}
    for p in sorted((d / "traces").rglob("rank_*.json")):
        di = load_json(p)["distributedInfo"]
        raw[di["rank"]] = di
    return d, raw


def _old_format(doc: dict, raw: dict) -> dict:
    """``doc`` (a merged trace, parsed) with its header as streamtrace wrote it before the table:
    each rank's entry carrying the rank's whole ``distributedInfo``."""
    old = copy.deepcopy(doc)
    st = old["streamtrace"]
    st.pop("pg_entries", None)
    for r in st["ranks"]:
        r.pop("pg_groups", None)
        r["distributedInfo"] = raw[r["rank"]]
    return old


def test_header_lists_each_group_once(job):
    d, raw = job
    assert all(len(di["pg_config"]) >= 3 for di in raw.values())
    st = load_json(d / "merged.json")["streamtrace"]
    table = st["pg_entries"]
    texts = [json.dumps(e, sort_keys=True) for e in table]
    assert len(set(texts)) == len(texts)
    distinct = {json.dumps(e, sort_keys=True) for di in raw.values() for e in di["pg_config"]}
    assert set(texts) == distinct
    assert sorted(r["rank"] for r in st["ranks"]) == sorted(raw)
    for r in st["ranks"]:
        assert "pg_config" not in r["distributedInfo"]
        # resolved by hand: exactly the rank's own distributedInfo
        assert dict(r["distributedInfo"], pg_config=[table[i] for i in r["pg_groups"]]) == raw[r["rank"]]


@pytest.mark.parametrize("form", ["new", "old"])
def test_readers_return_each_ranks_groups(job, tmp_path, form):
    d, raw = job
    path = d / "merged.json"
    if form == "old":
        path = tmp_path / "old.json"
        path.write_text(json.dumps(_old_format(load_json(d / "merged.json"), raw)))
    meta = TraceReader(path).read_metadata()
    everyone = []
    for rank, di in raw.items():
        assert pg_config(meta, rank) == {e["pg_name"]: e for e in di["pg_config"]}
        assert pg_config_entries(meta, rank) == (di["pg_config"], 8)
        assert trace_facts(meta, rank)["pg_entries"] == di["pg_config"]
        everyone += di["pg_config"]
    got = pg_config_entries(meta)[0]
    assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, everyone))
    out = tmp_path / "an"
    analyze([path], out, AnalyzeOptions(jobs=1))
    summ = Analysis.read(out).summary
    assert {r["rank"]: rank_trace_metadata(summ, r)["pg_entries"] for r in summ["ranks"]} == \
        {k: di["pg_config"] for k, di in raw.items()}


def test_dict_form_and_values_json_cannot_sort():
    shared = {"ranks": [0, 1], "pg_desc": "DATA_PARALLEL_GROUP"}
    ranks = [{"rank": 0, "distributedInfo": {"rank": 0, "pg_config": {"1": shared, "2": {"ranks": [0]}}}},
             {"rank": 1, "distributedInfo": {"rank": 1, "pg_config": {"1": dict(shared), "2": {"ranks": [1]}}}},
             {"rank": 2, "distributedInfo": {"rank": 2, "pg_config": [{"big": 2 ** 70}, dict(shared), {"v": None},
                                                                      {"v": float("nan")}]}},
             {"rank": 3, "distributedInfo": {"rank": 3}}, {"rank": 4}]
    want = copy.deepcopy(ranks)
    held = [r.get("distributedInfo") for r in ranks]
    table = share_rank_groups(ranks)
    assert len(table) == 6                       # shared, [0], [1], big, null, NaN: each once
    assert ranks[0]["pg_groups"] == {"1": 0, "2": 1} and ranks[2]["pg_groups"] == [3, 0, 4, 5]
    assert "pg_groups" not in ranks[3] and "pg_groups" not in ranks[4]
    assert [r.get("distributedInfo") for r in want] == held          # the given dicts are not changed
    header = {"pg_entries": table, "ranks": ranks}
    got = [rank_distributed_info(header, r) for r in ranks]
    assert json.dumps(got, sort_keys=True) == json.dumps([r.get("distributedInfo") for r in want], sort_keys=True)
    # an index outside the table is left out; an entry without indices is returned as it stands
    assert rank_distributed_info({"pg_entries": table}, {"distributedInfo": {}, "pg_groups": [0, 9, "x"]}) == \
        {"pg_config": [shared]}


def test_workers_metadata_shared_in_this_process(job):
    # each rank's metadata comes back from its worker unshared; the parent keeps one object per group
    from streamtrace.merge.outcome import share_metadata_head
    from streamtrace.merge.survey import Survey
    d, raw = job
    a, b = (Survey({"distributedInfo": copy.deepcopy(raw[r])}, None, {}, {}) for r in (0, 1))
    first = lambda s: s.metadata["distributedInfo"]["pg_config"][0]  # noqa: E731 - the default group, in both
    assert raw[0]["pg_config"][0] == raw[1]["pg_config"][0] and first(a) is not first(b)
    for s in (a, b):
        assert share_metadata_head(s) is s
    assert first(a) is first(b)
    assert a.metadata["distributedInfo"] == raw[0] and b.metadata["distributedInfo"] == raw[1]


def test_device_properties_shared_between_heads():
    # the node's GPU list, equal on every rank, is held once; a different one stays its own
    from streamtrace.trace.metadata import share_head
    gpus = [{"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984} for i in range(8)]
    a, b = (share_head({"deviceProperties": copy.deepcopy(gpus)}) for _ in range(2))
    c = share_head({"deviceProperties": copy.deepcopy(gpus[:4])})
    assert a["deviceProperties"] is b["deviceProperties"] and a["deviceProperties"] == gpus
    assert c["deviceProperties"] is not a["deviceProperties"] and c["deviceProperties"] == gpus[:4]
    assert share_head({"deviceProperties": []}) == {"deviceProperties": []}


def test_shared_groups_tell_nan_from_null():
    from streamtrace.trace.metadata import share_head
    a = share_head({"distributedInfo": {"pg_config": [{"pg_name": "x", "v": None}]}})
    b = share_head({"distributedInfo": {"pg_config": [{"pg_name": "x", "v": float("nan")}]}})
    assert a["distributedInfo"]["pg_config"][0]["v"] is None
    assert b["distributedInfo"]["pg_config"][0]["v"] != b["distributedInfo"]["pg_config"][0]["v"]     # NaN
