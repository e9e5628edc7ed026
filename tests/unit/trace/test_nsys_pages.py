"""The page reader (streamtrace.trace.nsys.pages) on the real exports: every column of every table
of every fixture of ../shared/traces/nsys/ equals ``SELECT rowid, ... ORDER BY rowid`` of the sqlite3
module (integers equal; NULL, REAL, TEXT and BLOB values flagged); and a cut-short, damaged or
foreign file gives a TraceError naming it."""
from __future__ import annotations

import shutil
import sqlite3
import struct

import numpy as np
import pytest

from streamtrace.runtime.errors import TraceError
from streamtrace.trace.nsys.pages import PageFile, scan_columns

from support import SHARED, run_cli

NSYS = SHARED / "traces" / "nsys"
FIXTURES = sorted(p.name for p in NSYS.glob("*.sqlite")) if NSYS.is_dir() else []


def _open(path):
    c = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    c.text_factory = bytes
    return c


@pytest.mark.skipif(not FIXTURES, reason="../shared/traces/nsys is absent")
@pytest.mark.parametrize("name", FIXTURES)
def test_every_table_equals_sqlite3(name):
    path = NSYS / name
    c = _open(path)
    tables = [r[0].decode() for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables
    for t in tables:
        cols = [r[1].decode() for r in c.execute(f"PRAGMA table_info([{t}])")]
        want = c.execute(f"SELECT rowid, {', '.join(f'[{x}]' for x in cols)} FROM [{t}] ORDER BY rowid").fetchall()
        got = list(scan_columns(path, t, cols, default=-1))
        rowid = [r for b in got for r in b.rowid.tolist()]
        assert rowid == [r[0] for r in want], t
        odd = 0
        for j, col in enumerate(cols):
            vals = [v for b in got for v in b.values[col].tolist()]
            null = [m for b in got for m in b.null[col].tolist()]
            exp = [r[j + 1] for r in want]
            assert [v if not m else None for v, m in zip(vals, null)] == \
                   [v if isinstance(v, int) else None for v in exp], (t, col)
            assert all(v == -1 for v, m in zip(vals, null) if m)
            odd += sum(v is not None and not isinstance(v, int) for v in exp)
        assert sum(b.odd for b in got) == odd, t
    c.close()


def _fixture():
    if not FIXTURES:
        pytest.skip("../shared/traces/nsys is absent")
    return NSYS / "nsysai_mfu_2gpu_before.sqlite"


def test_cut_short_file_names_it(tmp_path):
    src = _fixture()
    dst = tmp_path / "cut.sqlite"
    data = src.read_bytes()
    dst.write_bytes(data[:len(data) // 2])
    with pytest.raises(TraceError) as e:
        for _ in scan_columns(dst, "CUPTI_ACTIVITY_KIND_KERNEL", ["start"]):
            pass
    assert str(dst) in str(e.value)


def test_damaged_leaf_page_names_it(tmp_path):
    """The first leaf page of the kernel table given another page type: a TraceError, no traceback."""
    src = _fixture()
    dst = tmp_path / "bad.sqlite"
    shutil.copy(src, dst)
    c = _open(dst)
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    c.close()
    data = bytearray(dst.read_bytes())
    ps = struct.unpack_from(">H", data, 16)[0]
    with PageFile(dst) as pf:
        leaf = int(pf.leaves(root)[0])
    data[(leaf - 1) * ps] = 0x0A                       # an index leaf page where a table leaf must be
    dst.write_bytes(bytes(data))
    with pytest.raises(TraceError) as e:
        for _ in scan_columns(dst, "CUPTI_ACTIVITY_KIND_KERNEL", ["start"]):
            pass
    assert str(dst) in str(e.value) and f"page {leaf:,}" in str(e.value)


@pytest.mark.slow
def test_analyze_of_a_damaged_export_is_one_line(tmp_path):
    """``streamtrace analyze`` of an export with a damaged runtime leaf page: exit 1, one line naming
    the file and the page, no traceback."""
    src = _fixture()
    dst = tmp_path / "bad.sqlite"
    shutil.copy(src, dst)
    c = _open(dst)
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_RUNTIME'").fetchone()[0]
    c.close()
    data = bytearray(dst.read_bytes())
    ps = struct.unpack_from(">H", data, 16)[0]
    with PageFile(dst) as pf:
        leaf = int(pf.leaves(root)[3])
    data[(leaf - 1) * ps] = 0x0A
    dst.write_bytes(bytes(data))
    r = run_cli("analyze", dst, "-o", tmp_path / "out", "-q")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines[-1].startswith("streamtrace: error: ") and str(dst) in lines[-1] and f"page {leaf:,}" in lines[-1]


def test_damaged_cell_pointer_names_it(tmp_path):
    src = _fixture()
    dst = tmp_path / "bad2.sqlite"
    shutil.copy(src, dst)
    c = _open(dst)
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_RUNTIME'").fetchone()[0]
    c.close()
    data = bytearray(dst.read_bytes())
    ps = struct.unpack_from(">H", data, 16)[0]
    with PageFile(dst) as pf:
        leaf = int(pf.leaves(root)[-1])
    struct.pack_into(">H", data, (leaf - 1) * ps + 8, ps - 1)   # the first cell pointer at the page's end
    dst.write_bytes(bytes(data))
    with pytest.raises(TraceError) as e:
        for _ in scan_columns(dst, "CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "end"]):
            pass
    assert str(dst) in str(e.value)


def test_not_sqlite(tmp_path):
    p = tmp_path / "x.sqlite"
    p.write_bytes(b"not a database at all" * 10)
    with pytest.raises(TraceError) as e:
        PageFile(p)
    assert str(p) in str(e.value)
    with pytest.raises(TraceError):
        list(scan_columns(p, "t", ["a"]))


def test_rowid_order_is_start_order_where_the_fixtures_say():
    """The reader's rows come in rowid order; the kernel table of the 2-GPU fixture is in start order
    that way (checked here with SQL), so the page reader's starts are sorted."""
    path = _fixture()
    c = _open(path)
    inversions = c.execute("SELECT count(*) FROM (SELECT start, lag(start) OVER (ORDER BY rowid) p "
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL) WHERE start < p").fetchone()[0]
    c.close()
    starts = np.concatenate([b.values["start"] for b in scan_columns(path, "CUPTI_ACTIVITY_KIND_KERNEL", ["start"])])
    assert inversions == 0 and (np.diff(starts) >= 0).all()


def _rows(ex, batches):
    """The rows of ``batches`` as tuples, the name id replaced by its text (local ids are numbered
    in the order names are first met, which differs with the batch sizes)."""
    out = []
    for b in batches:
        names = ex.names(np.unique(b["name"]).tolist())
        for r in b.tolist():
            out.append(r[:3] + (names[r[3]],) + r[4:])
    return out


@pytest.mark.skipif(not FIXTURES, reason="../shared/traces/nsys is absent")
@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("page_bytes", [1 << 20, 8192])
def test_reader_rows_equal_the_sql_path(name, page_bytes):
    """NsysExport's GPU and CPU streams from the pages equal those of its SQL (``ORDER BY start``)
    path row for row, in order; 8 KiB batches make the start-order merge hold rows across batches
    (or give the table to SQL when it would hold more than it may)."""
    from streamtrace.trace.nsys import NsysExport
    got = {}
    for pages in (False, True):
        ex = NsysExport(NSYS / name, pages=pages, page_bytes=page_bytes)
        got[pages] = (_rows(ex, ex.gpu_batches()), _rows(ex, ex.cpu_batches()), ex.unusable, dict(ex.read_by))
        ex.close()
    assert got[True][:3] == got[False][:3]
    assert set(got[False][3].values()) == {"sql"}
    if page_bytes > 8192:
        assert set(got[True][3].values()) == {"pages"}


def _activity_db(path, rows):
    c = sqlite3.connect(path)
    c.execute("PRAGMA page_size = 1024")
    c.execute("CREATE TABLE T (start INTEGER NOT NULL, [end] INTEGER, globalTid INTEGER, eventClass INTEGER, "
              "nameId INTEGER, correlationId INTEGER)")
    c.executemany("INSERT INTO T VALUES (?, ?, ?, ?, ?, ?)", rows)
    c.commit()
    c.close()


@pytest.mark.parametrize("seed", range(6))
def test_page_rows_equal_sqlite_expressions_in_start_order(tmp_path, seed):
    """page_batches' fields against SQLite evaluating the reader's expressions itself (coalesce(end -
    start, -1), globalTid >> 24 and & 0xFFFFFF, 3 + (eventClass = 1)), in (start, rowid) order, on rows
    a little out of start order and NULLs; small batches, so the merge holds rows across them."""
    from streamtrace.trace.nsys.pagerows import page_batches
    rng = np.random.default_rng(seed)
    n = 3000
    start = np.sort(rng.integers(0, 10**6, n)) + rng.integers(-300, 300, n) * (rng.random(n) < 0.05)
    rows = [(int(s), None if rng.random() < 0.05 else int(s + rng.integers(0, 10**4)),
             None if rng.random() < 0.05 else int(rng.integers(0, 2**62)), [None, 0, 1, 2][int(rng.integers(0, 4))],
             int(rng.integers(0, 50)), int(i)) for i, s in enumerate(start.tolist())]
    path = tmp_path / "a.sqlite"
    _activity_db(path, rows)
    c = sqlite3.connect(path)
    want = c.execute("SELECT start, coalesce([end] - start, -1), 3 + (coalesce(eventClass, -1) = 1), "
                     "coalesce(nameId, -1), CASE WHEN globalTid IS NULL THEN -1 ELSE globalTid >> 24 END, "
                     "CASE WHEN globalTid IS NULL THEN -1 ELSE globalTid & 16777215 END, coalesce(correlationId, -1) "
                     "FROM T ORDER BY start, rowid").fetchall()
    cols = {"ts": "start", "dur": "end", "kind": "eventClass", "name": "nameId", "gtid": "globalTid",
            "correlation": "correlationId"}
    got = page_batches(path, c, "T", cols, {"kind": 3}, batch_bytes=4096)
    assert got is not None
    rows_got = [(r[0], r[1], r[2], r[3], r[4], r[5], r[8]) for b in got for r in b.tolist()]
    c.close()
    assert rows_got == want


def test_rows_far_from_start_order_are_left_to_sql(tmp_path):
    """Rows in reverse start order: the merge would hold everything, so page_batches says None."""
    from streamtrace.trace.nsys.pagerows import page_batches
    path = tmp_path / "r.sqlite"
    _activity_db(path, [(10**6 - i, 10**6, 1, 0, 1, i) for i in range(3000)])
    c = sqlite3.connect(path)
    assert page_batches(path, c, "T", {"ts": "start", "dur": "end"}, batch_bytes=4096) is None
    assert page_batches(path, c, "T", {"ts": "start", "dur": "end"}, ordered=False, batch_bytes=4096) is not None
    c.close()


@pytest.mark.parametrize("ddl", ["CREATE TABLE T (start INTEGER PRIMARY KEY, [end] INTEGER) WITHOUT ROWID",
                                 "CREATE TABLE T (start INTEGER, [end] INTEGER, d INTEGER AS ([end] - start))"])
def test_tables_the_page_reader_leaves_to_sql(tmp_path, ddl):
    """A WITHOUT ROWID table (an index b-tree) and one with a generated column: Unscannable before any
    row, and page_batches says None (the reader's SQL path reads them)."""
    from streamtrace.trace.nsys.pagerows import page_batches
    from streamtrace.trace.nsys.pages import Unscannable
    path = tmp_path / "w.sqlite"
    c = sqlite3.connect(path)
    c.execute(ddl)
    c.executemany("INSERT INTO T (start, [end]) VALUES (?, ?)", [(i, i + 1) for i in range(10)])
    c.commit()
    with pytest.raises(Unscannable):
        next(scan_columns(path, "T", ["start"], conn=c))
    assert page_batches(path, c, "T", {"ts": "start", "dur": "end"}) is None
    c.close()
