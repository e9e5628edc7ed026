"""Property tests: the SQLite page kernels (streamtrace.kernels.sqlite_pages, through
streamtrace.trace.nsys.pages.scan_columns) against their plain-Python twin AND the sqlite3 module, on
databases built here: integers of every serial-type width (negatives, int64 extremes, 0 and 1),
NULLs, a REAL and a TEXT where integers are asked for, columns added by ALTER TABLE (with and without
a default), an INTEGER PRIMARY KEY, page sizes 512..65536, enough rows for several b-tree levels, and
a big TEXT/BLOB column that overflows (before or after the integer columns).  Records and varints are
also built byte by byte here, from the file-format document, and decoded by the kernel and the twin."""
from __future__ import annotations

import os
import sqlite3
import struct
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import reference as ref
from streamtrace.kernels import sqlite_pages as nb
from streamtrace.kernels.reference.sqlite_pages import read_table_py
from streamtrace.trace.nsys.pages import PageFile, scan_columns

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
I64 = st.one_of(st.integers(-128, 127), st.integers(-2**15, 2**15 - 1), st.integers(-2**23, 2**23 - 1),
                st.integers(-2**31, 2**31 - 1), st.integers(-2**47, 2**47 - 1), st.integers(-2**63, 2**63 - 1),
                st.sampled_from([0, 1, -1, 2**63 - 1, -2**63, 2**47, -2**47 - 1]))


# -- bytes built from the document ---------------------------------------------------------

def enc_varint(v: int) -> bytes:
    """sqlite.org "Database File Format": big-endian 7-bit groups, high bit = more; a 9th byte of 8 bits."""
    v &= (1 << 64) - 1
    if v >= 1 << 56:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    groups = []
    while True:
        groups.append(v & 0x7F)
        v >>= 7
        if not v:
            break
    groups.reverse()
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


WIDTH_TYPES = [(1, 1), (2, 2), (3, 3), (4, 4), (6, 5), (8, 6)]


def enc_value(v, widen):
    """(serial type, body) of a value; ``widen``: use a wider integer type than the smallest."""
    if v is None:
        return 0, b""
    if isinstance(v, float):
        return 7, struct.pack(">d", v)
    if isinstance(v, bytes):
        return 12 + 2 * len(v), v
    if isinstance(v, str):
        b = v.encode()
        return 13 + 2 * len(b), b
    if v in (0, 1) and not widen:
        return 8 + v, b""
    fits = [(n, t) for n, t in WIDTH_TYPES if -(1 << (8 * n - 1)) <= v < 1 << (8 * n - 1)]
    n, t = fits[-1] if widen else fits[0]
    return t, v.to_bytes(n, "big", signed=True)


def enc_record(values, widen) -> bytes:
    types, bodies = zip(*[enc_value(v, w) for v, w in zip(values, widen)]) if values else ((), ())
    head = b"".join(enc_varint(t) for t in types)
    n = len(head) + 1
    while len(enc_varint(n)) + len(head) != n:
        n += 1
    return enc_varint(n) + head + b"".join(bodies)


VALUE = st.one_of(I64, st.none(), st.floats(allow_nan=False), st.binary(max_size=20), st.text(max_size=10))


@SETTINGS
@given(st.one_of(I64, st.integers(0, 2**64 - 1)))
def test_varint_matches_twin(v):
    b = enc_varint(v)
    buf = np.frombuffer(bytearray(b + b"\x00"), np.uint8)
    got, end = nb.varint(buf, np.int64(0), np.int64(len(b)))
    want, wend = ref.varint_py(b, 0)
    signed = v - (1 << 64) if v >= 1 << 63 else v
    assert (int(got), int(end)) == (want, wend) == (signed, len(b))
    assert nb.varint(buf, np.int64(0), np.int64(len(b) - 1))[1] == -1      # cut short


