"""Compiling the kernels ahead (streamtrace.runtime.compile, `streamtrace warmup`): after prepare() a
command compiles nothing more; warm-up never fails a command, also when numba cannot cache."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

from streamtrace.runtime import compile as C

from support import ROOT


def test_units_name_kernels_with_their_arity():
    """Every unit is a cached numba dispatcher whose Python function takes as many parameters as
    its signature has types; every command's units are units; callees are listed before use."""
    for name, (mod, fn, sig, deps, cost) in C.UNITS.items():
        disp = C._dispatcher(name)
        assert len(inspect.signature(disp.py_func).parameters) == len(sig), name
        assert disp.targetoptions.get("cache") is not False and cost > 0
        assert all(d in C.UNITS for d in deps), name
    for command, units in C.COMMANDS.items():
        assert set(units) <= set(C.UNITS), command
    # two signatures of one kernel are never compiled at once: one waits for the other
    for a, b in [(a, b) for a in C.UNITS for b in C.UNITS if a < b and C.UNITS[a][:2] == C.UNITS[b][:2]]:
        assert a in C._closure([b]) or b in C._closure([a]), (a, b)
    order = C._closure(["treestream._feed", "rewrite.scan_rewrite"])
    assert order.index("runs.merge_runs") < order.index("runs.sort_group") < order.index("treestream._feed")
    assert order.index("jsoncheck.object_members") < order.index("rewrite.scan_rewrite")


def test_prepare_never_raises(monkeypatch):
    def broken(*commands):
        raise RuntimeError("numba internals changed")
    monkeypatch.setattr(C, "pending", broken)
    notes = []
    res = C.prepare("analyze", notice=notes.append)
    assert res["compiled"] == [] and "RuntimeError" in res["failed"]["pending"] and notes == []


def test_unwritable_cache_is_skipped(monkeypatch):
    """numba's cache folder read-only: prepare compiles nothing (it would be lost), says nothing."""
    monkeypatch.setattr(C, "pending", lambda *commands: ["scan._is_ws"])

    def read_only(*a, **k):
        raise PermissionError(30, "Read-only file system")
    monkeypatch.setattr(C.tempfile, "TemporaryFile", read_only)
    assert not C.cache_writable()
    notes = []
    res = C.prepare("demo", notice=notes.append)
    assert res["compiled"] == [] and res["failed"] == {} and "not writable" in res["skipped"] and notes == []


def test_jit_disabled_warmup_says_so():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "streamtrace", "warmup"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "caches nothing" in p.stderr and "Traceback" not in p.stderr


_AFTER_PREPARE = textwrap.dedent("""
    import json, sys
    from numba.core import event
    from streamtrace.runtime.compile import prepare
    from streamtrace.merge import MergeOptions, merge
    from streamtrace.analyze import AnalyzeOptions, analyze
    from streamtrace.validate.check import validate
    from streamtrace.synth.job import SynthSpec, generate_job
    notes = []
    first = prepare("merge", "analyze", "validate", jobs=2, notice=notes.append)
    again = prepare("merge", "analyze", "validate", jobs=2, notice=notes.append)
    generate_job("traces", SynthSpec(world_size=4, tp=2, pp=2))
    rec = event.RecordingListener()
    event.register("numba:compile", rec)
    merge(["traces"], "merged.json", MergeOptions(jobs=1))
    analyze(["traces"], "analysis", AnalyzeOptions(jobs=1))
    validate("merged.json")
    funcs = [getattr(e.data["dispatcher"], "py_func", None) for _, e in rec.buffer if e.is_start]
    compiled = sorted({f.__qualname__ for f in funcs if f is not None and f.__module__.startswith("streamtrace.kernels")})
    print(json.dumps({"notes": notes, "first": first, "again": again, "compiled": compiled}))
""")


def test_after_prepare_merge_analyze_and_validate_compile_nothing(tmp_path):
    """A fresh numba cache: prepare compiles the units of merge, analyze and validate (one notice),
    a second prepare finds them cached, and then a real merge, analyze and validate compile no kernel."""
    env = {**_without_cache_root(), "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", _AFTER_PREPARE], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert len(out["notes"]) == 1 and out["notes"][0].startswith("compiling kernels, first run only")
    assert out["first"]["failed"] == {} and "rewrite.scan_rewrite" in out["first"]["compiled"]
    assert out["again"]["compiled"] == []
    assert out["compiled"] == []


def test_notice_once_and_quiet(tmp_path):
    """The CLI: one notice line on the first run, none on the next, none under -q."""
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2}]}')
    quiet = _cli_with_cache(tmp_path / "cache-q", "validate", trace, "-q")
    first = _cli_with_cache(tmp_path / "cache", "validate", trace)
    second = _cli_with_cache(tmp_path / "cache", "validate", trace)
    assert [r.returncode for r in (quiet, first, second)] == [0, 0, 0], quiet.stderr + first.stderr
    assert quiet.stderr == ""
    assert first.stderr.count("compiling kernels, first run only") == 1
    assert "compiling kernels" not in second.stderr


