"""``streamtrace merge`` of Nsight Systems exports built here with ``sqlite3`` (the columns as the
3.25 fixture of ``../shared/traces/nsys/`` has them): ``--steps``, ``--window``, ``--align``,
``--drop-cat`` and the ``ac2g`` flow arrows, every expected value computed from the file with plain
SQL; the outputs checked by ``streamtrace validate``.  Also the NVTX step names ``analyze`` takes by
default in an export, and the progress of an export's read."""
from __future__ import annotations

import gzip
import json
import sqlite3

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.merge import MergeOptions, merge
from support import run_cli

STEP_NAMES = {200: "iteration {}", 300: "step_{}"}       # one naming per process
SESSION = 1_700_000_000_000_000_000


def _gtid(pid, tid, host=1):
    return (host << 48) | (pid << 24) | tid


def build(path, pids=(200, 300), host=1, session=SESSION, skew=0, nccl=False):
    """Processes ``pids`` (one GPU each, devices 0, 1, ...), three steps each (NVTX push/pop
    ranges, eventType 59) of 10 us from 10 us; per step two ``cudaLaunchKernel`` calls, each a
    kernel (correlation ids repeat across processes), one call launching two kernels with one id
    (a graph launch), a driver call (eventClass 1) repeating a runtime call's id, a memcpy; with
    ``nccl`` an AllReduce kernel per step ending ``skew`` ns later than its step's end."""
    c = sqlite3.connect(path)
    c.executescript("""
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, [end] INT NOT NULL, deviceId INT, streamId INT,
                                               correlationId INT, globalPid INT, demangledName INT, shortName INT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT NOT NULL, [end] INT NOT NULL, deviceId INT, streamId INT,
                                               correlationId INT, globalPid INT, copyKind INT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, [end] INT NOT NULL, eventClass INT, globalTid INT,
                                                correlationId INT, nameId INT);
      CREATE TABLE NVTX_EVENTS (start INT NOT NULL, [end] INT, eventType INT NOT NULL, rangeId INT, category INT,
                                color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT,
                                jsonText TEXT, binaryData TEXT);
      CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INT, utcTime TEXT, localTime TEXT, systemClockNs INT);
      CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
    """)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "gemm_kernel"), (2, "cudaLaunchKernel_v7000"),
                                                         (3, "cuLaunchKernel"), (4, "cudaMemcpyAsync_v3020"),
                                                         (5, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")])
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    c.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, NULL, NULL, NULL)", (session,))
    for dev, pid in enumerate(pids):
        g, gp = _gtid(pid, pid, host), _gtid(pid, 0, host)
        for n in (1, 2, 3):
            t = n * 10_000
            c.execute("INSERT INTO NVTX_EVENTS (start, [end], eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                      (t, t + 10_000, STEP_NAMES.get(pid, "iteration {}").format(n), g))
            corr = n * 10
            rt = [(t + 100, t + 600, 0, g, corr, 2), (t + 700, t + 900, 1, g, corr, 3),      # driver, same id
                  (t + 1000, t + 1500, 0, g, corr + 1, 2), (t + 2000, t + 2400, 0, g, corr + 2, 4)]
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?)", rt)
            k = [(t + 3000, t + 5000, dev, 7, corr, gp, 1, 1), (t + 5500, t + 6000, dev, 7, corr + 1, gp, 1, 1),
                 (t + 6100, t + 6500, dev, 7, corr + 1, gp, 1, 1)]                          # one id, two kernels
            if nccl:
                k.append((t + 8000, t + 10_000 + skew, dev, 20, corr + 5, gp, 5, 5))
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?)", k)
            c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, 8, ?, ?, 1)",
                      (t + 7000, t + 7200, dev, corr + 2, gp))
    c.commit()
    c.close()


