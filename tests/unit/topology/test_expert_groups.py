"""Expert groups (issue 15, part 4) against megatron-core's own ``initialize_model_parallel`` (run
for real with a recording stand-in for torch.distributed, ``tools/check_expert_groups.py``): every
group Megatron builds (TP, CP, DP, DP x CP, PP, EP, ETP, EDP, ETP x EP, ETP x EP x PP) for every size
and order the dense tests use, and the same refusals.  Classification of communication over expert
groups: Megatron's exact group descriptions win over rank sets."""
from __future__ import annotations

import importlib.util
import warnings

import pytest

from streamtrace.topology import dim_of_desc, format_traceviz_txt, from_sizes, topology_from_traceviz
from streamtrace.topology.sources import from_json, from_pg_config

from support import ROOT
from test_topology import COMBOS, ORDERS, RICH


def _tool():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.parallel_state  # noqa: F401
    except Exception:       # megatron-core or torch missing (or broken)
        pytest.skip("megatron-core (with torch) is not installed")
    spec = importlib.util.spec_from_file_location("check_expert_groups", ROOT / "tools" / "check_expert_groups.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_group_equals_megatron_initialize_model_parallel():
    tool = _tool()
    configs = []
    for k, ((w, tp, pp, cp, ep), order) in enumerate(
            (c, o) for c in COMBOS for o in ORDERS):
        if (w, tp, pp, cp, ep) not in RICH and k % 11:      # the dense test's selection
            continue
        configs += [(w, tp, pp, cp, ep, etp, order) for etp in (None, 1, 2)
                    if etp is None or (w, tp, pp, cp, ep) in RICH or k % 3 == 0]
    n, built, refused, kinds, examples = tool.compare(configs)
    assert not kinds, {k: examples[k][:3] for k in kinds}
    assert built > 300 and refused > 50 and n == built + refused


def test_expert_groups_hand_checked():
    # world 16, tp2 pp2 ep2 etp1 (order tp-cp-ep-dp-pp): expert dp = 16 / (1*2*2) = 4
    t = from_sizes(16, tp=2, pp=2, ep=2, etp=1)
    assert t.groups["ep"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert t.extra["edp"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert t.extra["etp"] == [[r] for r in range(16)]
    assert t.extra["etp_ep_pp"][0] == [0, 1, 8, 9]
    # EP groups equal TP groups and EDP groups equal DP groups here: by rank set they stay dense,
    assert t.dim_of([0, 1]) == "TP" and t.dim_of([0, 2, 4, 6]) == "DP"
    # but Megatron's description says which group it is
    assert dim_of_desc("EXPERT_DATA_PARALLEL_GROUP") == "EDP" and dim_of_desc("EXPERT_MODEL_PARALLEL_GROUP") == "EP"
    assert dim_of_desc("EXPERT_TENSOR_PARALLEL_GROUP") == "ETP" and dim_of_desc("DATA_PARALLEL_GROUP_WITH_CP") == "DP"
    assert dim_of_desc("HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1") == "EDP"
    assert dim_of_desc("TENSOR_AND_DATA_PARALLEL_GROUP") is None and dim_of_desc("") is None
    # tp2 ep2, world 16: dense DP groups of 8 (stride 2), EDP groups of 4 (stride 4) of their own
    t = from_sizes(16, tp=2, ep=2)
    assert t.groups["dp"][0] == [0, 2, 4, 6, 8, 10, 12, 14]
    assert t.extra["edp"][0] == [0, 4, 8, 12] and t.dim_of([0, 4, 8, 12]) == "EDP"
    # tp4 etp2: the expert TP groups are halves of the TP groups
    t = from_sizes(16, tp=4, ep=2, etp=2)
    assert t.extra["etp"][0] == [0, 1] and t.dim_of([0, 1]) == "ETP" and t.dim_of([0, 1, 2, 3]) == "TP"


def test_expert_groups_round_trip_json_txt_pg_config(tmp_path):
    t = from_sizes(32, tp=2, pp=2, ep=4, etp=1, order="tp-cp-ep-dp-pp")
    back = from_json(t.to_json(), "json")
    assert back.extra == t.extra and back.groups == t.groups and back.order == t.order
    txt = format_traceviz_txt(t.to_json())
    assert "EXPERT DATA PARALLEL (EDP) GROUPS" in txt and "EXPERT TENSOR PARALLEL (ETP) GROUPS" in txt
    tv = topology_from_traceviz(txt)
    assert tv.extra["edp"] == t.extra["edp"] and tv.extra["etp"] == t.extra["etp"] and tv.groups == t.groups
    assert tv.order == "tp-cp-ep-dp-pp"
    dense = format_traceviz_txt(from_sizes(8, tp=2, pp=2).to_json())
    assert "EXPERT DATA" not in dense and "EXPERT TENSOR" not in dense       # no experts: TraceViz's layout
    entries = [{"pg_desc": desc, "ranks": g} for key, desc in (("edp", "EXPERT_DATA_PARALLEL_GROUP"),
                                                               ("etp", "EXPERT_TENSOR_PARALLEL_GROUP"))
               for g in t.extra[key]]
    entries += [{"pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": g} for g in t.groups["tp"]]
    pg = from_pg_config(entries)
    assert pg.extra["edp"] == t.extra["edp"] and pg.extra["etp"] == t.extra["etp"]


def test_analyze_classifies_expert_communication(tmp_path):
    """NCCL kernels on rank 0 of a TP2 x PP2 x EP2 (ETP1) job of 16 ranks: a gradient all-reduce over
    EXPERT_DATA_PARALLEL_GROUP whose ranks equal a dense DP group is EDP (the description wins); one
    over ranks [0, 4, 8, 12] of a tp2/ep2 job without a description is EDP by the topology; the
    dense groups stay TP and DP."""
    import json

    import pyarrow.dataset as ds

    from streamtrace.analyze import AnalyzeOptions, analyze
    from streamtrace.topology import write_topology

    from kineto import KinetoDoc

    def nccl(doc, ts, ranks, desc):
        c = doc.launch(ts, ts + 100, 50, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        doc.events[-1]["args"].update({"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                                       "dtype": "Float", "Process Group Name": str(c), "Group size": len(ranks),
                                       "Process Group Description": desc, "Process Group Ranks": str(ranks)})

    cases = [(from_sizes(16, tp=2, pp=2, ep=2, etp=1),
              [([0, 2, 4, 6], "EXPERT_DATA_PARALLEL_GROUP", "EDP"), ([0, 2, 4, 6], "DATA_PARALLEL_GROUP", "DP"),
               ([0, 1], "EXPERT_MODEL_PARALLEL_GROUP", "EP"), ([0, 1], "TENSOR_MODEL_PARALLEL_GROUP", "TP"),
               ([0, 2, 4, 6], "", "DP"), ([0, 1], "", "TP")]),
             (from_sizes(16, tp=2, ep=2), [([0, 4, 8, 12], "", "EDP"), ([0, 4, 8, 12], "my_expert_dp", "EDP"),
                                           ([0, 2, 4, 6, 8, 10, 12, 14], "", "DP")])]
    for k, (topo, rows) in enumerate(cases):
        doc = KinetoDoc().cpu("ProfilerStep#1", 0, 10_000)
        for j, (ranks, desc, _) in enumerate(rows):
            nccl(doc, 100 + 1000 * j, ranks, desc)
        tf = write_topology(topo, tmp_path / f"topo{k}.json")
        out = tmp_path / f"an{k}"
        analyze([doc.write(tmp_path / f"t{k}.json")], out, AnalyzeOptions(jobs=1, topology=str(tf)))
        t = ds.dataset(out / "kernels", partitioning="hive").to_table().sort_by("ts_ns")
        assert t["parallel_dim"].to_pylist() == [want for _, _, want in rows], json.dumps(rows)
