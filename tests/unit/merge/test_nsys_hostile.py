"""Hostile Nsight Systems exports (a fuzzing pass): TEXT or NULL where the exporter writes integers,
negative string ids, a ``WITHOUT ROWID`` kernel table, a kernel table that is a view.  Each is the
export of ``test_nsys_merge.build`` altered with plain SQL; ``analyze`` and ``merge`` must read it
(what cannot be read said in a warning, the rest kept) and never end in a traceback.  The rows
expected are counted from the file with plain SQL (``typeof``), not by streamtrace."""
from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from support import run_cli
from test_nsys_merge import build

K, M, R, N = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
ODD = "value(s) of integer columns are not integers"


def _relax(table):
    """``table`` again without its NOT NULL constraints (CREATE TABLE AS keeps the columns only)."""
    return f"CREATE TABLE t2 AS SELECT * FROM [{table}]; DROP TABLE [{table}]; ALTER TABLE t2 RENAME TO [{table}];"


#: name -> SQL that makes the export hostile
HOSTILE = {
    "nvtx_text_start": f"UPDATE {N} SET start = 'abc' WHERE rowid = 2",
    "runtime_text_start": f"UPDATE {R} SET start = 'abc' WHERE rowid = 3",
    "runtime_null_start": _relax(R) + f"UPDATE {R} SET start = NULL WHERE rowid = 3",
    "runtime_text_ids": f"UPDATE {R} SET correlationId = 'c', globalTid = 'g', nameId = 'n' WHERE rowid = 5",
    "runtime_null_ids": f"UPDATE {R} SET correlationId = NULL, globalTid = NULL, nameId = NULL WHERE rowid = 5",
    "nvtx_text_ids": f"UPDATE {N} SET globalTid = 'g', textId = 't', text = NULL WHERE rowid = 4",
    "kernel_text_ids": f"UPDATE {K} SET globalPid = 'p', correlationId = 'c', deviceId = 'd' WHERE rowid = 2",
    "memcpy_text_start": f"UPDATE {M} SET start = 'abc' WHERE rowid = 1",
}


def _kept(db):
    """Rows ``analyze``/``merge`` can keep, counted with SQL: start and end integers, a process
    that is an integer (``globalPid`` of GPU rows, ``globalTid`` of CPU rows)."""
    c = sqlite3.connect(db)
    try:
        def n(t, proc, where="1"):
            return c.execute(f"SELECT count(*) FROM [{t}] WHERE typeof(start) = 'integer' AND typeof([end]) = "
                             f"'integer' AND typeof({proc}) = 'integer' AND {where}").fetchone()[0]
        return {"kernel": n(K, "globalPid"), "gpu_memcpy": n(M, "globalPid"),
                "cpu": n(R, "globalTid") + n(N, "globalTid", "eventType IN (59, 60, 70, 71)")}
    finally:
        c.close()


def _hostile(tmp_path, sql):
    db = tmp_path / "node.sqlite"
    build(db)
    c = sqlite3.connect(db)
    c.executescript(sql)
    c.commit()
    c.close()
    return db


def _merged(tmp_path, db):
    out = tmp_path / "m.json.gz"
    r = run_cli("merge", db, "-o", out, "-q")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    evs = json.load(gzip.open(out))["traceEvents"]
    return evs, r


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_merge_reads_what_it_can_and_says_the_rest(tmp_path, case):
    db = _hostile(tmp_path, HOSTILE[case])
    want = _kept(db)
    evs, r = _merged(tmp_path, db)
    x = [e for e in evs if e["ph"] == "X"]
    assert sum(e["cat"] == "kernel" for e in x) == want["kernel"]
    assert sum(e["cat"] == "gpu_memcpy" for e in x) == want["gpu_memcpy"]
    assert sum(e["cat"] in ("cuda_runtime", "cuda_driver", "user_annotation") for e in x) == want["cpu"]
    ranks = {e["args"]["name"].split(" ·")[0] for e in evs if e.get("name") == "process_name"}
    assert ranks == {"Rank 0", "Rank 1"}            # no process made of a value that is not an integer
    if "text" in case:
        assert ODD in r.stderr and str(db) in r.stderr


@pytest.mark.parametrize("case", ["nvtx_text_start", "runtime_text_ids", "nvtx_text_ids", "kernel_text_ids"])
def test_analyze_reads_what_it_can_and_says_the_rest(tmp_path, case):
    db = _hostile(tmp_path, HOSTILE[case])
    want = _kept(db)
    r = run_cli("analyze", db, "-o", tmp_path / "a")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ODD in r.stderr
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert sorted(x["rank"] for x in summary["ranks"]) == [0, 1]
    assert sum(d["gpu_events"] for x in summary["ranks"] for d in x["devices"].values()) == \
        want["kernel"] + want["gpu_memcpy"]


