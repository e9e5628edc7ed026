"""``streamtrace analyze``: metrics against the reference, classification against the
synthetic generator's truth, chunked == in-memory, merged traces split back into ranks."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.merge import MergeOptions, merge
from streamtrace.synth.job import SynthSpec, generate_job

from support import CPU3D, REAL, SHARED, need_shared, real_traces, run_cli
from metrics_reference import FLOAT64_REFERENCE_KEYS, close_enough, float64_metrics

KERNEL_COLUMNS = [
    ("device", pa.int32()), ("stream", pa.int64()), ("tid", pa.int64()), ("ts_ns", pa.int64()),
    ("dur_ns", pa.int64()), ("end_ns", pa.int64()), ("name", pa.string()), ("cat", pa.string()),
    ("kind", pa.string()), ("correlation", pa.int64()), ("external_id", pa.int64()), ("launch_op", pa.string()),
    ("launching_op", pa.string()), ("annotation", pa.string()), ("top_annotation", pa.string()),
    ("gpu_annotation", pa.string()), ("phase", pa.string()), ("microbatch", pa.int64()), ("step", pa.int64()),
    ("attributed_by", pa.string()), ("collective", pa.string()),
    ("in_bytes", pa.int64()), ("out_bytes", pa.int64()), ("msg_bytes", pa.int64()), ("dtype", pa.string()),
    ("group_size", pa.int64()), ("pg_name", pa.string()), ("pg_desc", pa.string()), ("pg_ranks", pa.string()),
    ("parallel_dim", pa.string()), ("seq", pa.int64()), ("bytes_source", pa.string()), ("in_splits", pa.string()),
    ("out_splits", pa.string())]
OP_COLUMNS = [
    ("pid", pa.int64()), ("tid", pa.int64()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()), ("name", pa.string()),
    ("cat", pa.string()), ("depth", pa.int32()), ("parent", pa.int64()), ("correlation", pa.int64()),
    ("external_id", pa.int64()), ("kernel_count", pa.int64()), ("kernel_time_ns", pa.int64()),
    ("gpu_busy_ns", pa.int64())]


def table(outdir, name, rank):
    """One rank's partition, ``<name>/iteration=N/rank=R/part-0.parquet``, N from summary.json (-1 = null)."""
    its = [r["iteration"] for r in json.loads((Path(outdir) / "summary.json").read_text())["ranks"]
           if r["rank"] == rank]
    assert len(its) == 1, its
    it = -1 if its[0] is None else its[0]
    return pq.read_table(os.path.join(outdir, name, f"iteration={it}", f"rank={rank}", "part-0.parquet"))


@pytest.fixture(scope="module")
def real_analysis(tmp_path_factory):
    need_shared()
    out = tmp_path_factory.mktemp("real")
    res = {}
    for p in real_traces():
        res[p.name] = (analyze([p], out / p.name, AnalyzeOptions(jobs=1)), out / p.name)
    return res


@pytest.mark.parametrize("trace", [p.name for p in real_traces()] or ["<none>"])
def test_summary_matches_reference(real_analysis, trace):
    need_shared()
    summary, _ = real_analysis[trace]
    ref = json.loads((SHARED / "reference" / trace.replace(".json.gz", ".metrics.json")).read_text())
    assert len(summary["ranks"]) == 1
    got = summary["ranks"][0]["devices"]
    assert sorted(got) == sorted(ref["devices"])
    for dev, want in ref["devices"].items():
        for key, v in want.items():
            if close_enough(got[dev][key], v):
                continue
            # the reference was computed in float64 for this trace (see test_metrics_reference)
            assert key in FLOAT64_REFERENCE_KEYS.get(trace, ()), (dev, key, got[dev][key], v)
            assert close_enough(float64_metrics(REAL / trace, dev)[key], v)


def test_schema_is_pinned(real_analysis):
    need_shared()
    _, out = real_analysis["a100_resnet_ddp_rank0_of2.json.gz"]
    assert [(f.name, f.type) for f in table(out, "kernels", 0).schema] == KERNEL_COLUMNS
    assert [(f.name, f.type) for f in table(out, "ops", 0).schema] == OP_COLUMNS
    dset = ds.dataset(out / "kernels", format="parquet", partitioning="hive")
    assert {"rank", "iteration"} <= set(dset.schema.names) and dset.count_rows() == 3774
    assert sorted(os.listdir(out / "kernels")) == ["iteration=-1"]        # no iteration in the file's path
    pd = pytest.importorskip("pandas")      # strings read back as strings, not categoricals
    df = pd.read_parquet(out / "kernels" / "iteration=-1" / "rank=0" / "part-0.parquet")
    assert not any(isinstance(df[c].dtype, pd.CategoricalDtype) for c in df.columns)
    assert isinstance(df["name"].iloc[0], str)