def _merge(tmp_path, *args, name="m.json.gz", inputs=("node.sqlite",)):
    quiet = () if "-v" in args else ("-q",)
    r = run_cli("merge", *[tmp_path / i for i in inputs], "-o", tmp_path / name, *quiet, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    v = run_cli("validate", tmp_path / name)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "OK" in v.stdout + v.stderr
    return json.load(gzip.open(tmp_path / name))["traceEvents"], r


def _sql(path, q, *p):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute(q, p).fetchall()
    finally:
        c.close()


GPU_ROWS = ("SELECT globalPid >> 24 AS proc, correlationId AS corr, start, [end], 'kernel' AS cat "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT globalPid >> 24, correlationId, start, [end], "
            "'gpu_memcpy' FROM CUPTI_ACTIVITY_KIND_MEMCPY")
ALL_ROWS = (GPU_ROWS + " UNION ALL SELECT globalTid >> 24, correlationId, start, [end], CASE eventClass WHEN 1 "
            "THEN 'cuda_driver' ELSE 'cuda_runtime' END FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION ALL SELECT "
            "globalTid >> 24, NULL, start, [end], 'user_annotation' FROM NVTX_EVENTS")


def _flows(evs):
    s = {e["id"]: e for e in evs if e["ph"] == "s"}
    f = {e["id"]: e for e in evs if e["ph"] == "f"}
    return s, f


def test_flows_join_each_launch_to_its_gpu_row(tmp_path):
    build(tmp_path / "node.sqlite")
    evs, _ = _merge(tmp_path)
    want = _sql(tmp_path / "node.sqlite", f"SELECT count(*) FROM (SELECT DISTINCT g.proc, g.corr FROM ({GPU_ROWS}) g "
                                          "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.corr AND "
                                          "r.globalTid >> 24 = g.proc)")[0][0]
    s, f = _flows(evs)
    assert len(s) == len(f) == want == 2 * 3 * 3
    assert set(s) == set(f)
    assert sum(e["ph"] == "s" for e in evs) == len(s) and sum(e["ph"] == "f" for e in evs) == len(f)
    pids = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    for i in s:
        assert "CPU" in pids[s[i]["pid"]] and "GPU" in pids[f[i]["pid"]]
        assert f[i]["bp"] == "e" and s[i]["cat"] == f[i]["cat"] == "ac2g"
        assert s[i]["args"]["rank"] == f[i]["args"]["rank"]
    x = {(e["pid"], e["ts"]): e for e in evs if e["ph"] == "X"}
    for i in s:       # each end sits on an X slice of its correlation: the first launch, the first kernel
        a, b = x[(s[i]["pid"], s[i]["ts"])], x[(f[i]["pid"], f[i]["ts"])]
        assert a["args"]["correlation"] == b["args"]["correlation"] == i
        assert a["cat"] == "cuda_runtime"


def test_steps_keep_the_rows_overlapping_the_step(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    evs, _ = _merge(tmp_path, "--steps", "2-2")
    want, names = 0, set()
    for pid, name in STEP_NAMES.items():
        lo, hi = _sql(db, "SELECT start, [end] FROM NVTX_EVENTS WHERE text = ?", name.format(2))[0]
        want += _sql(db, f"SELECT count(*) FROM ({ALL_ROWS}) WHERE proc & 16777215 = ? AND [end] >= ? AND start <= ?",
                     pid, lo, hi)[0][0]
        names |= {t for t, in _sql(db, "SELECT text FROM NVTX_EVENTS WHERE globalTid >> 24 & 16777215 = ? AND "
                                       "[end] >= ? AND start <= ?", pid, lo, hi)}
    assert sum(e["ph"] == "X" for e in evs) == want
    assert {e["name"] for e in evs if e.get("cat") == "user_annotation"} == names
    assert "iteration 2" in names and "step_2" in names and "step_3" in names     # ends touching count


def test_window_keeps_the_rows_overlapping_it(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    evs, _ = _merge(tmp_path, "--window", "0.015:0.025")
    t0 = _sql(db, f"SELECT min(start) FROM ({ALL_ROWS})")[0][0]
    want = _sql(db, f"SELECT count(*) FROM ({ALL_ROWS}) WHERE [end] >= ? AND start <= ?", t0 + 15_000, t0 + 25_000)
    assert sum(e["ph"] == "X" for e in evs) == want[0][0]
    s, f = _flows(evs)
    assert set(s) == set(f) and s                 # flows with both ends inside only


def test_drop_cat_drops_the_category_and_its_flows(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    evs, _ = _merge(tmp_path, "--drop-cat", "cuda_runtime")
    want = _sql(db, f"SELECT count(*) FROM ({ALL_ROWS}) WHERE cat != 'cuda_runtime'")[0][0]
    assert sum(e["ph"] == "X" for e in evs) == want
    s, f = _flows(evs)          # only the driver calls' flows are left (their launches are kept)
    assert set(s) == set(f)
    assert len(s) == _sql(db, f"SELECT count(*) FROM (SELECT DISTINCT g.proc, g.corr FROM ({GPU_ROWS}) g JOIN "
                              "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.corr AND r.globalTid >> 24 = g.proc "
                              "AND r.eventClass = 1)")[0][0] > 0
    evs, _ = _merge(tmp_path, "--drop-cat", "ac2g", name="n.json.gz")
    assert not any(e["ph"] in "sf" for e in evs)
    assert sum(e["ph"] == "X" for e in evs) == _sql(db, f"SELECT count(*) FROM ({ALL_ROWS})")[0][0]


def test_align_first_step_starts_every_rank_s_first_step_together(tmp_path):
    build(tmp_path / "a.sqlite", pids=(200,), session=SESSION)
    build(tmp_path / "b.sqlite", pids=(300,), host=2, session=SESSION + 7_000)
    evs, _ = _merge(tmp_path, "--align", "first-step", inputs=("a.sqlite", "b.sqlite"))
    firsts = {e["args"]["rank"]: float(e["ts"]) for e in evs if e["name"] in ("iteration 1", "step_1")}
    assert len(firsts) == 2 and firsts[0] == firsts[1]
    evs, _ = _merge(tmp_path, name="g.json.gz", inputs=("a.sqlite", "b.sqlite"))       # global: 7 us apart
    firsts = {e["args"]["rank"]: float(e["ts"]) for e in evs if e["name"] in ("iteration 1", "step_1")}
    assert firsts[1] - firsts[0] == pytest.approx(7.0)


def test_align_collectives_takes_out_a_clock_offset(tmp_path):
    skew = 3_000                                       # node b's clock runs 3 us ahead of node a's
    build(tmp_path / "a.sqlite", pids=(200,), nccl=True)
    build(tmp_path / "b.sqlite", pids=(300,), host=2, nccl=True)
    c = sqlite3.connect(tmp_path / "b.sqlite")         # 10 steps: enough instances to estimate an offset
    c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, [end] = [end] + ?", (skew, skew))
    c.commit()
    c.close()
    for p in ("a.sqlite", "b.sqlite"):
        c = sqlite3.connect(tmp_path / p)
        rows = c.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName = 5").fetchall()
        for k in range(1, 4):
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          [(r[0] + k * 40_000, r[1] + k * 40_000) + tuple(r[2:]) for r in rows])
        c.commit()
        c.close()
    n = _sql(tmp_path / "a.sqlite", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName = 5")[0][0]
    assert n >= 8
    evs, r = _merge(tmp_path, "--align", "collectives", "-v", inputs=("a.sqlite", "b.sqlite"))
    ends = {}
    for e in evs:
        if e["ph"] == "X" and e["name"].startswith("ncclDevKernel"):
            ends.setdefault(e["args"]["rank"], []).append(float(e["ts"]) + float(e["dur"]))
    assert len(ends[0]) == len(ends[1]) == n
    assert [b - a for a, b in zip(sorted(ends[0]), sorted(ends[1]))] == pytest.approx([0.0] * n, abs=1e-3)
    assert "clock offsets applied" in r.stdout + r.stderr


def test_options_that_cannot_apply_say_so(tmp_path):
    build(tmp_path / "node.sqlite")
    r = run_cli("merge", tmp_path / "node.sqlite", "-o", tmp_path / "m.json.gz", "--salvage")
    assert r.returncode == 0, r.stderr
    assert "--salvage not applied" in r.stderr


def test_merge_shows_a_progress_bar_over_rows(tmp_path, capsys):
    db = tmp_path / "node.sqlite"
    build(db)
    merge([str(db)], tmp_path / "m.json.gz", MergeOptions(progress=True))
    err = capsys.readouterr().err
    gpu_cpu = sum(_sql(db, f"SELECT count(*) FROM [{t}]")[0][0] for t in
                  ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME"))
    nvtx = _sql(db, "SELECT count(*) FROM NVTX_EVENTS")[0][0]
    total = 2 * gpu_cpu + nvtx                  # the pre-pass reads no NVTX range unless steps / windows ask
    assert f"{total}/{total}" in err.replace(" rows", "") and "merge (nsys)" in err
    merge([str(db)], tmp_path / "s.json.gz", MergeOptions(progress=True, steps=(2, 2)))
    err = capsys.readouterr().err.replace(" rows", "")
    assert f"{2 * (gpu_cpu + nvtx)}/{2 * (gpu_cpu + nvtx)}" in err


def test_analyze_reports_progress_of_an_export(tmp_path):
    from streamtrace.analyze.nsys import rows_as_bytes
    db = tmp_path / "node.sqlite"
    build(db)
    seen = []
    report = rows_as_bytes(db, seen.append)
    rows = sum(_sql(db, f"SELECT count(*) FROM [{t}]")[0][0] for t in
               ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"))
    report(rows // 2)
    report(rows)
    assert seen == [db.stat().st_size * (rows // 2) // rows, db.stat().st_size]
    analyze([str(db)], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=True))   # the bar runs to the end


def test_analyze_takes_nvtx_step_ranges_by_default(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    analyze([str(db)], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=False))
    k = pq.read_table(tmp_path / "a" / "kernels").to_pandas()
    # a kernel's step: the step range (of its process) around the start of the runtime call that launched it
    want = _sql(db, "SELECT k.start, CAST(substr(n.text, length(n.text)) AS INT) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                    "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId AND r.eventClass = 0 AND "
                    "r.globalTid >> 24 = k.globalPid >> 24 JOIN NVTX_EVENTS n ON n.globalTid >> 24 = r.globalTid >> 24 "
                    "AND r.start BETWEEN n.start AND n.[end]")
    assert sorted(k[k["kind"].astype(str) != "memory"]["step"].tolist()) == sorted(s for _, s in want)
    assert set(k["step"]) == {1, 2, 3}


def test_step_pattern_names_the_export_s_step_range(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    c = sqlite3.connect(db)
    c.execute("UPDATE NVTX_EVENTS SET text = replace(replace(text, 'iteration ', 'it.'), 'step_', 'it.')")
    c.commit()
    c.close()
    r = run_cli("merge", db, "-o", tmp_path / "x.json.gz", "-q", "--steps", "2-2")
    assert r.returncode == 1 and "not in this rank's ProfilerSteps (none)" in r.stderr      # not a default name
    evs, _ = _merge(tmp_path, "--steps", "2-2", "--step-pattern", r"^it\.(\d+)$")
    lo, hi = _sql(db, "SELECT min(start), max([end]) FROM NVTX_EVENTS WHERE text = 'it.2'")[0]
    assert sum(e["ph"] == "X" for e in evs) == _sql(db, f"SELECT count(*) FROM ({ALL_ROWS}) WHERE [end] >= ? AND "
                                                        "start <= ?", lo, hi)[0][0]
    r = run_cli("merge", db, "-o", tmp_path / "y.json.gz", "--step-pattern", "^it")
    assert r.returncode == 1 and "needs a group" in r.stderr and "Traceback" not in r.stderr    # as analyze


def test_rank_map_ranks_an_export_s_processes(tmp_path):
    build(tmp_path / "node.sqlite")
    (tmp_path / "ranks.txt").write_text("200 1\n300 0\n")
    evs, _ = _merge(tmp_path, "--rank-map", tmp_path / "ranks.txt")
    names = sorted(e["args"]["name"] for e in evs if e.get("name") == "process_name")
    assert names == ["Rank 0 · CPU (host 1, pid 300)", "Rank 0 · GPU 1", "Rank 1 · CPU (host 1, pid 200)",
                     "Rank 1 · GPU 0"]


def test_step_pattern_on_kineto_traces_says_it_is_not_applied(tmp_path):
    from kineto import KinetoDoc
    doc = KinetoDoc(rank=0).cpu("ProfilerStep#1", 0, 100)
    doc.launch(10, 20, 5)
    doc.write(tmp_path / "rank0.json")
    r = run_cli("merge", tmp_path / "rank0.json", "-o", tmp_path / "m.json", "--step-pattern", r"^it(\d+)$")
    assert r.returncode == 0, r.stderr
    assert "--step-pattern not applied" in r.stderr


def test_merge_validates_the_output_of_an_export(tmp_path):
    db = tmp_path / "node.sqlite"
    build(db)
    res = merge([str(db)], tmp_path / "m.json.gz", MergeOptions(progress=False))[0]
    v = res["validation"]
    assert v is not None and v["ok"] and not any(v["added"].values())
    assert v["output"]["flows"] == 2 * 3 * 3 == res["flows"]
    res = merge([str(db)], tmp_path / "n.json.gz", MergeOptions(progress=False, validate=False))[0]
    assert res["validation"] is None
