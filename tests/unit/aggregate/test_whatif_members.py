"""``InstanceFacts.read``: the what-if replay's facts of each matched collective, read from
``collectives.parquet`` a batch at a time through the text columns' dictionaries; ``unique_inverse``."""
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.whatif_members import InstanceFacts

ROWS = {                                   # instance 7 is the one without a row: the defaults
    "instance": [3, 0, 2, 1, 5],
    "collective": ["AllReduce", None, "SendRecv", "AllReduce", "AllGather"],
    "parallel_dim": ["TP", None, "", "DP", "TP"],
    "msg_bytes": [10, None, 3, 4, 1 << 40],
    "busbw_gbps": [1.5, None, 2.0, float("nan"), 0.25],
    "pg_ranks": ["0,1", None, "", "0,8", "7 6 5"],
    "ranks": ["0,1", "0,9", "3,12", None, "16,17"],
}
# by hand: a null name is the text "None" (str of it), a null dimension "", null bytes 0, a null bus
# bandwidth NaN; a group spans nodes when its ranks (pg_ranks, else ranks: "" or null is none) are on
# more than one node of eight: "0,1" no, (null ->) "0,9" yes, ("" ->) "3,12" yes, "0,8" yes, "7 6 5" no
WANT = {3: ("AllReduce", "TP", 10, 1.5, False), 0: ("None", "", 0, math.nan, True),
        2: ("SendRecv", "", 3, 2.0, True), 1: ("AllReduce", "DP", 4, math.nan, True),
        5: ("AllGather", "TP", 1 << 40, 0.25, False), 7: ("", "", 0, math.nan, False)}


@pytest.mark.parametrize("batch", [1, 2, 1 << 15])
def test_facts_are_the_rows_whatever_the_batch(tmp_path, batch):
    p = tmp_path / "collectives.parquet"
    pq.write_table(pa.table(ROWS), p)
    got = InstanceFacts.read(p, 900.0, 50.0, batch_rows=batch)
    ids = list(WANT)
    assert len(got) == 5
    for k, fact in enumerate(("name", "dim", "bytes", "busbw", "inter")):
        col = got.column(fact, ids).tolist()
        want = [WANT[i][k] for i in ids]
        if fact == "busbw":
            assert [x if not math.isnan(x) else "nan" for x in col] == [x if not math.isnan(x) else "nan"
                                                                        for x in want]
        else:
            assert col == want
    assert got.column("gpu_gbps", [0, 5]).tolist() == [900.0, 900.0]
    assert got.column("nic_gbps", [0]).tolist() == [50.0] and math.isnan(got.column("nic_gbps", [7])[0])
    assert got.get(2) == {"name": "SendRecv", "dim": "", "bytes": 3, "busbw": 2.0, "inter": True,
                          "gpu_gbps": 900.0, "nic_gbps": 50.0}


def test_a_name_is_one_str_object_a_distinct_text(tmp_path):
    p = tmp_path / "collectives.parquet"
    pq.write_table(pa.table(ROWS), p)
    names = InstanceFacts.read(p, batch_rows=1).column("name", [3, 1])
    assert names[0] == names[1] == "AllReduce" and names[0] is names[1]


def test_an_empty_table(tmp_path):
    p = tmp_path / "collectives.parquet"
    pq.write_table(pa.table({k: pa.array(v[:0], pa.string() if k in ("collective", "parallel_dim", "pg_ranks",
                                                                      "ranks") else None)
                             for k, v in ROWS.items() if k not in ("msg_bytes", "busbw_gbps", "instance")}
                            | {"instance": pa.array([], pa.int64()), "msg_bytes": pa.array([], pa.int64()),
                               "busbw_gbps": pa.array([], pa.float64())}), p)
    got = InstanceFacts.read(p)
    assert len(got) == 0 and got.column("bytes", [1]).tolist() == [0]
    assert np.isnan(got.column("busbw", [1])).all()


def test_columns_of_nulls_alone_read_as_their_defaults(tmp_path):
    """A column whose every value is null (Parquet's ``null`` type: a job without sizes, dimensions or groups)
    reads as the facts' defaults, as a column of the usual type with nulls does."""
    p = tmp_path / "collectives.parquet"
    nulls = pa.array([None, None])
    pq.write_table(pa.table({"instance": [4, 9], "collective": ["AllReduce", None], "parallel_dim": nulls,
                             "msg_bytes": nulls, "busbw_gbps": nulls, "pg_ranks": nulls, "ranks": ["0,9", None]}), p)
    assert pq.read_schema(p).field("msg_bytes").type == pa.null()
    got = InstanceFacts.read(p)
    assert got.column("name", [4, 9]).tolist() == ["AllReduce", "None"]
    assert got.column("dim", [4, 9]).tolist() == ["", ""]
    assert got.column("bytes", [4, 9]).tolist() == [0, 0]
    assert np.isnan(got.column("busbw", [4, 9])).all()
    assert got.column("inter", [4, 9]).tolist() == [True, False]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 50), st.integers(-3, 2 ** 40)), max_size=60),
       st.sampled_from([np.int32, np.int64]))
def test_unique_inverse_is_numpys(values, dtype):
    """``unique_inverse``: ``np.unique(values, return_inverse=True)``'s distinct values (in their dtype) and
    inverse (int32), by its table of present values (small non-negative ids) or by numpy (negative ones,
    a wide span)."""
    from streamtrace.aggregate.whatif_members import unique_inverse
    v = np.asarray([x % (2 ** 31 - 1) if dtype is np.int32 and x > 0 else x for x in values], dtype)
    uniq, inv = unique_inverse(v)
    want_u, want_i = np.unique(v, return_inverse=True)
    assert uniq.dtype == v.dtype and inv.dtype == np.int32
    assert uniq.tolist() == want_u.tolist() and inv.tolist() == want_i.reshape(-1).tolist()
    assert uniq[inv].tolist() == v.tolist()
