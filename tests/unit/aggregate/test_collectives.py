"""Cross-rank collectives against the synthetic generator's truth: matching, skew, straggler, waiter,
latency, bandwidth, the per-type summary, clock offsets estimated from collective ends."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from streamtrace.aggregate.alignment import Job
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.collectives import analyse_collectives, bus_factor, write_collectives
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.synth.job import END_SKEW_NS, SynthSpec, generate_job


TYPE = {"allreduce": "AllReduce", "allgather": "AllGather", "reduce_scatter": "ReduceScatter", "sendrecv": "SendRecv"}
# nccl-tests PERFORMANCE.md, written out by hand for the test
FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}


def _analysed(tmp, spec):
    truth = generate_job(tmp / "traces", spec)
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    return truth, tmp / "an"


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    spec = SynthSpec(clock_skew_ns=5_000_000, straggler_rank=3, straggler_delay_ns=300_000)
    return _analysed(tmp_path_factory.mktemp("coll"), spec)


def _instance_of(res):
    m = res.members
    return {(int(r), int(c)): int(i) for r, c, i in zip(m["rank"], m["correlation"], m["instance"])}


def _global(truth, t, r):
    """Rank-local truth time -> the global axis before the origin: ts + baseTime(r) - min baseTime."""
    lo = min(x.base_time_ns for x in truth.ranks)
    return t + truth.ranks[r].base_time_ns - lo


def test_bus_factor_hand_checked():
    assert bus_factor("AllReduce", 8) == 1.75 and bus_factor("AllReduce", 2) == 1.0
    assert bus_factor("AllGather", 4) == 0.75 and bus_factor("ReduceScatter", 2) == 0.5
    assert bus_factor("AllToAll", 8) == 0.875
    assert bus_factor("Broadcast", 8) == bus_factor("Reduce", 8) == bus_factor("SendRecv", 2) == 1.0
    assert math.isnan(bus_factor("Barrier", 8))


def test_every_instance_matches_the_truth(skewed):
    truth, an = skewed
    job = Job([an])
    res = analyse_collectives(job)
    inst, where = res.instances, _instance_of(res)
    assert len(inst["instance"]) == len(truth.collectives)
    assert res.stats["complete"] == len(truth.collectives) and res.stats["inconsistent"] == 0
    origin = None
    for c in truth.collectives:
        ids = {where[(r, c.correlation[r])] for r in c.ranks}
        assert len(ids) == 1, c
        i = ids.pop()
        assert inst["collective"][i] == TYPE[c.type] and inst["parallel_dim"][i] == c.dim
        assert inst["n_ranks"][i] == len(c.ranks) and inst["complete"][i]
        assert inst["msg_bytes"][i] == c.nbytes
        g_start = {r: _global(truth, c.start_ns[r], r) for r in c.ranks}
        g_end = {r: _global(truth, c.end_ns[r], r) for r in c.ranks}
        first = min(g_start.values())
        if origin is None:
            origin = first - int(inst["first_start_ns"][i])
        assert inst["first_start_ns"][i] == first - origin
        assert inst["start_skew_ns"][i] == max(g_start.values()) - first
        assert inst["end_skew_ns"][i] == max(g_end.values()) - min(g_end.values())
        assert inst["straggler_rank"][i] == max(c.ranks, key=lambda r: (g_start[r], r))
        assert inst["waiter_rank"][i] == min(c.ranks, key=lambda r: (g_start[r], r))
        lat = min(c.end_ns[r] - c.start_ns[r] for r in c.ranks)
        assert inst["latency_ns"][i] == lat
        assert inst["algbw_gbps"][i] == pytest.approx(c.nbytes / lat, rel=1e-12)
        n = 2 if c.type == "sendrecv" else len(c.pg_ranks)
        assert inst["busbw_gbps"][i] == pytest.approx(c.nbytes / lat * FACTOR[c.type](n), rel=1e-12)
        if c.type == "sendrecv":
            assert (inst["src"][i], inst["dst"][i]) == c.ranks


def test_summary_and_stragglers_from_truth(skewed):
    truth, an = skewed
    res = analyse_collectives(Job([an]))
    want: dict = {}
    for c in truth.collectives:
        w = want.setdefault((TYPE[c.type], c.dim), {"count": 0, "bytes": 0, "time_ns": 0})
        w["count"] += 1
        w["bytes"] += c.nbytes
        w["time_ns"] += min(c.end_ns[r] - c.start_ns[r] for r in c.ranks)
    got = {(s["collective"], s["parallel_dim"]): s for s in res.summary}
    assert set(got) == set(want)
    for k, w in want.items():
        assert {x: got[k][x] for x in w} == w
    assert sum(s["traffic_pct"] for s in res.summary) == pytest.approx(100.0)
    # stragglers: counted from the truth on the global axis
    count = {r: 0 for r in range(8)}
    for c in truth.collectives:
        if c.type == "sendrecv":          # p2p: the receiver waits by design; not a straggler statistic
            continue
        g = {r: _global(truth, c.start_ns[r], r) for r in c.ranks}
        count[max(c.ranks, key=lambda r: (g[r], r))] += 1
    got = {r: 0 for r in range(8)}
    for s in res.stragglers:
        got[s["rank"]] += s["straggler_count"]
    assert got == count
    assert {s["collective"] for s in res.stragglers} == {"AllReduce", "AllGather", "ReduceScatter"}


def test_stragglers_wait_over_group_collectives_only(skewed):
    """Per collective kind and rank, wait_ns = sum over that kind's instances of (last arrival -
    the rank's arrival), on the global axis, from the truth; point-to-point transfers are not
    counted (before issue 15 a rank's wait_ns also held its pipeline Send/Recv waits)."""
    truth, an = skewed
    res = analyse_collectives(Job([an]))
    want: dict = {}
    for c in truth.collectives:
        if c.type == "sendrecv":
            continue
        g = {r: _global(truth, c.start_ns[r], r) for r in c.ranks}
        last = max(g.values())
        for r in c.ranks:
            w = want.setdefault((TYPE[c.type], c.dim, r), {"instances": 0, "wait_ns": 0, "straggler_count": 0})
            w["instances"] += 1
            w["wait_ns"] += last - g[r]
            w["straggler_count"] += r == max(c.ranks, key=lambda q: (g[q], q))
    got = {(s["collective"], s["parallel_dim"], s["rank"]): {k: s[k] for k in ("instances", "wait_ns", "straggler_count")}
           for s in res.stragglers}
    assert got == want
    p2p_wait = sum(int(w) for w, c in zip(res.members["wait_ns"], res.members["collective"]) if c in ("Send", "Recv"))
    assert p2p_wait > 0          # there is pipeline waiting to leave out


def test_clock_sync_recovers_offsets_and_true_stragglers(skewed):
    truth, an = skewed
    job = Job([an])
    res = analyse_collectives(job, clock_sync="collectives")
    part_rank = {p.index: p.rank for p in job.parts}
    abs0 = truth.ranks[0].clock_offset_ns + truth.ranks[0].base_time_ns
    for part, est in res.clock_offsets.items():
        r = part_rank[part]
        want = truth.ranks[r].clock_offset_ns + truth.ranks[r].base_time_ns - abs0     # 10 ms per rank here
        assert abs(est - want) <= END_SKEW_NS, (r, est, want)
    assert max(res.clock_offsets.values()) > 60_000_000
    assert set(res.clock_components.values()) == {0}
    # on corrected clocks the straggler is the truly last arrival wherever the truth is clear-cut
    inst, where = res.instances, _instance_of(res)
    clear = agree = 0
    for c in truth.collectives:
        t = {r: c.start_ns[r] - truth.ranks[r].clock_offset_ns for r in c.ranks}     # the job's true clock
        order = sorted(c.ranks, key=lambda r: t[r])
        if t[order[-1]] - t[order[-2]] <= 2 * END_SKEW_NS:
            continue
        clear += 1
        i = where[(c.ranks[0], c.correlation[c.ranks[0]])]
        agree += inst["straggler_rank"][i] == order[-1]
        assert abs(int(inst["start_skew_ns"][i]) - (t[order[-1]] - t[order[0]])) <= 2 * END_SKEW_NS
    assert clear > 50 and agree == clear
    # the delayed rank's TP peer waits for it: rank 3 is the last to arrive in most of their all-reduces
    tp23 = (inst["pg_ranks"] == "2,3")
    assert (inst["straggler_rank"][tp23] == 3).sum() > 0.6 * tp23.sum()
    lag: dict = {}
    for s in res.stragglers:
        lag[s["rank"]] = lag.get(s["rank"], 0) + s["straggler_lag_ns"]
    assert max(lag, key=lag.get) == 3        # spec.straggler_rank: the rank that makes the others wait most


def test_pipeline_of_four_stages_matches_p2p_by_direction(tmp_path):
    truth, an = _analysed(tmp_path, SynthSpec(world_size=8, tp=2, pp=4, microbatches=3, layers=1))
    res = analyse_collectives(Job([an]))
    where = _instance_of(res)
    p2p = [c for c in truth.collectives if c.type == "sendrecv"]
    assert p2p and len(p2p[0].pg_ranks) == 4
    assert len(res.instances["instance"]) == len(truth.collectives)
    for c in p2p:
        i = {where[(r, c.correlation[r])] for r in c.ranks}
        assert len(i) == 1
        i = i.pop()
        assert (res.instances["src"][i], res.instances["dst"][i]) == c.ranks
        assert res.instances["collective"][i] == "SendRecv"


def test_outputs_and_individual_alignment(skewed, tmp_path):
    truth, an = skewed
    job = Job([an], alignment="individual")
    res = analyse_collectives(job)
    paths = write_collectives(tmp_path, res)
    names = sorted(p.name for p in paths)
    assert names == ["collectives.parquet", "collectives_ranks.parquet", "collectives_summary.csv",
                     "collectives_summary.parquet"]
    t = pq.read_table(tmp_path / "collectives.parquet")
    assert t.num_rows == len(truth.collectives) and "busbw_gbps" in t.column_names
    # individual: each rank's own first event is 0, so a member's start is its local start - that
    for p in job.parts:
        k = job.read_kernels(p)
        assert int(p.align(k["ts_ns"]).min()) >= 0
    m = res.members
    for part in job.parts:
        sel = m["part"] == part.index
        assert (m["start_ns"][sel] >= 0).all()
    with pytest.raises(StreamtraceError):
        analyse_collectives(job, clock_sync="ntp")


def test_p2p_table_from_truth(tmp_path):
    """One row per sender -> receiver pair: count, bytes, transfer time, who waited how long
    (receiver: send start - recv start when positive; sender: the other way), stages and direction,
    all from the generator's truth (4 pipeline stages, no clock skew)."""
    from streamtrace.aggregate.p2p import p2p_table, stage_pairs
    truth, an = _analysed(tmp_path, SynthSpec(world_size=8, tp=2, pp=4, microbatches=3, layers=1,
                                              straggler_rank=5, straggler_delay_ns=200_000))
    job = Job([an])
    res = analyse_collectives(job)
    rows = p2p_table(res.instances, res.members, job.topology)
    want: dict = {}
    for c in truth.collectives:
        if c.type != "sendrecv":
            continue
        s, d = c.ranks
        diff = _global(truth, c.start_ns[s], s) - _global(truth, c.start_ns[d], d)
        w = want.setdefault((s, d), {"count": 0, "bytes": 0, "time_ns": 0, "recv_wait_ns": 0, "send_wait_ns": 0})
        w["count"] += 1
        w["bytes"] += c.nbytes
        w["time_ns"] += min(c.end_ns[r] - c.start_ns[r] for r in c.ranks)
        w["recv_wait_ns"] += max(diff, 0)
        w["send_wait_ns"] += max(-diff, 0)
    got = {(r["src"], r["dst"]): {k: r[k] for k in want[next(iter(want))]} for r in rows}
    assert got == want
    stage = {t.rank: t.coords["pp"] for t in truth.ranks}
    for r in rows:
        assert (r["src_stage"], r["dst_stage"]) == (stage[r["src"]], stage[r["dst"]])
        assert r["direction"] == ("forward" if stage[r["dst"]] > stage[r["src"]] else "backward")
    assert sum(r["recv_wait_ns"] for r in rows) > 0
    pairs = stage_pairs(rows)
    assert {(p["src_stage"], p["dst_stage"]) for p in pairs} == {(a, a + 1) for a in range(3)} | {(a + 1, a) for a in range(3)}
    assert sum(p["count"] for p in pairs) == sum(w["count"] for w in want.values())
