"""A collective's facts from each source (analyze/collective_facts.py), built from the shapes of
real events of each PyTorch era, and on the real multi-rank jobs: every collective's type and
bytes against a plain-Python reading of the raw JSON (kernel -> correlation -> launch ->
enclosing ops on the launching thread)."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.analyze.collective_facts import OpIndex, collective_facts
from streamtrace.analyze.patterns import Patterns

from support import SHARED

MULTI = SHARED / "traces" / "real-multi"
PATS = Patterns.load(None)


def op(name, ts, end, tid=7, **args):
    """A collective-args row of a named CPU op, as ingest keeps it."""
    return {"@op": name, "@pid": 1, "@tid": tid, "@ts": ts, "@end": end, **args}


# -- each source, from the real events' shapes ---------------------------------------------

def test_kernel_args_newest_kineto():
    # the NCCL kernel's args in PyTorch 2.4+ (megatron_tp2_v100x2's kernels, plus Seq)
    own = {"Collective name": "allreduce", "In msg nelems": 6144, "Out msg nelems": 6144, "Group size": 2,
           "dtype": "Float", "In split size": "[]", "Out split size": "[]", "Process Group Name": "13",
           "Process Group Description": "undefined", "Process Group Ranks": "[0, 1]", "Seq": 41}
    f = collective_facts("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", own, [],
                         PATS, {})
    assert (f.collective, f.in_bytes, f.out_bytes, f.msg_bytes) == ("AllReduce", 6144 * 4, 6144 * 4, 24576)
    assert (f.group_size, f.pg_name, f.pg_ranks, f.seq, f.bytes_source) == (2, "13", [0, 1], 41, "kernel_args")
    assert f.in_splits == f.out_splits == ""


def test_record_param_comms_era():
    # v100_float_ns_rank0: the kernel has no args; record_param_comms carries them (no pg name)
    rpc = op("record_param_comms", 100, 200, **{"Collective name": "allreduce", "dtype": "Float",
                                                "In msg nelems": 2049000, "Out msg nelems": 2049000,
                                                "Group size": 2, "Process Group Ranks": "[0, 1]"})
    ann = op("nccl:all_reduce", 110, 190)
    f = collective_facts("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", None, [ann, rpc], PATS, {})
    assert (f.collective, f.in_bytes, f.out_bytes, f.group_size) == ("AllReduce", 2049000 * 4, 2049000 * 4, 2)
    assert (f.pg_ranks, f.bytes_source, f.seq) == ([0, 1], "record_param_comms", -1)


def test_record_param_comms_concrete_inputs():
    # the macro's recorded inputs (input tensors, seq, pg, rank, collective name, splits)
    rpc = op("record_param_comms", 100, 200, **{
        "Input Dims": [[1024], [], [], [], [], [], []], "Input type": ["c10::BFloat16", "Scalar", "Scalar", "Scalar",
                                                                      "", "", ""],
        "Concrete Inputs": ["", "17", "1402", "0", "allgather", "[]", "[]"]})
    f = collective_facts("ncclKernel_AllGather_RING_LL_Sum_bf16", None, [rpc], PATS, {}, world_size=4)
    assert (f.collective, f.seq, f.bytes_source, f.dtype) == ("AllGather", 17, "record_param_comms", "c10::BFloat16")
    assert (f.in_bytes, f.out_bytes, f.group_size, f.pg_ranks) == (2048, 2048 * 4, 4, [0, 1, 2, 3])


def test_annotation_only_era():
    # a100_rank3_of8: record_param_comms without args, the size only on nccl:* (Input Dims x Input type)
    rpc = op("record_param_comms", 100, 300)
    ann = op("nccl:all_reduce", 120, 290, **{"Input Dims": [[4, 2048, 4096]], "Input type": ["c10::Half"]})
    f = collective_facts("ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)", None, [ann, rpc], PATS,
                         {"0": {"ranks": [0, 1]}}, world_size=8)
    assert (f.collective, f.in_bytes, f.out_bytes, f.bytes_source) == ("AllReduce", 4 * 2048 * 4096 * 2,
                                                                       4 * 2048 * 4096 * 2, "annotation_dims")
    assert f.group_size == -1                  # process groups exist but none is named: unknown


def test_nothing_known():
    f = collective_facts("ncclKernel_Broadcast_RING_LL_Sum_int8_t", None, [], PATS, {})
    assert (f.collective, f.in_bytes, f.msg_bytes, f.bytes_source, f.seq) == ("Broadcast", -1, -1, "unknown", -1)


def test_alltoall_uneven_splits_from_args():
    # an all_to_allv (MoE token dispatch) on a SendRecv kernel: splits in elements, 2 bytes each
    own = {"Collective name": "all_to_allv", "In msg nelems": 60, "Out msg nelems": 40, "Group size": 4,
           "dtype": "BFloat16", "In split size": "[10, 20, 0, 30]", "Out split size": "[5, 5, 25, 5]",
           "Process Group Name": "3", "Process Group Ranks": "[0, 1, 2, 3]"}
    f = collective_facts("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", own, [], PATS, {})
    assert (f.collective, f.in_bytes, f.out_bytes, f.msg_bytes) == ("AllToAll", 120, 80, 120)
    assert (f.in_splits, f.out_splits) == ("20,40,0,60", "10,10,50,10")


def test_alltoall_even_split_when_lists_empty():
    rpc = op("record_param_comms", 0, 50, **{"Collective name": "all_to_all", "In msg nelems": 64,
                                             "Out msg nelems": 64, "dtype": "Float", "Group size": 4,
                                             "In split size": "[]", "Out split size": "[]"})
    f = collective_facts("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None, [rpc], PATS, {})
    assert (f.collective, f.in_splits, f.out_splits) == ("AllToAll", "64,64,64,64", "64,64,64,64")


def test_alltoall_old_kernel_names_under_c10d_op():
    # param_dlrm_v100x8, rank 0: c10d::alltoall_base_(output, input, ...) > record_param_comms > nccl:all_to_all
    c10d = op("c10d::alltoall_base_", 0, 88, **{"Input Dims": [[768], [3392], [], [], [], []],
                                                "Input type": ["int", "int", "", "", "", "Scalar"]})
    rpc = op("record_param_comms", 4, 80, **{"Input Dims": [[3392], [], [], [], [], [], []],
                                             "Input type": ["int", "Scalar", "Scalar", "Scalar", "", "", ""]})
    ann = op("nccl:all_to_all", 16, 64, **{"Input Dims": [[3392]], "Input type": ["int"]})
    f = collective_facts("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
                         None, [ann, rpc, c10d], PATS, {}, world_size=8)
    assert (f.collective, f.in_bytes, f.out_bytes, f.msg_bytes) == ("AllToAll", 3392 * 4, 768 * 4, 3392 * 4)
    assert (f.group_size, f.pg_ranks, f.bytes_source, f.in_splits) == (8, list(range(8)), "record_param_comms", "")
    assert f.pg_desc == "inferred:default_pg"          # no process group anywhere in the trace


def test_point_to_point_stays_apart():
    """Point-to-point never becomes all-to-all; a SendRecv kernel under one send or receive is that
    Send / Recv (NCCL 2.19+ runs each as a SendRecv kernel; issue 47), under a batch of both a SendRecv."""
    for name, want in (("nccl:send", "Send"), ("nccl:recv", "Recv"), ("c10d::send", "Send"),
                       ("batch_isend_irecv", "SendRecv")):
        ann = op(name, 0, 10, **{"Input Dims": [[16, 128]], "Input type": ["float"]})
        f = collective_facts("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None, [ann], PATS, {})
        assert f.collective == want, name
        assert f.in_bytes == 16 * 128 * 4


def test_enclosing_ops_same_thread_innermost_first():
    rows = [op("c10d::alltoall_base_", 0, 100), op("record_param_comms", 5, 90), op("nccl:all_to_all", 10, 80),
            op("c10d::allreduce_", 0, 100, tid=8), op("nccl:all_reduce", 200, 300), {"Collective name": "x"}]
    idx = OpIndex(rows)
    assert idx.enclosing(2) == [2, 1, 0]
    assert idx.enclosing(4) == [4]
    assert idx.enclosing(5) == [5]


# -- the real jobs -----------------------------------------------------------------------------

DTYPE = {"float": 4, "long int": 8, "int": 4, "Float": 4}


def prod(dims):
    n = 1
    for x in dims:
        n *= x
    return n


def expected_collectives(path):
    """Per NCCL kernel (by start): (type, in bytes, out bytes), from the raw JSON alone: the
    kernel's launch (same correlation) and the nccl:* / record_param_comms / c10d:: ops on the
    launch's thread that contain it."""
    ev = json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "args" in e
                and "correlation" in e["args"]}
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    out = []
    for k in sorted((e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                    key=lambda e: e["ts"]):
        a = k["args"]
        if "In msg nelems" in a:
            kind = "AllReduce" if a["Collective name"] == "allreduce" else a["Collective name"]
            out.append((kind, a["In msg nelems"] * DTYPE[a["dtype"]], a["Out msg nelems"] * DTYPE[a["dtype"]]))
            continue
        ln = launches[a["correlation"]]
        around = {o["name"]: o for o in ops if o["tid"] == ln["tid"] and o["ts"] <= ln["ts"] <= o["ts"] + o["dur"]}
        if "c10d::alltoall_base_" in around:      # the op says what this rank sends and receives
            rpc, base = around["record_param_comms"]["args"], around["c10d::alltoall_base_"]["args"]
            out.append(("AllToAll", prod(rpc["Input Dims"][0]) * DTYPE[rpc["Input type"][0]],
                        prod(base["Input Dims"][0]) * DTYPE[base["Input type"][0]]))
        else:
            (name,) = [n for n in around if n.startswith("nccl:")]
            ann = around[name]["args"]
            b = prod(ann["Input Dims"][0]) * DTYPE[ann["Input type"][0]]
            out.append(({"nccl:all_reduce": "AllReduce", "nccl:all_to_all": "AllToAll"}[name], b, b))
    return out


def analysed(folder, tmp_path_factory):
    if not folder.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    out = tmp_path_factory.mktemp("facts") / "a"
    analyze([str(folder)], out, AnalyzeOptions(jobs=1))
    t = ds.dataset(out / "kernels", format="parquet", partitioning="hive").to_table().to_pandas()
    return t[t["kind"] == "communication"]


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    return analysed(MULTI / "param_dlrm_v100x8", tmp_path_factory)


def test_dlrm_every_collective(dlrm):
    files = sorted((MULTI / "param_dlrm_v100x8").glob("worker*.json.gz"))
    assert len(files) == 8 and sorted(dlrm["rank"].unique()) == list(range(8))
    for f in files:
        rank = int(f.name[6])
        want = expected_collectives(f)
        assert sorted(k for k, _, _ in want) == ["AllReduce"] * 3 + ["AllToAll"] * 5
        got = dlrm[dlrm["rank"] == rank].sort_values("ts_ns")
        assert list(zip(got["collective"], got["in_bytes"], got["out_bytes"])) == want, rank
        assert set(got["group_size"]) == {8}
        assert set(got["pg_ranks"]) == {"0,1,2,3,4,5,6,7"} and set(got["pg_desc"]) == {"inferred:default_pg"}
        assert set(got["bytes_source"]) == {"record_param_comms", "annotation_dims"}
        assert set(got["seq"]) == {-1}
        assert (got["msg_bytes"] == got[["in_bytes", "out_bytes"]].max(axis=1)).all()


def test_megatron_tp2_allreduces(tmp_path_factory):
    got = analysed(MULTI / "megatron_tp2_v100x2", tmp_path_factory)
    files = sorted((MULTI / "megatron_tp2_v100x2").glob("*.json.gz"))
    for f in files:
        rank = json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"]
        want = expected_collectives(f)
        mine = got[got["rank"] == rank].sort_values("ts_ns")
        assert len(want) == 13 and sum(b == 24576 for _, b, _ in want) == 10
        assert list(zip(mine["collective"], mine["in_bytes"], mine["out_bytes"])) == want
        assert set(mine["bytes_source"]) == {"kernel_args"}
        assert set(mine["group_size"]) == {2} and set(mine["pg_name"]) == {"13"}


def test_cpu_only_gloo_rows(tmp_path):
    # cpu-3d: no GPU events; one cpu_collectives row per gloo:* annotation, bytes from its shapes
    folder = SHARED / "traces" / "cpu-3d"
    if not folder.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    analyze([str(folder)], tmp_path / "a", AnalyzeOptions(jobs=1))
    got = ds.dataset(tmp_path / "a" / "cpu_collectives", format="parquet", partitioning="hive").to_table()
    got = got.to_pandas()
    kinds = {"gloo:all_reduce": "AllReduce", "gloo:all_gather": "AllGather", "gloo:send": "Send",
             "gloo:recv": "Recv"}
    for f in sorted((folder / "iteration_4").glob("*.json")):
        raw = json.loads(f.read_text())
        rank = raw["distributedInfo"]["rank"]
        want = sorted((e["ts"], e["name"], kinds[e["name"]],
                       prod(e["args"]["Input Dims"][0]) * DTYPE[e["args"]["Input type"][0]])
                      for e in raw["traceEvents"] if e.get("cat") == "user_annotation"
                      and e["name"].startswith("gloo:"))
        mine = got[got["rank"] == rank].sort_values("ts_ns")
        assert list(zip(mine["name"], mine["collective"], mine["in_bytes"])) == [w[1:] for w in want]
        assert set(mine["bytes_source"]) == {"annotation_dims"} and set(mine["kind"]) == {"communication"}
        assert len(mine) == 9


def test_annotation_only_era_real_rank(tmp_path_factory):
    # a100_rank3_of8: no args on kernels or record_param_comms, sizes on nccl:* only, 42 all-to-alls
    path = SHARED / "traces" / "real" / "a100_rank3_of8.json.gz"
    if not path.is_file():
        pytest.skip("../shared/traces/real is absent")
    out = tmp_path_factory.mktemp("facts") / "a"
    analyze([str(path)], out, AnalyzeOptions(jobs=1))
    got = ds.dataset(out / "kernels", format="parquet", partitioning="hive").to_table().to_pandas()
    got = got[got["kind"] == "communication"].sort_values("ts_ns")
    want = expected_collectives(path)
    assert Counter(k for k, _, _ in want) == {"AllReduce": 18, "AllToAll": 42}
    assert list(zip(got["collective"], got["in_bytes"], got["out_bytes"])) == want
    assert set(got["bytes_source"]) == {"annotation_dims"} and set(got["group_size"]) == {8}


def test_rank_lists_parse_once_per_text_and_each_caller_gets_its_own_list():
    """``parse_ranks`` reads a member list once per distinct text (every collective of a group repeats
    it); a caller that changes its list does not change the next caller's, and a list nested past
    the parser's recursion limit falls back to its numbers."""
    from streamtrace.analyze.collective_facts import _ranks_text, parse_ranks
    text = "[" + ", ".join(str(r) for r in range(0, 4096, 16)) + "]"
    _ranks_text.cache_clear()
    first = parse_ranks(text)
    first.append(-1)
    assert parse_ranks(text) == list(range(0, 4096, 16))
    assert _ranks_text.cache_info().hits == 1 and _ranks_text.cache_info().misses == 1
    assert parse_ranks("[" * 100_000 + "7") == [7]
    assert parse_ranks("") == [] and parse_ranks(None) is None and parse_ranks("5") == [5]
