"""merge's validation while rewriting (streamtrace/merge/check.py) against independent checks: the
output's report equals the reference validate of the merged file, the inputs' report the sum of
the reference validate of each rank file, and "added" is what the output has beyond its inputs."""
from __future__ import annotations

import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.merge import MergeOptions, merge
from streamtrace.synth.job import SynthSpec, generate_job
from support import CPU3D, REAL, need_shared, run_cli
from validate_reference import validate_py

KEYS = ("events", "tracks", "flows", "problems", "notices")


def sum_reports(paths):
    tot = {"events": 0, "tracks": 0, "flows": 0, "problems": {}, "notices": {}}
    for p in paths:
        r = validate_py(p)
        for k in ("events", "tracks", "flows"):
            tot[k] += r[k]
        for k in ("problems", "notices"):
            for name, v in r[k].items():
                tot[k][name] = tot[k].get(name, 0) + v
    return tot


def check(out, sources, val, exact=True):
    """The merge's validation ``val`` against the reference validate of its output and inputs."""
    ref_out = validate_py(out)
    assert {k: val["output"][k] for k in KEYS} == {k: ref_out[k] for k in KEYS}
    ref_in = sum_reports(sources)
    assert {k: val["input"][k] for k in KEYS} == ref_in
    assert val["exact"] is exact
    return ref_in, ref_out


def test_cpu3d_problems_are_the_inputs(tmp_path):
    need_shared()
    out = tmp_path / "m.json"
    val = merge([CPU3D], out, MergeOptions(jobs=1))[0]["validation"]
    check(out, sorted((CPU3D / "iteration_4").glob("*.json")), val)
    assert val["input"]["problems"]["bad_nesting"] == 32 and val["ok"] and not any(val["added"].values())


@pytest.mark.parametrize("opts", [{"gpu_only": True}, {"drop_cat": frozenset({"cpu_op"})}, {"steps": (10, 10)},
                                  {"window_ms": (0.0, 3.0)}], ids=str)
def test_filters(tmp_path, opts):
    generate_job(tmp_path / "demo", SynthSpec(world_size=4, tp=2, pp=2))
    out = tmp_path / "m.json.gz"
    val = merge([tmp_path / "demo"], out, MergeOptions(jobs=1, **opts))[0]["validation"]
    check(out, sorted((tmp_path / "demo").rglob("*.pt.trace.json")), val)


@pytest.mark.parametrize("jobs", [1, 2])
def test_real_ranks_split_in_byte_ranges(tmp_path, jobs):
    need_shared()
    d = tmp_path / "in"
    d.mkdir()
    names = ["v100_ddp_rank1_of2.json.gz", "a100_rank3_of8.json.gz", "h100_qwen_inference.json.gz"]
    for r, n in enumerate(names):
        os.symlink(REAL / n, d / f"rank{r}_trace.json.gz")
    out = tmp_path / "m.json"
    res = merge([d], out, MergeOptions(jobs=jobs, split_threshold=4 << 20))[0]     # (54 + 35 + 18 MB: cutting pays)
    assert bool(res["split"]) == (jobs > 1)
    _, ref_out = check(out, sorted(d.iterdir()), res["validation"])
    assert ref_out["problems"]["bad_nesting"] == 1 and res["validation"]["ok"]      # h100's own
    assert not list(tmp_path.glob("*.val")) and not list(tmp_path.glob(".*.val"))


def write_rank(path, rank, events):
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))


def test_merge_added_problems_fail_the_cli(tmp_path):
    # flow ends without an id stay (cat, None) in every rank: merged, they collide across ranks
    d = tmp_path / "in"
    d.mkdir()
    for r in range(2):
        write_rank(d / f"rank{r}_trace.json", r, [
            {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "s", "cat": "c", "pid": 1, "tid": 1, "ts": 1},
            {"ph": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 2}])
    out = tmp_path / "m.json"
    val = merge([d], out, MergeOptions(jobs=1))[0]["validation"]
    check(out, sorted(d.iterdir()), val, exact=False)
    assert val["added"] == {"missing_field": 0, "negative_dur": 0, "duplicate_flow": 1, "cross_rank_flow": 1,
                            "bad_nesting": 0} and not val["ok"]
    r = run_cli("merge", d, "-o", tmp_path / "m2.json", "-j", "1")
    assert r.returncode == 1 and "PROBLEMS added by merge: duplicate_flow 1, cross_rank_flow 1" in r.stdout
    r = run_cli("merge", d, "-o", tmp_path / "m3.json", "-j", "1", "--no-validate")
    assert r.returncode == 0 and "validate" not in r.stdout


def test_no_validate(tmp_path):
    need_shared()
    res = merge([CPU3D], tmp_path / "m.json", MergeOptions(jobs=1, validate=False))[0]
    assert res["validation"] is None


# -- generated ranks: odd events on both sides of the rewrite -----------------------------

ev = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "s", "f", "i", "M"]), "ts": st.one_of(st.integers(0, 40), st.just("x")),
     "pid": st.one_of(st.integers(0, 2), st.sampled_from([4000, "Spans", None]))},
    optional={"tid": st.integers(0, 2), "dur": st.integers(-2, 15), "cat": st.sampled_from(["ac2g", "k"]),
              "id": st.one_of(st.integers(0, 3), st.sampled_from(["z", 2 ** 41])),
              "args": st.fixed_dictionaries({}, optional={"rank": st.integers(0, 3), "correlation": st.integers(0, 3)})})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# (ranks of no events: an empty rank file is skipped with a warning, issue 33; alone it is an error)
@given(st.lists(st.lists(ev, min_size=1, max_size=25), min_size=1, max_size=3), st.sampled_from([{}, {"drop_cat": frozenset({"k"})}]))
def test_generated_ranks(ranks, opts):
    with tempfile.TemporaryDirectory() as t:
        d = os.path.join(t, "in")
        os.mkdir(d)
        from pathlib import Path
        for r, evs in enumerate(ranks):
            write_rank(Path(d) / f"rank{r}_trace.json", r, [dict(e, name="e") for e in evs])
        out = os.path.join(t, "m.json")
        val = merge([d], out, MergeOptions(jobs=1, **opts))[0]["validation"]
        ref_in, ref_out = check(out, sorted(Path(d).iterdir()), val, exact=val["exact"])
        for k, v in val["added"].items():
            assert v >= max(0, ref_out["problems"][k] - ref_in["problems"][k])


def test_input_ranks_compared_apart_from_the_output(tmp_path):
    # a rank file whose flows already join two args.rank values: the input's cross_rank_flow; the
    # output gets args.rank = the file's rank on every event, so it has none
    d = tmp_path / "in"
    d.mkdir()
    write_rank(d / "rank0_trace.json", 0, [
        {"ph": "s", "id": 1, "cat": "c", "pid": 1, "tid": 1, "ts": 1, "args": {"rank": 5}},
        {"ph": "f", "id": 1, "cat": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"rank": 6}}])
    out = tmp_path / "m.json"
    val = merge([d], out, MergeOptions(jobs=1))[0]["validation"]
    check(out, sorted(d.iterdir()), val, exact=True)
    assert val["input"]["problems"]["cross_rank_flow"] == 1 and val["output"]["problems"]["cross_rank_flow"] == 0
