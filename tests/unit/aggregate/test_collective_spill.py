"""The bucketed, spilled collectives path against the in-memory one: the same tables row for row,
the same summary, straggler and p2p rows, the same clock offsets, whatever the bucket size; the
spill folder gone on success and on error; timeline written per part equal to the gathered one."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.aggregate import collective_spill
from streamtrace.aggregate.run import AggregateOptions, aggregate
from streamtrace.aggregate.alignment import Job
from streamtrace.aggregate.collective_spill import collectives_to
from streamtrace.aggregate.collectives import analyse_collectives, write_collectives
from streamtrace.aggregate.p2p import p2p_rows, p2p_table
from streamtrace.synth.job import SynthSpec, generate_job


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spill")
    generate_job(tmp / "traces", SynthSpec(world_size=16, tp=2, pp=4, microbatches=3, layers=2, steps=2,
                                           clock_skew_ns=2_000_000, straggler_rank=5, straggler_delay_ns=300_000))
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    return tmp / "an"


def _count_buckets(monkeypatch):
    calls = []
    real = collective_spill.instance_tables

    def counting(c):
        calls.append(len(c["instance"]))
        return real(c)
    monkeypatch.setattr(collective_spill, "instance_tables", counting)
    return calls


def _same_files(a, b, names):
    for n in names:
        ta, tb = pq.read_table(a / n), pq.read_table(b / n)
        assert ta.schema.equals(tb.schema), n
        assert ta.equals(tb), n


@pytest.mark.parametrize("clock_sync", [None, "collectives"])
@pytest.mark.parametrize("bucket_rows", [1, 97, 10**9])
@pytest.mark.parametrize("batch_rows,held", [(None, None), (1, 1), (150, 400)])
def test_buckets_equal_in_memory(job_dir, tmp_path, monkeypatch, clock_sync, bucket_rows, batch_rows, held):
    """(``batch_rows`` / ``held``: pass 1's batches and pass 2's flushes made small: a batch a part,
    several parts a batch, several flushes)"""
    if batch_rows is not None:
        monkeypatch.setattr(collective_spill, "_BATCH_ROWS", batch_rows)
        monkeypatch.setattr(collective_spill, "_HELD", held)
    mem_job, spill_job = Job([job_dir]), Job([job_dir])
    ref = analyse_collectives(mem_job, clock_sync)
    (tmp_path / "ref").mkdir()
    (tmp_path / "out").mkdir()
    write_collectives(tmp_path / "ref", ref)
    calls = _count_buckets(monkeypatch)
    res, paths = collectives_to(spill_job, tmp_path / "out", clock_sync, bucket_rows)
    n_rows = len(ref.members["instance"])
    n_buckets = len(calls) // (2 if clock_sync else 1)
    if bucket_rows < 100:
        assert n_buckets > 10 and sum(calls) == n_rows * (2 if clock_sync else 1)
    else:
        assert n_buckets == 1
    assert sorted(p.name for p in paths) == sorted(p.name for p in (tmp_path / "ref").iterdir())
    _same_files(tmp_path / "ref", tmp_path / "out", [p.name for p in paths if p.suffix == ".parquet"])
    assert (tmp_path / "ref" / "collectives_summary.csv").read_bytes() == \
        (tmp_path / "out" / "collectives_summary.csv").read_bytes()
    assert res.summary == ref.summary and res.stragglers == ref.stragglers and res.stats == ref.stats
    assert p2p_rows(res.transfers, spill_job.topology) == p2p_table(ref.instances, ref.members, mem_job.topology)
    assert res.clock_offsets == ref.clock_offsets and res.clock_components == ref.clock_components
    if clock_sync:
        assert len(set(res.clock_offsets.values())) > 1          # the skew was found, not zeros
        assert [p.clock_offset_ns for p in spill_job.parts] == [p.clock_offset_ns for p in mem_job.parts]
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []


def test_spill_removed_on_error(job_dir, tmp_path, monkeypatch):
    def boom(c):
        raise StreamtraceError("boom")
    monkeypatch.setattr(collective_spill, "instance_tables", boom)
    with pytest.raises(StreamtraceError, match="boom"):
        collectives_to(Job([job_dir]), tmp_path, None, 50)
    assert list(tmp_path.iterdir()) == []


def test_bad_clock_sync(job_dir, tmp_path):
    with pytest.raises(StreamtraceError):
        collectives_to(Job([job_dir]), tmp_path, "ntp")
    assert list(tmp_path.iterdir()) == []


def test_aggregate_timeline_per_part(job_dir, tmp_path):
    """timeline.parquet: the rows of each part in part order, each part's rows as its own
    intervals (compared with the kernels' unions computed here), no spill folder left."""
    meta = aggregate([job_dir], tmp_path / "agg", AggregateOptions(jobs=2, collective_bucket_rows=50))
    t = pq.read_table(tmp_path / "agg" / "timeline.parquet").to_pydict()
    part = np.asarray(t["part"])
    assert (np.diff(part) >= 0).all() and set(part.tolist()) == set(range(16))
    job = Job([job_dir])
    for p in job.parts[:3]:
        k = job.read_kernels(p, ("ts_ns", "end_ns", "kind"))
        comp = k["kind"] == "compute"
        s, e = np.sort(p.align(k["ts_ns"][comp])), None
        sel = (part == p.index) & (np.asarray(t["category"], object) == "compute")
        starts = np.asarray(t["start_ns"])[sel]
        ends = np.asarray(t["end_ns"])[sel]
        e = p.align(k["end_ns"][comp])
        assert starts.min() == s.min() and ends.max() == e.max()
        assert (starts[1:] > ends[:-1]).all()                   # canonical: sorted, disjoint
        assert int((ends - starts).sum()) <= int((e - p.align(k["ts_ns"][comp])).sum())
    assert sorted(x.name for x in (tmp_path / "agg").iterdir() if x.name.startswith(".")) == []
    assert "timeline.parquet" in meta["files"]


def test_spilled_rows_of_some_prefixes(tmp_path):
    """The spill file (Arrow IPC, a record batch per part) read back for some prefixes only: the rows
    whose ``pid`` is asked for, in file order, across batches; none asked, none read."""
    import pyarrow as pa
    spill = collective_spill._SPILL
    parts = [{"pid": [3, 1, 3], "seq": [0, 0, 1]}, {"pid": [2], "seq": [0]}, {"pid": [1, 3], "seq": [1, 2]}]
    with collective_spill._spill_writer(tmp_path / "s.arrow") as w:
        for p in parts:
            n = len(p["pid"])
            cols = {f.name: p.get(f.name, [0] * n if f.type == pa.int64() else ["x"] * n) for f in spill}
            w.write_table(pa.table(cols, schema=spill))
    got = collective_spill._spilled_rows(tmp_path / "s.arrow", ["pid", "seq"], [3, 1])
    assert got.column_names == ["pid", "seq"]
    assert list(zip(got["pid"].to_pylist(), got["seq"].to_pylist())) == [(3, 0), (1, 0), (3, 1), (1, 1), (3, 2)]
    assert collective_spill._spilled_rows(tmp_path / "s.arrow", ["pid"], []).num_rows == 0


def test_group_rank_lists_are_spilled_as_codes(job_dir, tmp_path):
    """A group's rank list (``pg_ranks``) repeats on each of its rows: the bucket files hold it as an int
    code, and a loaded bucket gives back each row's text as analyze wrote it (read here from the
    analysed kernels), one ``str`` object a distinct text."""
    import pyarrow as pa
    job = Job([job_dir])
    plan = collective_spill._bucket(job, tmp_path, 10**9)
    assert len(plan.buckets) == 1
    assert pa.ipc.open_file(plan.buckets[0]).schema.field("pg_ranks").type == pa.int64()
    rows = collective_spill._load(job, plan, plan.buckets[0])
    raw = {}
    for p in job.parts:
        t = pq.read_table(p.files("kernels")[0], columns=["correlation", "kind", "pg_ranks"]).to_pylist()
        raw.update({(p.index, r["correlation"]): r["pg_ranks"] for r in t if r["kind"] == "communication"})
    got = dict(zip(zip(rows["part"].tolist(), rows["correlation"].tolist()), rows["pg_ranks"].tolist()))
    assert got == raw and any(v for v in got.values())
    assert len({id(v) for v in rows["pg_ranks"]}) == len(set(rows["pg_ranks"].tolist()))


@pytest.mark.parametrize("clock_sync", [None, "collectives"])
def test_parts_read_by_workers_equal_in_memory(job_dir, tmp_path, monkeypatch, clock_sync):
    """Pass 1 on two worker processes (``collective_parts.part_rows``, chunks of 3 parts, 16 parts: forked
    workers, results read back in part order) gives the in-memory path's tables, summary and offsets."""
    from streamtrace.aggregate import collective_parts
    monkeypatch.setattr(collective_parts, "CHUNK_PARTS", 3)
    monkeypatch.setattr(collective_parts, "MIN_PARTS", 1)
    mem_job, spill_job = Job([job_dir]), Job([job_dir])
    ref = analyse_collectives(mem_job, clock_sync)
    (tmp_path / "ref").mkdir()
    (tmp_path / "out").mkdir()
    write_collectives(tmp_path / "ref", ref)
    res, paths = collectives_to(spill_job, tmp_path / "out", clock_sync, 97, jobs=2)
    _same_files(tmp_path / "ref", tmp_path / "out", [p.name for p in paths if p.suffix == ".parquet"])
    assert res.summary == ref.summary and res.stragglers == ref.stragglers and res.stats == ref.stats
    assert res.clock_offsets == ref.clock_offsets and spill_job.warnings == mem_job.warnings


def test_worker_ids_and_notes_made_the_jobs():
    """A worker's part: its own prefix / signature ids turned into the job's (first seen first, in the
    part's order), its notes added once each."""
    from types import SimpleNamespace
    from streamtrace.aggregate.collective_parts import _job_ids
    job = SimpleNamespace(warnings=["a"])
    pids, sigs = {"p0": 0}, {}
    rows = {"prefix": np.asarray([0, 1, 1, 0, 2]), "sig": np.asarray([0, 0, 1, 1, 0])}
    got = _job_ids(job, rows, ["p1", "p0", "p2"], ["s0", "s1"], ["a", "b", "b"], pids, sigs)
    assert got["prefix"].tolist() == [1, 0, 0, 1, 2] and pids == {"p0": 0, "p1": 1, "p2": 2}
    assert got["sig"].tolist() == [0, 0, 1, 1, 0] and sigs == {"s0": 0, "s1": 1}
    assert job.warnings == ["a", "b"] and _job_ids(job, None, [], [], ["c"], pids, sigs) is None
    assert job.warnings == ["a", "b", "c"]


def test_workers_raise_a_parts_error(job_dir, tmp_path, monkeypatch):
    """A part whose kernels cannot be read: its error raised where a serial pass raises it, the workers
    stopped, nothing left in the output folder."""
    from streamtrace.aggregate import collective_parts
    monkeypatch.setattr(collective_parts, "CHUNK_PARTS", 2)
    monkeypatch.setattr(collective_parts, "MIN_PARTS", 1)
    job = Job([job_dir])
    (tmp_path / "copy").mkdir()
    monkeypatch.setattr(type(job.parts[7]), "files",
                        lambda self, d, _f=type(job.parts[7]).files: [tmp_path / "copy" / "gone.parquet"]
                        if self.index == 7 and d == "kernels" else _f(self, d))
    with pytest.raises(StreamtraceError):
        collectives_to(job, tmp_path / "copy", None, 97, jobs=2)
    assert list((tmp_path / "copy").iterdir()) == []
