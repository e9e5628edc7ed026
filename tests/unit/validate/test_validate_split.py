"""``validate --jobs``: one trace read by worker processes in byte ranges gives the report of one
pass (``jobs=1``), and the independent per-event reference (tests/validate_reference.py) agrees;
files cut into 2 and 3 ranges (and 8: the default ranges per worker), on the real traces, cpu-3d,
merged outputs and hostile files (cuts inside args, errors in a later range, NaN ranks in two
ranges, a trailing comma)."""
from __future__ import annotations

import gzip
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamtrace.validate.check as V
from streamtrace.merge import MergeOptions, merge
from streamtrace.validate.check import ValidateOptions, split_plan, validate, validate_split
from support import CPU3D, REAL, need_shared, real_traces, run_cli
from validate_reference import validate_py

TINY = 5          # records per sorted run: many runs, every merge path of the external sort


def split_opt(jobs, **kw):
    return ValidateOptions(jobs=jobs, split_threshold=0, **kw)


def same_split(path, monkeypatch, cut=True, sort_rows=V.SORT_ROWS):
    """The report of ``path`` read in 2 and 3 ranges (one per worker) and in 8 (4 per worker)
    equals the one-process report; ``cut``: assert it really was cut (not read by one process)."""
    one = validate(path, opt=ValidateOptions(jobs=1, sort_rows=sort_rows))
    for per_job, jobs in ((1, 2), (1, 3), (4, 2)):
        monkeypatch.setattr(V, "RANGES_PER_JOB", per_job)
        opt = split_opt(jobs, sort_rows=sort_rows)
        if cut:
            assert validate_split(path, opt, jobs) == one, (per_job, jobs)
        assert validate(path, opt=opt) == one, (per_job, jobs)
    return one


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name)
def test_real_traces(path, monkeypatch):
    with tempfile.TemporaryDirectory() as d:
        from streamtrace.trace.source import plain_copy
        plain = plain_copy(path, d)
        big = split_plan(plain, 3) is not None and len(split_plan(plain, 3)) == 3
    rep = same_split(path, monkeypatch, cut=big)
    assert rep == validate_py(path)


def test_cpu3d_and_its_merge(tmp_path, monkeypatch):
    need_shared()
    for p in sorted((CPU3D / "iteration_4").glob("*.json"))[:3]:
        assert same_split(p, monkeypatch, sort_rows=TINY)["problems"]["bad_nesting"] == 4
    out = tmp_path / "m.json"
    merge([CPU3D], out, MergeOptions(jobs=1, validate=False))
    rep = same_split(out, monkeypatch)
    assert rep["problems"]["bad_nesting"] == 32 and rep == validate_py(out)


def test_merged_real_pair_gzip_and_no_leftovers(tmp_path, monkeypatch):
    need_shared()
    (tmp_path / "in").mkdir()
    for r, name in enumerate(("v100_ddp_rank1_of2.json.gz", "a100_resnet_ddp_rank0_of2.json.gz")):
        os.symlink(REAL / name, tmp_path / "in" / f"rank{r}_trace.json.gz")
    out = tmp_path / "pair.json.gz"
    merge([tmp_path / "in"], out, MergeOptions(jobs=1, validate=False))
    spill = tmp_path / "spill"
    spill.mkdir()
    one = validate(out, opt=ValidateOptions(jobs=1))
    assert one["ok"] and one["events"] > 250_000
    rep = validate_split(out, split_opt(2, spill_dir=str(spill), sort_rows=4096), 2)
    assert rep == one
    assert not list(spill.iterdir())            # the plain copy, the logs and the sort's files are gone


def test_cross_boundary_problems(tmp_path, monkeypatch):
    # a slice overlapping its parent, a duplicate flow and a cross-rank flow, each with its ends in
    # the first and the last third of the file; NaN ranks (unequal to everything) in every range
    evs = []
    for i in range(30):
        evs.append({"ph": "X", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5, "name": "a"})
    evs[1] = {"ph": "X", "pid": 2, "tid": 2, "ts": 0, "dur": 100}
    evs[2] = {"ph": "s", "id": 7, "cat": "c", "pid": 1, "tid": 1, "ts": 0, "args": {"rank": 0}}
    evs[3] = {"ph": "s", "id": 8, "cat": "c", "pid": 1, "tid": 1, "ts": 0, "args": {"rank": 0}}
    evs[4] = {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 0, "args": {"rank": float("nan")}}
    evs[14] = {"ph": "f", "id": 9, "pid": 1, "tid": 1, "ts": 0, "args": {"rank": float("nan")}}
    evs[15] = {"ph": "s", "id": 10, "pid": 1, "tid": 1, "ts": 0, "args": {"rank": float("nan")}}
    evs[26] = {"ph": "X", "pid": 2, "tid": 2, "ts": 50, "dur": 100}
    evs[27] = {"ph": "s", "id": 7, "cat": "c", "pid": 1, "tid": 1, "ts": 3, "args": {"rank": 0}}
    evs[28] = {"ph": "f", "id": 8, "cat": "c", "pid": 1, "tid": 1, "ts": 3, "args": {"rank": 1}}
    evs[29] = {"ph": "f", "id": 10, "pid": 1, "tid": 1, "ts": 0, "args": {"rank": float("nan")}}
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ",\n".join(json.dumps(e) for e in evs) + '], "x": 1}')
    rep = same_split(p, monkeypatch, sort_rows=TINY)
    assert rep == validate_py(p)
    assert rep["problems"] == {"missing_field": 0, "negative_dur": 0, "duplicate_flow": 1,
                               "cross_rank_flow": 3, "bad_nesting": 1}


