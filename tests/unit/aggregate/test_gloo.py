"""A CPU-only gloo job (../shared/traces/cpu-3d: TP2 x DP2 x PP2 on one host): its collectives and
send/recv matched across ranks from the CPU ops, the groups from the topology, waiting in a receive
reported as waiting (p2p's recv_wait_ns), and no clock offset estimated from them.  Expected figures
from the raw JSON with plain Python (and the generator's topology file)."""
from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.run import aggregate
from streamtrace.aggregate.options import AggregateOptions

from support import CPU3D


@pytest.fixture(scope="module")
def cpu3d(tmp_path_factory):
    if not CPU3D.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    tmp = tmp_path_factory.mktemp("gloo")
    analyze([CPU3D / "iteration_4"], tmp / "an", AnalyzeOptions(jobs=1))
    raw = {}
    for f in sorted((CPU3D / "iteration_4").glob("*.json")):
        d = json.loads(f.read_text())
        raw[int(d["distributedInfo"]["rank"])] = (int(d["baseTimeNanoseconds"]), d["traceEvents"])
    topo = json.loads((CPU3D / "parallel_topology.json").read_text())
    m = aggregate([tmp / "an"], tmp / "ag", AggregateOptions(jobs=1, clock_sync="collectives"))
    return raw, topo, tmp, m


def _ops(events, name):
    return sorted((e for e in events if e.get("name") == name), key=lambda e: e["ts"])


def test_collectives_matched_in_their_groups(cpu3d):
    raw, topo, tmp, m = cpu3d
    inst = pq.read_table(tmp / "ag" / "collectives.parquet").to_pydict()
    # per rank: its all-reduces (under tp_all_reduce: TP, under start_grad_sync: DP) and its all-gather
    n_ar = {r: len(_ops(ev, "c10d::allreduce_")) for r, (_, ev) in raw.items()}
    n_ag = {r: len(_ops(ev, "c10d::allgather_")) for r, (_, ev) in raw.items()}
    assert set(n_ar.values()) == {4} and set(n_ag.values()) == {1}
    got = Counter((c, g, n) for c, g, n, s in zip(inst["collective"], inst["pg_ranks"], inst["n_ranks"], inst["src"])
                  if s < 0)
    want = Counter()
    for dim in ("tp", "dp"):                       # two all-reduces per rank in each of its groups
        for g in topo[f"{dim}_groups"]:
            want[("AllReduce", ",".join(map(str, g)), len(g))] += 2
    want[("AllGather", "", len(raw))] += 1
    assert got == want
    assert set(inst["source"]) == {"cpu ops"} and all(inst["complete"])
    # no clock offset from gloo ends, and the one warning that says so
    assert m["clock_offsets_ns"] == {}
    assert sum("no clock offset is estimated" in w for w in m["warnings"]) == 1


def test_send_recv_matched_and_receive_wait_reported(cpu3d):
    raw, topo, tmp, m = cpu3d
    lo = min(b for b, _ in raw.values())
    sends, recvs = {}, {}
    for r, (base, ev) in raw.items():           # the k-th c10d call of a kind runs as the k-th gloo: op
        for call, run, table in (("c10d::send", "gloo:send", sends), ("c10d::recv_", "gloo:recv", recvs)):
            for c, g in zip(_ops(ev, call), _ops(ev, run)):
                peer = int(c["args"]["Concrete Inputs"][2])
                key = (r, peer) if table is sends else (peer, r)
                table.setdefault(key, []).append(round(g["ts"] * 1000) + base - lo)
    assert sends.keys() == recvs.keys() and all(len(sends[k]) == len(recvs[k]) for k in sends)
    p2p = pq.read_table(tmp / "ag" / "p2p.parquet").to_pydict()
    got = {(s, d): (n, w) for s, d, n, w in zip(p2p["src"], p2p["dst"], p2p["count"], p2p["recv_wait_ns"])}
    want = {k: (len(sends[k]), sum(max(0, a - b) for a, b in zip(sends[k], recvs[k]))) for k in sends}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][0] == want[k][0]
        assert abs(got[k][1] - want[k][1]) <= 2 * want[k][0]     # ns rounding of the us times
    assert sum(w for _, w in got.values()) > 0


def test_gloo_facts_are_analyzes_rows(cpu3d, tmp_path):
    """A gloo collective's bytes are those analyze's ``cpu_collectives`` read from its ``gloo:*`` run
    (``Input Dims`` x ``Input type``, plain json here): aggregate reads them, it does not derive
    them again; without that table (an analysis folder of before) a CPU-only rank gives no rows."""
    import shutil
    from math import prod
    raw, topo, tmp, m = cpu3d
    inst = pq.read_table(tmp / "ag" / "collectives.parquet").to_pydict()
    size = {"float": 4, "c10::Half": 2, "long int": 8, "int": 4}
    for r, (_, ev) in raw.items():
        want = Counter(prod(e["args"]["Input Dims"][0]) * size[e["args"]["Input type"][0]]
                       for e in _ops(ev, "gloo:all_reduce"))
        got = Counter(b for c, ranks, b in zip(inst["collective"], inst["ranks"], inst["msg_bytes"])
                      if c == "AllReduce" and str(r) in ranks.split(","))
        assert got == want and all(b > 0 for b in got)
    assert all(b > 0 for b in inst["msg_bytes"])
    shutil.copytree(tmp / "an", tmp_path / "an")
    shutil.rmtree(tmp_path / "an" / "cpu_collectives")
    m2 = aggregate([tmp_path / "an"], tmp_path / "ag", AggregateOptions(jobs=1))
    assert not (tmp_path / "ag" / "collectives.parquet").exists() or \
        pq.read_table(tmp_path / "ag" / "collectives.parquet").num_rows == 0, m2
