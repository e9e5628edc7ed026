"""The step names ``analyze`` used reach ``aggregate`` and ``report`` (``streamtrace.aggregate.steps``):
an Nsight Systems export built here with ``sqlite3`` whose steps are NVTX ``iteration N`` ranges, and
a Kineto trace analysed with ``--step-pattern``, give the report's step table (durations from the
raw file: plain SQL / the JSON written here) and a critical path per step; an analysis without
recorded patterns keeps ``ProfilerStep#N``."""
from __future__ import annotations

import json
import sqlite3

import pyarrow.parquet as pq
import pytest

from kineto import KinetoDoc
from support import run_cli

SESSION = 1_700_000_000_000_000_000


def build_export(path, pids=(200, 300)):
    """Processes ``pids`` (one GPU each), three steps each: NVTX push/pop ranges (eventType 59) named
    ``iteration N`` of 10 us + 1 us x N, from 20 us x N; per step two ``cudaLaunchKernel`` calls each
    launching one kernel."""
    c = sqlite3.connect(path)
    c.executescript("""
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, [end] INT NOT NULL, deviceId INT, streamId INT,
                                               correlationId INT, globalPid INT, demangledName INT, shortName INT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, [end] INT NOT NULL, eventClass INT, globalTid INT,
                                                correlationId INT, nameId INT);
      CREATE TABLE NVTX_EVENTS (start INT NOT NULL, [end] INT, eventType INT NOT NULL, rangeId INT, category INT,
                                color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT,
                                jsonText TEXT, binaryData TEXT);
      CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INT, utcTime TEXT, localTime TEXT, systemClockNs INT);
      CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
    """)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "gemm_kernel"), (2, "cudaLaunchKernel_v7000")])
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    c.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, NULL, NULL, NULL)", (SESSION,))
    for dev, pid in enumerate(pids):
        g, gp = (1 << 48) | (pid << 24) | pid, (1 << 48) | (pid << 24)
        for n in (1, 2, 3):
            t = n * 20_000
            c.execute("INSERT INTO NVTX_EVENTS (start, [end], eventType, text, globalTid) VALUES (?, ?, 59, ?, ?)",
                      (t, t + 10_000 + 1000 * n, f"iteration {n}", g))
            corr = n * 10
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?)",
                          [(t + 100, t + 600, 0, g, corr, 2), (t + 1000, t + 1500, 0, g, corr + 1, 2)])
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          [(t + 3000, t + 5000, dev, 7, corr, gp, 1, 1),
                           (t + 5500, t + 6000 + 100 * dev, dev, 7, corr + 1, gp, 1, 1)])
    c.commit()
    c.close()


def _sql(path, q):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute(q).fetchall()
    finally:
        c.close()


def _pipeline(tmp_path, inputs, *analyze_args):
    """analyze -> aggregate -> report (``--no-charts``) through the CLI; the report's JSON."""
    for cmd in (["analyze", *inputs, "-o", tmp_path / "an", "-q", *analyze_args],
                ["aggregate", tmp_path / "an", "-o", tmp_path / "agg", "-q"],
                ["report", tmp_path / "agg", "--no-charts", "-q"]):
        r = run_cli(*cmd)
        assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "agg" / "report.json").read_text())


def _assert_steps(rep, want_ns: dict):
    """The report's step table and critical path have exactly the steps ``want_ns``
    (``{step number: duration ns}``)."""
    assert [(s["step"], s["step_ns"]) for s in rep["steps"]] == sorted(want_ns.items())
    cp = rep["critical_path"]["steps"]
    assert [s["step"] for s in cp] == sorted(want_ns)
    for s in cp:
        assert 0 < s["path_ns"] <= s["span_ns"]
        assert s["ranks"]


def test_nsys_iteration_ranges_are_the_steps_of_aggregate_and_report(tmp_path):
    db = tmp_path / "node.sqlite"
    build_export(db)
    rep = _pipeline(tmp_path, [db])
    # each step's duration per process: the NVTX range's end - start; the table's is the median over ranks
    per_rank = _sql(db, "SELECT CAST(substr(text, length('iteration ') + 1) AS INT) AS n, [end] - start "
                        "FROM NVTX_EVENTS WHERE text LIKE 'iteration %' GROUP BY n, [end] - start")
    want = dict(per_rank)
    assert len(want) == len(per_rank) == 3          # both processes: one duration per step
    _assert_steps(rep, want)
    summ = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert all(any("iteration" in p for p in r["step_patterns"]) for r in summ["ranks"])
    it = pq.read_table(tmp_path / "agg" / "iterations.parquet").to_pylist()
    assert [(r["step"], r["ranks"]) for r in it] == [(n, 2) for n in sorted(want)]
    md = next((tmp_path / "agg").glob("*.md")).read_text()
    assert "## What bounds each step" in md and "Step 3: its critical path is" in md
    assert "| step | step time |" in md and "(?i)^(?:step|iteration" in md    # the names it took, said once
    assert rep["configuration"]["step_patterns"] == summ["ranks"][0]["step_patterns"]


def _kineto(path):
    """``train_step_N`` annotations (no ProfilerStep) of 30 + N us from 100 us x N, two launches each."""
    doc = KinetoDoc()
    for n in (4, 5, 6):
        t = 100 * n
        doc.cpu(f"train_step_{n}", t, 30 + n)
        doc.cpu("aten::mm", t + 2, 5, cat="cpu_op")
        doc.launch(t + 3, t + 8, 6)
        doc.launch(t + 10, t + 15, 4)
    return doc.write(path)


