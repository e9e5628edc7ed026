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

import streamtrace.analyze.rank as RA
import streamtrace.analyze.trackfork as TF
import streamtrace.analyze.tracks as TR
from streamtrace.runtime.fork import run_forked
from streamtrace import merge
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import partition_files, read_partition

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


def _run_both(tmp_path, src, monkeypatch, jobs=2, **opt):
    stats = []
    orig = RA.analyze_tracks

    def spy(*a, **k):
        stats.append(orig(*a, **k))
        return stats[-1]
    monkeypatch.setattr(RA, "analyze_tracks", spy)
    sa = analyze([src], tmp_path / "serial", AnalyzeOptions(jobs=1, **opt))
    sb = analyze([src], tmp_path / "forked", AnalyzeOptions(jobs=jobs, split_threshold=1, **opt))
    _equal_outputs(tmp_path / "serial", tmp_path / "forked", sa, sb)
    return sa, stats


@pytest.mark.parametrize("shared_corr", [False, True])
def test_forked_tracks_equal_serial(tmp_path, monkeypatch, shared_corr):
    src = _trace(tmp_path, shared_corr)
    sa, stats = _run_both(tmp_path, src, monkeypatch, jobs=3)
    assert stats == [{"parts": 3, "redone": 1 if shared_corr else 0, "pieces": 3}]   # the conflicting group, again
    links = sa["ranks"][0]["links"]
    assert links["linked"] == 120 - (1 if shared_corr else 0)          # kernel 120's only launch lost it
    out = partition_files(tmp_path / "forked", "ops", 0, None)[0].parent
    assert sorted(os.listdir(out)) == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]   # nothing else


def test_failed_child_is_redone_by_the_parent(tmp_path, monkeypatch):
    parent = os.getpid()
    real = TR.analyze_track

    def flaky(*a, **k):
        if os.getpid() != parent:
            raise RuntimeError("child failure")
        return real(*a, **k)
    monkeypatch.setattr(TR, "analyze_track", flaky)
    _, stats = _run_both(tmp_path, _trace(tmp_path, False), monkeypatch, jobs=2)
    assert stats == [{"parts": 2, "redone": 2, "pieces": 4}]          # thread 2 cut in two
    out = partition_files(tmp_path / "forked", "ops", 0, None)[0].parent
    assert sorted(os.listdir(out)) == ["part-0.parquet", "part-1.parquet"]    # no temporary files left


def test_fewer_parts_than_an_earlier_run_leave_no_stale_file(tmp_path, monkeypatch):
    src = _trace(tmp_path, False)
    analyze([src], tmp_path / "o", AnalyzeOptions(jobs=3, split_threshold=1))
    analyze([src], tmp_path / "o", AnalyzeOptions(jobs=1))
    assert len(partition_files(tmp_path / "o", "ops", 0, None)) == 1


def test_merged_synthetic_job(tmp_path, monkeypatch):
    """Several ranks (main + autograd threads each) in one merged trace, with NCCL kernels."""
    from streamtrace.synth.job import SynthSpec, generate_job
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
    real = RA.write_kernels

    def flaky(*a, **k):
        if child_fails and os.getpid() != parent:
            raise RuntimeError("child failure")
        return real(*a, **k)
    monkeypatch.setattr(RA, "write_kernels", flaky)
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
    run_forked([job(0, False), job(1, False), job(2, True)], then=lambda: seen.append(1))
    assert sorted(os.listdir(marks)) == ["0-parent", "1-child", "2-parent"] and seen == [1]


# -- one dominant track cut into pieces between call trees ---------------------------------

def brute_cuts(ts, end):
    """Positions h (0 < h < n) where every event before h ends before every later one starts."""
    n = len(ts)
    return [h for h in range(1, n) if max(end[:h]) < min(ts[h:])]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), min_size=0, max_size=12),
       st.integers(-1, 40), st.integers(-1, 40))
def test_piece_cuts_match_definition(events, before, after):
    import numpy as np
    ts = np.array([e[0] for e in events], np.int64)
    end = ts + np.array([e[1] for e in events], np.int64)
    n = len(events)
    want = [h for h in range(n + 1)
            if max([before, *end[:h].tolist()]) < min([after, *ts[h:].tolist()])]
    assert TF.piece_cuts(ts, end, before, after).tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), min_size=0, max_size=40),
       st.integers(1, 7), st.data())