def test_cuts_inside_args_fall_back_or_agree(tmp_path, monkeypatch):
    # every event holds '}, {"ph": ...' in its args: a guessed cut there must not change the result
    evs = [{"ph": "X", "pid": 1, "tid": i % 3, "ts": i, "dur": 2 + i % 5,
            "args": {"l": [{"a": 1}, {"ph": "X", "pid": 9}]}} for i in range(200)]
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join(json.dumps(e) for e in evs) + ']}')
    assert same_split(p, monkeypatch, cut=False) == validate_py(p)


@pytest.mark.parametrize("tail", ['{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 01}]}',     # invalid JSON
                                  '{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1},]}',    # trailing comma
                                  '{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1}',       # truncated
                                  '{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]} x',   # data after it
                                  '{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]'])     # no closing }
def test_errors_in_a_later_range_are_the_one_pass_errors(tmp_path, tail):
    good = ", ".join(json.dumps({"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 1}) for i in range(100))
    p = tmp_path / "bad.json"
    p.write_text('{"traceEvents": [' + good + ", " + tail)
    with pytest.raises(Exception) as a:
        validate(p, opt=ValidateOptions(jobs=1))
    for jobs in (2, 3):
        with pytest.raises(Exception) as b:
            validate(p, opt=split_opt(jobs))
        assert str(a.value) == str(b.value) and type(a.value) is type(b.value)


def test_bare_array_and_second_events_key_are_read_in_one_process(tmp_path, monkeypatch):
    body = ", ".join(json.dumps({"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 3}) for i in range(60))
    bare = tmp_path / "bare.json"
    bare.write_text("[" + body + "]")
    assert split_plan(str(bare), 3) is None
    assert same_split(bare, monkeypatch, cut=False) == validate_py(bare)
    two = tmp_path / "two.json"
    two.write_text('{"traceEvents": [' + body + '], "traceEvents": [' + body + "]}")
    assert validate_split(two, split_opt(3), 3) is None      # a range holding "], "traceEvents": [" ends early
    assert same_split(two, monkeypatch, cut=False)["events"] == 120


pids = st.one_of(st.integers(0, 3), st.sampled_from([1.0, "1", None, [1], 2 ** 64, 1.5]))
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "s", "f", "i", None])},
    optional={"pid": pids, "tid": pids, "ts": st.one_of(st.integers(0, 60), st.sampled_from([1.5, None, -3])),
              "dur": st.one_of(st.integers(0, 60), st.sampled_from([2.25, "7", None, -3])),
              "cat": st.sampled_from(["ac2g", "k", None]), "id": st.one_of(st.integers(0, 4), st.sampled_from(["4", 4.0])),
              "args": st.fixed_dictionaries({}, optional={"rank": st.sampled_from([0, 1, None, "0", [0], 0.0])})})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, min_size=1, max_size=40), st.booleans(), st.integers(2, 3))
def test_generated_traces(events, gz, jobs):
    text = '{"traceEvents": [' + ",\n".join(json.dumps(e) for e in events) + '], "baseTimeNanoseconds": 5}'
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json.gz" if gz else "t.json")
        with (gzip.open if gz else open)(p, "wt") as f:
            f.write(text)
        one = validate(p, opt=ValidateOptions(jobs=1, sort_rows=3))
        assert validate(p, opt=split_opt(jobs, sort_rows=3)) == one == validate_py(p)


def test_cli_jobs(tmp_path):
    need_shared()
    good = REAL / "v100_float_ns_rank0.json.gz"
    for j in ("1", "2", "0"):
        r = run_cli("validate", "-j", j, good)
        assert r.returncode == 0 and ": OK: 68,692 events" in r.stdout
    r = run_cli("validate", "-j", "-1", good)
    assert r.returncode == 2 and "--jobs" in r.stderr
