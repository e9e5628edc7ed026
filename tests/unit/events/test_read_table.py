"""read_table: whole, some columns, some rows (pyarrow filters), strings as shared objects; bad input
named as a DataError."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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
