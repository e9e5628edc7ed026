"""``streamtrace analyze --gpu-only`` (issue 32) and the export read without ``ORDER BY``.

Expected values are computed independently: the Nsight Systems exports' per-device metrics by the
plain-SQL rules of ``test_nsys.py`` (``test_nsys.expected``), the Kineto trace's from the shared
reference metrics (``../shared/reference``, computed outside streamtrace), checked the way
``test_metrics_reference.py`` checks them."""
from __future__ import annotations

import json
import sqlite3

import pyarrow.parquet as pq
import pytest

from metrics_reference import REFERENCE, TRACES, close_enough
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.trace.nsys import NsysExport
from streamtrace.trace.nsys.reader import KERNEL_T, RUNTIME_T

from support import run_cli
from test_nsys import FIXTURES, NSYS, expected

KINETO = "a100_resnet_ddp_rank0_of2.json.gz"


def _need_fixtures():
    if not FIXTURES:
        pytest.skip("../shared/traces/nsys is absent")


@pytest.mark.parametrize("name", FIXTURES or ["<no fixtures>"])
def test_gpu_only_export_metrics_equal_independent_sql(tmp_path, monkeypatch, name):
    _need_fixtures()

    def no_cpu(*a, **k):
        raise AssertionError("--gpu-only read the CPU tables")
    monkeypatch.setattr(NsysExport, "cpu_batches", no_cpu)
    s = analyze([str(NSYS / name)], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=False, gpu_only=True))
    want, _, nccl = expected(name)
    got = {(r["rank"], int(d)): m for r in s["ranks"] for d, m in r["devices"].items()}
    assert set(got) == set(want)
    for k, w in want.items():
        for key, v in w.items():
            assert got[k][key] == pytest.approx(v, abs=1e-3), (k, key)
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["gpu_only"] is True
    assert any("CPU activity left out" in n for n in summary["notices"])
    assert all(r["links"]["linked"] == 0 and r["call_tree"]["cpu_events"] == 0 for r in summary["ranks"])
    k = pq.read_table(tmp_path / "a" / "kernels").to_pandas()
    assert len(k) == sum(w["gpu_events"] for w in want.values())
    assert int((k["kind"].astype(str) == "communication").sum()) == nccl
    assert pq.read_table(tmp_path / "a" / "ops").num_rows == 0


def test_gpu_only_keeps_the_kernels_schema(tmp_path):
    _need_fixtures()
    name = str(NSYS / "nsysai_mfu_2gpu_before.sqlite")
    for flag in ((), ("--gpu-only",)):
        r = run_cli("analyze", name, "-o", tmp_path / f"a{len(flag)}", "-q", "-j", "1", *flag)
        assert r.returncode == 0, r.stderr
    parts = sorted(p.relative_to(tmp_path / "a0") for p in (tmp_path / "a0" / "kernels").rglob("*.parquet"))
    assert parts
    for p in parts:
        assert pq.read_schema(tmp_path / "a0" / p).equals(pq.read_schema(tmp_path / "a1" / p))
    full, gpu = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("a0", "a1"))
    assert [r["devices"] for r in full["ranks"]] == [r["devices"] for r in gpu["ranks"]]
    assert full["gpu_only"] is False and gpu["gpu_only"] is True


def test_gpu_only_kineto_trace_metrics_equal_reference(tmp_path):
    trace = TRACES / KINETO
    ref = REFERENCE / KINETO.replace(".json.gz", ".metrics.json")
    if not (trace.is_file() and ref.is_file()):
        pytest.skip(f"{trace} or its reference metrics absent")
    want = json.loads(ref.read_text())["devices"]
    s = analyze([str(trace)], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=False, gpu_only=True))
    (rank,) = s["ranks"]
    assert set(rank["devices"]) == set(want)
    for d, w in want.items():
        bad = [k for k, v in w.items() if not close_enough(rank["devices"][d][k], v)]
        assert not bad, (d, bad)
    assert rank["call_tree"]["cpu_events"] == 0
    assert pq.read_table(tmp_path / "a" / "ops").num_rows == 0
    assert pq.read_table(tmp_path / "a" / "kernels").num_rows == sum(w["gpu_events"] for w in want.values())


@pytest.mark.parametrize("name", FIXTURES or ["<no fixtures>"])
def test_unordered_read_is_rowid_order(name):
    """``ordered=False``: each table's rows as SQLite stores them (rowid order), table after
    table; ``ordered=True``: every row in start order.  Both: the same rows."""
    _need_fixtures()
    c = sqlite3.connect(f"file:{NSYS / name}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ex = NsysExport(NSYS / name)
    try:
        for t, read in ((KERNEL_T, ex.gpu_batches), (RUNTIME_T, ex.cpu_batches)):
            if t not in tables:
                continue
            want = [s for (s,) in c.execute(f"SELECT start FROM [{t}] WHERE start >= 0 AND [end] >= start "
                                            f"ORDER BY rowid")]
            loose = [int(x) for b in read(ordered=False) for x in b["ts"]]
            assert loose[:len(want)] == want          # the first table of each read: its rows in rowid order
            tight = [int(x) for b in read(ordered=True) for x in b["ts"]]
            assert tight == sorted(tight) and sorted(tight) == sorted(loose)
    finally:
        ex.close()
