"""Failure behaviour (issue 19), "never a traceback": merge's orjson fallback (lone surrogates, args
nested 10,000 deep), a header nested 10,000 deep with several workers, aggregate and report on a
damaged analysis or aggregate folder, a read-only install without a writable numba cache.  Each
case fails with a traceback on the code before issue 19 unless its docstring says "pinned".
Helpers: tests/hostile.py; fixtures: tests/integration/conftest.py."""
from __future__ import annotations

import json
import shutil

import pytest

from hostile import (fresh_aggregate, DEEP, DEEP_ARRAY_EVENT, DEEP_OBJECT_EVENT, SURROGATE_KEY_EVENT, add_top_level_key,
                     assert_no_traceback, assert_one_line_error, cli, cpu3d, inject, rank_file, real, says_dropped,
                     synth, trace_events, ts_of_first_x, visible_files)


# =========================================================================== CRASHES
# --- merge's orjson Fragment fallback ----------------------------------------------------

def _fragment_case(tmp_path, kind):
    if kind == "surrogate_key_synth":
        it = synth(tmp_path / "run")
        f = rank_file(it, 1)
        inject(f, SURROGATE_KEY_EVENT % ts_of_first_x(f))
        return it, [it], f
    if kind == "deep_array_args_cpu3d":
        it = cpu3d(tmp_path / "run")
        f = rank_file(it, 1)
        inject(f, DEEP_ARRAY_EVENT % ts_of_first_x(f))
        return it, [it], f
    if kind == "deep_object_args_real_mi250":
        f = real("mi250_rocm_minitoy.json.gz", tmp_path / "run" / "rank0_trace.json")
        inject(f, DEEP_OBJECT_EVENT % ts_of_first_x(f))
        return f.parent, [f], f
    if kind == "surrogate_key_cpu3d_j2":
        it = cpu3d(tmp_path / "run")
        f = rank_file(it, 0)
        inject(f, SURROGATE_KEY_EVENT % ts_of_first_x(f))
        return it, [it], f
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["surrogate_key_synth", "deep_array_args_cpu3d",
                                  "deep_object_args_real_mi250", "surrogate_key_cpu3d_j2"])
def test_crash_merge_fragment_fallback(tmp_path, kind):
    """An event re-serialised through orjson.Fragment's stdlib fallback (a key holding a lone
    surrogate, args nested 10,000 deep) must merge (or fail in one line), never a traceback."""
    _, inputs, f = _fragment_case(tmp_path, kind)
    out = tmp_path / "merged.json"
    r = cli("merge", *inputs, "-o", out, "-j", "2" if kind.endswith("_j2") else "1")
    assert_no_traceback(r)
    if r.returncode == 0:
        assert out.exists()
        names = {e.get("name") for e in trace_events(out)}
        assert names & {"corpus_surrogate", "corpus_deep"} or says_dropped(r.stderr, tmp_path), \
            "the odd event vanished without a word"
    else:
        assert_one_line_error(r, f)
        assert not out.exists()


@pytest.mark.parametrize("kind", ["surrogate_key_synth", "deep_array_args_cpu3d"])
def test_crash_merge_fragment_fallback_analyze_reads_same_file(tmp_path, kind):
    """Pinned: analyze reads the files merge chokes on."""
    _, inputs, _ = _fragment_case(tmp_path, kind)
    r = cli("analyze", *inputs, "-o", tmp_path / "analysis", "-j", "1")
    assert r.returncode == 0, r
    assert_no_traceback(r)


# --- deep nesting in the header, several workers -----------------------------------------

_DEEP_ARRAY = b'"corpus_deep":' + b"[" * DEEP + b"]" * DEEP
_DEEP_OBJECT = b'"corpus_deep":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP


@pytest.mark.parametrize("where,text", [("last", _DEEP_ARRAY), ("first", _DEEP_ARRAY), ("last", _DEEP_OBJECT)],
                         ids=["array_after_events", "array_before_events", "object_after_events"])
