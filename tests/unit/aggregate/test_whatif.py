"""The what-if replay end to end on a small synthetic job (4 ranks, TP2 x DP2, rank 1's data loader
stalling 3 ms), its change records, ``streamtrace whatif`` and the report's "What a fix buys".
Expected step spans are read from the generated files with ``json`` (the clean job: the same spec
without the fault, same seed), never from streamtrace."""
from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamtrace
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.aggregate.whatif import COLUMNS
from streamtrace.aggregate.whatif_changes import (AtMedian, Comm, HostGaps, Kernels, Launches, Ops, parse_change,
                                                  parse_ranks)
from streamtrace.aggregate.whatif_members import Members, TransferView
from streamtrace.aggregate import whatif_graphs
from streamtrace.aggregate.critical_local import part_paths
from streamtrace.aggregate.whatif import PartsJob, parts_of
from streamtrace.aggregate.whatif_graphs import GraphSpill, kept_graphs
from streamtrace.aggregate.whatif_local import part_replays
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import read_json
from streamtrace.runtime.errors import UsageError
from streamtrace.synth.faults import Fault
from streamtrace.synth.job import SynthSpec, generate_job

from support import run_cli, step_span

SPEC = SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1)
STALL_NS = 3_000_000


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("whatif")
    generate_job(d / "clean", SPEC)
    generate_job(d / "traces", dataclasses.replace(SPEC, faults=(Fault("cpu_stall", 1, delay_ns=STALL_NS),)))
    analyze([d / "traces"], d / "an", AnalyzeOptions(jobs=1))
    aggregate([d / "an"], d / "agg", AggregateOptions(jobs=1))
    return d, step_span(d / "clean"), step_span(d / "traces")


def test_whatif_parquet_holds_the_candidates(job):
    d, clean, faulty = job
    t = pq.read_table(d / "agg" / "whatif.parquet").to_pylist()
    assert t and set(t[0]) == set(COLUMNS)
    assert {r["source"] for r in t} == {"candidate"}
    best = max(t, key=lambda r: r["saving_ns"])
    assert "rank=1" in best["change"]                                # the stalled rank's change saves most
    assert abs(best["predicted_span_ns"] - clean) <= 0.03 * clean
    assert all(abs(r["measured_span_ns"] - faulty) <= 1_000 for r in t)
    assert all(r["predicted_span_ns"] == r["measured_span_ns"] - r["saving_ns"] for r in t)
    r = pq.read_table(d / "agg" / "whatif_ranks.parquet").to_pylist()
    assert len(r) == 4 and all(x["replay_end_ns"] == x["end_ns"] for x in r)      # the unmodified replay


def test_replays_from_kept_graphs_equal_those_built_each_time(job):
    # the candidates' replays of aggregate keep a rank's step graphs (whatif_graphs.kept_graphs): the
    # rows must not depend on whether a graph was kept (budget for all) or built again (budget for none)
    agg = streamtrace.load(job[0] / "agg")
    changes = ["median:rank=1", "host_gaps:rank=1", "ops:name=DataLoader,rank=1", "median:rank=1,what=cpu"]
    built = [agg.whatif(c).to_pylist() for c in changes]
    for budget in (1 << 30, 1):
        with kept_graphs(budget) as kept:
            assert [agg.whatif(c).to_pylist() for c in changes] == built
            assert bool(kept.parts) == (budget > 1)
            assert sum(len(k.steps) for k in kept.parts.values()) == (1 if budget > 1 else 0)  # one step


def test_replays_from_spilled_graphs_equal_those_built_each_time(job, tmp_path):
    # aggregate's rank pass spills each part's step graphs (whatif_graphs.GraphSpill) and the
    # candidates read them back: the rows must equal those of graphs built again from the tables
    d = job[0]
    meta = read_json(d / "agg" / "aggregate.json")
    parts = parts_of(meta)
    steps = PartsJob({int(s[1]) for s in meta.get("steps") or []} or None)
    sets = [[], [HostGaps((1,))], [Ops((1,), "DataLoader", 0.0)], [Launches(), Kernels(None, "gemm", 0.5)]]
    for i, part in parts.items():
        spill = GraphSpill(tmp_path, i, 1 << 30)
        part_paths(steps, part, tmp_path, None, spill.add)
        path = spill.close()
        assert path is not None and (tmp_path / f"graphs-{i:06d}.pickle").is_file()
        got, want = part_replays(steps, part, sets, spilled=path), part_replays(steps, part, sets)
        for g, w in zip(got, want):
            for name in w:
                assert set(g[name]) == set(w[name]) and all(np.array_equal(g[name][c], w[name][c]) for c in w[name])
    small = GraphSpill(tmp_path / "", 0, 1)                          # past its limit: removed, built again
    part_paths(steps, parts[0], tmp_path, None, small.add)
    assert small.close() is None and not (tmp_path / "graphs-000000.pickle").exists()


