"""Collective matching on the real multi-rank GPU jobs (../shared/traces/real-multi): DLRM's all-to-alls
matched across its 8 ranks, bytes per rank, matching by sequence number / by order with a rank that
missed a collective, and ``merge --align collectives`` and ``aggregate --clock-sync collectives``
giving the same offsets.  Every expected figure is computed here from the raw JSON with plain Python.

The analyze stage's all-to-all facts (``collective`` "AllToAll", ``in_bytes`` / ``out_bytes``,
``seq``, ``in_splits`` / ``out_splits``) are added to the analysed kernels tables by the fixtures,
from the raw JSON, where the analysed folder lacks them (the analyze side gives them itself)."""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.run import aggregate
from streamtrace.aggregate.options import AggregateOptions
from streamtrace.merge import MergeOptions, merge

from support import SHARED, load_json

MULTI = SHARED / "traces" / "real-multi"
DLRM, MEGATRON = MULTI / "param_dlrm_v100x8", MULTI / "megatron_tp2_v100x2"
SIZE = {"float": 4, "int": 4, "long int": 8, "c10::Half": 2, "double": 8}


def _need():
    if not MULTI.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")


def _raw(folder):
    """{rank: trace events} of a real set, the rank from distributedInfo."""
    out = {}
    for f in sorted(folder.glob("*.json.gz")):
        d = json.loads(gzip.open(f).read(), parse_float=Decimal)
        out[int(d["distributedInfo"]["rank"])] = d["traceEvents"]
    return out