def test_kineto_step_pattern_reaches_aggregate_and_report(tmp_path):
    trace = _kineto(tmp_path / "rank0.json")
    rep = _pipeline(tmp_path, [trace], "--step-pattern", r"train_step_(\d+)")
    events = json.loads(trace.read_text())["traceEvents"]
    want = {int(e["name"].rsplit("_", 1)[1]): e["dur"] * 1000 for e in events if e["name"].startswith("train_step_")}
    _assert_steps(rep, want)
    ops = pq.read_table(tmp_path / "agg" / "op_stats.parquet").to_pylist()
    # a step op counts in its own step, under one name with its number as *
    assert sorted((r["step"], r["name"]) for r in ops if r["name"].startswith("train_step")) == \
        [(n, "train_step_*") for n in sorted(want)]


def test_without_a_step_pattern_the_same_trace_has_no_steps(tmp_path):
    trace = _kineto(tmp_path / "rank0.json")
    rep = _pipeline(tmp_path, [trace])
    assert rep["steps"] == [] or all(s["step"] < 0 for s in rep["steps"])
    summ = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert all("step_patterns" not in r for r in summ["ranks"])   # the Kineto default: not recorded
    # the whole capture is one window, said so, with its critical path: from the first CPU op's
    # start (train_step_4 at 400 us) to the last end (train_step_6's, 636 us; its launches' kernels
    # end inside it)
    events = json.loads(trace.read_text())["traceEvents"]
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    lo = min(e["ts"] for e in cpu)
    hi = max(e["ts"] + e["dur"] for e in cpu + gpu)
    (cp,) = rep["critical_path"]["steps"]
    assert cp["step"] == -1 and cp["path_ns"] == round((hi - lo) * 1000)
    md = next((tmp_path / "agg").glob("*.md")).read_text()
    assert "The whole capture (no step ranges; `--step-pattern` names them): its critical path is" in md


@pytest.mark.slow
def test_epilogue_takes_the_step_pattern(tmp_path):
    """``epilogue --step-pattern`` reaches its analysis and merge: the report's steps are the
    train_step_N annotations (their durations from the JSON written here)."""
    run = tmp_path / "run" / "iteration_1"
    run.mkdir(parents=True)
    trace = _kineto(run / "rank_0000_iter_1.pt.trace.json")
    r = run_cli("epilogue", tmp_path / "run", "-o", tmp_path / "out", "--step-pattern", r"train_step_(\d+)",
                "--no-charts", "-q", "-j", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    events = json.loads(trace.read_text())["traceEvents"]
    want = {int(e["name"].rsplit("_", 1)[1]): e["dur"] * 1000 for e in events if e["name"].startswith("train_step_")}
    _assert_steps(rep, want)


def test_profiler_steps_need_no_recorded_patterns(tmp_path):
    doc = KinetoDoc()
    for n in (1, 2):
        doc.cpu(f"ProfilerStep#{n}", 100 * n, 50 + n)
        doc.launch(100 * n + 3, 100 * n + 8, 6)
    trace = doc.write(tmp_path / "rank0.json")
    rep = _pipeline(tmp_path, [trace])
    _assert_steps(rep, {1: 51_000, 2: 52_000})
    assert "step_patterns" not in rep["configuration"]
    assert "| step (ProfilerStep#) | step time |" in next((tmp_path / "agg").glob("*.md")).read_text()
    assert all("step_patterns" not in r for r in json.loads((tmp_path / "an" / "summary.json").read_text())["ranks"])


def test_a_bad_recorded_pattern_is_a_one_line_error(tmp_path):
    trace = _kineto(tmp_path / "rank0.json")
    assert run_cli("analyze", trace, "-o", tmp_path / "an", "-q", "--step-pattern", r"train_step_(\d+)").returncode == 0
    sp = tmp_path / "an" / "summary.json"
    summ = json.loads(sp.read_text())
    summ["ranks"][0]["step_patterns"] = ["train_step_("]
    sp.write_text(json.dumps(summ))
    r = run_cli("aggregate", tmp_path / "an", "-o", tmp_path / "agg", "-q")
    assert r.returncode == 1 and "summary.json" in r.stderr and "bad step pattern" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("name,number,generic", [("ProfilerStep#12", 12, "ProfilerStep#*"), ("iteration 3", 3,
                                                 "iteration *"), ("Step#4", 4, "Step#*"), ("aten::mm", -1, "aten::mm")])
def test_step_names_of_an_export(name, number, generic):
    from streamtrace.aggregate.steps import step_names
    from streamtrace.trace.steps import STEP_PATTERNS
    s = step_names(STEP_PATTERNS)
    assert s.number(name) == number and s.generic(name) == generic and not s.default
    assert step_names(None).default and step_names(None).number("iteration 3") == -1


def test_custom_step_names_in_chart_titles_and_the_cli(tmp_path):
    """Issue 47: where the steps are custom ranges (``train_step_N``), the charts' titles and aggregate's
    line call them ``step N``, never ``ProfilerStep#N``; the --steps help says both."""
    from streamtrace.report.charts import rank_timeline
    from streamtrace.report.render import load
    trace = _kineto(tmp_path / "rank0.json")
    _pipeline(tmp_path, [trace], "--step-pattern", r"train_step_(\d+)")
    data = load(tmp_path / "agg")
    fig = rank_timeline(data, 0, (-1, 5))
    assert "step 5" in fig.axes[0].get_title() and "ProfilerStep" not in fig.axes[0].get_title()
    r = run_cli("aggregate", tmp_path / "an", "-o", tmp_path / "agg2", "--steps", "5")
    assert r.returncode == 0 and "ProfilerStep" not in r.stdout + r.stderr, r.stdout + r.stderr
    h = run_cli("aggregate", "--help").stdout
    assert "custom step ranges" in " ".join(h.split())
