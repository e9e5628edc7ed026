"""Inline NVTX texts of an Nsight Systems export (numbered in SQL through a temporary table of the
distinct texts, ``NsysExport._nvtx_sql``), on exports built here: each range's name must be
the text as plain Python reads it from the file -- ``StringIds`` by ``textId``, else ``text``
without what PyTorch's ``emit_nvtx`` appends (``, seq = ``, ``, op_id = ``), Windows-1252 bytes
decoded leniently, no text at all ``""`` -- in start order, whatever the batch size."""
from __future__ import annotations

import sqlite3

import pytest

from streamtrace.trace.nsys.reader import NsysExport

GTID = (5 << 24) | 6
TEXTS = ["aten::add, seq = 12, op_id = 34, sizes = [[2]]", "aten::mm, op_id = 7", "forward", None,
         "aten::add, seq = 99, op_id = 1", "forward", "caf\xe9", "aten::add, seq = 12, op_id = 34, sizes = [[2]]"]


def build(path, n_rows):
    """``n_rows`` NVTX push/pop ranges cycling through ``TEXTS`` (inline), every fifth named by
    ``textId`` instead, one row of Windows-1252 bytes, a mark (eventType 34: left out), a kernel."""
    c = sqlite3.connect(path)
    c.executescript("""
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE NVTX_EVENTS (start INT, [end] INT, eventType INT, text TEXT, globalTid INT, textId INT,
                                domainId INT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, [end] INT, deviceId INT, streamId INT,
                                               correlationId INT, globalPid INT, demangledName INT);
    """)
    c.execute("INSERT INTO StringIds VALUES (3, 'by id')")
    c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0, 7, 1, ?, 3)", (GTID >> 24 << 24,))
    for i in range(n_rows):
        t = TEXTS[i % len(TEXTS)]
        tid = 3 if i % 5 == 4 else None
        if t == "caf\xe9":           # bytes that are not UTF-8, as an export written on Windows holds them
            c.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, CAST(? AS TEXT), ?, ?, 0)",
                      (1000 - i, 1010 - i, t.encode("cp1252"), GTID, tid))
        else:
            c.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, ?, 0)", (1000 - i, 1010 - i, t, GTID, tid))
    c.execute("INSERT INTO NVTX_EVENTS VALUES (5, 5, 34, 'a mark', ?, NULL, 0)", (GTID,))
    c.commit()
    c.close()


def expected(path):
    """(start, name) of every range, by plain sqlite3 and Python string operations."""
    c = sqlite3.connect(path)
    c.text_factory = bytes
    ids = {i: v.decode() for i, v in c.execute("SELECT id, value FROM StringIds")}
    out = []
    for start, raw, tid in c.execute("SELECT start, text, textId FROM NVTX_EVENTS WHERE eventType = 59"):
        if tid is not None:
            out.append((start, ids[tid]))
            continue
        try:
            text = raw.decode("utf-8") if raw is not None else ""
        except UnicodeDecodeError:
            text = raw.decode("cp1252")
        for cut in (", seq = ", ", op_id = "):
            if cut in text:
                text = text[:text.index(cut)]
                break
        out.append((start, text))
    c.close()
    return sorted(out)


@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_inline_texts_as_python_reads_them(tmp_path, batch):
    path = tmp_path / "nvtx.sqlite"
    build(path, 23)
    ex = NsysExport(path, batch=batch)
    got = []
    for b in ex.cpu_batches():
        names = ex.names(b["name"].tolist())
        got += [(int(t), names[int(i)]) for t, i in zip(b["ts"], b["name"])]
    ex.close()
    assert got == expected(path)
    assert {"aten::add", "aten::mm", "forward", "", "caf\xe9", "by id"} == {n for _, n in got}


def test_each_text_one_local_name(tmp_path):
    """Equal texts (after the cut) share one name id, however many rows and batches carry them."""
    path = tmp_path / "nvtx.sqlite"
    build(path, 40)
    ex = NsysExport(path, batch=4)
    by_text: dict = {}
    for b in ex.cpu_batches():
        names = ex.names(b["name"].tolist())
        for i in b["name"].tolist():
            by_text.setdefault(names[i], set()).add(i)
    ex.close()
    assert all(len(v) == 1 for v in by_text.values())