def test_aggregate_without_spilled_graphs_writes_the_same_whatif(job, tmp_path, monkeypatch):
    d = job[0]
    assert whatif_graphs.spill_share(4, 4) > 0                       # the fixture's aggregate spilled them
    monkeypatch.setattr(whatif_graphs, "SPILL_BYTES", 0)
    aggregate([d / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    assert pq.read_table(tmp_path / "agg" / "whatif.parquet").equals(pq.read_table(d / "agg" / "whatif.parquet"))


@pytest.mark.parametrize("change", ["median:rank=1", "ops:name=DataLoader,rank=1", "median:rank=1,what=cpu"])
def test_removing_the_stall_predicts_the_clean_job(job, change):
    d, clean, faulty = job
    row = streamtrace.load(d / "agg").whatif(change).to_pylist()[0]
    assert faulty - clean > 0.9 * STALL_NS                         # the stall shows in the files
    assert abs(row["predicted_span_ns"] - clean) <= 0.03 * clean, (row["predicted_span_ns"], clean)
    assert row["ranks_touched"] == 1 and not row["flag"]


def test_changes_that_miss_the_stall_buy_little(job):
    d, clean, faulty = job
    agg = streamtrace.load(d / "agg")
    for change in ("host_gaps:rank=0", "median:rank=3", "comm:median"):
        row = agg.whatif(change).to_pylist()[0]
        assert row["saving_ns"] < 0.1 * STALL_NS, change           # rank 1's stall still bounds the step
    both = agg.whatif(["median:rank=1", "kernels:name=gemm,factor=0.5"]).to_pylist()[0]
    one = agg.whatif("median:rank=1").to_pylist()[0]
    assert both["saving_ns"] > one["saving_ns"] and both["ranks_touched"] == 4


def test_cli(job, tmp_path):
    d, clean, _ = job
    r = run_cli("whatif", d / "agg", "--change", "median:rank=1", "-o", tmp_path / "w.parquet")
    assert r.returncode == 0, r.stderr
    assert "rank 1's compute" in r.stdout and "->" in r.stdout
    t = pq.read_table(tmp_path / "w.parquet").to_pylist()
    assert abs(t[0]["predicted_span_ns"] - clean) <= 0.03 * clean
    for bad in (["--change", "nonsense"], ["--change", "median:rank=9"], ["--change", "kernels:name=gemm"], []):
        r = run_cli("whatif", d / "agg", *bad)
        assert r.returncode == 2 and r.stderr.startswith("streamtrace: error:") and "Traceback" not in r.stderr
    r = run_cli("whatif", tmp_path / "nowhere", "--change", "launches")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    marker = (d / "agg" / "aggregate.json").read_bytes()
    (tmp_path / "afile").write_text("x")
    for out in (d / "agg" / "aggregate.json", d / "agg" / "whatif.parquet", tmp_path, tmp_path / "afile" / "w.parquet"):
        r = run_cli("whatif", d / "agg", "--change", "launches", "-o", out)     # the aggregate's own file, a folder,
        assert r.returncode == 1 and r.stderr.startswith("streamtrace: error:"), (out, r.stderr)   # under a file
        assert "Traceback" not in r.stderr
    assert (d / "agg" / "aggregate.json").read_bytes() == marker


def test_report_section(job):
    d, _, _ = job
    r = run_cli("report", d / "agg", "--no-charts", "-q")
    assert r.returncode == 0, r.stderr
    md = next((d / "agg").glob("*.md")).read_text()
    a, b = md.index("## What bounds each step"), md.index("## What a fix buys")
    assert a < b < md.index("## Configuration")
    sec = md[b:md.index("## Configuration")]
    assert "- Rank 1's" in sec and "->" in sec
    # the next bound is the replay of `median:rank=0` (rank 0 holds most of the path); it saves
    # under 0.5 % of the path here (rank 1's stall still bounds the step), so the cell says nothing
    row = streamtrace.load(d / "agg").whatif("median:rank=0").to_pylist()[0]
    assert row["saving_ns"] < 0.005 * row["measured_span_ns"]
    assert "(replayed)" not in md[a:b] and "| - | rank 3:" in md[a:b]


def test_report_next_bound_replayed(job, tmp_path):
    """A replay of the heaviest rank at the median speed that buys more than 0.5 % is the next bound."""
    d, _, _ = job
    agg = tmp_path / "agg"
    shutil.copytree(d / "agg", agg)
    for md in agg.glob("*.md"):
        md.unlink()
    t = pq.read_table(agg / "whatif.parquet")
    saving = np.array(t["saving_ns"].to_pylist())
    m = np.array([c == "median:rank=0" for c in t["change"].to_pylist()])
    saving[m] = 2_000_000                                           # 2 ms of an 11.5 ms path
    t = t.set_column(t.schema.get_field_index("saving_ns"), "saving_ns", pa.array(saving, pa.int64()))
    pq.write_table(t, agg / "whatif.parquet")
    r = run_cli("report", agg, "--no-charts", "-q")
    assert r.returncode == 0, r.stderr
    md = next(agg.glob("*.md")).read_text()
    a, b = md.index("## What bounds each step"), md.index("## What a fix buys")
    assert "(replayed)" in md[a:b]


def test_parse_change_round_trips():
    for c in (HostGaps((0,)), Ops((0, 1, 2, 5), "data_loading", 0.0), AtMedian((3,), "gpu"),
              Kernels(None, "gemm", 0.5), Comm(None, None, "DP", None, 0.8, None, False), Comm((4,), median=True),
              Launches()):
        assert parse_change(c.text()) == c, c.text()
    assert parse_ranks("0-2,7") == (0, 1, 2, 7) and parse_ranks("all") is None
    assert parse_change("kernels:name=gemm,factor=x0.25").factor == 0.25
    for bad in ("bogus", "ops:rank=1", "median:what=gpu", "median:rank=1,what=x", "kernels:name=(,factor=1",
                "host_gaps:factor=-1", "comm:share=0", "launches:color=red",
                # (a hostile-input pass: numbers that overflowed the replay's int64 ns, or a rank list of 10^8)
                "comm:factor=inf", "comm:factor=1e13", "host_gaps:factor=1e308", "kernels:name=gemm,factor=nan",
                "comm:share=1,gbps=0", "comm:share=0.5,gbps=-5", "comm:share=0.5,gbps=nan", "comm:share=inf",
                "launches:rank=5-2", "median:rank=1-0", "launches:rank=0-100000000", "launches:rank=x"):
        with pytest.raises(UsageError):
            parse_change(bad)
    assert parse_change("comm:factor=1000000").factor == 1e6 and parse_ranks("1048575") == (1048575,)


def test_transfers_at_a_share_of_the_link_and_at_the_median():
    # instance 0 (2 members, 100 us each) reached 50 GB/s of a 200 GB/s link; instance 1 is unknown
    info = {0: {"name": "AllReduce", "dim": "DP", "bytes": 10, "busbw": 50.0, "inter": False, "gpu_gbps": 200.0,
                "nic_gbps": 25.0},
            1: {"name": "AllReduce", "dim": "DP", "bytes": 10, "busbw": float("nan"), "inter": True,
                "gpu_gbps": 200.0, "nic_gbps": 25.0}}
    v = TransferView(np.asarray([0, 0, 1, 1]), np.asarray([0, 1, 0, 1]), np.asarray([100., 100., 300., 500.]),
                     Members({}, info))
    sel = v.select(None, "dp", None)
    assert v.share_factor(sel, 0.5).tolist() == [0.5, 0.5, 1.0, 1.0]        # 50 / (0.5 x 200); unknown: as is
    assert v.share_factor(sel, 0.1).tolist() == [1.0, 1.0, 1.0, 1.0]        # never slower than measured
    # the median of the four transfers is 200 us: instance 1's members (selected by rank 1) come down to it
    assert v.median_factor(v.has_member([1])).tolist() == [1.0, 1.0, 200.0 / 300.0, 200.0 / 500.0]
    # each member reads its instance's facts; one str object a distinct name, whatever the members
    assert v.fact("name").tolist() == ["AllReduce"] * 4 and v.fact("bytes").tolist() == [10] * 4
    assert len({id(x) for x in v.fact("name")}) == 1
    assert np.isnan(v.fact("peak")).tolist() == [False] * 4 and v.fact("peak").tolist() == [200.0, 200.0, 25.0, 25.0]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=30),
       st.lists(st.tuples(st.one_of(st.just(math.nan), st.floats(0, 500)), st.booleans(),
                          st.one_of(st.just(math.nan), st.floats(0, 400))), min_size=5, max_size=5),
       st.sampled_from([0.25, 0.5, 1.0]), st.sampled_from([None, 100.0]))