def _nccl_kernels(events):
    """The NCCL kernels of one rank in start order: (name, start ns, end ns)."""
    ks = [e for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    ks.sort(key=lambda e: Decimal(e["ts"]))
    return [(e["name"], int(Decimal(e["ts"]) * 1000), int((Decimal(e["ts"]) + Decimal(e["dur"])) * 1000)) for e in ks]


def _alltoalls(events):
    """Per c10d::alltoall_base_ in time order: (bytes received, bytes sent): its Input Dims are
    [output, input, ...] (c10d's alltoall_base_(output, input, ...))."""
    ops = sorted((e for e in events if e.get("name") == "c10d::alltoall_base_"), key=lambda e: Decimal(e["ts"]))
    out = []
    for e in ops:
        dims, types = e["args"]["Input Dims"], e["args"]["Input type"]
        out.append((int(np.prod(dims[0])) * SIZE[types[0]], int(np.prod(dims[1])) * SIZE[types[1]]))
    return out


def _kernel_files(an):
    return {int(p.parent.name.split("=")[1]): p for p in sorted(Path(an).glob("kernels/*/rank=*/part-0.parquet"))}


def _set_columns(path, changes: dict, keep=None):
    t = pq.read_table(path)
    if keep is not None:
        t = t.filter(pa.array(keep))
    for name, values in changes.items():
        values = values if keep is None else [v for v, k in zip(values, keep) if k]
        arr = pa.array(values, pa.int64() if isinstance(values[0], int) else pa.string())
        i = t.schema.get_field_index(name)
        t = t.set_column(i, name, arr) if i >= 0 else t.append_column(name, arr)
    pq.write_table(t, path)


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    """DLRM analysed, with the analyze side's all-to-all facts: the k-th SendRecv kernel of a rank is
    its k-th c10d::alltoall_base_ (AllToAll, bytes from the op's dims)."""
    _need()
    tmp = tmp_path_factory.mktemp("dlrm")
    analyze([DLRM], tmp / "an", AnalyzeOptions(jobs=1))
    raw = _raw(DLRM)
    for rank, path in _kernel_files(tmp / "an").items():
        t = pq.read_table(path).to_pydict()
        a2a = iter(_alltoalls(raw[rank]))
        coll, inb, outb = list(t["collective"]), list(t["in_bytes"]), list(t["out_bytes"])
        for i in np.argsort(t["ts_ns"], kind="stable").tolist():
            if coll[i] == "SendRecv":
                recv, sent = next(a2a)
                coll[i], inb[i], outb[i] = "AllToAll", sent, recv
        _set_columns(path, {"collective": coll, "in_bytes": inb, "out_bytes": outb})
    return raw, tmp


@pytest.fixture(scope="module")
def megatron(tmp_path_factory):
    _need()
    tmp = tmp_path_factory.mktemp("megatron")
    analyze([MEGATRON], tmp / "an", AnalyzeOptions(jobs=1))
    return _raw(MEGATRON), tmp


def _aggregate(an, out, **kw):
    return aggregate([an], out, AggregateOptions(jobs=1, clock_sync="collectives", **kw))


def test_dlrm_alltoall_matched_across_all_ranks(dlrm):
    raw, tmp = dlrm
    m = _aggregate(tmp / "an", tmp / "ag")
    n_a2a = {r: len(_alltoalls(ev)) for r, ev in raw.items()}
    n_ar = {r: sum(1 for e in ev if e.get("name") == "c10d::allreduce_") for r, ev in raw.items()}
    assert set(n_a2a.values()) == {5} and set(n_ar.values()) == {3}       # the README's figures, checked
    inst = pq.read_table(tmp / "ag" / "collectives.parquet").to_pydict()
    kinds = sorted(inst["collective"])
    assert kinds == ["AllReduce"] * 3 + ["AllToAll"] * 5
    assert all(n == len(raw) for n in inst["n_ranks"]) and all(inst["complete"])
    assert set(inst["matched_by"]) == {"order"}
    assert m["collectives"]["mismatched"] == 0 and m["collectives"]["matched_by_order"] == 8
    # bytes per rank: what each sends and receives, and the instance's the largest of them
    mem = pq.read_table(tmp / "ag" / "collectives_ranks.parquet").to_pydict()
    order = {i: k for k, i in enumerate(sorted({i for i, c in zip(inst["instance"], inst["collective"])
                                                if c == "AllToAll"},
                                               key=lambda i: inst["first_start_ns"][inst["instance"].index(i)]))}
    for i, r, s, v in zip(mem["instance"], mem["rank"], mem["send_bytes"], mem["recv_bytes"]):
        if i in order:
            assert (v, s) == _alltoalls(raw[r])[order[i]]
    for i, c, b, lat, bus in zip(inst["instance"], inst["collective"], inst["msg_bytes"], inst["latency_ns"],
                                 inst["busbw_gbps"]):
        if c == "AllToAll":
            most = max(max(_alltoalls(raw[r])[order[i]]) for r in raw)
            assert b == most
            assert bus == pytest.approx(most / lat * 7 / 8)          # nccl-tests: algbw x (n-1)/n


def _offsets_by_hand(raw, pairs):
    """Each rank's offset against rank 0 as the estimator must find it when every instance pairs
    each rank with rank 0 only (a star: the least-squares solution is the median end difference):
    ``pairs`` = list of instances, each ``{rank: end ns}``."""
    return {r: int(round(statistics.median(p[r] - p[0] for p in pairs))) for r in sorted(raw)}


@pytest.mark.parametrize("which", ["dlrm", "megatron"])
def test_merge_and_aggregate_give_equal_offsets(which, request, tmp_path):
    raw, tmp = request.getfixturevalue(which)
    m = _aggregate(tmp / "an", tmp_path / "ag")
    folder = DLRM if which == "dlrm" else MEGATRON
    res = merge([folder], tmp_path / "m.json", MergeOptions(align="collectives", jobs=1))[0]
    st = load_json(tmp_path / "m.json")["streamtrace"]
    merged = {int(r["rank"]): int(r["clock_offset_ns"]) for r in st["ranks"]}
    agg = {int(r): int(v) for r, v in m["clock_offsets_ns"].items()}
    kernels = {r: _nccl_kernels(ev) for r, ev in raw.items()}
    n = {len(k) for k in kernels.values()}
    assert len(n) == 1                               # every rank the same count: the k-th is one instance
    pairs = [{r: kernels[r][k][2] for r in raw} for k in range(n.pop())]
    expected = _offsets_by_hand(raw, pairs)
    assert merged == agg == expected
    assert res["clock_offsets_ns"] == {r: v for r, v in expected.items()}
    assert not any("consider --clock-sync" in w for w in m["warnings"])


def test_megatron_seq_matching_reports_a_missed_collective(megatron, tmp_path):
    """With NCCL sequence numbers (0..12 per rank here) and rank 1's 6th all-reduce dropped: matched
    by seq, rank 1 reported (12 of 13), every other instance keeps both ranks."""
    raw, tmp = megatron
    an = tmp_path / "an"
    shutil.copytree(tmp / "an", an)
    n = len(_nccl_kernels(raw[0]))
    for rank, path in _kernel_files(an).items():
        t = pq.read_table(path).to_pydict()
        comm = [i for i in np.argsort(t["ts_ns"], kind="stable").tolist() if t["kind"][i] == "communication"]
        seq = [-1] * len(t["ts_ns"])
        for k, i in enumerate(comm):
            seq[i] = 100 + k
        keep = [not (rank == 1 and s == 105) for s in seq]
        _set_columns(path, {"seq": seq}, keep)
    m = aggregate([an], tmp_path / "ag", AggregateOptions(jobs=1))
    inst = pq.read_table(tmp_path / "ag" / "collectives.parquet").to_pydict()
    assert len(inst["instance"]) == n and set(inst["matched_by"]) == {"seq"}
    assert sorted(inst["n_ranks"]) == [1] + [2] * (n - 1)
    assert m["collectives"]["mismatched"] == 1 and m["collectives"]["mismatched_ranks"] == [1]
    bad = pq.read_table(tmp_path / "ag" / "collectives_mismatch.parquet").to_pydict()
    assert (bad["rank"], bad["count"], bad["most"], bad["matched_by"]) == ([1], [n - 1], [n], ["seq"])
    assert any("missed or extra collective" in w for w in m["warnings"])


def test_megatron_order_matching_reports_a_missed_collective(megatron, tmp_path):
    """Without sequence numbers, rank 1's 6th all-reduce dropped: matched by order, rank 1 reported."""
    raw, tmp = megatron
    an = tmp_path / "an"
    shutil.copytree(tmp / "an", an)
    n = len(_nccl_kernels(raw[0]))
    path = _kernel_files(an)[1]
    t = pq.read_table(path).to_pydict()
    comm = [i for i in np.argsort(t["ts_ns"], kind="stable").tolist() if t["kind"][i] == "communication"]
    keep = [i != comm[5] for i in range(len(t["ts_ns"]))]
    _set_columns(path, {"kind": t["kind"]}, keep)
    m = aggregate([an], tmp_path / "ag", AggregateOptions(jobs=1))
    inst = pq.read_table(tmp_path / "ag" / "collectives.parquet").to_pydict()
    assert set(inst["matched_by"]) == {"order"} and len(inst["instance"]) == n
    assert m["collectives"]["mismatched_ranks"] == [1]
    bad = pq.read_table(tmp_path / "ag" / "collectives_mismatch.parquet").to_pydict()
    assert (bad["rank"], bad["count"], bad["most"], bad["group"]) == ([1], [n - 1], [n], ["ranks:0,1"])


def test_alltoall_uneven_splits(megatron, tmp_path):
    """The first all-reduce of the TP=2 job rewritten as an all-to-allv with uneven splits: rank 0
    sends 100 / 300 bytes to ranks 0 / 1 and receives 100 / 500, rank 1 sends 500 / 50 and receives
    300 / 50.  Members: sent 400 / 550, received 600 / 350; the instance 600 bytes, consistent; a
    split that disagrees (rank 1 says it received 301 from rank 0) makes it inconsistent."""
    raw, tmp = megatron
    splits = {0: ("100,300", "100,500"), 1: ("500,50", "300,50")}
    for bad_split, consistent in ((None, True), ("301,50", False)):
        an = tmp_path / f"an{consistent}"
        shutil.copytree(tmp / "an", an)
        for rank, path in _kernel_files(an).items():
            t = pq.read_table(path).to_pydict()
            first = min((i for i in range(len(t["ts_ns"])) if t["kind"][i] == "communication"),
                        key=lambda i: t["ts_ns"][i])
            ins, outs = [""] * len(t["ts_ns"]), [""] * len(t["ts_ns"])
            coll = list(t["collective"])
            coll[first] = "AllToAll"
            ins[first], outs[first] = splits[rank]
            if rank == 1 and bad_split:
                outs[first] = bad_split
            _set_columns(path, {"collective": coll, "in_splits": ins, "out_splits": outs})
        aggregate([an], tmp_path / f"ag{consistent}", AggregateOptions(jobs=1))
        inst = pq.read_table(tmp_path / f"ag{consistent}" / "collectives.parquet").to_pydict()
        j = inst["collective"].index("AllToAll")
        assert inst["consistent"][j] is consistent and inst["n_ranks"][j] == 2
        if consistent:
            assert inst["msg_bytes"][j] == 600
            assert inst["busbw_gbps"][j] == pytest.approx(600 / inst["latency_ns"][j] * 1 / 2)
            mem = pq.read_table(tmp_path / "agTrue" / "collectives_ranks.parquet").to_pydict()
            got = {r: (s, v) for i, r, s, v in zip(mem["instance"], mem["rank"], mem["send_bytes"],
                                                  mem["recv_bytes"]) if i == inst["instance"][j]}
            assert got == {0: (400, 600), 1: (550, 350)}


@pytest.mark.parametrize("bucket_rows", [1, 1000])
def test_bucketed_path_equals_in_memory_with_a_gap(megatron, tmp_path, bucket_rows):
    """The bucketed matcher (aggregate's) and the in-memory one agree row for row when a rank missed
    a collective (re-aligned by signature) and on the mismatch table."""
    from streamtrace.aggregate.alignment import Job
    from streamtrace.aggregate.collective_spill import collectives_to
    from streamtrace.aggregate.collectives import analyse_collectives
    raw, tmp = megatron
    an = tmp_path / "an"
    shutil.copytree(tmp / "an", an)
    path = _kernel_files(an)[1]
    t = pq.read_table(path).to_pydict()
    comm = [i for i in np.argsort(t["ts_ns"], kind="stable").tolist() if t["kind"][i] == "communication"]
    sizes = [100 + k if k != 7 else 99 for k in range(len(comm))]     # signatures that tell the gap
    msg = list(t["msg_bytes"])
    for k, i in enumerate(comm):
        msg[i] = sizes[k]
    _set_columns(path, {"msg_bytes": msg}, [i != comm[0] for i in range(len(msg))])
    t0 = pq.read_table(_kernel_files(an)[0]).to_pydict()
    comm0 = [i for i in np.argsort(t0["ts_ns"], kind="stable").tolist() if t0["kind"][i] == "communication"]
    msg0 = list(t0["msg_bytes"])
    for k, i in enumerate(comm0):
        msg0[i] = sizes[k]
    _set_columns(_kernel_files(an)[0], {"msg_bytes": msg0})
    mem = analyse_collectives(Job([an]))
    out = tmp_path / f"out{bucket_rows}"
    out.mkdir()
    res, _ = collectives_to(Job([an]), out, bucket_rows=bucket_rows)
    spilled = pq.read_table(out / "collectives.parquet").to_pydict()
    for c in ("instance", "n_ranks", "matched_by", "msg_bytes", "consistent", "ranks"):
        assert list(spilled[c]) == list(mem.instances[c]), c
    assert {k: list(v) for k, v in res.mismatches.items()} == {k: list(v) for k, v in mem.mismatches.items()}
    assert list(mem.mismatches["rank"]) == [1] and list(mem.mismatches["shift"]) == [-1]
    # rank 1 lacks the first all-reduce: the first instance is rank 0's alone, the rest are pairs
    assert sorted(mem.instances["n_ranks"]) == [1] + [2] * (len(comm) - 1)
    assert all(mem.instances["consistent"])