def _without_cache_root() -> dict:
    """The environment without ``STREAMTRACE_CACHE_DIR``, which names the kernel cache ahead of
    ``NUMBA_CACHE_DIR`` (``kernels.cachedir``): set by the caller, a test's fresh ``NUMBA_CACHE_DIR``
    would find the caller's warm cache."""
    return {k: v for k, v in os.environ.items() if k != "STREAMTRACE_CACHE_DIR"}


def _cli_with_cache(cache, *args):
    env = {**_without_cache_root(), "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "streamtrace", *map(str, args)], capture_output=True, text=True,
                          env=env)



def test_load_brings_units_here_and_never_raises(monkeypatch):
    """load() leaves each unit compiled for its signature in this process (its callees' code inside
    it: their units are not loaded); an unknown name or a broken numba loads nothing and raises nothing."""
    got = C.load("intervals._union_length_sorted", "scan.skip_value")
    assert got == ["intervals._union_length_sorted", "scan.skip_value"]
    for n in got:
        assert tuple(C.UNITS[n][2]) in C._dispatcher(n).overloads, n
    assert C.load("no.such_unit") == []
    assert all(set(units) <= set(C.UNITS) for units in C.TASKS.values())

    def broken(name):
        raise RuntimeError("numba internals changed")
    monkeypatch.setattr(C, "_dispatcher", broken)
    assert C.load("scan.skip_value") == []


def test_prepare_fills_the_per_user_kernel_cache(tmp_path):
    """prepare (what `streamtrace warmup` runs) compiles into $STREAMTRACE_CACHE_DIR/<version>/...: the
    folder cache_folder() names, with numba's index of each unit; a second process finds them cached."""
    script = ("import json; from streamtrace.runtime import compile as C; "
              "r = C.prepare('scan.skip_ws', jobs=1, notice=None); "
              "print(json.dumps([r['compiled'], C.cache_folder(), C.pending('scan.skip_ws')]))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(STREAMTRACE_CACHE_DIR=str(tmp_path / "st"), PYTHONPATH=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
            for _ in range(2)]
    assert all(p.returncode == 0 for p in runs), runs[0].stderr + runs[1].stderr
    (compiled, folder, pending), (again, folder2, _) = (json.loads(p.stdout) for p in runs)
    assert compiled == ["scan._is_ws", "scan.skip_ws"] and pending == [] and again == [] and folder2 == folder
    from streamtrace import __version__
    assert os.path.dirname(folder) == str(tmp_path / "st" / __version__)
    assert sorted(f.split("-")[0] for f in os.listdir(folder) if f.endswith(".nbi")) == ["scan._is_ws", "scan.skip_ws"]


_EPILOGUE_AFTER_PREPARE = textwrap.dedent("""
    import json
    from numba.core import event
    from streamtrace.runtime.compile import prepare
    from streamtrace.epilogue import run
    from streamtrace.synth.job import SynthSpec, generate_job
    first = prepare("demo", jobs=2, notice=None)
    generate_job("tb", SynthSpec(world_size=4, tp=2, pp=2))
    rec = event.RecordingListener()
    event.register("numba:compile", rec)
    s = run("tb", jobs=1, isolate=False, charts=False, progress=False)
    funcs = [getattr(e.data["dispatcher"], "py_func", None) for _, e in rec.buffer if e.is_start]
    compiled = sorted({f.__qualname__ for f in funcs
                       if f is not None and f.__module__.startswith("streamtrace.kernels")})
    print(json.dumps({"first": first, "compiled": compiled, "failures": s["failures"], "stages": s["stages"]}))
""")


@pytest.mark.slow
def test_demo_units_are_what_the_epilogue_of_kineto_traces_calls(tmp_path):
    """The demo's units (the epilogue of Kineto traces, no Nsight Systems reader, no time filter) are
    enough: after prepare("demo") on a fresh cache, the whole epilogue of a generated job compiles no
    kernel; and the export readers are not among them."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(STREAMTRACE_CACHE_DIR=str(tmp_path / "st"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _EPILOGUE_AFTER_PREPARE], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["failures"] == [] and out["stages"]["critical path marks"] == "done", out
    assert out["first"]["failed"] == {} and out["compiled"] == []
    assert not set(C.NSYS_UNITS) & set(C.COMMANDS["demo"]) and set(C.NSYS_UNITS) <= set(C.COMMANDS["all"])


def test_epilogue_compiles_the_export_readers_only_for_an_export(tmp_path):
    """The epilogue's compile-ahead adds the Nsight Systems units only when the run folder holds an
    export (a SQLite file, whatever the folder depth), never for a file that only has the name."""
    import sqlite3
    from streamtrace.cli.epilogue import holds_export
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "fake.sqlite").write_text("not a database")
    assert not holds_export(tmp_path)
    sqlite3.connect(tmp_path / "a" / "b" / "job.sqlite").execute("CREATE TABLE t (x)").connection.commit()
    assert holds_export(tmp_path) and not holds_export(tmp_path / "missing")
