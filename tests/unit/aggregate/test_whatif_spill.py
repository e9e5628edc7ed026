"""The what-if replay's rows spilled by aggregate's workers (``streamtrace.aggregate.whatif_spill``):
the Parquet tables streamed from the spilled files hold the rows written (expected tables built
with plain pyarrow from the raw rows), the columns loaded and read lazily are those rows, and an
aggregate's ``whatif_anchors`` / ``whatif_edges`` equal its ranks' rows computed again without
spilling (a regression check of the transport).  The job graph built from spilled rows is checked
against a brute-force replay in ``test_whatif_replay``."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.aggregate import whatif_spill
from streamtrace.aggregate.folder import WHATIF_ANCHORS_COLUMNS, WHATIF_EDGES_COLUMNS
from streamtrace.aggregate.whatif import PartsJob, join_rows, parts_of
from streamtrace.aggregate.whatif_local import RANK_COLUMNS, part_replay
from streamtrace.aggregate.whatif_spill import SpilledRows, spill_rows
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import read_json, read_spilled
from streamtrace.synth.job import SynthSpec, generate_job

TEXT = ("top_category", "top_name", "top_lane")


def _raw_part(part, nanchors, nedges, seed):
    """One part's rows as plain Python lists (ints, and names from a small set)."""
    rng = np.random.default_rng(seed)
    names = ["aten::mm", "nccl:all_reduce", "", "DataLoader"]
    anchors = {c: [int(x) for x in rng.integers(0, 10 ** 9, nanchors)] for c in WHATIF_ANCHORS_COLUMNS}
    anchors["part"] = [part] * nanchors
    edges = {c: ([names[int(x)] for x in rng.integers(0, 4, nedges)] if c in TEXT else
                 [int(x) for x in rng.integers(-5, 10 ** 9, nedges)]) for c in WHATIF_EDGES_COLUMNS}
    edges["part"] = [part] * nedges
    ranks = {c: np.asarray([part], np.int64) for c in RANK_COLUMNS}
    return anchors, edges, ranks


def _as_result(anchors, edges, ranks):
    arr = lambda d: {c: np.asarray(v, object if c in TEXT else np.int64) for c, v in d.items()}  # noqa: E731
    return {"anchors": arr(anchors), "edges": arr(edges), "ranks": ranks}


@pytest.fixture
def spilled(tmp_path):
    raw = [_raw_part(0, 5, 7, 1), _raw_part(1, 0, 0, 2), _raw_part(2, 4, 11, 3)]
    folder = tmp_path / "spill"
    folder.mkdir()
    parts = [spill_rows(_as_result(*r), folder, i) for i, r in enumerate(raw)]
    return raw, SpilledRows(folder, parts), tmp_path


def test_spilled_files_are_the_workers_records(spilled, tmp_path):
    """Each table's records as the worker returned them, ``(record, rows)`` a part in order, all in the
    one file of this process (a part without rows writes none); pickled to the replay's process
    alike; each record reads back as the table of its part's rows."""
    import pickle
    raw, rows, _ = spilled
    (only,) = list(rows.folder.iterdir())
    for name, i in (("anchors", 0), ("edges", 1)):
        files = rows.files[name]
        got = list(files)
        want = [len(r[i]["part"]) for r in raw]
        assert [n for _, n in got] == want and rows.rows(name) == sum(want)
        assert all(rec[0] == str(only) and rec[2] > 0 for rec, n in got if n)
        assert [rec for rec, n in got if not n] == [whatif_spill.NO_RECORD]
        assert list(files.nonempty()) == [x for x in got if x[1]]
        assert list(pickle.loads(pickle.dumps(files))) == got
        for (rec, n), r in zip(got, raw):
            if n:
                assert read_spilled(rec).column("part").to_pylist() == r[i]["part"]
    other = [(("/elsewhere/a.spill", 0, 30), 3), (("", 0, 0), 0), (("/elsewhere/b.spill", 8, 40), 2)]
    files = whatif_spill.SpillFiles(other)
    assert list(files) == other and files.paths == ["/elsewhere/a.spill", "", "/elsewhere/b.spill"]
    assert list(files.nonempty()) == [other[0], other[2]]