def test_transfers_at_a_share_of_the_link_member_by_member(members, facts, share, gbps):
    """``share_factor`` against a member at a time in plain Python: min(1, busbw / (share x peak)), the peak
    ``gbps`` else the instance's link (the network's when its group spans nodes); 1 where not selected,
    unknown (NaN) or not positive."""
    info = {i: {"name": "AllReduce", "busbw": b, "inter": inter, "gpu_gbps": p, "nic_gbps": p / 4}
            for i, (b, inter, p) in enumerate(facts)}
    inst = np.asarray([m[0] for m in members], np.int64)
    sel = np.asarray([m[1] for m in members], bool)
    v = TransferView(inst, np.zeros(len(inst), np.int64), np.ones(len(inst)), Members({}, info))
    want = []
    for i, chosen in members:
        b, inter, p = facts[i]
        peak = gbps if gbps else (p / 4 if inter else p)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            f = min(1.0, float(np.float64(b) / np.float64(share * peak)))
        want.append(f if chosen and math.isfinite(f) and f > 0 else 1.0)
    assert v.share_factor(sel, share, gbps).tolist() == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(min_size=2, max_size=5), st.none(), st.integers(-3, 3)), max_size=30))
def test_shared_text_is_str_of_each_value_one_object_a_text(values):
    """``_shared_text``: ``str`` of each value, in order, one str object a distinct text, though the input
    held a copy of it per element (texts of two characters or more: Python shares one-character ones)."""
    from streamtrace.aggregate.whatif_members import _shared_text
    col = np.empty(len(values), object)
    col[:] = ["".join(list(v)) if isinstance(v, str) else v for v in values]      # (a new str object each)
    texts = [x for x in col.tolist() if isinstance(x, str)]
    assert len({id(x) for x in texts}) == len(texts)                     # (so the input shares none)
    got = _shared_text(col)
    assert got.dtype == object and got.tolist() == [str(v) for v in values]
    assert len({id(x) for x in got}) == len({str(v) for v in values})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 50), st.booleans()), min_size=1, max_size=40),
       st.lists(st.tuples(st.sampled_from(["AllReduce", "AllGather"]), st.sampled_from(["DP", "TP"]),
                          st.sampled_from([10, 20])), min_size=6, max_size=6))
