"""Nsight Systems exports through ``streamtrace analyze``: every fixture of ../shared/traces/nsys/
against numbers computed here with plain ``sqlite3`` SQL and Python interval unions, from the
definitions of ../shared/traces/README.md (GPU events = kernels, memcpy, memset; communication =
a kernel named ``(?i)nccl|rccl``; memory = memcpy/memset; compute = the other kernels).

The rules the expected values follow, written here independently of streamtrace: one rank per
process with GPU work (``globalPid``), in (host, pid) order (``globalPid >> 48``, then
``globalPid / 0x1000000 % 0x1000000``, NVIDIA's decoding); a file whose GPU tables carry no
``globalPid`` is one rank; rows with a negative start or no end (cut at the capture's edge) are
left out; a GPU row is linked when a CUDA runtime/driver row of its process has its
``correlationId``."""
from __future__ import annotations

import json
import re
import sqlite3

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze

from support import SHARED, run_cli

NSYS = SHARED / "traces" / "nsys"
FIXTURES = sorted(p.name for p in NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
GPU_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": "kernel", "CUPTI_ACTIVITY_KIND_MEMCPY": "memory",
              "CUPTI_ACTIVITY_KIND_MEMSET": "memory"}
COMM = re.compile(r"(?i)nccl|rccl")


def _open(name):
    c = sqlite3.connect(f"file:{NSYS / name}?mode=ro&immutable=1", uri=True)
    c.text_factory = lambda b: b.decode("utf-8", "replace")
    return c


def _cols(c, t):
    return {r[1] for r in c.execute(f"PRAGMA table_info([{t}])")}


def _union(iv):
    tot, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return tot + (cur_e - cur_s if cur_e is not None else 0)


def _intersection(a, b):
    return _union(a) + _union(b) - _union(a + b)


def expected(name):
    """``({(rank, device): metrics}, linked GPU rows, NCCL kernels)`` by plain SQL."""
    c = _open(name)
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    by_pid = any("globalPid" in _cols(c, t) for t in GPU_TABLES if t in tables)
    procs = sorted({r[0] for t in GPU_TABLES if t in tables and "globalPid" in _cols(c, t)
                    for r in c.execute(f"SELECT DISTINCT globalPid FROM {t}")},
                   key=lambda g: (g >> 48, g // 0x1000000 % 0x1000000))
    rank = {g // 0x1000000: i for i, g in enumerate(procs)}
    launches = set()
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        launches = {(g // 0x1000000 if by_pid else 0, corr) for g, corr in c.execute(
            "SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= 0 AND [end] >= start")}
    dev: dict = {}
    linked = nccl = 0
    for t, kind in GPU_TABLES.items():
        if t not in tables:
            continue
        name_col = "s.value" if kind == "kernel" else "''"
        join = "LEFT JOIN StringIds s ON s.id = k.demangledName" if kind == "kernel" else ""
        gp = "k.globalPid" if by_pid else "0"
        q = (f"SELECT k.start, k.[end], k.deviceId, {gp}, k.correlationId, {name_col} FROM {t} k {join} "
             f"WHERE k.start >= 0 AND k.[end] >= k.start")
        for s, e, d, g, corr, nm in c.execute(q):
            r = rank[g // 0x1000000] if by_pid else 0
            cls = "memory" if kind == "memory" else "comm" if COMM.search(nm or "") else "compute"
            nccl += cls == "comm"
            m = dev.setdefault((r, d), {"all": [], "comm": [], "compute": [], "memory": [], "sum": 0})
            m["all"].append((s, e))
            m[cls].append((s, e))
            m["sum"] += e - s
            linked += ((g // 0x1000000 if by_pid else 0), corr) in launches
    out = {}
    for k, m in dev.items():
        span = max(e for _, e in m["all"]) - min(s for s, _ in m["all"])
        ov = _intersection(m["comm"], m["compute"])
        out[k] = {"gpu_events": len(m["all"]), "span_us": span / 1e3, "busy_us": _union(m["all"]) / 1e3,
                  "compute_us": _union(m["compute"]) / 1e3, "comm_us": _union(m["comm"]) / 1e3,
                  "memory_us": _union(m["memory"]) / 1e3, "overlap_us": ov / 1e3, "kernel_time_us": m["sum"] / 1e3}
    return out, linked, nccl


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    if not FIXTURES:
        pytest.skip("../shared/traces/nsys is absent")
    out = {}
    for name in FIXTURES:
        d = tmp_path_factory.mktemp(name.split(".")[0])
        out[name] = (analyze([str(NSYS / name)], str(d / "a"), AnalyzeOptions(jobs=1, progress=False)), d / "a")
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_metrics_equal_independent_sql(analysed, name):
    summary, _ = analysed[name]
    want, linked, _ = expected(name)
    got = {(r["rank"], int(d)): m for r in summary["ranks"] for d, m in r["devices"].items()}
    assert set(got) == set(want)
    for k, w in want.items():
        for key, v in w.items():
            assert got[k][key] == pytest.approx(v, abs=1e-3), (k, key)
    assert sum(r["links"]["linked"] for r in summary["ranks"]) == linked


@pytest.mark.parametrize("name", FIXTURES)
def test_kernels_table_counts(analysed, name):
    _, out = analysed[name]
    want, _, nccl = expected(name)
    t = pq.read_table(out / "kernels").to_pandas()
    assert len(t) == sum(w["gpu_events"] for w in want.values())
    assert int((t["kind"].astype(str) == "communication").sum()) == nccl


def test_nccl_fixture_has_nccl_kernels_on_both_gpus(analysed):
    name = "nsysai_mfu_2gpu_before.sqlite"
    if name not in analysed:
        pytest.skip(name + " absent")
    want, _, nccl = expected(name)
    assert nccl > 0 and len(want) == 2
    summary, _ = analysed[name]
    for r in summary["ranks"]:
        assert r["nsys"]["collective_bytes"].startswith("unknown")
        assert r["trace_metadata"]["base_time_ns"] == 1779782330176752435


@pytest.mark.parametrize("name", [n for n in FIXTURES if n.startswith(("saxpy", "extrap"))])
def test_schema_2_9_and_non_utf8_exports(analysed, name):
    c = sqlite3.connect(f"file:{NSYS / name}?mode=ro&immutable=1", uri=True)
    c.text_factory = bytes
    version = dict(c.execute("SELECT name, value FROM EXPORT_META_DATA"))[b"EXPORT_SCHEMA_VERSION"].decode()
    summary, out = analysed[name]
    assert version == "2.9.1"
    assert all(r["nsys"]["schema_version"] == version for r in summary["ranks"])
    names = set(pq.read_table(out / "kernels", columns=["name"]).column("name").to_pylist())
    want = {v.decode() for (v,) in c.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")}
    assert want <= names


def test_nsys_rep_gets_one_line(tmp_path):
    rep = tmp_path / "node0.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    r = run_cli("analyze", rep, "-o", tmp_path / "out", "-q")
    assert r.returncode == 1
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "nsys export --type sqlite" in lines[0], r.stderr


def test_cli_analyze_of_export_folder(tmp_path):
    if not FIXTURES:
        pytest.skip("../shared/traces/nsys is absent")
    r = run_cli("analyze", NSYS / "nsysai_h100_2gpu_1s.sqlite", "-o", tmp_path / "a", "-q")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert [x["rank"] for x in s["ranks"]] == [0, 1]
