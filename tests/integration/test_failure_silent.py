"""Failure behaviour (issue 19), nothing dropped or changed without a word: rank files without a
traceEvents array, ts written as a string or beyond int64 ns, analyses missing partitions,
aggregate folders missing tables, unreadable iteration folders, a trace cut after the events
array, the epilogue's isolation of a bad rank, a stray CPU event on a GPU pid, analyze's error
lines.  Helpers: tests/hostile.py; fixtures: tests/integration/conftest.py."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from hostile import (DEEP, assert_no_traceback, assert_one_line_error, cli, cpu3d, first_event, fresh_aggregate,
                     inject, marked_kernel, rank_file, real, says_dropped, synth, trace_header, unprivileged)


# =========================================================================== SILENT DROPS
# --- a rank file whose traceEvents is missing or not an array ------------------------------

_NOT_AN_ARRAY = {"empty_object": "{}", "traceEvents_null": '{"traceEvents": null}',
                 "traceEvents_object": '{"traceEvents": {"ph": "X", "name": "k"}}',
                 "traceEvents_number": '{"traceEvents": 42}'}


@pytest.mark.parametrize("how", list(_NOT_AN_ARRAY))
def test_silent_rank_without_events_merge_warns(tmp_path, how):
    """merge drops such a rank: it must say so, naming the file (today: not a word)."""
    it = cpu3d(tmp_path / "run", ranks=(0, 1, 2))
    bad = rank_file(it, 1)
    bad.write_text(_NOT_AN_ARRAY[how])
    r = cli("merge", it, "-o", tmp_path / "merged.json", "-j", "1", "--no-validate")
    assert_no_traceback(r)
    assert bad.name in r.stderr, f"rank file {bad.name} dropped without a word\n{r!r}"


@pytest.mark.parametrize("how", list(_NOT_AN_ARRAY))
def test_silent_rank_without_events_validate_fails(tmp_path, how):
    """validate calls such a file OK with 0 events: it must fail."""
    f = tmp_path / "rank_0001_trace.json"
    f.write_text(_NOT_AN_ARRAY[how])
    r = cli("validate", f)
    assert_no_traceback(r)
    assert r.returncode == 1, f"validate accepts {_NOT_AN_ARRAY[how]}\n{r!r}"


@pytest.mark.parametrize("how", ["empty_object", "traceEvents_number"])
def test_silent_rank_without_events_analyze_names_it(tmp_path, how):
    """analyze drops such a rank without a word too (not in the issue's list): say so."""
    it = cpu3d(tmp_path / "run", ranks=(0, 1))
    bad = rank_file(it, 1)
    bad.write_text(_NOT_AN_ARRAY[how])
    r = cli("analyze", it, "-o", tmp_path / "analysis", "-j", "1")
    assert_no_traceback(r)
    assert bad.name in r.stderr, f"rank file {bad.name} dropped without a word\n{r!r}"


def test_silent_rank_without_events_epilogue_strict(tmp_path):
    """The epilogue says OK, even with --strict, when a rank file holds {}: count it."""
    it = synth(tmp_path / "run")
    bad = rank_file(it, 1)
    bad.write_text("{}")
    r = cli("epilogue", tmp_path / "run", "-j", "1", "--strict")
    assert_no_traceback(r)
    assert r.returncode == 1, f"--strict epilogue exits 0 with an empty rank file\n{r!r}"
    state = json.loads((tmp_path / "run" / "streamtrace" / "epilogue.json").read_text())
    assert any(bad.name in f.get("file", "") + f.get("error", "") for f in state["summary"]["failures"])


# --- ts as a JSON string, ts beyond int64 ns -------------------------------------------------

def _merged_mark(out):
    doc = json.loads(Path(out).read_bytes(), parse_float=Decimal)
    shifts = {x["rank"]: x["time_shift_ns"] for x in doc["streamtrace"]["ranks"]}
    marks = [e for e in doc["traceEvents"] if e.get("name") == "CORPUS_MARK"]
    return marks, shifts


@pytest.mark.parametrize("case", ["ts_string_synth", "ts_string_cpu3d", "ts_1e26_synth", "numeric_ts_synth"])
def test_silent_ts_merge_shift_or_refuse(tmp_path, case):
    """A ts merge cannot rewrite (a JSON string, beyond int64 ns) must be shifted like the rank's
    other events, or refused / dropped with a word — not copied unshifted (1 s off)."""
    ts_text = {"ts_string_synth": None, "ts_string_cpu3d": None, "ts_1e26_synth": "1e26",
               "numeric_ts_synth": None}[case]
    if case.endswith("cpu3d"):
        it = cpu3d(tmp_path / "run")
        f = rank_file(it, 1)
        b = f.read_text()
        base = int(re.search(r'"baseTimeNanoseconds":\s*(\d+)', b).group(1))
        f.write_text(b.replace(str(base), str(base + 10**9)))          # rank 1's clock 1 s ahead
        orig = repr(first_event(f, lambda e: e.get("ph") == "X")["ts"])
        ev = (b'{"ph":"X","cat":"cpu_op","name":"CORPUS_MARK","pid":4242,"tid":4242,"ts":"%s","dur":1}'
              % orig.encode())
    else:
        it = synth(tmp_path / "run", clock_skew_ns=10**9)
        f = rank_file(it, 1)
        orig = repr(first_event(f, lambda e: e.get("cat") == "kernel")["ts"])
        ts = ts_text or (orig if case.startswith("numeric") else f'"{orig}"')
        ev = marked_kernel(f, ts)
        orig = ts_text or orig
    inject(f, ev)
    out = tmp_path / "merged.json"
    r = cli("merge", it, "-o", out, "-j", "1", "--no-validate")
    assert_no_traceback(r)
    if r.returncode != 0:
        assert_one_line_error(r, f)
        return
    marks, shifts = _merged_mark(out)
    if not marks:
        assert says_dropped(r.stderr, tmp_path) and f.name in r.stderr, f"CORPUS_MARK dropped without a word\n{r!r}"
        return
    got = Decimal(str(marks[0]["ts"]))
    want = Decimal(orig) + Decimal(shifts[1]) / 1000
    assert shifts[1] == 10**9
    assert got == want, f"ts {marks[0]['ts']!r} written for {orig} (+{shifts[1]} ns shift): want {want}"


def _analyzed_mark(outdir, rank):
    import pyarrow.parquet as pq
    names = []
    for p in sorted((outdir / "kernels").glob(f"iteration=*/rank={rank}/*.parquet")):
        names += pq.read_table(p, columns=["name"]).column("name").to_pylist()
    return "CORPUS_MARK" in names


@pytest.mark.parametrize("case", ["ts_string", "ts_1e26", "ts_int_1e26", "dur_1e26", "ts_null",
                                  "ts_1e26_real_mi250", "numeric_ts"])
def test_silent_ts_analyze_drop_counted(tmp_path, case):
    """A kernel whose ts/dur analyze cannot use is dropped without a warning: keep it or count
    it (summary.json warnings or stderr)."""
    if case.endswith("mi250"):
        f = real("mi250_rocm_minitoy.json.gz", tmp_path / "run" / "rank0_trace.json")
        inputs, rank = [f], 0
    else:
        it = synth(tmp_path / "run")
        f = rank_file(it, 1)
        inputs, rank = [it], 1
    orig = repr(first_event(f, lambda e: e.get("cat") == "kernel")["ts"])
    ts, dur = {"ts_string": (f'"{orig}"', None), "ts_1e26": ("1e26", None),
               "ts_int_1e26": ("1" + "0" * 26, None), "dur_1e26": (orig, "1e26"), "ts_null": ("null", None),
               "ts_1e26_real_mi250": ("1e26", None), "numeric_ts": (orig, None)}[case]
    inject(f, marked_kernel(f, ts, dur))
    outdir = tmp_path / "analysis"
    r = cli("analyze", *inputs, "-o", outdir, "-j", "1")
    assert_no_traceback(r)
    if r.returncode != 0:
        assert_one_line_error(r, f)
        return
    if _analyzed_mark(outdir, rank):
        return
    warnings = json.dumps([x.get("warnings") for x in json.loads((outdir / "summary.json").read_text())["ranks"]])
    assert says_dropped(r.stderr + warnings, tmp_path), \
        f"the kernel with ts {ts} dur {dur} vanished from analyze without a warning\n{r!r}"


# --- aggregate of an analysis missing rank partitions ---------------------------------------

@pytest.mark.parametrize("how", ["rank1_partitions", "kernels_folder"])
@pytest.mark.parametrize("command", ["aggregate", "report"])
def test_silent_aggregate_missing_rank_partitions(small_analysis, tmp_path, how, command):
    """summary.json lists 4 ranks, some partitions are gone: say so (or fail in one line)."""
    a = shutil.copytree(small_analysis / "analysis", tmp_path / "analysis")
    if how == "rank1_partitions":
        shutil.rmtree(a / "kernels" / "iteration=10" / "rank=1")
        shutil.rmtree(a / "ops" / "iteration=10" / "rank=1")
        pattern = r"rank[ =]?1\b"
    else:
        shutil.rmtree(a / "kernels")
        pattern = r"kernels"
    args = ["--no-charts"] if command == "report" else []
    r = cli(command, a, "-o", tmp_path / "out", *args)
    assert_no_traceback(r)
    if r.returncode != 0:
        assert_one_line_error(r, a)
        return
    text = r.stderr.replace(str(tmp_path), "<tmp>")
    meta = tmp_path / "out" / "aggregate.json"
    if meta.exists():
        text += json.dumps(json.loads(meta.read_text()).get("warnings"))
    assert re.search(pattern, text), f"missing {how} reported nowhere (stderr, aggregate.json warnings)\n{r!r}"


def test_silent_report_missing_collectives_table(small_analysis, tmp_path):
    """Beyond the issue: report of an aggregate folder without collectives.parquet writes a
    report without collectives, silently."""
    g = fresh_aggregate(small_analysis, tmp_path)
    (g / "collectives_summary.parquet").unlink()
    r = cli("report", g, "-o", tmp_path / "rep", "--no-charts")
    assert_no_traceback(r)
    if r.returncode != 0:
        assert_one_line_error(r, "collectives_summary.parquet")
    else:
        assert "collectives_summary.parquet" in r.stderr, f"a missing table is not mentioned\n{r!r}"


# --- unreadable iteration_N/ subfolders -------------------------------------------------------

@pytest.fixture
def run_with_unreadable_iteration(tmp_path, restore_modes):
    pre = unprivileged()
    run = tmp_path / "run"
    synth(run, iteration=10)
    synth(run, iteration=11)
    os.chmod(run / "iteration_11", 0o000)
    restore_modes.append(run / "iteration_11")
    return pre, run


@pytest.mark.parametrize("command", ["merge", "analyze"])
def test_silent_unreadable_iteration_folder(run_with_unreadable_iteration, tmp_path, command):
    """An unreadable iteration_11/ beside a readable iteration_10/: say so (today: skipped)."""
    pre, run = run_with_unreadable_iteration
    target = tmp_path / ("merged.json" if command == "merge" else "analysis")
    r = cli(command, run, "-o", target, "-j", "1", prefix=pre)
    assert_no_traceback(r)
    assert "iteration_11" in r.stderr, f"iteration_11 skipped without a word\n{r!r}"


def test_silent_unreadable_iteration_folder_epilogue(run_with_unreadable_iteration):
    """The epilogue counts an unreadable iteration folder as a problem."""
    pre, run = run_with_unreadable_iteration
    r = cli("epilogue", run, "-j", "1", "--strict", "--name", "corpus", prefix=pre)
    assert_no_traceback(r)
    assert r.returncode == 1 and "iteration_11" in r.stderr, r


def test_silent_unreadable_folder_given_directly(run_with_unreadable_iteration, tmp_path):
    """Beyond the issue: merge of the unreadable folder itself says 'no trace files found'; it
    should say it cannot be read."""
    pre, run = run_with_unreadable_iteration
    r = cli("merge", run / "iteration_11", "-o", tmp_path / "m.json", prefix=pre)
    assert_one_line_error(r, run / "iteration_11")
    msg = r.last_err.replace(str(tmp_path), "<tmp>")
    assert re.search(r"permission|unreadable|cannot (read|open|list)", msg, re.I), r.last_err


def test_silent_unreadable_rank_file_one_line(tmp_path, restore_modes):
    """Pinned: an unreadable rank file is one line naming it."""
    pre = unprivileged()
    it = synth(tmp_path / "run")
    f = rank_file(it, 1)
    os.chmod(f, 0o000)
    restore_modes.append(f)
    r = cli("merge", it, "-o", tmp_path / "m.json", prefix=pre)
    assert_one_line_error(r, f)


# --- a trace cut right after the ',' that follows the traceEvents ']' -------------------------

def _cut(tmp_path, where, gz=False):
    if gz:
        it = synth(tmp_path / "run", compress=True)
        f = rank_file(it, 1)
        b = gzip.decompress(f.read_bytes())
        end = b.index(b"]", b.rindex(b"}", 0, b.rindex(b"]") + 1))      # the events array's ']'
    else:
        it = cpu3d(tmp_path / "run")
        f = rank_file(it, 1)
        b = f.read_bytes()
        end = b.rindex(b'],"traceName"')
    full = len(json.loads(b)["traceEvents"])
    assert b[end + 1:end + 2] == b","
    cut = {"comma": b[:end + 2], "comma_space": b[:end + 2] + b"\n  ", "bracket": b[:end + 1],
           "inside_key": b[:end + 6]}[where]
    f.write_bytes(gzip.compress(cut) if gz else cut)
    return it, f, full


@pytest.mark.parametrize("where,gz", [("comma", False), ("comma_space", False), ("comma", True)],
                         ids=["comma", "comma_space", "comma_gz_synth"])
def test_silent_cut_after_events_comma_merge_salvage(tmp_path, where, gz):
    """Every event is complete: --salvage keeps them all with a warning (today: refused)."""
    it, f, full = _cut(tmp_path, where, gz)
    out = tmp_path / "merged.json"
    r = cli("merge", it, "-o", out, "-j", "1", "--no-validate", "--salvage")
    assert_no_traceback(r)
    assert r.returncode == 0, r
    ranks = {x["rank"]: x for x in json.loads(out.read_bytes())["streamtrace"]["ranks"]}
    assert ranks[1]["events_in"] == full and ranks[1]["truncated"]
    assert "truncated" in r.stderr and f.name in r.stderr


@pytest.mark.parametrize("where", ["comma", "comma_space"])
def test_silent_cut_after_events_comma_says_truncated(tmp_path, where):
    """Without --salvage: one line naming the file that says 'truncated' (today: 'expected a
    key string')."""
    it, f, _ = _cut(tmp_path, where)
    r = cli("merge", it, "-o", tmp_path / "merged.json", "-j", "1")
    assert_one_line_error(r, f)
    assert "truncated" in r.last_err.replace(str(tmp_path), "<tmp>"), r.last_err


def test_silent_cut_after_events_comma_analyze_salvage(tmp_path):
    """analyze --salvage keeps the rank (today: the rank fails)."""
    it, f, _ = _cut(tmp_path, "comma")
    outdir = tmp_path / "analysis"
    r = cli("analyze", it, "-o", outdir, "-j", "1", "--salvage")
    assert_no_traceback(r)
    assert r.returncode == 0, r
    assert sorted(x["rank"] for x in json.loads((outdir / "summary.json").read_text())["ranks"]) == [0, 1]


@pytest.mark.parametrize("where", ["bracket", "inside_key"])
def test_silent_cut_after_events_pinned(tmp_path, where):
    """Pinned: cut right after ']' or inside the next key: --salvage keeps every event."""
    it, f, full = _cut(tmp_path, where)
    out = tmp_path / "merged.json"
    r = cli("merge", it, "-o", out, "-j", "1", "--no-validate", "--salvage")
    assert r.returncode == 0, r
    ranks = {x["rank"]: x for x in json.loads(out.read_bytes())["streamtrace"]["ranks"]}
    assert ranks[1]["events_in"] == full and "truncated" in r.stderr


# --- the epilogue isolates a bad rank in merge ------------------------------------------------

@pytest.mark.parametrize("bad", ["surrogate_key", "deep_args"])
def test_silent_epilogue_isolates_bad_rank_in_merge(tmp_path, bad):
    """A rank merge cannot rewrite: the good ranks still get merged_gpu.json.gz and the failure
    names the rank file (today: no merged trace, failure names 'iteration_10')."""
    it = synth(tmp_path / "run")
    f = rank_file(it, 1)
    ev = marked_kernel(f, repr(first_event(f, lambda e: e.get("cat") == "kernel")["ts"]))
    odd = b'"\\udc80": 1, ' if bad == "surrogate_key" else b'"deep": ' + b"[" * DEEP + b"]" * DEEP + b", "
    inject(f, ev.replace(b'"args": {', b'"args": {' + odd, 1))     # a kernel: the epilogue merges GPU processes only
    r = cli("epilogue", tmp_path / "run", "-j", "1", "--name", "corpus")
    assert_no_traceback(r)
    out = tmp_path / "run" / "streamtrace"
    state = json.loads((out / "epilogue.json").read_text())
    for fail in state["summary"]["failures"]:
        if fail["stage"] == "merge":
            assert f.name in fail["file"], f"merge failure not isolated to the rank file: {fail}"
    merged = out / "iteration_10" / "merged_gpu.json.gz"
    assert merged.exists(), f"no merged trace for the good ranks; failures: {state['summary']['failures']}"
    ranks = [x["rank"] for x in trace_header(merged)["ranks"]]
    assert 0 in ranks


# --- what the corpus noticed beside the issue ---------------------------------------------------

def test_silent_stray_cpu_event_on_a_gpu_pid_is_not_a_megatron_merge(tmp_path):
    """A CPU op on pid 1 in rank 1's own trace (pid 1 is its GPU's pid there) made analyze take
    the file for Megatron's merged trace (pid = rank + 1): "rank 0 appears in two inputs"."""
    it = synth(tmp_path / "run")
    f = rank_file(it, 1)
    gpu_pid = first_event(f, lambda e: e.get("cat") == "kernel")["pid"]
    ts = first_event(f, lambda e: e.get("ph") == "X")["ts"]
    inject(f, b'{"ph":"X","cat":"cpu_op","name":"stray","pid":%d,"tid":%d,"ts":%r,"dur":1}' % (gpu_pid, gpu_pid, ts))
    r = cli("analyze", it, "-o", tmp_path / "analysis", "-j", "1")
    assert r.returncode == 0, r
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert sorted(x["rank"] for x in summary["ranks"]) == [0, 1]


def test_silent_analyze_error_line_names_the_file_once_and_is_not_retried(tmp_path):
    """A file analyze cannot read: one line naming it once (was "error: F: F: ..."), not
    retried (a parse error comes back the same: was "(after 2 attempts)")."""
    it = synth(tmp_path / "run")
    bad = rank_file(it, 1)
    bad.write_bytes(bad.read_bytes()[:2000])
    r = cli("analyze", it, "-o", tmp_path / "analysis", "-j", "1")
    assert r.returncode == 1, r
    errors = [ln for ln in r.err_lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].count(bad.name) == 1 and "truncated" in errors[0], r
    assert "attempts" not in errors[0], r
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert [x["rank"] for x in summary["ranks"]] == [0] and summary["failed"][0]["attempts"] == 1
