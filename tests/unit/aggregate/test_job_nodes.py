"""``job_nodes.NodeColumn``: a job graph's node column appended part by part and read back by index,
in memory or on disk, against the same values held in a plain numpy array."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate import job_nodes
from streamtrace.aggregate.job_nodes import NodeColumn


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.lists(st.integers(-2 ** 40, 2 ** 40), max_size=40), max_size=8),
       memory_rows=st.sampled_from([0, 3, 1 << 18]), read_rows=st.sampled_from([1, 5, 1 << 18]),
       on_disk=st.booleans(), data=st.data())
def test_a_column_reads_back_what_was_appended(parts, memory_rows, read_rows, on_disk, data, tmp_path_factory):
    """Every way of reading (whole, one value, an index array of any order and shape with repeats) gives
    the appended values, whether the column stayed in memory or went to its file (past ``MEMORY_ROWS``, or
    from the first value: ``on_disk``), read in chunks of any size."""
    mp = pytest.MonkeyPatch()
    mp.setattr(job_nodes, "MEMORY_ROWS", memory_rows)
    mp.setattr(job_nodes, "READ_ROWS", read_rows)
    try:
        col = NodeColumn(np.int64, tmp_path_factory.mktemp("nodes"), on_disk=on_disk)
        for p in parts:
            col.append(np.asarray(p, np.int64))
        want = np.asarray([x for p in parts for x in p], np.int64)
        assert len(col) == len(want) and col.tolist() == want.tolist()
        assert (col._f is not None) == (len(want) > memory_rows or on_disk)
        if len(want):
            idx = np.asarray(data.draw(st.lists(st.integers(0, len(want) - 1), min_size=1, max_size=30)))
            assert col.take(idx).tolist() == want[idx].tolist()
            assert col[idx.reshape(1, -1)].tolist() == want[idx.reshape(1, -1)].tolist()
            i = int(idx[0])
            assert col[i] == want[i] and col[np.int32(i)] == want[i]
        with pytest.raises(IndexError):
            col[len(want)]
        with pytest.raises(IndexError):
            col.take([len(want)])
        col.close()
        assert len(col) == 0 and col._f is None
    finally:
        mp.undo()


def test_values_are_cast_to_the_columns_type(tmp_path):
    """int64 values appended to an int32 column come back as int32 of the same values; an empty column reads
    back empty."""
    col = NodeColumn(np.int32, tmp_path)
    assert col.array().dtype == np.int32 and col.tolist() == [] and col.take([]).tolist() == []
    col.append(np.asarray([3, -1, 7], np.int64))
    assert col.array().dtype == np.int32 and col.tolist() == [3, -1, 7]