def test_chunked_real_trace_equals_in_memory(real_analysis, tmp_path):
    """A real trace's tracks (runtime events written out of time order, in many runs) analysed
    in chunks of 997 events from spill files equal the in-memory analysis in one chunk."""
    need_shared()
    name = "a100_resnet_ddp_rank0_of2.json.gz"
    summary, out = real_analysis[name]
    s = analyze([REAL / name], tmp_path, AnalyzeOptions(jobs=1, chunked=True, chunk_events=997))
    assert [{k: v for k, v in r.items() if k != "source"} for r in s["ranks"]] == \
        [{k: v for k, v in r.items() if k != "source"} for r in summary["ranks"]]
    for t in ("kernels", "ops"):
        a, b = table(out, t, 0), table(tmp_path, t, 0)
        assert a.schema == b.schema and a.equals(b)


def test_resnet_kernels_and_ops(real_analysis):
    need_shared()
    _, out = real_analysis["a100_resnet_ddp_rank0_of2.json.gz"]
    k = table(out, "kernels", 0).to_pydict()
    comm = [i for i, kind in enumerate(k["kind"]) if kind == "communication"]
    # collective args sit on the NCCL kernels of this trace: check against them, read with plain json
    from support import load_json
    args = {e["args"]["correlation"]: e["args"] for e in load_json(REAL / "a100_resnet_ddp_rank0_of2.json.gz")
            ["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})}
    size = {"Float": 4, "Byte": 1, "Char": 1, "Long": 8}
    assert len(comm) == len(args) == 21
    for i in comm:
        a = args[k["correlation"][i]]
        assert k["collective"][i] == {"allreduce": "AllReduce", "broadcast": "Broadcast"}[a["Collective name"]]
        assert k["msg_bytes"][i] == a["In msg nelems"] * size[a["dtype"]] > 0
        assert k["group_size"][i] == 2 and k["pg_ranks"][i] == "0,1" and k["pg_desc"][i] == "default_pg"
    assert set(k["phase"]) >= {"forward", "backward", "optimizer"}
    assert all(k["launch_op"][i].startswith("cuda") for i in range(len(k["kind"])))
    o = table(out, "ops", 0).to_pydict()
    # roll-up: a root's kernel time equals the sum of the kernels launched under it
    roots = [i for i, p in enumerate(o["parent"]) if p < 0]
    assert sum(o["kernel_count"][i] for i in roots) == len(k["kind"])
    assert sum(o["kernel_time_ns"][i] for i in roots) == sum(k["dur_ns"])
    assert all(o["gpu_busy_ns"][i] <= o["kernel_time_ns"][i] for i in range(len(o["parent"])))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    truth = generate_job(d / "traces", SynthSpec(world_size=8, tp=2, pp=2, microbatches=2, steps=1))
    summary = analyze([d / "traces"], d / "out", AnalyzeOptions(jobs=2, topology=str(
        d / "traces" / "streamtrace_topology.json")))
    return truth, summary, d


def test_synthetic_metrics_and_classification(synth):
    """The generator knows every interval and collective it placed."""
    from streamtrace.kernels.intervals import intersect_length, union, union_length
    truth, summary, d = synth
    assert [r["rank"] for r in summary["ranks"]] == list(range(8))
    for rt, rs in zip(truth.ranks, summary["ranks"]):
        for dev, dt in rt.devices.items():
            m = rs["devices"][str(dev)]
            cu, co = union(*dt.compute), union(*dt.comm)
            assert m["compute_us"] * 1000 == pytest.approx(union_length(*dt.compute), abs=1)
            assert m["comm_us"] * 1000 == pytest.approx(union_length(*dt.comm), abs=1)
            assert m["overlap_us"] * 1000 == pytest.approx(intersect_length(*cu, *co), abs=1)
        k = table(d / "out", "kernels", rt.rank).to_pydict()
        by_corr = {c: i for i, c in enumerate(k["correlation"])}
        for ct in truth.collectives:
            if rt.rank not in ct.correlation:
                continue
            i = by_corr[ct.correlation[rt.rank]]
            assert k["kind"][i] == "communication"
            assert k["parallel_dim"][i] == ct.dim
            assert k["msg_bytes"][i] == ct.nbytes
            want = {"allreduce": "AllReduce", "reduce_scatter": "ReduceScatter", "allgather": "AllGather",
                    "sendrecv": ("Send", "Recv", "SendRecv")}[ct.type]
            assert k["collective"][i] in (want if isinstance(want, tuple) else (want,))
        # compute kernels: phase and micro-batch from the forward_step / backward_step windows
        for phase, gpu_windows in (("forward", rt.forward_gpu), ("backward", rt.backward_gpu)):
            for s in range(gpu_windows.shape[0]):
                for mb in range(gpu_windows.shape[1]):
                    lo, hi = gpu_windows[s, mb]
                    sel = [i for i in range(len(k["kind"])) if k["kind"][i] == "compute"
                           and lo <= k["ts_ns"][i] and k["end_ns"][i] <= hi]
                    assert sel and all(k["phase"][i] in (phase, "recompute") and k["microbatch"][i] == mb
                                       and k["step"][i] == truth.spec.iteration + s for i in sel)


def test_synthetic_dims_without_topology(synth, tmp_path):
    """Without --topology the dimension comes from the process-group description."""
    truth, _, d = synth
    s = analyze([d / "traces" / "iteration_10" / "rank_0005_iter_10.pt.trace.json"], tmp_path, AnalyzeOptions(jobs=1))
    k = table(tmp_path, "kernels", 5).to_pydict()
    dims = {k["parallel_dim"][i] for i in range(len(k["kind"])) if k["kind"][i] == "communication"}
    assert dims == {"TP", "DP", "PP"}
    assert s["ranks"][0]["rank"] == 5


def test_merged_trace_splits_back_into_ranks(synth, tmp_path):
    truth, summary, d = synth
    merged = tmp_path / "merged.json.gz"
    merge([d / "traces"], merged, MergeOptions(jobs=2))
    s2 = analyze([merged], tmp_path / "out", AnalyzeOptions(jobs=1, topology=str(
        d / "traces" / "streamtrace_topology.json")))
    assert [r["rank"] for r in s2["ranks"]] == list(range(8))
    for a, b in zip(summary["ranks"], s2["ranks"]):
        assert a["devices"] == b["devices"] and a["phases"] == b["phases"]
        ka = table(d / "out", "kernels", a["rank"]).drop(["correlation", "external_id"])
        kb = table(tmp_path / "out", "kernels", b["rank"]).drop(["correlation", "external_id"])
        assert ka.equals(kb)


def test_megatron_style_merge_is_split(synth, tmp_path):
    """Megatron's merge script gives every event of rank r pid r + 1."""
    truth, summary, d = synth
    import re
    parts = []
    for rt in truth.ranks[:2]:
        text = rt.path.read_text()       # edited as text: a float round trip would lose ns at ~1e13 us
        body = text[text.index("[", text.index('"traceEvents"')) + 1:text.rindex("]")]
        parts.append(re.sub(r'"pid":\s*("[^"]*"|-?\d+)', f'"pid": {rt.rank + 1}', body))
    p = tmp_path / "megatron_merged.json"
    p.write_text('{"traceEvents": [' + ",".join(parts) + "]}")
    s = analyze([p], tmp_path / "out", AnalyzeOptions(jobs=1))
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    for r in s["ranks"]:
        want = summary["ranks"][r["rank"]]["devices"]
        assert list(r["devices"].values()) == list(want.values())


def test_chunked_equals_in_memory(synth, tmp_path):
    truth, summary, d = synth
    s = analyze([d / "traces"], tmp_path, AnalyzeOptions(jobs=1, chunked=True, chunk_events=500, topology=str(
        d / "traces" / "streamtrace_topology.json")))
    for a, b in zip(summary["ranks"], s["ranks"]):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
        for name in ("kernels", "ops"):
            assert table(d / "out", name, a["rank"]).equals(table(tmp_path, name, b["rank"]))
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]     # spill files cleaned up


def test_cpu3d_call_trees(tmp_path):
    need_shared()
    s = analyze([CPU3D], tmp_path, AnalyzeOptions(jobs=2))
    assert [r["rank"] for r in s["ranks"]] == list(range(8))
    for r in s["ranks"]:
        assert r["devices"] == {} and r["call_tree"]["cpu_events"] > 200
        o = table(tmp_path, "ops", r["rank"]).to_pydict()
        names = set(o["name"])
        assert {"forward_step", "backward_step"} <= names


def test_cli_analyze_and_bad_input(tmp_path):
    need_shared()
    r = run_cli("analyze", REAL / "a100_resnet_ddp_rank0_of2.json.gz", "-o", tmp_path / "o", "-j", "1")
    assert r.returncode == 0, r.stderr
    assert "rank 0: GPU 0" in r.stdout and (tmp_path / "o" / "summary.json").exists()
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1')
    r = run_cli("analyze", bad, "-o", tmp_path / "o2")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "truncated" in r.stderr
    assert not (tmp_path / "o2" / "summary.json").exists()


def test_patterns_override(synth, tmp_path):
    """--patterns: a TOML file replacing the phase patterns changes the classification."""
    truth, summary, d = synth
    pat = tmp_path / "p.toml"
    pat.write_text('[phase]\nforward = ["^no_such_annotation$"]\n')
    s = analyze([d / "traces" / "iteration_10" / "rank_0000_iter_10.pt.trace.json"], tmp_path / "o",
                AnalyzeOptions(jobs=1, patterns=str(pat)))
    k = table(tmp_path / "o", "kernels", 0).to_pydict()
    assert "backward" in set(k["phase"])
    # no forward pattern left: the forward phase is only the inferred one (before each step's first backward)
    n_fwd = sum(1 for p in k["phase"] if p == "forward")
    assert s["ranks"][0]["phases_inferred"]["forward"]["gpu_events"] == n_fwd
    assert "phases_inferred" not in summary["ranks"][0]                  # annotated: nothing inferred
    assert s["ranks"][0]["devices"] == summary["ranks"][0]["devices"]      # metrics do not depend on phases
    bad = tmp_path / "bad.toml"
    bad.write_text('nonsense_key = ["x"]\n')
    r = run_cli("analyze", d / "traces", "-o", tmp_path / "o2", "--patterns", bad)
    assert r.returncode == 1 and "unknown pattern key" in r.stderr


def test_traceviz_topology_file(synth, tmp_path):
    """--topology also takes Megatron-TraceViz's unique_parallel_groups_*.txt."""
    truth, _, d = synth
    topo = json.loads((d / "traces" / "streamtrace_topology.json").read_text())
    lines = ["=" * 80, "MEGATRON PARALLEL CONFIGURATION", "=" * 80, ""]
    for dim, title in (("tp", "TENSOR PARALLEL (TP) GROUPS"), ("pp", "PIPELINE PARALLEL (PP) GROUPS"),
                       ("dp", "DATA PARALLEL (DP) GROUPS")):
        lines += [title, "-" * 50] + [f"Group {i + 1}: {g}" for i, g in enumerate(topo[dim])] + \
                 [f"Total groups: {len(topo[dim])}", ""]
    txt = tmp_path / "unique_parallel_groups_20260105_144840.txt"
    txt.write_text("\n".join(lines))
    analyze([d / "traces" / "iteration_10" / "rank_0002_iter_10.pt.trace.json"], tmp_path / "o",
            AnalyzeOptions(jobs=1, topology=str(txt)))
    k = table(tmp_path / "o", "kernels", 2).to_pydict()
    for ct in truth.collectives:
        if 2 in ct.correlation:
            i = k["correlation"].index(ct.correlation[2])
            assert k["parallel_dim"][i] == ct.dim


# -- the Parquet datasets: OUTDIR/<table>/iteration=N/rank=R/part-0.parquet -------------------------

@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    """One folder with two iterations of the same 4 ranks: iteration_10/ and iteration_20/."""
    d = tmp_path_factory.mktemp("multi")
    for it in (10, 20):
        generate_job(d / "traces", SynthSpec(world_size=4, tp=2, pp=2, iteration=it, seed=it))
    summary = analyze([d / "traces"], d / "out", AnalyzeOptions(jobs=2))
    return summary, d


def _counts(summary):
    """{(iteration, rank): (kernels rows, ops rows)} from summary.json's numbers (null iteration -> -1)."""
    return {(-1 if r["iteration"] is None else r["iteration"], r["rank"]):
            (r["links"]["gpu_events"], r["call_tree"]["cpu_events"]) for r in summary["ranks"]}


def test_partitions_are_iteration_then_rank(multi):
    summary, d = multi
    assert [(r["iteration"], r["rank"]) for r in summary["ranks"]] == [(it, r) for it in (10, 20) for r in range(4)]
    for name in ("kernels", "ops"):
        got = sorted(p.relative_to(d / "out" / name).as_posix() for p in (d / "out" / name).rglob("*.parquet"))
        assert got == [f"iteration={it}/rank={r}/part-0.parquet" for it in (10, 20) for r in range(4)]
    for r in summary["ranks"]:      # same rank, two iterations: each partition holds its own file's events
        k = pq.read_table(d / "out" / "kernels" / f"iteration={r['iteration']}" / f"rank={r['rank']}"
                          / "part-0.parquet")
        assert k.num_rows == r["links"]["gpu_events"] > 0
        assert r["iteration"] in set(k["step"].to_pylist()) <= {r["iteration"], -1}    # ProfilerStep#N
        assert "iteration" not in k.schema.names and "rank" not in k.schema.names   # only in the path


def test_dataset_read_whole_by_pyarrow_and_pandas(multi):
    from collections import Counter
    pd = pytest.importorskip("pandas")
    summary, d = multi
    want = _counts(summary)
    for name, j in (("kernels", 0), ("ops", 1)):
        t = ds.dataset(d / "out" / name, partitioning="hive").to_table()      # every column: no type clash
        assert t.schema.field("iteration").type == t.schema.field("rank").type == pa.int32()
        assert Counter(zip(t["iteration"].to_pylist(), t["rank"].to_pylist())) == {k: v[j] for k, v in want.items()}
        df = pd.read_parquet(d / "out" / name)
        assert Counter(zip(df["iteration"].astype("int64"), df["rank"].astype("int64"))) == \
            {k: v[j] for k, v in want.items()}
    df = pd.read_parquet(d / "out" / "kernels")
    assert set(df.loc[df["iteration"].astype("int64") == 20, "step"]) <= {20, -1}


def test_dataset_read_whole_by_duckdb(multi):
    duckdb = pytest.importorskip("duckdb")
    summary, d = multi
    rows = duckdb.sql(f"SELECT iteration, rank, count(*) FROM read_parquet('{(d / 'out' / 'kernels').as_posix()}"
                      f"/*/*/*.parquet', hive_partitioning=true) GROUP BY ALL").fetchall()
    assert {(i, r): n for i, r, n in rows} == {k: v[0] for k, v in _counts(summary).items()}


def test_unknown_iteration_partition(multi, tmp_path):
    """A trace whose path names no iteration: summary.json says null, its partition is iteration=-1, and
    the dataset reads as a whole beside iteration=10 (hive's null directory would not, in pandas)."""
    from collections import Counter
    pd = pytest.importorskip("pandas")
    summary, d = multi
    (tmp_path / "loose").mkdir()
    shutil.copy(d / "traces" / "iteration_20" / "rank_0001_iter_20.pt.trace.json",
                tmp_path / "loose" / "trace_rank1.json")          # rank 1 from distributedInfo, no iteration
    only = analyze([tmp_path / "loose"], tmp_path / "o1", AnalyzeOptions(jobs=1))
    assert [(r["iteration"], r["rank"]) for r in only["ranks"]] == [(None, 1)]
    assert os.listdir(tmp_path / "o1" / "kernels") == ["iteration=-1"]
    t = ds.dataset(tmp_path / "o1" / "kernels", partitioning="hive").to_table(columns=["iteration", "rank"])
    assert set(zip(t["iteration"].to_pylist(), t["rank"].to_pylist())) == {(-1, 1)}
    s = analyze([d / "traces" / "iteration_10", tmp_path / "loose"], tmp_path / "o2", AnalyzeOptions(jobs=2))
    assert [(r["iteration"], r["rank"]) for r in s["ranks"]] == [(None, 1)] + [(10, r) for r in range(4)]
    want = _counts(s)
    for name, j in (("kernels", 0), ("ops", 1)):
        t = ds.dataset(tmp_path / "o2" / name, partitioning="hive").to_table(columns=["iteration", "rank"])
        assert Counter(zip(t["iteration"].to_pylist(), t["rank"].to_pylist())) == {k: v[j] for k, v in want.items()}
        df = pd.read_parquet(tmp_path / "o2" / name, columns=["iteration", "rank"])
        assert Counter(zip(df["iteration"].astype("int64"), df["rank"].astype("int64"))) == \
            {k: v[j] for k, v in want.items()}


def test_same_rank_and_iteration_refused_before_writing(multi, tmp_path):
    from streamtrace.runtime.errors import RankConflictError
    _, d = multi
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(d / "traces" / "iteration_20" / "rank_0001_iter_20.pt.trace.json", tmp_path / sub / "rank1.json")
    with pytest.raises(RankConflictError, match="rank 1 appears in two inputs"):
        analyze([tmp_path / "a", tmp_path / "b"], tmp_path / "out", AnalyzeOptions(jobs=1))
    assert not (tmp_path / "out" / "kernels").exists()


def test_older_rank_only_layout(multi, tmp_path):
    """aggregate refuses a folder of the older kernels/rank=R/ layout; analyze into it replaces that layout."""
    from streamtrace.aggregate.alignment import Job
    from streamtrace.runtime.errors import StreamtraceError
    _, d = multi
    out = tmp_path / "out"
    for name in ("kernels", "ops"):
        (out / name / "rank=0").mkdir(parents=True)
        (out / name / "rank=0" / "part-0.parquet").write_bytes(b"PAR1")
    (out / "summary.json").write_text(json.dumps({"ranks": [{"rank": 0, "iteration": 10, "source": ""}]}))
    with pytest.raises(StreamtraceError, match="older streamtrace"):
        Job([out])
    analyze([d / "traces" / "iteration_10" / "rank_0000_iter_10.pt.trace.json"], out, AnalyzeOptions(jobs=1))
    assert os.listdir(out / "kernels") == os.listdir(out / "ops") == ["iteration=10"]
    assert len(Job([out]).parts) == 1


def test_aggregate_reads_every_iteration(multi, tmp_path):
    from streamtrace.aggregate import AggregateOptions, aggregate
    from streamtrace.events.dataset import read_table
    summary, d = multi
    want = {k: v[0] for k, v in _counts(summary).items()}
    aggregate([d / "out"], tmp_path / "all", AggregateOptions(jobs=1))
    rk = read_table(tmp_path / "all" / "ranks.parquet")
    assert dict(zip(zip(rk["iteration"].tolist(), rk["rank"].tolist()), rk["kernels"].tolist())) == want
    aggregate([d / "out"], tmp_path / "i20", AggregateOptions(jobs=1, iterations=[20]))
    rk = read_table(tmp_path / "i20" / "ranks.parquet")
    assert dict(zip(zip(rk["iteration"].tolist(), rk["rank"].tolist()), rk["kernels"].tolist())) == \
        {k: v for k, v in want.items() if k[0] == 20}


def test_cli_chunk_events_default_is_the_library_default():
    """The command's --chunk-events default (a literal: the CLI module imports no numpy) is
    streamtrace.events.store.CHUNK_EVENTS, which the benchmarks' memory numbers were measured with."""
    import inspect

    from streamtrace.cli import analyze as cli
    from streamtrace.events.store import CHUNK_EVENTS
    assert inspect.signature(cli.analyze).parameters["chunk_events"].default == CHUNK_EVENTS


def test_the_topology_is_read_once_per_run_and_again_in_the_next(synth, tmp_path, monkeypatch):
    """The job's topology (every rank's groups) is read once for all the files a process analyses,
    not once per file (quadratic in the world size), and read again by the next run (it may have
    changed); the analysis is the one each file's own read gave (the fixture's run, ``jobs=2``)."""
    import streamtrace.analyze.file as af
    _, summary, d = synth
    reads = []
    real = af.load_topology
    monkeypatch.setattr(af, "load_topology", lambda p: reads.append(p) or real(p))
    topo = str(d / "traces" / "streamtrace_topology.json")
    again = analyze([d / "traces"], tmp_path / "a", AnalyzeOptions(jobs=1, topology=topo))
    assert len(again["ranks"]) == 8 and reads == [topo]
    cols = ["rank", "ts_ns", "name", "parallel_dim"]
    mine, first = (ds.dataset(x / "kernels", partitioning="hive").to_table(columns=cols).sort_by(
        [("rank", "ascending"), ("ts_ns", "ascending")]) for x in (tmp_path / "a", d / "out"))
    assert mine.num_rows and mine.equals(first) and "TP" in set(mine["parallel_dim"].to_pylist())
    analyze([d / "traces"], tmp_path / "b", AnalyzeOptions(jobs=1, topology=topo))
    assert reads == [topo, topo]