def test_crash_header_deep_nesting_merge_j2(tmp_path, where, text):
    """A top-level key nested 10,000 deep: merge -j 2 must give what -j 1 gives (today:
    RecursionError while pickling)."""
    it = cpu3d(tmp_path / "run")
    add_top_level_key(rank_file(it, 1), text, first=(where == "first"))
    (tmp_path / "j2").mkdir()
    r2 = cli("merge", it, "-o", tmp_path / "j2" / "m.json", "-j", "2", "--no-validate")
    assert_no_traceback(r2)
    assert r2.returncode == 0, r2
    if where == "first":                    # once: byte for byte what -j 1 writes
        (tmp_path / "j1").mkdir()
        r1 = cli("merge", it, "-o", tmp_path / "j1" / "m.json", "-j", "1", "--no-validate")
        assert r1.returncode == 0, r1
        assert (tmp_path / "j2" / "m.json").read_bytes() == (tmp_path / "j1" / "m.json").read_bytes()


def test_crash_header_deep_nesting_analyze_j2(tmp_path):
    """Pinned: analyze -j 2 reads a 10,000-deep header."""
    it = cpu3d(tmp_path / "run")
    add_top_level_key(rank_file(it, 1), _DEEP_ARRAY)
    r = cli("analyze", it, "-o", tmp_path / "analysis", "-j", "2")
    assert r.returncode == 0, r
    assert_no_traceback(r)


# --- damaged analysis folders (aggregate, report) ----------------------------------------

_K1 = "kernels/iteration=10/rank=1/part-0.parquet"
_O1 = "ops/iteration=10/rank=1/part-0.parquet"


def _summary_edit(a, fn):
    s = json.loads((a / "summary.json").read_text())
    (a / "summary.json").write_text(json.dumps(fn(s)))