@SETTINGS
@given(st.lists(st.tuples(VALUE, st.booleans()), max_size=12), st.data())
def test_decode_record_matches_twin(cols, data):
    values, widen = [c[0] for c in cols], [c[1] for c in cols]
    rec = enc_record(values, widen)
    ncol = len(values) + 2                            # two more asked than stored: ABSENT
    asked = data.draw(st.lists(st.integers(0, ncol - 1), unique=True, min_size=1))
    slot = np.full(ncol, -1, np.int64)
    slot[asked] = np.arange(len(asked))
    last = np.int64(max(asked))
    buf = np.frombuffer(bytearray(rec + b"\xff" * 8), np.uint8)
    out = np.zeros((len(asked), 1), np.int64)
    flags = np.zeros((len(asked), 1), np.uint8)
    assert nb.decode_record(buf, np.int64(0), np.int64(len(rec)), slot, last, out, flags, np.int64(0)) == nb.OK
    twin = ref.record_py(rec)
    for k, i in enumerate(asked):
        want = twin[i] if i < len(twin) else (ref.sqlite_pages.ABSENT, 0)
        assert (int(flags[k, 0]), int(out[k, 0])) == want
        v = values[i] if i < len(values) else None
        if isinstance(v, int):
            assert want == (nb.OK, v)
    cut = data.draw(st.integers(0, len(rec)))         # the payload's on-page part ends early
    st_ = nb.decode_record(buf, np.int64(0), np.int64(cut), slot, last, out, flags, np.int64(0))
    assert st_ in (nb.OK, nb.NEED_OVERFLOW)
    if st_ == nb.OK:                                  # only when every asked column is before the cut
        for k, i in enumerate(asked):
            want = twin[i] if i < len(twin) else (ref.sqlite_pages.ABSENT, 0)
            assert (int(flags[k, 0]), int(out[k, 0])) == want


# -- whole databases ------------------------------------------------------------------------