@pytest.mark.parametrize("slice_rows", [3, 1 << 16])
def test_written_tables_hold_the_raw_rows(spilled, monkeypatch, slice_rows):
    raw, rows, tmp = spilled
    monkeypatch.setattr(whatif_spill, "SLICE_ROWS", slice_rows)
    out = tmp / "out"
    out.mkdir()
    for name, cols, i in (("anchors", WHATIF_ANCHORS_COLUMNS, 0), ("edges", WHATIF_EDGES_COLUMNS, 1)):
        (path,) = rows.write(out, name)
        want = pa.table({c: pa.array(sum((r[i][c] for r in raw), []), pa.string() if c in TEXT else pa.int64())
                         for c in cols})
        got = pq.read_table(path)
        assert got.schema.equals(want.schema) and got.equals(want)
        groups = [pq.ParquetFile(path).metadata.row_group(g).num_rows
                  for g in range(pq.ParquetFile(path).metadata.num_row_groups)]
        assert all(n == slice_rows for n in groups[:-1]) and sum(groups) == want.num_rows
    rows.close()
    assert not rows.folder.exists()


def test_loaded_and_lazy_columns_are_the_raw_rows(spilled):
    raw, rows, _ = spilled
    got = rows.load("edges", ("part", "src", "w_ns"))
    for c in ("part", "src", "w_ns"):
        assert got[c].dtype == np.int64 and got[c].tolist() == sum((r[1][c] for r in raw), [])
    want = sum((r[1]["top_name"] for r in raw), [])
    lazy = rows.lazy("edges", "top_name")
    assert len(lazy) == len(want) and [lazy[i] for i in range(len(want))] == want
    mask = np.arange(len(want)) % 3 == 1
    sub = lazy[mask]
    assert [sub[i] for i in range(len(sub))] == [x for x, m in zip(want, mask) if m]
    idx = [len(want) - 1, 0, 6, 7, 3]                       # across the files, out of order
    assert lazy.take(idx) == [want[i] for i in idx]
    assert sub.take([1, 0]) == [x for x, m in zip(want, mask) if m][1::-1]
    assert rows.ranks()["part"].tolist() == [0, 1, 2]



@pytest.mark.parametrize("join_parts", [1, 2, 1024])
def test_spilled_rows_read_from_a_generator_a_part_at_a_time(tmp_path, monkeypatch, join_parts):
    """``SpilledRows`` of a generator of the parts (and parts without rows, None), their ``"ranks"`` joined
    ``JOIN_PARTS`` at a time: the parts' ranks rows in order, each table's records as the workers returned them."""
    monkeypatch.setattr(whatif_spill, "JOIN_PARTS", join_parts)
    raw = [_raw_part(p, 2 + p % 3, p % 4, p) for p in range(7)]
    folder = tmp_path / "spill"
    folder.mkdir()
    parts = [spill_rows(_as_result(*r), folder, i) for i, r in enumerate(raw)]
    files = {name: [p[name] for p in parts] for name in ("anchors", "edges")}
    rows = SpilledRows(folder, (p for q in parts for p in (q, None)))
    for c in RANK_COLUMNS:
        assert rows.ranks()[c].tolist() == [int(r[2][c][0]) for r in raw]
    for name, want in files.items():
        assert list(rows.files[name]) == want

