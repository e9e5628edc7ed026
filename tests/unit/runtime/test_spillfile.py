"""Worker records in one file a process (``streamtrace.runtime.spillfile``): each record reads back as
the bytes written, whatever was appended around it; a process writes one file, a forked child another;
a file cut short raises ``OSError``."""
from __future__ import annotations

import multiprocessing as mp
import os

import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.runtime import spillfile


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_records_read_back_as_written(tmp_path_factory, blobs):
    folder = tmp_path_factory.mktemp("spill")
    recs = [spillfile.append(folder, b) for b in blobs]
    assert [spillfile.read_at(*r) for r in recs] == blobs
    assert [r[1] for r in recs] == [sum(len(b) for b in blobs[:i]) for i in range(len(blobs))]
    assert {r[0] for r in recs} <= {str(p) for p in folder.iterdir()} and len(list(folder.iterdir())) <= 1


def test_a_record_written_through_the_file_and_opened_at_its_start(tmp_path):
    spillfile.append(tmp_path, b"before")
    r = spillfile.Record(tmp_path)
    with r as f:
        f.write(b"abc")
        at = f.tell()
        f.write(b"defg")
    path, offset, size = r.rec
    assert (offset, size, at) == (6, 7, 9)
    with spillfile.opened(r.rec) as f:
        assert f.read(size) == b"abcdefg"
    assert spillfile.read_at(path, at, 4) == b"defg"


def _child(folder, q):
    q.put(spillfile.append(folder, b"child %d" % os.getpid()))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_each_process_its_own_file(tmp_path):
    mine = spillfile.append(tmp_path, b"parent")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(tmp_path, q)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join()
    assert len({mine[0], got[0][0], got[1][0]}) == 3 and len(list(tmp_path.iterdir())) == 3
    assert sorted(spillfile.read_at(*r) for r in got) == sorted(b"child %d" % p.pid for p in procs)
    assert spillfile.read_at(*mine) == b"parent" and all(r[1] == 0 for r in got)


def test_a_file_cut_short_raises(tmp_path):
    path, offset, size = spillfile.append(tmp_path, b"0123456789")
    os.truncate(path, 4)
    with pytest.raises(OSError, match="10 bytes expected"):
        spillfile.read_at(path, offset, size)


def test_tables_as_records_in_a_folder_not_utf8(tmp_path):
    """``events.dataset.spill_table`` / ``read_spilled``: Arrow tables as records of one file, read back
    equal (schema and values, nulls and empty strings too) from their offsets, in a folder whose name is
    not UTF-8 (issue 49's case)."""
    import pyarrow as pa
    from streamtrace.events.dataset import read_spilled, spill_table
    folder = os.path.join(os.fsencode(tmp_path), b"job_caf\xe9")
    os.mkdir(folder)
    folder = os.fsdecode(folder)
    tables = [pa.table({"a": pa.array(list(range(n)), pa.int64()),
                        "s": pa.array([None, "", "x"] * (n // 3), pa.string())}) for n in (3, 0, 300)]
    recs = [spill_table(folder, t) for t in tables]
    assert len({r[0] for r in recs}) == 1 and recs[1][1] > 0
    for t, r in zip(tables, recs):
        got = read_spilled(r)
        assert got.schema.equals(t.schema) and got.equals(t)


def test_threads_of_a_process_write_files_of_their_own(tmp_path):
    """Tasks run at once in threads (a dask worker's) never share a file: each thread's records read
    back whole, however their writes interleave."""
    import threading
    recs, start = {}, threading.Barrier(4)

    def task(k):
        start.wait()
        recs[k] = [spillfile.append(tmp_path, bytes([k]) * (1000 + j)) for j in range(50)]

    threads = [threading.Thread(target=task, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({rs[0][0] for rs in recs.values()}) == 4 and len(list(tmp_path.iterdir())) == 4
    for k, rs in recs.items():
        assert [spillfile.read_at(*r) for r in rs] == [bytes([k]) * (1000 + j) for j in range(50)]