#: name -> (SQL, the event category, the string id): a negative string id (StringIds holds none) is the
#: name "<string id N>" (as an id missing from StringIds is), never another row's name or a traceback
NEGATIVE = {
    "runtime_nameId": (f"UPDATE {R} SET nameId = -5 WHERE rowid = 1", "cuda_runtime", -5),
    "kernel_names": (f"UPDATE {K} SET demangledName = -7, shortName = -7 WHERE rowid = 1", "kernel", -7),
    "nvtx_textId": (f"UPDATE {N} SET textId = -9, text = NULL WHERE rowid = 1", "user_annotation", -9),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_a_negative_string_id_is_named_as_a_missing_one(tmp_path, case):
    sql, cat, sid = NEGATIVE[case]
    db = _hostile(tmp_path, sql)
    texts = [t for t, in sqlite3.connect(db).execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL")]
    evs, r = _merged(tmp_path, db)
    named = [e for e in evs if e["ph"] == "X" and e["name"] == f"<string id {sid}>"]
    assert len(named) == 1 and named[0]["cat"] == cat
    assert "negative string id" in r.stderr and str(db) in r.stderr
    if cat == "user_annotation":        # every other range keeps its own text
        names = [e["name"] for e in evs if e.get("cat") == "user_annotation"]
        assert sorted(names) == sorted(texts + [f"<string id {sid}>"])
    a = run_cli("analyze", db, "-o", tmp_path / "a")
    assert a.returncode == 0 and "Traceback" not in a.stderr, a.stderr
    assert "negative string id" in a.stderr


#: the columns of ``build``'s tables, as it declares them
COLUMNS = {K: "start INT, [end] INT, deviceId INT, streamId INT, correlationId INT, globalPid INT, demangledName INT, "
              "shortName INT",
           R: "start INT, [end] INT, eventClass INT, globalTid INT, correlationId INT, nameId INT",
           N: "start INT, [end] INT, eventType INT, rangeId INT, category INT, color INT, text TEXT, globalTid INT, "
              "endGlobalTid INT, textId INT, domainId INT, jsonText TEXT, binaryData TEXT"}


def _without_rowid(table, key):
    """``table`` again as a ``WITHOUT ROWID`` table (primary key ``key``), rows and columns unchanged."""
    return (f"ALTER TABLE [{table}] RENAME TO t0; CREATE TABLE [{table}] ({COLUMNS[table]}, PRIMARY KEY ({key})) "
            f"WITHOUT ROWID; INSERT INTO [{table}] SELECT * FROM t0; DROP TABLE t0;")


#: name -> SQL: tables that are not the exporter's plain rowid tables
SHAPES = {
    "kernel_without_rowid": _without_rowid(K, "globalPid, deviceId, start"),
    "runtime_without_rowid": _without_rowid(R, "globalTid, start, eventClass"),
    "nvtx_without_rowid": _without_rowid(N, "globalTid, start"),
    "kernel_view": f"ALTER TABLE {K} RENAME TO k0; CREATE VIEW {K} AS SELECT * FROM k0",
    "memcpy_view_of_some": f"ALTER TABLE {M} RENAME TO m0; CREATE VIEW {M} AS SELECT * FROM m0 WHERE start > 15000",
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_a_table_without_rowid_or_a_view_is_read(tmp_path, case):
    db = _hostile(tmp_path, SHAPES[case])
    kinds = {t: k for t, k in sqlite3.connect(db).execute("SELECT name, type FROM sqlite_master")}
    assert kinds[{"k": K, "r": R, "n": N, "m": M}[case[0]]] == ("view" if "view" in case else "table")
    want = _kept(db)
    evs, r = _merged(tmp_path, db)
    x = [e for e in evs if e["ph"] == "X"]
    assert sum(e["cat"] == "kernel" for e in x) == want["kernel"] > 0
    assert sum(e["cat"] == "gpu_memcpy" for e in x) == want["gpu_memcpy"] > 0
    assert sum(e["cat"] in ("cuda_runtime", "cuda_driver", "user_annotation") for e in x) == want["cpu"]
    a = run_cli("analyze", db, "-o", tmp_path / "a")
    assert a.returncode == 0 and "Traceback" not in a.stderr, a.stderr
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert sum(d["gpu_events"] for x in summary["ranks"] for d in x["devices"].values()) == \
        want["kernel"] + want["gpu_memcpy"]


def test_nvtx_without_rowid_says_its_payloads_are_not_read(tmp_path):
    """NCCL payloads are read by rowid: an NVTX table without one is read, its payloads' sizes unknown, said."""
    from streamtrace.trace.nsys import NsysExport
    db = _hostile(tmp_path, f"""
        INSERT INTO {N} (start, eventType, text, globalTid, domainId) VALUES (1, 75, 'NCCL', 0, 5);
        INSERT INTO {N} (start, [end], eventType, text, globalTid, domainId, binaryData)
            SELECT start + 1, [end] - 1, 59, 'ncclAllReduce', globalTid, 5, x'00' FROM {N} WHERE rowid = 1;
        """ + _without_rowid(N, "globalTid, start, eventType"))
    ex = NsysExport(db)
    try:
        assert ex.collective_bytes.startswith("unknown: NVTX_EVENTS has no rowid")
        names = [n for b in ex.cpu_batches() for n in ex.names(b["name"][b["kind"] == 5].tolist()).values()]
    finally:
        ex.close()
    with sqlite3.connect(db) as c:
        want = [t for t, in c.execute(f"SELECT text FROM {N} WHERE eventType = 59")]
    assert sorted(names) == sorted(want)


def test_analyze_counts_the_gpu_rows_it_cannot_give_a_process(tmp_path):
    """A kernel whose ``globalPid`` is TEXT has no process, so no rank: ``analyze`` leaves it out and says
    how many (it was left out without a word).  The count is taken from the file with SQL."""
    db = _hostile(tmp_path, HOSTILE["kernel_text_ids"])
    lost = sqlite3.connect(db).execute(f"SELECT count(*) FROM {K} WHERE typeof(globalPid) != 'integer' "
                                       f"OR globalPid < 0").fetchone()[0]
    assert lost == 1
    r = run_cli("analyze", db, "-o", tmp_path / "a")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"{db}: {lost:,} GPU row(s) without a usable process id" in r.stderr
    _, m = _merged(tmp_path, db)
    assert f"{db}: {lost:,} GPU row(s) without a usable process id" in m.stderr
