"""The streaming writer, the demo command and the Megatron drop-in script."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from streamtrace import TraceWriter
from streamtrace.validate.check import validate

from support import CPU3D, ROOT, load_json, need_shared, run_cli


@pytest.mark.parametrize("name", ["z.json", "z.json.gz"])
def test_zero_events_is_valid_json(tmp_path, name):
    p = tmp_path / name
    with TraceWriter(p, metadata={"schemaVersion": 1, "n": 2 ** 70}):
        pass
    raw = p.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    assert load_json(p) == {"traceEvents": [], "schemaVersion": 1, "n": 2 ** 70}


def test_writer_is_atomic(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with TraceWriter(p) as w:
            w.write({"ph": "i", "ts": 1, "pid": 1, "tid": 1})
            raise RuntimeError("interrupted")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["a.json"]
    with TraceWriter(p, metadata={"k": "v"}) as w:
        w.write({"ph": "i", "ts": 1, "pid": 1, "tid": 1})
        w.write_many([{"ph": "i", "ts": 2, "pid": 1, "tid": 1, "args": {"big": 10 ** 30, "nan": float("nan")}}])
    doc = json.loads(p.read_text())
    assert len(doc["traceEvents"]) == 2 and doc["traceEvents"][1]["args"]["big"] == 10 ** 30
    assert oct(p.stat().st_mode & 0o777) != oct(0o600)


def test_demo_command(tmp_path):
    r = run_cli("demo", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    merged = tmp_path / "d" / "merged.json.gz"
    assert "ui.perfetto.dev" in r.stdout and str(merged.resolve()) in r.stdout
    rep = validate(merged)
    assert rep["ok"] and rep["notices"]["unmatched_flow"] == 0
    doc = load_json(merged)
    assert len(doc["streamtrace"]["ranks"]) == 8
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert any(n.startswith("Rank 7 · GPU") for n in names) and any(n.startswith("Rank 0 · CPU") for n in names)
    # the whole epilogue ran on the demo job: analysis Parquet, aggregate, report and charts, and the report is named
    out = tmp_path / "d" / "streamtrace"
    report = out / "demo.md"
    assert f"report: {report.resolve()}" in r.stdout
    assert "## " in report.read_text() and json.loads((out / "report.json").read_text())
    assert sorted(p.name for p in (out / "iteration_10" / "analysis" / "kernels" / "iteration=10").iterdir()) == \
        [f"rank={r}" for r in range(8)]
    assert (out / "aggregate" / "ranks.parquet").exists() and any((out / "charts").glob("*.png"))
    assert json.loads((out / "epilogue.json").read_text())["summary"]["failures"] == []
    assert run_cli("demo", tmp_path / "e", "--world-size", "6").returncode == 2       # a usage error


def test_megatron_dropin(tmp_path):
    need_shared()
    d = tmp_path / "torch_profiler"
    d.mkdir()
    for p in (CPU3D / "iteration_4").glob("*.json"):
        os.symlink(p, d / p.name)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "merge_profiler_traces.py"), "-i", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "torch_profiler_merged.json"        # Megatron's naming, beside the folder
    assert out.exists() and len(load_json(out)["streamtrace"]["ranks"]) == 8
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "merge_profiler_traces.py"), "-i", str(d),
                        "-o", "x.json.gz"], capture_output=True, text=True)
    assert r.returncode == 0 and gzip.open(tmp_path / "x.json.gz").read(1) == b"{"


_PROBE = r'''
import importlib.util, sys
cli = sys.argv[1] == "cli"
if cli:
    from streamtrace.cli import main
    main(["validate", sys.argv[2]])
else:
    from streamtrace.validate.check import validate
    validate(sys.argv[2])
m = sys.modules.get("scipy.linalg", "absent")
print("blocked" if m is None else ("loaded" if m != "absent" else "absent"))
'''


def test_command_skips_numba_blas_but_library_does_not(tmp_path):
    """The ``streamtrace`` command keeps numba from importing SciPy's BLAS (start-up
    time); a program using streamtrace as a library keeps SciPy importable."""
    pytest.importorskip("scipy")
    doc = tmp_path / "t.json"
    doc.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = {}
    for mode in ("cli", "library"):
        p = subprocess.run([sys.executable, "-c", _PROBE, mode, str(doc)], capture_output=True, text=True,
                           env=env, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        out[mode] = p.stdout.split()[-1]
    assert out["cli"] == "blocked"
    assert out["library"] == "loaded"        # numba probed SciPy BLAS at its first kernel


def test_demo_done_line_is_the_whole_command(tmp_path):
    """Issue 47: the demo's closing "done in" counts from the command's start, the first run's compiling
    said within it."""
    import time as _time
    from streamtrace.cli.demo import run_demo
    lines = []
    run_demo(tmp_path / "d", jobs=1, log=lines.append, epilogue=False, started=_time.time() - 30, compiled_s=21.5)
    done = lines[-1]
    assert done.startswith("done in ") and float(done.split()[2]) >= 30, done
    assert done.endswith("(21.5 s of it compiling the kernels, first run only)"), done