def _damage_analysis(a, how):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if how == "summary_is_list":
        (a / "summary.json").write_text("[]")
        return a / "summary.json"
    if how == "summary_rank_not_int":
        def f(s):
            s["ranks"][1]["rank"] = "x"
            return s
        _summary_edit(a, f)
        return a / "summary.json"
    if how == "summary_ranks_is_object":
        _summary_edit(a, lambda s: dict(s, ranks={"0": 1}))
        return a / "summary.json"
    if how == "summary_truncated":
        t = (a / "summary.json").read_text()
        (a / "summary.json").write_text(t[:len(t) // 2])
        return a / "summary.json"
    if how == "kernels_part_garbage":
        (a / _K1).write_bytes(b"garbage" * 100)
        return a / _K1
    if how == "kernels_part_cut_in_half":
        b = (a / _K1).read_bytes()
        (a / _K1).write_bytes(b[:len(b) // 2])
        return a / _K1
    if how == "kernels_part_empty":
        (a / _K1).write_bytes(b"")
        return a / _K1
    if how == "kernels_part_other_schema":
        pq.write_table(pa.table({"x": [1, 2, 3]}), a / _K1)
        return a / _K1
    if how == "ops_part_garbage":
        (a / _O1).write_bytes(b"PAR1garbagePAR1")
        return a / _O1
    raise AssertionError(how)


_DAMAGE = ["summary_is_list", "summary_rank_not_int", "summary_ranks_is_object", "kernels_part_garbage",
           "kernels_part_cut_in_half", "kernels_part_empty", "kernels_part_other_schema", "ops_part_garbage"]


@pytest.mark.parametrize("how", _DAMAGE)
def test_crash_damaged_analysis_aggregate(small_analysis, tmp_path, how):
    """aggregate of a damaged analysis folder: one line naming the bad file, exit 1, nothing written."""
    a = shutil.copytree(small_analysis / "analysis", tmp_path / "analysis")
    bad = _damage_analysis(a, how)
    r = cli("aggregate", a, "-o", tmp_path / "agg")
    assert_one_line_error(r, bad.name if bad.name != "part-0.parquet" else "rank=1")
    assert not visible_files(tmp_path / "agg")


@pytest.mark.parametrize("how", ["summary_is_list", "kernels_part_garbage", "kernels_part_other_schema"])
def test_crash_damaged_analysis_report(small_analysis, tmp_path, how):
    """report given a damaged analysis folder: same rule as aggregate."""
    a = shutil.copytree(small_analysis / "analysis", tmp_path / "analysis")
    bad = _damage_analysis(a, how)
    r = cli("report", a, "-o", tmp_path / "rep", "--no-charts")
    assert_one_line_error(r, bad.name if bad.name != "part-0.parquet" else "rank=1")
    assert not visible_files(tmp_path / "rep")


@pytest.mark.parametrize("how", ["summary_truncated", "summary_missing"])
def test_crash_damaged_analysis_summary_one_line(small_analysis, tmp_path, how):
    """Pinned: a truncated or missing summary.json is already one line naming it."""
    a = shutil.copytree(small_analysis / "analysis", tmp_path / "analysis")
    if how == "summary_missing":
        (a / "summary.json").unlink()
        name = "analysis"
    else:
        name = _damage_analysis(a, how).name
    r = cli("aggregate", a, "-o", tmp_path / "agg")
    assert_one_line_error(r, name)


# --- damaged aggregate folders (report) ----------------------------------------------------



def _damage_aggregate(g, how):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if how == "aggregate_json_truncated":
        t = (g / "aggregate.json").read_text()
        (g / "aggregate.json").write_text(t[:len(t) // 3])
        return g / "aggregate.json"
    if how == "aggregate_json_is_list":
        (g / "aggregate.json").write_text("[]")
        return g / "aggregate.json"
    if how == "ranks_parquet_missing":
        (g / "ranks.parquet").unlink()
        return g / "ranks.parquet"
    if how == "ranks_parquet_garbage":
        (g / "ranks.parquet").write_bytes(b"x" * 50)
        return g / "ranks.parquet"
    if how == "rank_phase_cut_in_half":
        b = (g / "rank_phase.parquet").read_bytes()
        (g / "rank_phase.parquet").write_bytes(b[:len(b) // 2])
        return g / "rank_phase.parquet"
    if how == "iterations_other_schema":
        pq.write_table(pa.table({"x": [1]}), g / "iterations.parquet")
        return g / "iterations.parquet"
    if how == "timeline_empty_file":
        (g / "timeline.parquet").write_bytes(b"")
        return g / "timeline.parquet"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["aggregate_json_truncated", "aggregate_json_is_list", "ranks_parquet_missing",
                                 "ranks_parquet_garbage", "rank_phase_cut_in_half", "iterations_other_schema",
                                 "timeline_empty_file"])
def test_crash_damaged_aggregate_report(small_analysis, tmp_path, how):
    """report of a damaged aggregate folder: one line naming the bad file, exit 1, no report."""
    g = fresh_aggregate(small_analysis, tmp_path)
    bad = _damage_aggregate(g, how)
    charts = how in ("timeline_empty_file", "rank_phase_cut_in_half")     # read for the charts only
    args = ["report", g, "-o", tmp_path / "rep"] + ([] if charts else ["--no-charts"])
    r = cli(*args)
    assert_one_line_error(r, bad.name)
    assert not visible_files(tmp_path / "rep")


# --- read-only install without a writable numba cache ---------------------------------------


@pytest.mark.parametrize("args", [["--version"], ["topology", "--tp", "2", "--pp", "2", "--world-size", "8"]],
                         ids=["version", "topology"])
def test_crash_readonly_install_no_numba_cache(readonly_install, args):
    """A shared read-only site-packages and an unwritable HOME: every command must still run
    (no cache, or a temp one, with at most one notice) — today: RuntimeError 'no locator'."""
    pre, env, cwd, _ = readonly_install
    r = cli(*args, prefix=pre, env=env, cwd=cwd)
    assert_no_traceback(r)
    assert r.returncode == 0, r
    assert len(r.err_lines) <= 1, r


def test_crash_readonly_install_writable_numba_cache_dir(readonly_install):
    """Pinned control: the same read-only install with NUMBA_CACHE_DIR writable works."""
    pre, env, cwd, tmp = readonly_install
    (tmp / "numba-cache").mkdir()
    r = cli("--version", prefix=pre, env=dict(env, NUMBA_CACHE_DIR=str(tmp / "numba-cache")), cwd=cwd)
    assert r.returncode == 0, r
    assert "streamtrace" in r.stdout