def test_transfers_at_the_median_of_their_collective(members, facts):
    """``median_factor`` against ``np.median`` of each group's transfers (same collective, dimension and
    size, over every member of the step), computed a member at a time in plain Python."""
    info = {i: {"name": n, "dim": d, "bytes": b} for i, (n, d, b) in enumerate(facts)}
    inst = np.asarray([m[0] for m in members])
    transfer = np.asarray([float(m[1]) for m in members])
    sel = np.asarray([m[2] for m in members])
    v = TransferView(inst, np.zeros(len(inst), np.int64), transfer, Members({}, info))
    want = []
    for i, t, s in members:
        med = float(np.median([float(x[1]) for x in members if facts[x[0]] == facts[i]]))
        want.append(med / t if s and t > med else 1.0)
    assert v.median_factor(sel).tolist() == want


def test_two_iterations(tmp_path):
    # the same stalled job as two iterations (two analysed folders): rank 1 is two parts, each step replayed
    # with its own iteration's figures, each predicting the clean job's span
    dirs = []
    for it in (10, 11):
        spec = dataclasses.replace(SPEC, iteration=it)
        generate_job(tmp_path / f"clean{it}", spec)
        generate_job(tmp_path / f"t{it}", dataclasses.replace(spec, faults=(Fault("cpu_stall", 1, delay_ns=STALL_NS),)))
        analyze([tmp_path / f"t{it}"], tmp_path / f"an{it}", AnalyzeOptions(jobs=1))
        dirs.append(tmp_path / f"an{it}")
    aggregate(dirs, tmp_path / "agg", AggregateOptions(jobs=1))
    rows = streamtrace.load(tmp_path / "agg").whatif("median:rank=1").to_pylist()
    assert sorted((r["iteration"], r["step"]) for r in rows) == [(10, 10), (11, 11)]
    for r in rows:
        clean = step_span(tmp_path / f"clean{r['iteration']}")
        assert r["ranks_touched"] == 2 and abs(r["predicted_span_ns"] - clean) <= 0.03 * clean


