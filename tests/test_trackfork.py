"""A rank's CPU tracks analysed in forked processes (streamtrace.trackfork, ``-j N`` on one big
trace) give exactly the serial results: contiguous balanced groups, the claim-conflict and
failed-child fallbacks, several ranks in one merged trace."""
from __future__ import annotations

import itertools
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamtrace.rankanalysis as RA
import streamtrace.trackfork as TF
from streamtrace import merge
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.outputs import partition_files, read_partition

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def brute_groups(sizes, parts):
    """Smallest possible largest group sum over every cut into <= parts contiguous groups."""
    n = len(sizes)
    best = None
    for k in range(1, min(parts, n) + 1):
        for cuts in itertools.combinations(range(1, n), k - 1):
            b = (0, *cuts, n)
            worst = max(sum(sizes[b[i]:b[i + 1]]) for i in range(k))
            best = worst if best is None else min(best, worst)
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=8), st.integers(1, 5))
def test_track_groups_contiguous_and_balanced(sizes, parts):
    g = TF.track_groups(sizes, parts)
    assert g[0][0] == 0 and g[-1][1] == len(sizes) and len(g) <= parts
    assert all(a < b for a, b in g) and all(g[i][1] == g[i + 1][0] for i in range(len(g) - 1))
    assert max(sum(sizes[a:b]) for a, b in g) == brute_groups(sizes, parts)


def _x(name, ts, dur, tid, pid=100, cat="cpu_op", **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            **({"args": args} if args else {})}


def _trace(tmp_path, shared_corr):
    """Three CPU threads launching kernels; with ``shared_corr`` a launch on the last thread
    reuses a correlation id of the first thread (serially, the first thread wins it)."""
    ev = [_x("ProfilerStep#3", 0, 10_000, 1)]
    corr = 1
    for tid in (1, 2, 3):
        for i in range(40):
            t = 10 + tid * 3000 + i * 60
            ev.append(_x("aten::mm", t, 50, tid))
            c = 5 if (shared_corr and tid == 3 and i == 7) else corr
            ev.append(_x("cudaLaunchKernel", t + 5, 20, tid, cat="cuda_runtime", correlation=c))
            ev.append(_x(f"gemm_{tid}", t + 30, 15, 7, pid=0, cat="kernel", correlation=corr, stream=7,
                         device=0))
            corr += 1
    p = tmp_path / ("shared.json" if shared_corr else "plain.json")
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def _equal_outputs(a, b, sa, sb):
    strip = lambda s: [{k: v for k, v in r.items() if k != "source"} for r in s["ranks"]]  # noqa: E731
    assert strip(sa) == strip(sb)
    for r in sa["ranks"]:
        for name in ("kernels", "ops"):
            fa = partition_files(a, name, r["rank"], r["iteration"])
            fb = partition_files(b, name, r["rank"], r["iteration"])
            assert len(fa) == 1 and fb
            assert read_partition(fa).equals(read_partition(fb))


def _run_both(tmp_path, src, monkeypatch, jobs=2):
    stats = []
    orig = TF.analyze_tracks

    def spy(*a, **k):
        stats.append(orig(*a, **k))
        return stats[-1]
    monkeypatch.setattr(TF, "analyze_tracks", spy)
    sa = analyze([src], tmp_path / "serial", AnalyzeOptions(jobs=1))
    sb = analyze([src], tmp_path / "forked", AnalyzeOptions(jobs=jobs, split_threshold=1))
    _equal_outputs(tmp_path / "serial", tmp_path / "forked", sa, sb)
    return sa, stats


@pytest.mark.parametrize("shared_corr", [False, True])
def test_forked_tracks_equal_serial(tmp_path, monkeypatch, shared_corr):
    src = _trace(tmp_path, shared_corr)
    sa, stats = _run_both(tmp_path, src, monkeypatch, jobs=3)
    assert stats == [{"parts": 3, "redone": 1 if shared_corr else 0}]   # the conflicting group, again
    links = sa["ranks"][0]["links"]
    assert links["linked"] == 120 - (1 if shared_corr else 0)          # kernel 120's only launch lost it
    out = partition_files(tmp_path / "forked", "ops", 0, None)[0].parent
    assert sorted(os.listdir(out)) == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]   # nothing else


