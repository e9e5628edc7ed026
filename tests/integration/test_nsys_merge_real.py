"""``streamtrace merge`` of the real exports of ../shared/traces/nsys/ (schema 3.13 and 3.25, their
GPU tables naming the process): the output passes ``streamtrace validate``, every GPU row and every
usable CUDA call is an ``X`` slice, and the ``ac2g`` flow arrows are the (process, correlationId)
pairs that a GPU row and a CUDA runtime/driver row share, counted here with plain SQL (rows with a
negative start or no end left out, as the reader does)."""
from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from support import SHARED, run_cli

NSYS = SHARED / "traces" / "nsys"
WITH_PID = ["cloverleaf.sqlite", "nsysai_mfu_2gpu_before.sqlite"]
USABLE = "start >= 0 AND [end] >= start"


def _count(name, q):
    c = sqlite3.connect(f"file:{NSYS / name}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        gpu = " UNION ".join(f"SELECT globalPid >> 24 AS proc, correlationId AS corr FROM [{t}] WHERE {USABLE}"
                             for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                       "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
        return c.execute(q.format(gpu=gpu)).fetchone()[0]
    finally:
        c.close()


@pytest.mark.skipif(not NSYS.is_dir(), reason="../shared/traces/nsys is absent")
@pytest.mark.parametrize("name", WITH_PID)
def test_merge_of_a_real_export_has_a_flow_per_linked_launch(tmp_path, name):
    out = tmp_path / "m.json.gz"
    r = run_cli("merge", NSYS / name, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    v = run_cli("validate", out)
    assert v.returncode == 0 and "OK" in v.stdout + v.stderr, v.stdout + v.stderr
    evs = json.load(gzip.open(out))["traceEvents"]
    want = _count(name, "SELECT count(*) FROM (SELECT DISTINCT g.proc, g.corr FROM ({gpu}) g JOIN "
                        f"CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.corr AND r.globalTid >> 24 = g.proc "
                        f"AND r.start >= 0 AND r.[end] >= r.start)")
    s = [e for e in evs if e["ph"] == "s"]
    f = [e for e in evs if e["ph"] == "f"]
    assert len(s) == len(f) == want > 0
    assert {e["id"] for e in s} == {e["id"] for e in f}
    calls = _count(name, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {USABLE}")
    assert sum(e["ph"] == "X" and e["cat"] in ("cuda_runtime", "cuda_driver") for e in evs) == calls