def test_instance_facts_are_columns_with_defaults_for_unknown_instances():
    """The matched instances' facts as columns (``InstanceFacts``): looked up by id in any order,
    an unknown id gets each fact's default; built from rows as from columns alike."""
    import math
    from streamtrace.aggregate.whatif_members import InstanceFacts
    f = InstanceFacts([7, 3], name=["AllGather", "AllReduce"], bytes=[70, 30], inter=[True, False])
    assert f.column("name", [3, 9, 7]).tolist() == ["AllReduce", "", "AllGather"]
    assert f.column("bytes", [7, 3, 3]).tolist() == [70, 30, 30]
    assert f.column("inter", [3, 7, -1]).tolist() == [False, True, False]
    assert math.isnan(f.column("busbw", [3])[0]) and f.get(9) is None
    one = f.get(7)
    assert {k: one[k] for k in ("name", "dim", "bytes", "inter")} == {"name": "AllGather", "dim": "", "bytes": 70,
                                                                     "inter": True}
    assert all(math.isnan(one[k]) for k in ("busbw", "gpu_gbps", "nic_gbps"))
    rows = InstanceFacts.from_rows({3: {"name": "AllReduce", "bytes": 30}, 7: {"name": "AllGather", "bytes": 70,
                                                                             "inter": True}})
    for k in ("name", "bytes", "inter"):
        assert rows.column(k, [3, 7]).tolist() == f.column(k, [3, 7]).tolist()


def _replayer(aggdir):
    from streamtrace.aggregate.folder import Aggregate
    from streamtrace.aggregate.whatif import Replayer, graph_tables, parts_of, read_members, step_tables
    meta = Aggregate.read(aggdir).summary
    steps = {int(s[1]) for s in meta.get("steps") or []} or None
    return Replayer(step_tables(graph_tables(aggdir)), read_members(aggdir, meta), parts_of(meta), aggdir, 1, steps)


def test_replayed_together_equal_one_at_a_time(job, monkeypatch):
    """``Replayer.replay_many`` (the report's candidates) gives each change set the rows its own replay
    gives, and builds each touched rank's step graph once for all the sets without an at-median change."""
    from streamtrace.aggregate.critical_local import PartGraphs
    rep = _replayer(job[0] / "agg")
    sets = [[AtMedian((1,), "compute")], [HostGaps((1,))], [Launches()], [Kernels(None, "gemm", 0.5)],
            [Ops((1,), "DataLoader", 0.0)]]
    alone = [row for s in sets for row in rep.replay(s, "candidate")]
    builds = []
    real = PartGraphs.build
    monkeypatch.setattr(PartGraphs, "build", lambda self, *w: builds.append(w) or real(self, *w))
    assert rep.replay_many(sets, "candidate") == alone
    together = len(builds)
    builds.clear()
    rep.replay([Launches()], "candidate")
    every_rank = len(builds)                            # one global set: each rank's step graph once
    builds.clear()
    rep.replay(sets[0], "candidate")
    assert every_rank == 4 and together == every_rank + len(builds)    # + the at-median set's own


@pytest.mark.parametrize("batch", [1, 3, 1 << 15])
def test_members_read_a_batch_at_a_time_are_the_tables_rows(job, batch):
    """``read_members`` reads ``collectives.parquet`` ``batch_rows`` instances at a time: its facts are the
    table's (read whole with pyarrow here), and its keys ``collectives_ranks``' members of instances with
    two or more members, whatever the batch."""
    import pyarrow.parquet as pq
    from streamtrace.aggregate.folder import Aggregate
    from streamtrace.aggregate.whatif import read_members
    agg = job[0] / "agg"
    got = read_members(agg, Aggregate.read(agg).summary, batch_rows=batch)
    c = pq.read_table(agg / "collectives.parquet").to_pydict()
    assert len(got.info) == len(c["instance"]) > 0
    ids = c["instance"]
    assert got.info.column("name", ids).tolist() == c["collective"]
    assert got.info.column("dim", ids).tolist() == [d or "" for d in c["parallel_dim"]]
    assert got.info.column("bytes", ids).tolist() == [b or 0 for b in c["msg_bytes"]]
    m = pq.read_table(agg / "collectives_ranks.parquet").to_pydict()
    count = {}
    for i in m["instance"]:
        count[i] = count.get(i, 0) + 1
    want = sorted((p, k, s, i) for p, k, s, i in zip(m["part"], m["correlation"], m["stream"], m["instance"])
                  if count[i] >= 2)
    keys, inst = got.arrays()
    assert sorted(zip(*keys.T.tolist(), inst.tolist())) == want