def test_failed_child_is_redone_by_the_parent(tmp_path, monkeypatch):
    parent = os.getpid()
    real = RA._track

    def flaky(*a, **k):
        if os.getpid() != parent:
            raise RuntimeError("child failure")
        return real(*a, **k)
    monkeypatch.setattr(RA, "_track", flaky)
    _, stats = _run_both(tmp_path, _trace(tmp_path, False), monkeypatch, jobs=2)
    assert stats == [{"parts": 2, "redone": 2}]
    out = partition_files(tmp_path / "forked", "ops", 0, None)[0].parent
    assert sorted(os.listdir(out)) == ["part-0.parquet", "part-1.parquet"]    # no temporary files left


def test_fewer_parts_than_an_earlier_run_leave_no_stale_file(tmp_path, monkeypatch):
    src = _trace(tmp_path, False)
    analyze([src], tmp_path / "o", AnalyzeOptions(jobs=3, split_threshold=1))
    analyze([src], tmp_path / "o", AnalyzeOptions(jobs=1))
    assert len(partition_files(tmp_path / "o", "ops", 0, None)) == 1


def test_merged_synthetic_job(tmp_path, monkeypatch):
    """Several ranks (main + autograd threads each) in one merged trace, with NCCL kernels."""
    from streamtrace.synth import SynthSpec, generate_job
    generate_job(tmp_path / "job", SynthSpec(world_size=4, tp=2, pp=2, microbatches=2, layers=2))
    merged = tmp_path / "merged.json"
    merge([str(tmp_path / "job")], str(merged))
    sa, stats = _run_both(tmp_path, merged, monkeypatch)
    assert len(sa["ranks"]) == 4 and len(stats) == 4
    assert all(s["parts"] == 2 and s["redone"] == 0 for s in stats)


@pytest.mark.parametrize("child_fails", [False, True])
def test_kernels_written_in_two_halves(tmp_path, monkeypatch, child_fails):
    """With -j 2 the kernels rows go to part-0 / part-1 (written at once); a failed child's
    half is written again by the parent."""
    parent = os.getpid()
    real = RA._write_kernels

    def flaky(*a, **k):
        if child_fails and os.getpid() != parent:
            raise RuntimeError("child failure")
        return real(*a, **k)
    monkeypatch.setattr(RA, "_write_kernels", flaky)
    src = _trace(tmp_path, False)
    sa = analyze([src], tmp_path / "serial", AnalyzeOptions(jobs=1, chunk_events=16))
    sb = analyze([src], tmp_path / "forked", AnalyzeOptions(jobs=2, split_threshold=1, chunk_events=16))
    _equal_outputs(tmp_path / "serial", tmp_path / "forked", sa, sb)
    files = partition_files(tmp_path / "forked", "kernels", 0, None)
    assert [f.name for f in files] == ["part-0.parquet", "part-1.parquet"]
    assert sorted(os.listdir(files[0].parent)) == ["part-0.parquet", "part-1.parquet"]


def test_run_forked_runs_each_function_once_successfully(tmp_path):
    parent = os.getpid()
    marks = tmp_path / "m"
    marks.mkdir()

    def job(i, fail_in_child):
        def f():
            if fail_in_child and os.getpid() != parent:
                os._exit(3)                                  # killed mid-way, say
            (marks / f"{i}-{'parent' if os.getpid() == parent else 'child'}").write_text("x")
        return f
    seen = []
    TF.run_forked([job(0, False), job(1, False), job(2, True)], then=lambda: seen.append(1))
    assert sorted(os.listdir(marks)) == ["0-parent", "1-child", "2-parent"] and seen == [1]