def test_nearest_cut_is_a_valid_cut_nearest_the_target(events, block, data):
    """Blocks of ``block`` rows: the cut found is valid, and none is nearer among the blocks
    searched up to its block's distance; with every block in reach, one is found if any exists."""
    import numpy as np
    from streamtrace.events.store import STORE_DTYPE, MemoryStore
    rows = np.zeros(len(events), STORE_DTYPE)
    rows["ts"] = [e[0] for e in events]
    rows["dur"] = [e[1] for e in events]
    store = MemoryStore(chunk_events=block)
    store.add("k", rows)
    store.flush()
    n = len(events)
    target = data.draw(st.integers(0, max(0, n - 1)))
    valid = brute_cuts(rows["ts"], rows["ts"] + rows["dur"])
    got = TF.nearest_cut(store, "k", target, reach=n)
    if not valid:
        assert got is None
        return
    assert got in valid
    dist = abs(got // block - target // block) if got % block else min(
        abs(got // block - target // block), abs(got // block - 1 - target // block))
    closer = [h for h in valid if abs(h - target) < abs(got - target)]
    # any nearer valid cut lies in a block further from target's block than got's
    for h in closer:
        blocks_h = {h // block, (h - 1) // block}
        assert min(abs(b - target // block) for b in blocks_h) > dist


@st.composite
def dominant_thread(draw):
    """One thread of consecutive call trees (gaps of 0 or more us, zero-length marks at a
    root's start or end, children launching kernels, a child overrunning its root by 0.5 us,
    a correlation id reused in a later root) plus a tiny second thread."""
    ev, corr, t = [], 1, 0.0
    roots = draw(st.integers(2, 10))
    reuse = draw(st.none() | st.integers(1, roots - 1))
    for r in range(roots):
        t += draw(st.sampled_from([0, 0, 1, 7]))
        kids = draw(st.integers(0, 3))
        dur = 10 + 20 * kids
        overrun = kids and draw(st.booleans())
        ev.append(_x("forward", t, dur - (0.5 if overrun else 0), 1))
        if draw(st.booleans()):
            ev.append(_x("mark", t, 0, 1))
        for i in range(kids):
            kt = t + 2 + 20 * i
            c = 1 if (reuse == r and i == 0 and corr > 1) else corr
            ev.append(_x("cudaLaunchKernel", kt, 18, 1, cat="cuda_runtime", correlation=c))
            ev.append(_x("gemm", kt + 19, 3, 7, pid=0, cat="kernel", correlation=corr, stream=7, device=0))
            corr += 1
        if draw(st.booleans()):
            ev.append(_x("mark", t + dur, 0, 1))
        t += dur
    ev.append(_x("optimizer.step", 3, 2, 2))
    return ev


@settings(max_examples=25, deadline=None)
@given(dominant_thread(), st.sampled_from([3, 8, 65536]))
def test_dominant_track_cut_equals_serial(tmp_path_factory, events, chunk):
    import pytest as _pt
    tmp = tmp_path_factory.mktemp("dom")
    src = tmp / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    with _pt.MonkeyPatch.context() as mp:
        sa, stats = _run_both(tmp, src, mp, jobs=2, chunk_events=chunk)
    assert stats and stats[0]["pieces"] >= 2


@pytest.mark.parametrize("chunked", [False, True])
def test_dominant_track_is_cut_between_call_trees(tmp_path, monkeypatch, chunked):
    """Six call trees on one thread: the thread is cut in two pieces, each analysed by its
    own child; duplicates of a correlation id across the pieces are still counted.  Also
    with ``--chunked`` (the block spans then come from the spill stores' references)."""
    ev, corr = [], 1
    for r in range(6):
        t0 = 5 + r * 1000
        ev.append(_x("forward", t0, 900, 1))
        for i in range(10):
            t = t0 + 10 + i * 80
            c = 3 if (r == 5 and i == 0) else corr
            ev.append(_x("cudaLaunchKernel", t, 20, 1, cat="cuda_runtime", correlation=c))
            ev.append(_x("gemm", t + 30, 15, 7, pid=0, cat="kernel", correlation=corr, stream=7, device=0))
            corr += 1
    ev.append(_x("optimizer.step", 5, 3, 2))
    src = tmp_path / "one.json"
    src.write_text(json.dumps({"traceEvents": ev}))
    sa, stats = _run_both(tmp_path, src, monkeypatch, jobs=2, chunked=chunked, chunk_events=16)
    assert stats == [{"parts": 2, "redone": 1, "pieces": 3}]     # piece 2's claim of id 3 conflicts
    assert sa["ranks"][0]["links"]["duplicate_launch_ids"] == 1


def test_a_track_without_cut_points_stays_whole(tmp_path, monkeypatch):
    ev = [_x("train", 0, 7000, 1)] + [_x("forward", 5 + r * 1000, 900, 1) for r in range(6)]
    ev.append(_x("optimizer.step", 5, 3, 2))
    src = tmp_path / "whole.json"
    src.write_text(json.dumps({"traceEvents": ev}))
    _, stats = _run_both(tmp_path, src, monkeypatch, jobs=2)
    assert stats[0]["pieces"] == 2                                # the two threads as they are