def test_lazy_columns_of_a_table_read_each_file_once(spilled, monkeypatch):
    # a path's rows read several columns from the same files: a file is opened once for all of a table's
    # lazy columns, past KEEP_CHUNKS files the first opened is let go (read again when asked), and
    # ``release`` lets every one go (each read again, the same values)
    raw, rows, _ = spilled
    opened = []
    read = whatif_spill.Lazy._read
    monkeypatch.setattr(whatif_spill.Lazy, "_read", lambda self, k: opened.append(k) or read(self, k))
    names, lanes = rows.lazy("edges", "top_name"), rows.lazy("edges", "top_lane")
    want = {c: sum((r[1][c] for r in raw), []) for c in ("top_name", "top_lane")}
    idx = list(range(len(want["top_name"])))[::-1]
    for _ in range(3):
        assert names.take(idx) == [want["top_name"][i] for i in idx]
        assert lanes.take(idx) == [want["top_lane"][i] for i in idx]
        assert names[idx[0]] == want["top_name"][idx[0]] and names[[0, 1]].take([1]) == [want["top_name"][1]]
    assert sorted(opened) == list(range(len(names.files))) and len(names.files) >= 2   # (files with rows)
    lanes.release()
    assert len(names.chunks) == 0
    assert names.take(idx) == [want["top_name"][i] for i in idx]
    assert lanes.take(idx) == [want["top_lane"][i] for i in idx]
    assert sorted(opened) == sorted(2 * list(range(len(names.files))))     # (each file opened once more)
    opened.clear()
    monkeypatch.setattr(whatif_spill, "KEEP_CHUNKS", 1)
    few, part = rows.lazy("anchors", "part"), sum((r[0]["part"] for r in raw), [])
    last = len(few.files) - 1
    assert few.take([0]) == [part[0]] and few.take([len(part) - 1]) == [part[-1]] and few.take([0]) == [part[0]]
    assert len(few.chunks) == 1 and opened == [0, last, 0]



def test_parquet_lazy_columns_are_the_file_rows(spilled, monkeypatch):
    """``ParquetLazy`` (``streamtrace whatif``'s edges not loaded) reads the values the raw rows hold,
    across row groups, out of order, through masks and indices, nulls as None."""
    raw, rows, tmp = spilled
    monkeypatch.setattr(whatif_spill, "SLICE_ROWS", 4)               # 18 rows: 5 row groups
    out = tmp / "pq"
    out.mkdir()
    (path,) = rows.write(out, "edges")
    for c in ("top_name", "host_ns"):
        want = sum((r[1][c] for r in raw), [])
        lazy = whatif_spill.ParquetLazy(path, c)
        assert len(lazy) == len(want) and [lazy[i] for i in range(len(want))] == want
        idx = [len(want) - 1, 0, 9, 4, 3, 4]
        assert lazy.take(np.asarray(idx)) == [want[i] for i in idx] and lazy.take([]) == []
        mask = np.arange(len(want)) % 3 != 1
        sub = lazy[mask]
        kept = [x for x, m in zip(want, mask) if m]
        assert len(sub) == len(kept) and sub.take(np.arange(len(kept))[::-1]) == kept[::-1]
        assert sub[np.asarray([2, 0])].take([0, 1]) == [kept[2], kept[0]]
        lazy.release()
        assert lazy._open[0] == -1 and lazy.take(np.asarray(idx)) == [want[i] for i in idx]
    t = pa.table({"x": pa.array(["a", None, "b"])})
    pq.write_table(t, tmp / "nulls.parquet", row_group_size=2)
    assert whatif_spill.ParquetLazy(tmp / "nulls.parquet", "x").take([2, 1, 0]) == ["b", None, "a"]


@pytest.mark.slow
def test_aggregate_tables_equal_the_rows_without_spilling(tmp_path):
    """A 4-rank synthetic job's aggregate: ``whatif_anchors`` / ``whatif_edges`` as its ranks' rows
    computed again in memory (``part_replay``, no change), in part order; no spill left behind."""
    generate_job(tmp_path / "traces", SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=2))
    analyze([tmp_path / "traces"], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=2))
    meta = read_json(tmp_path / "agg" / "aggregate.json")
    parts = parts_of(meta)
    steps = {int(s[1]) for s in meta.get("steps") or []} or None
    want = join_rows([part_replay(PartsJob(steps), parts[i], []) for i in sorted(parts)])
    for name, key in (("whatif_anchors", "anchors"), ("whatif_edges", "edges")):
        got = pq.read_table(tmp_path / "agg" / f"{name}.parquet")
        assert got.num_rows == len(want[key]["part"]) > 0
        for c in got.column_names:
            assert got[c].to_pylist() == want[key][c].tolist(), (name, c)
    assert not [p for p in (tmp_path / "agg").iterdir() if p.name.startswith(".")]