@st.composite
def databases(draw):
    """A schema and rows: ``(page_size, cols, rows, added, pk, big)``."""
    page_size = draw(st.sampled_from([512, 1024, 4096, 65536]))
    ncols = draw(st.integers(1, 5))
    n = draw(st.sampled_from([0, 1, 30, 400, 3000]))
    pk = draw(st.booleans())
    big = draw(st.sampled_from([None, "first", "last"]))
    added = draw(st.sampled_from([None, "NULL", "7", "-3"]))
    cell = st.one_of(I64, st.none())
    rows = [draw(st.lists(cell, min_size=ncols + 1, max_size=ncols + 1)) for _ in range(min(n, 30))]
    rows += [[(i * 2654435761 + j * 40503) % (2**64) - 2**63 if j % 2 else i - n // 2 for j in range(ncols + 1)]
             for i in range(n - len(rows))]          # filler rows: cheap to draw, all widths
    odd = draw(st.sampled_from([None, 1.5, "12x"]))
    return page_size, ncols, rows, added, pk, big, odd


def build(path, db):
    """Write the database ``db`` to ``path``; returns (table, int columns)."""
    page_size, ncols, rows, added, pk, big, odd = db
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    cols = [f"c{j} INTEGER" for j in range(ncols)]
    if pk:
        cols.insert(0, "id INTEGER PRIMARY KEY")
    if big == "first":
        cols.insert(0, "big BLOB")
    if big == "last":
        cols.append("big TEXT")
    con.execute(f"CREATE TABLE t ({', '.join(cols)})")
    names = [f"c{j}" for j in range(ncols)]
    half = len(rows) // 2
    for i, r in enumerate(rows[:half]):
        vals = dict(zip(names, r))
        if pk:
            vals["id"] = i * 3 - 5
        if big:
            size = i * 997 % (3 * page_size) if i < 40 else i % 30        # overflowing ones and short ones
            vals["big"] = b"x" * size if big == "first" else "y" * size
        con.execute(f"INSERT INTO t ({', '.join(vals)}) VALUES ({', '.join('?' * len(vals))})", list(vals.values()))
    if added is not None:
        con.execute(f"ALTER TABLE t ADD COLUMN a INTEGER{'' if added == 'NULL' else ' DEFAULT ' + added}")
        names.append("a")
    for i, r in enumerate(rows[half:]):
        vals = dict(zip(names, r))
        if pk:
            vals["id"] = (half + i) * 3 - 5
        if big:
            size = i * 7 % (2 * page_size) if i < 20 else i % 50
            vals["big"] = b"z" * size if big == "first" else "w" * size
        con.execute(f"INSERT INTO t ({', '.join(vals)}) VALUES ({', '.join('?' * len(vals))})", list(vals.values()))
    if odd is not None and rows:
        con.execute("UPDATE t SET c0 = ? WHERE rowid = (SELECT min(rowid) FROM t)", (odd,))
    con.commit()
    con.close()
    return "t", (["id"] if pk else []) + names


def _expected(path, table, cols):
    con = sqlite3.connect(path)
    got = con.execute(f"SELECT rowid, {', '.join(cols)} FROM {table} ORDER BY rowid").fetchall()
    info = {r[1]: r[0] for r in con.execute(f"PRAGMA table_info({table})")}
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    return got, info, root


def _scan(path, table, cols, default=-7):
    batches = list(scan_columns(path, table, cols, default=default, batch_bytes=4096))
    if not batches:
        return [], {c: [] for c in cols}, {c: [] for c in cols}, 0
    rowid = np.concatenate([b.rowid for b in batches]).tolist()
    vals = {c: np.concatenate([b.values[c] for b in batches]).tolist() for c in cols}
    null = {c: np.concatenate([b.null[c] for b in batches]).tolist() for c in cols}
    return rowid, vals, null, sum(b.odd for b in batches)


@SETTINGS
@given(databases())
def test_scan_matches_sqlite3_and_twin(db):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.db")
        table, cols = build(path, db)
        want, info, root = _expected(path, table, cols)
        rowid, vals, null, odd = _scan(path, table, cols)
        assert rowid == [r[0] for r in want]
        n_odd = 0
        for j, c in enumerate(cols):
            for i, r in enumerate(want):
                v = r[j + 1]
                if isinstance(v, int):
                    assert (vals[c][i], null[c][i]) == (v, False), (c, i)
                else:
                    assert (vals[c][i], null[c][i]) == (-7, True), (c, i)
                    n_odd += v is not None
        assert odd == n_odd
        with open(path, "rb") as f:
            twin_rowids, twin_rows = read_table_py(f.read(), root, [info[c] for c in cols])
        assert twin_rowids == rowid
        alias = "id" if db[4] else None
        for j, c in enumerate(cols):
            if c == alias:
                continue
            for i, row in enumerate(twin_rows):
                flag_j, v_j = row[j]
                if flag_j == ref.sqlite_pages.ABSENT:       # the default of an added column: sqlite3 says which
                    continue
                assert (v_j if flag_j == nb.OK else -7, flag_j != nb.OK) == (vals[c][i], null[c][i])


def _depth(path):
    """Levels of table ``t``'s b-tree, read here from the page headers."""
    with open(path, "rb") as f:
        data = f.read()
    con = sqlite3.connect(path)
    pg = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    con.close()
    ps = struct.unpack_from(">H", data, 16)[0]
    levels = 1
    while data[(pg - 1) * ps] == 5:
        ncell = struct.unpack_from(">H", data, (pg - 1) * ps + 3)[0]
        ptr = struct.unpack_from(">H", data, (pg - 1) * ps + 12)[0] if ncell else None
        pg = struct.unpack_from(">I", data, (pg - 1) * ps + (ptr if ptr else 8))[0]
        levels += 1
    return levels


def test_deep_tree_and_overflow():
    """512-byte pages, 60,000 rows and a 2 KB text in some: four levels, overflow chains."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.db")
        rows = [[i * 7919 - 10**6, None if i % 11 == 0 else -i, 2**63 - 1 - i] for i in range(60000)]
        build(path, (512, 2, rows, None, True, "last", None))
        assert _depth(path) >= 4
        want, _, _ = _expected(path, "t", ["id", "c0", "c1"])
        rowid, vals, null, _ = _scan(path, "t", ["id", "c0", "c1"])
        assert rowid == [r[0] for r in want] and vals["id"] == rowid
        assert vals["c1"] == [-7 if r[3] is None else r[3] for r in want]
        with PageFile(path) as pf:
            assert len(pf.leaves(2)) > 1000


def test_big_blob_before_the_integers_is_assembled():
    """The asked columns after a BLOB that overflows: read from the overflow pages."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.db")
        rows = [[i, -i] for i in range(300)]
        build(path, (1024, 1, rows, None, False, "first", None))
        want, _, _ = _expected(path, "t", ["c0"])
        _, vals, null, _ = _scan(path, "t", ["c0"])
        assert vals["c0"] == [r[1] for r in want] and not any(null["c0"])


@pytest.mark.parametrize("default", [None, "5"])
def test_added_column_default(default):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.db")
        build(path, (4096, 1, [[i, i] for i in range(10)], default or "NULL", False, None, None))
        want, _, _ = _expected(path, "t", ["a"])
        _, vals, null, _ = _scan(path, "t", ["a"])
        assert [None if m else v for v, m in zip(vals["a"], null["a"])] == [r[1] for r in want]
        assert want[0][1] == (5 if default else None) and want[-1][1] == 9
