"""read_table: whole, some columns, some rows (pyarrow filters), strings as shared objects; bad input
named as a DataError."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.runtime.errors import DataError
from streamtrace.events.dataset import read_table, shared_strings


@pytest.fixture
def table(tmp_path):
    p = tmp_path / "t.parquet"
    rank = [0, 1, 2, 1, 0, 3]
    cat = ["compute", None, "comm:TP", "compute", "comm:TP", "compute"]
    pq.write_table(pa.table({"rank": rank, "category": cat, "x": [1.5, 2, 3, 4, 5, 6]}), p, row_group_size=2)
    return p, rank, cat


def test_whole_columns_and_rows(table):
    p, rank, cat = table
    t = read_table(p)
    assert t["rank"].tolist() == rank and t["category"].tolist() == cat and t["category"].dtype == object
    assert t["x"].dtype == np.float64
    t = read_table(p, columns=["category"])
    assert list(t) == ["category"] and t["category"].tolist() == cat
    t = read_table(p, columns=["rank", "category"], where={"rank": [1, 3]})
    keep = [i for i, r in enumerate(rank) if r in (1, 3)]
    assert t["rank"].tolist() == [rank[i] for i in keep]            # file order kept
    assert t["category"].tolist() == [cat[i] for i in keep]
    assert len(read_table(p, where={"rank": [9]})["rank"]) == 0


def test_strings_shared(table):
    p = table[0]
    v = read_table(p)["category"]
    assert v[0] is v[3] is v[5]                                    # one str per distinct value
    col = pa.chunked_array([pa.array(["a", None]), pa.array(["b", "a"])])
    assert shared_strings(col).tolist() == ["a", None, "b", "a"]
    assert shared_strings(pa.chunked_array([], pa.string())).tolist() == []


def test_bad_column_or_file(table, tmp_path):
    p, _, _ = table
    with pytest.raises(DataError):
        read_table(p, columns=["nope"])
    with pytest.raises(DataError):
        read_table(p, where={"nope": [1]})
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(DataError):
        read_table(bad, where={"rank": [1]})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "é", None])), max_size=60),
       st.integers(1, 7), st.sets(st.integers(0, 6), max_size=3), st.sets(st.sampled_from(["a", "é", "z"]), max_size=2))
def test_read_arrow_keeps_the_rows_pyarrow_filters_keep(tmp_path_factory, rows, group, ranks, names):
    """``read_arrow`` (row groups left out by their statistics, the rest tested batch by batch, never
    through ``pyarrow.dataset``) returns the table ``pyarrow.parquet.read_table`` with the same
    filters returns: rows, order, types (names as dictionaries when asked)."""
    from streamtrace.events.dataset import read_arrow
    p = tmp_path_factory.mktemp("ra") / "t.parquet"
    t = pa.table({"rank": pa.array([r for r, _ in rows], pa.int64()), "name": pa.array([n for _, n in rows], pa.string()),
                  "i": pa.array(np.arange(len(rows)), pa.int64())})
    pq.write_table(t, p, row_group_size=group)
    where = {"rank": sorted(ranks)} | ({"name": sorted(names)} if names else {})
    filters = [(c, "in", v) for c, v in where.items()]
    for cols in (None, ["i"], ["name", "i"]):
        want = pq.read_table(p, columns=cols, filters=filters, read_dictionary=["name"])
        got = read_arrow(p, cols, where=where, read_dictionary=["name"])
        assert got.column_names == want.column_names
        assert got.to_pylist() == want.to_pylist()
        assert [f.type for f in got.schema] == [f.type for f in want.schema]
    assert read_arrow(p).equals(pq.read_table(p))


def test_read_arrow_names_a_damaged_file(tmp_path):
    from streamtrace.events.dataset import read_arrow
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="bad.parquet"):
        read_arrow(p)
    with pytest.raises(DataError, match="missing"):
        read_arrow(tmp_path / "none.parquet", where={"rank": [1]})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-2 ** 62, 2 ** 62), st.integers(-2 ** 62, 2 ** 62)), max_size=12),
       st.integers(1, 5), st.booleans())
def test_columns_min_max_is_numpys_over_the_rows(tmp_path_factory, rows, group, statistics):
    """Each column's (min, max), its footer read once, from the row groups' statistics or, written
    without them, from the rows; (None, None) for no rows and for a file that is not there."""
    from streamtrace.events.dataset import column_min_max, columns_min_max
    p = tmp_path_factory.mktemp("mm") / "k.parquet"
    a = np.asarray([r[0] for r in rows], np.int64)
    b = np.asarray([r[1] for r in rows], np.int64)
    pq.write_table(pa.table({"ts_ns": a, "end_ns": b}), p, row_group_size=group, write_statistics=statistics)
    want = {c: (int(v.min()), int(v.max())) if len(v) else (None, None) for c, v in (("ts_ns", a), ("end_ns", b))}
    assert columns_min_max(p, ("ts_ns", "end_ns")) == want
    assert column_min_max(p, "end_ns") == want["end_ns"]
    assert columns_min_max(p.with_name("gone.parquet"), ("ts_ns",)) == {"ts_ns": (None, None)}
    with pytest.raises(DataError, match="has no column 'dur_ns'"):
        columns_min_max(p, ("ts_ns", "dur_ns"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.one_of(st.none(), st.floats(-1e9, 1e9)),
                          st.one_of(st.none(), st.sampled_from(["fwd", "bwd", "é,\"x"]))), max_size=60),
       st.sampled_from([1, 7, 4_096]), st.booleans(), st.randoms())
def test_write_table_by_row_group_writes_the_table_written_whole(tmp_path_factory, rows, group, shuffle, rnd):
    """``write_table`` (``ROW_GROUP_ROWS`` rows a group, ``rows``: a group taken at a time) against pyarrow's
    own whole-table writers of the same rows, sorted first: the Parquet file's rows and schema, the CSV's
    bytes (its floats at 6 significant digits), and the row groups' sizes."""
    import io
    import pyarrow.csv as pcsv
    import streamtrace.events.dataset as ds
    d = tmp_path_factory.mktemp("wt")
    cols = {"i": np.asarray([r[0] for r in rows], np.int64),
            "f": np.asarray([np.nan if r[1] is None else r[1] for r in rows], np.float64),
            "s": np.asarray([r[2] for r in rows], object)}
    order = list(range(len(rows)))
    if shuffle:
        rnd.shuffle(order)
    old, ds.ROW_GROUP_ROWS = ds.ROW_GROUP_ROWS, group
    try:
        ds.write_table(d, "t", cols, csv=True, rows=np.asarray(order, np.int64) if shuffle else None)
    finally:
        ds.ROW_GROUP_ROWS = old
    whole = pa.table({"i": pa.array([rows[k][0] for k in order], pa.int64()),
                      "f": pa.array([np.nan if rows[k][1] is None else rows[k][1] for k in order], pa.float64()),
                      "s": pa.array([rows[k][2] for k in order],
                                    pa.string() if any(r[2] is not None for r in rows) else pa.null())})
    got = pq.read_table(d / "t.parquet")
    assert got.schema.equals(whole.schema)
    assert [x for x in got.column("i").to_pylist()] == whole.column("i").to_pylist()
    assert str(got.column("f").to_pylist()) == str(whole.column("f").to_pylist())       # (NaN as NaN)
    assert got.column("s").to_pylist() == whole.column("s").to_pylist()
    md = pq.ParquetFile(d / "t.parquet").metadata
    sizes = [md.row_group(k).num_rows for k in range(md.num_row_groups)]
    assert [s for s in sizes if s] == [min(group, len(rows) - k) for k in range(0, len(rows), group)]
    want = io.BytesIO()
    rounded = pa.array([float(f"{x:.6g}") for x in whole.column("f").to_pylist()], pa.float64())
    pcsv.write_csv(pa.table({"i": whole.column("i"), "f": rounded, "s": whole.column("s")}), want)
    assert (d / "t.csv").read_bytes() == want.getvalue()
