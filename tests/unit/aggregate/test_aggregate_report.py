"""``streamtrace aggregate`` and ``streamtrace report`` against the synthetic generator's truth (overlap,
micro-batch windows, pipeline bubbles), analyze's own summary.json, and the real cpu-3d run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.kernels import reference as R
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.events.dataset import read_table

from support import CPU3D, exact_ns, load_json, run_cli, shown_time, workers_loaded_kernels

M = 3   # micro-batches


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agg")
    truth = generate_job(tmp / "traces", SynthSpec(world_size=8, tp=2, pp=2, microbatches=M))
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    meta = aggregate([tmp / "an"], tmp / "out", AggregateOptions(jobs=1))
    return truth, tmp, meta


def _union(s, e):
    return R.union(list(map(int, s)), list(map(int, e)))


def _len(iv):
    return sum(b - a for a, b in zip(*iv))


def _within(iv, lo, hi):
    """A union clipped to [lo, hi) (the phase windows of one rank are disjoint)."""
    return R.intersect(iv[0], iv[1], [lo], [hi])


def _shift(meta, rank):
    return next(p["shift_ns"] - p["clock_offset_ns"] for p in meta["parts"] if p["rank"] == rank)


def _rows(table, **eq):
    m = np.ones(len(next(iter(table.values()))), bool)
    for k, v in eq.items():
        m &= table[k] == v
    return np.flatnonzero(m)


def test_rank_totals_equal_the_truth(job):
    truth, tmp, meta = job
    ranks = read_table(tmp / "out" / "ranks.parquet")
    assert sorted(ranks["rank"].tolist()) == list(range(8))
    for rt in truth.ranks:
        d = rt.devices[rt.rank % 8]
        cu, co, me = _union(*d.compute), _union(*d.comm), _union(*d.memory)
        allu = _union(np.r_[d.compute.start, d.comm.start, d.memory.start], np.r_[d.compute.end, d.comm.end, d.memory.end])
        ov = _len(R.intersect(cu[0], cu[1], co[0], co[1]))
        (i,) = _rows(ranks, rank=rt.rank)
        assert ranks["compute_ns"][i] == _len(cu) and ranks["comm_ns"][i] == _len(co)
        assert ranks["memory_ns"][i] == _len(me) and ranks["busy_ns"][i] == _len(allu)
        assert ranks["overlap_ns"][i] == ov and ranks["exposed_comm_ns"][i] == _len(co) - ov
        assert ranks["compute_only_ns"][i] == _len(cu) - ov
        first = min(d.compute.start.min(), d.comm.start.min(), d.memory.start.min())
        last = max(d.compute.end.max(), d.comm.end.max(), d.memory.end.max())
        assert ranks["wall_ns"][i] == last - first
        assert ranks["start_ns"][i] == first + _shift(meta, rt.rank)
        assert ranks["stage"][i] == rt.coords["pp"] and ranks["replica"][i] == rt.coords["dp"]
        assert ranks["step_ns"][i] == rt.steps[0, 1] - rt.steps[0, 0]


def test_microbatch_rows_equal_the_truth(job):
    truth, tmp, meta = job
    rp = read_table(tmp / "out" / "rank_phase.parquet")
    for rt in truth.ranks:
        d = rt.devices[rt.rank % 8]
        cu = _union(*d.compute)
        sh = _shift(meta, rt.rank)
        for phase, win in (("forward", rt.forward_gpu), ("backward", rt.backward_gpu)):
            for mb in range(M):
                (i,) = _rows(rp, rank=rt.rank, phase=phase, microbatch=mb)
                lo, hi = map(int, win[0, mb])
                assert rp["compute_start_ns"][i] == lo + sh and rp["compute_end_ns"][i] == hi + sh
                assert rp["compute_ns"][i] == _len(_within(cu, lo, hi))
                assert rp["compute_only_ns"][i] + rp["overlap_ns"][i] + (rp["comm_ns"][i] - rp["overlap_ns"][i]) + \
                    rp["memory_ns"][i] >= rp["busy_ns"][i]
                assert rp["idle_ns"][i] == rp["wall_ns"][i] - rp["busy_ns"][i]


def test_rank_phase_agrees_with_analyze_summary(job):
    truth, tmp, meta = job
    rp = read_table(tmp / "out" / "rank_phase.parquet")
    summ = json.loads((tmp / "an" / "summary.json").read_text())
    n = 0
    for r in summ["ranks"]:
        for row in r["phases"]:
            mb = -1 if row["microbatch"] is None else row["microbatch"]
            (i,) = _rows(rp, rank=r["rank"], device=int(row["device"]), iteration=row["iteration"],
                         phase=row["phase"], microbatch=mb)
            for k in ("compute", "comm", "memory", "overlap", "exposed_comm", "busy", "idle", "kernel_time"):
                assert round(int(rp[f"{k}_ns"][i]) / 1000, 3) == row[f"{k}_us"], (k, row)
            assert rp["kernels"][i] == row["gpu_events"]
            n += 1
    assert n == len(rp["rank"])


def test_pipeline_bubbles_equal_the_truth(job):
    truth, tmp, meta = job
    pipe = read_table(tmp / "out" / "pipeline.parquet")
    assert meta["topology"]["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert len(pipe["rank"]) == 8
    for g in meta["topology"]["pp"]:
        wins = {r: np.concatenate([truth.ranks[r].forward_gpu[0], truth.ranks[r].backward_gpu[0]]) for r in g}
        for stage, r in enumerate(g):
            cu = _union(*truth.ranks[r].devices[r % 8].compute)
            busy = sum(_len(_within(cu, int(a), int(b))) for a, b in wins[r])
            (i,) = _rows(pipe, rank=r)
            assert pipe["stage"][i] == stage
            assert pipe["busy_ns"][i] == busy and pipe["microbatches"][i] == M
        # the bubble: the group's span minus the stage's micro-batch windows (rank_phase's forward /
        # backward rows: every kernel of the micro-batch; cpu-3d's raw annotations in
        # test_report_real_multi) plus the pipeline waits inside them, the definition the report shows
        rp = read_table(tmp / "out" / "rank_phase.parquet")
        ws = {r: [(int(a), int(b)) for rr, ph, a, b in zip(rp["rank"], rp["phase"], rp["start_ns"], rp["end_ns"])
                  if rr == r and ph in ("forward", "backward")] for r in g}
        assert all(len(w) == 2 * M for w in ws.values())
        lo = min(a for w in ws.values() for a, _ in w)
        hi = max(b for w in ws.values() for _, b in w)
        waits = {}
        for stage, r in enumerate(g):
            # the pipeline sends / receives inside the stage's micro-batches while it computes nothing
            # (the truth's kernels, rank-local, moved onto the aggregate's axis)
            sh = _shift(meta, r)
            cu = _union(*truth.ranks[r].devices[r % 8].compute)
            cu = ([a + sh for a in cu[0]], [b + sh for b in cu[1]])
            pp = [(c.start_ns[r] + sh, c.end_ns[r] + sh) for c in truth.collectives
                  if c.dim == "PP" and r in c.start_ns]
            pp = _union([a for a, _ in pp], [b for _, b in pp])
            inside_pp = [x for a, b in ws[r] for x in zip(*_within(pp, a, b))]
            inside_pp = _union([a for a, _ in inside_pp], [b for _, b in inside_pp])
            waits[r] = _len(inside_pp) - _len(R.intersect(*inside_pp, *cu))
        for stage, r in enumerate(g):
            (i,) = _rows(pipe, rank=r)
            assert waits[r] > 0 and pipe["p2p_wait_ns"][i] == waits[r]
            inside = _len(_union([a for a, _ in ws[r]], [b for _, b in ws[r]]))
            assert pipe["span_ns"][i] == hi - lo and pipe["microbatch_ns"][i] == inside
            assert pipe["outside_microbatch_ns"][i] == hi - lo - inside and inside >= pipe["busy_ns"][i]
            assert pipe["bubble_ns"][i] == hi - lo - inside + waits[r]
            assert pipe["bubble_pct"][i] == pytest.approx(100 * (hi - lo - inside + waits[r]) / (hi - lo))
            assert pipe["ideal_bubble_pct"][i] == pytest.approx(100 / (M + 1))
            assert pipe["microbatches"][i] == M
    reps = read_table(tmp / "out" / "replicas.parquet")
    assert reps["ranks"].tolist() == ["0,1,4,5", "2,3,6,7"] and reps["pp_groups"].tolist() == ["0,1", "2,3"]
    for ri, ranks in enumerate(reps["ranks"].tolist()):         # each replica: its stages' window-based bubble
        mine = [pipe["bubble_pct"][j] for j in range(len(pipe["rank"])) if str(pipe["rank"][j]) in ranks.split(",")]
        assert reps["bubble_pct_mean"][ri] == pytest.approx(np.mean(mine))


def test_outputs_files_and_jobs(job, tmp_path):
    truth, tmp, meta = job
    for f in ("rank_phase.csv", "rank_phase.parquet", "ranks.csv", "pipeline.parquet", "replicas.parquet",
              "iterations.parquet", "timeline.parquet", "top_kernels.parquet", "collectives.parquet",
              "collectives_summary.csv", "stragglers.csv", "aggregate.json"):
        assert (tmp / "out" / f).is_file(), f
    m2 = aggregate([tmp / "an"], tmp_path / "j2", AggregateOptions(jobs=2))
    # every file aggregate writes is its own: running it again into the same folder replaces it
    first = sorted(p.name for p in (tmp_path / "j2").iterdir())
    aggregate([tmp / "an"], tmp_path / "j2", AggregateOptions(jobs=1))
    assert sorted(p.name for p in (tmp_path / "j2").iterdir()) == first
    for f in ("rank_phase.parquet", "pipeline.parquet", "collectives.parquet", "timeline.parquet"):
        a, b = read_table(tmp / "out" / f), read_table(tmp_path / "j2" / f)
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]) or (a[k].dtype.kind == "f" and np.allclose(a[k], b[k], equal_nan=True))
    assert m2["iterations"] == [10]
    top = read_table(tmp / "out" / "top_kernels.parquet")
    assert top["count"].sum() == sum(len(d.compute.start) + len(d.comm.start) + len(d.memory.start)
                                     for rt in truth.ranks for d in rt.devices.values())
    with pytest.raises(StreamtraceError):
        aggregate([tmp / "an"], tmp_path / "x", AggregateOptions(iterations=[99]))
    with pytest.raises(StreamtraceError):
        aggregate([tmp_path], tmp_path / "y")


def test_written_tables_have_their_declared_columns(job):
    """Each table (``aggregate.folder.COLUMNS`` declares every one's columns) is written with exactly those, in that
    order (read from the Parquet file's own schema); ``columns`` hands a reader only columns its table has."""
    import pyarrow.parquet as pq
    from streamtrace.aggregate.folder import COLUMNS, CRITICAL_PATH, TABLES, columns
    _, tmp, _ = job
    written = {n: tuple(pq.read_schema(tmp / "out" / f"{n}.parquet").names) for n in COLUMNS
               if (tmp / "out" / f"{n}.parquet").is_file()}
    assert set(COLUMNS) == set(TABLES)
    assert set(TABLES) - set(written) <= {"collectives_mismatch", "op_perf", "stragglers"}, set(TABLES) - set(written)
    assert {n: COLUMNS[n] for n in written} == written
    assert columns(CRITICAL_PATH, "rank", "step") == ["rank", "step"]
    assert columns(CRITICAL_PATH) == list(written[CRITICAL_PATH])
    with pytest.raises(KeyError):
        columns(CRITICAL_PATH, "stage")
    with pytest.raises(KeyError):
        columns("rank", "rank")


def test_workers_share_the_parents_kernels(job, tmp_path):
    """aggregate -j 2 loads its per-rank tasks' kernels (runtime.compile.TASKS) in the parent
    before forking the workers: a fresh process's workers then load no kernel of their own."""
    truth, tmp, meta = job
    parent, reports = workers_loaded_kernels(
        "streamtrace.aggregate.run", "_part_job", "args[1]",
        "from streamtrace.aggregate import AggregateOptions, aggregate\n"
        "aggregate([sys.argv[1]], os.path.join(sys.argv[2], 'out'), AggregateOptions(jobs=2))",
        tmp / "an", tmp_path)
    assert len(reports) == 8 and not any(name.startswith(parent + "-") for name, _ in reports)
    assert [k for _, loaded in reports for k in loaded] == []


def test_cli_aggregate(job, tmp_path):
    truth, tmp, meta = job
    r = run_cli("aggregate", tmp / "an", "-o", tmp_path / "o", "--clock-sync", "collectives",
                "--time-alignment", "individual", "--iterations", 10, "-j", 2)
    assert r.returncode == 0, r.stderr
    assert "collective instances" in r.stdout and "estimated clock offsets" in r.stdout
    m = json.loads((tmp_path / "o" / "aggregate.json").read_text())
    assert m["time_alignment"] == "individual" and m["clock_sync"] == "collectives"
    r = run_cli("aggregate", tmp_path / "nothing", "-o", tmp_path / "o2")
    assert r.returncode == 1 and "summary.json" in r.stderr and "Traceback" not in r.stderr


def test_cpu3d_microbatch_rows_for_every_rank(tmp_path):
    if not CPU3D.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    analyze([CPU3D / "iteration_4"], tmp_path / "an", AnalyzeOptions(jobs=1))
    meta = aggregate([tmp_path / "an"], tmp_path / "out", AggregateOptions(iterations=[4]))
    truth = json.loads((CPU3D / "parallel_topology.json").read_text())
    assert meta["topology"]["pp"] == truth["pp_groups"] and meta["topology"]["tp"] == truth["tp_groups"]
    rp = read_table(tmp_path / "out" / "rank_phase.parquet")
    for rank in range(8):
        raw = load_json(CPU3D / "iteration_4" / f"rank_{rank:04d}_iter_4.pt.trace.json", decimal=True)
        for phase in ("forward", "backward"):
            durs = [exact_ns(e["dur"]) for e in sorted(raw["traceEvents"], key=lambda e: e.get("ts", 0))
                    if e.get("ph") == "X" and e.get("name") == f"{phase}_step"]
            assert len(durs) == 2
            for mb in range(2):
                (i,) = _rows(rp, rank=rank, phase=phase, microbatch=mb)
                assert rp["wall_ns"][i] == durs[mb] and rp["source"][i] == "cpu"
                assert rp["comm_ns"][i] > 0 and rp["busy_ns"][i] <= rp["wall_ns"][i]
    pipe = read_table(tmp_path / "out" / "pipeline.parquet")
    assert sorted(zip(pipe["pp_group"].tolist(), pipe["stage"].tolist(), pipe["rank"].tolist())) == \
        [(g, s, r) for g, grp in enumerate(truth["pp_groups"]) for s, r in enumerate(grp)]


# -- report -----------------------------------------------------------------------------------

def test_report_numbers_come_from_the_tables(job, tmp_path):
    from streamtrace.report import write_report
    from streamtrace.report.options import ReportOptions
    truth, tmp, meta = job
    rep = write_report(tmp / "out", tmp_path, ReportOptions(tokens_per_step=16 * 2048, charts=False))
    got = json.loads((tmp_path / "report.json").read_text())
    md = (tmp_path / f"{got['name']}.md").read_text()
    assert got["name"] == tmp.name          # the job's: the folder of its traces (tmp/traces), not "an"
    c = got["configuration"]
    assert (c["world_size"], c["tp"], c["pp"], c["dp"], c["cp"], c["ep"]) == (8, 2, 2, 2, 1, 1)
    assert c["devices"] == ["NVIDIA H100 80GB HBM3"] and c["order"] == "tp-cp-ep-dp-pp"
    # throughput: the step time is the median over ranks of ProfilerStep#10, known from the truth
    step = int(np.median([rt.steps[0, 1] - rt.steps[0, 0] for rt in truth.ranks]))
    assert got["steps"] == [{"iteration": 10, "step": 10, "step_ns": step}]
    assert got["throughput"]["tokens_per_s"] == pytest.approx(16 * 2048 / (step / 1e9))
    assert f"{got['throughput']['tokens_per_s']:,.0f} tokens/s" in md
    # per-rank distribution = ranks.parquet
    rk = read_table(tmp / "out" / "ranks.parquet")
    for k in ("compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns"):
        s = got["ranks"]["stats"][k]
        assert (s["min"], s["median"], s["max"]) == (rk[k].min(), np.median(rk[k]), rk[k].max())
        assert rk[k][rk["rank"] == s["max_rank"]][0] == rk[k].max()
    assert f"| compute | {shown_time(rk['compute_ns'].min())} (rank " in md     # report/units.py's format
    assert f"{shown_time(np.median(rk['compute_ns']))} |" in md
    # collectives = collectives_summary.parquet, and its medians = collectives.parquet
    cs = read_table(tmp / "out" / "collectives_summary.parquet")
    inst = read_table(tmp / "out" / "collectives.parquet")
    assert len(got["collectives"]["by_type"]) == len(cs["collective"])
    for row in got["collectives"]["by_type"]:
        m = (inst["collective"] == row["collective"]) & (inst["parallel_dim"] == row["parallel_dim"]) & inst["complete"]
        assert row["busbw_gbps_median"] == pytest.approx(np.median(inst["busbw_gbps"][m]))
        assert row["bytes"] == inst["msg_bytes"][m].sum() and row["count"] == m.sum()
        assert f"| {row['collective']} | {row['parallel_dim']} | {row['count']:,} |" in md
    assert sum(v["traffic_pct"] for v in got["traffic"]["by_dim"].values()) == pytest.approx(100.0)
    # pipeline and top kernels = their tables
    pipe = read_table(tmp / "out" / "pipeline.parquet")
    assert [r["bubble_ns"] for r in got["pipeline"]["rows"]] == pipe["bubble_ns"].tolist()
    assert got["pipeline"]["ideal_bubble_pct"] == pytest.approx(100 / (M + 1))
    top = read_table(tmp / "out" / "top_kernels.parquet")
    assert [r["total_ns"] for r in got["top_kernels"]["rows"]] == top["total_ns"][:15].tolist()
    assert got["top_kernels"]["total_ns"] == top["total_ns"].sum()
    st = read_table(tmp / "out" / "stragglers.parquet")
    assert got["stragglers"]["top"][0]["straggler_lag_ns"] == st["straggler_lag_ns"].max()
    top0 = got["stragglers"]["top"][0]
    assert f"| {top0['rank']} | {top0['collective']} | {top0['parallel_dim']} | {top0['straggler_count']} |" in md
    assert not set(st["collective"].tolist()) & {"Send", "Recv", "SendRecv"}
    # point-to-point: its own section, = p2p.parquet summed per stage pair, and the truth's transfers
    p2p = read_table(tmp / "out" / "p2p.parquet")
    sec = got["p2p"]["by_stage_pair"]
    assert {(r["src_stage"], r["dst_stage"]) for r in sec} == {(0, 1), (1, 0)}
    for r in sec:
        m = (p2p["src_stage"] == r["src_stage"]) & (p2p["dst_stage"] == r["dst_stage"])
        assert (r["count"], r["recv_wait_ns"]) == (p2p["count"][m].sum(), p2p["recv_wait_ns"][m].sum())
        assert f"| {r['src_stage']} -> {r['dst_stage']} | {r['direction']} |" in md
    assert sum(r["count"] for r in sec) == sum(1 for c in truth.collectives if c.type == "sendrecv")
    assert "## Point-to-point (pipeline)" in md
    assert rep["files"][0].endswith(f"{tmp.name}.md")


def test_report_cli(job, tmp_path):
    truth, tmp, meta = job
    r = run_cli("report", tmp / "out", "-o", tmp_path / "r", "--name", "job42", "--global-batch", 16,
                "--seq-len", 2048, "--no-charts")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r" / "job42.md").is_file() and "tokens/s" in r.stdout
    r = run_cli("report", tmp / "out", "-o", tmp_path / "r2", "--global-batch", 16)
    assert r.returncode == 2 and "--seq-len" in r.stderr and "Error:" not in r.stderr     # a usage error
    # analysed folders are aggregated first
    r = run_cli("report", tmp / "an", "-o", tmp_path / "r3", "--no-charts", "--clock-sync", "collectives")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r3" / "report.json").read_text())
    assert rep["configuration"]["clock_sync"] == "collectives" and rep["stragglers"]["clock_offsets_ns"]


def test_merged_trace_gives_the_same_global_timeline(job, tmp_path):
    from streamtrace.merge import MergeOptions, merge
    truth, tmp, meta = job
    merge([tmp / "traces"], tmp_path / "merged.json", MergeOptions(jobs=1))
    analyze([tmp_path / "merged.json"], tmp_path / "an", AnalyzeOptions(jobs=1))
    m = aggregate([tmp_path / "an"], tmp_path / "out", AggregateOptions())
    assert all(p["merged"] for p in m["parts"])
    a, b = read_table(tmp / "out" / "ranks.parquet"), read_table(tmp_path / "out" / "ranks.parquet")
    for k in ("rank", "start_ns", "end_ns", "compute_ns", "comm_ns", "overlap_ns", "busy_ns"):
        assert a[k].tolist() == b[k].tolist(), k
    ca, cb = read_table(tmp / "out" / "collectives.parquet"), read_table(tmp_path / "out" / "collectives.parquet")
    assert ca["start_skew_ns"].tolist() == cb["start_skew_ns"].tolist()


def test_trace_metadata_comes_from_the_summary(job, tmp_path):
    """analyze keeps each rank's base time, device and process groups in summary.json, so aggregate
    gives the same alignment without the traces (moved away) and, for a folder analysed before
    summary.json kept them, still reads them from the traces."""
    truth, tmp, meta = job
    from streamtrace.analyze.outputs import rank_trace_metadata
    summ = load_json(tmp / "an" / "summary.json")
    for r in summ["ranks"]:
        facts = rank_trace_metadata(summ, r)
        assert facts["base_time_ns"] == truth.spec.base_time_ns + r["rank"] * truth.spec.clock_skew_ns
        assert facts["world_size"] == 8 and facts["device_name"]
        assert facts["pg_entries"] and all(r["rank"] in e["ranks"] for e in facts["pg_entries"])
    # each process group written once for the job, not once per member: the traces' own pg_config entries
    raw = [e for f in sorted((tmp / "traces").rglob("*.json*")) if "rank" in f.name
           for e in load_json(f)["distributedInfo"]["pg_config"]]
    distinct = {json.dumps(e, sort_keys=True) for e in raw}
    assert len(raw) > len(distinct) == len(summ["pg_entries"])
    assert {json.dumps(e, sort_keys=True) for e in summ["pg_entries"]} == distinct
    assert sum(len(r["trace_metadata"]["pg_groups"]) for r in summ["ranks"]) == len(raw)
    import shutil
    an = tmp_path / "an"
    shutil.copytree(tmp / "an", an)
    for r in summ["ranks"]:                  # the sources gone: the summary alone
        r["source"] = str(tmp_path / "gone" / f"rank{r['rank']}.json")
    (an / "summary.json").write_text(json.dumps(summ))
    m = aggregate([an], tmp_path / "agg", AggregateOptions(jobs=1))
    key = lambda ps: [(p["rank"], p["base_time_ns"], p["shift_ns"], p["device_name"]) for p in ps]  # noqa: E731
    assert key(m["parts"]) == key(meta["parts"])
    old = load_json(tmp / "an" / "summary.json")
    for r in old["ranks"]:                   # an older summary: read from the traces again
        del r["trace_metadata"]
    (an / "summary.json").write_text(json.dumps(old))
    m = aggregate([an], tmp_path / "agg_old", AggregateOptions(jobs=1))
    assert key(m["parts"]) == key(meta["parts"])
