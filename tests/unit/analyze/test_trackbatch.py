"""Small CPU tracks analysed many at a time (streamtrace.analyze.trackbatch) give exactly what one
track at a time gives (``SMALL_ROWS = 0``: every track through ``analyze_track``): call trees
(nesting, clamped children, overruns), GPU links (a correlation id launched twice in a track, and
from two tracks: the earlier track wins), launch context, windows, ops and kernels rows."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamtrace.analyze.trackbatch as TB
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import partition_files, read_partition


def _x(name, ts, dur, tid, pid=100, cat="cpu_op", **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            **({"args": args} if args else {})}


@st.composite
def traces(draw):
    """Threads of random nested ops (overlapping and overrunning ones too), launches with
    correlation ids that repeat within and across threads, their kernels, annotations and steps."""
    ev = [_x("ProfilerStep#1", 0, 5000, 1, cat="user_annotation")]
    corr = draw(st.integers(1, 5))
    for t in range(draw(st.integers(1, 12))):
        tid, pid = 10 + t, draw(st.sampled_from([100, 101]))
        base = draw(st.sampled_from([0, 1000, -3000, 2 ** 40]))
        for _ in range(draw(st.integers(0, 8))):
            ts = base + draw(st.integers(0, 400))
            dur = draw(st.integers(0, 300))
            kind = draw(st.sampled_from(["op", "op", "launch", "annot", "step"]))
            if kind == "launch":
                c = draw(st.sampled_from([corr, corr, corr - 1, 3]))
                ev.append(_x("cudaLaunchKernel", ts, dur, tid, pid, cat="cuda_runtime", correlation=c))
                ev.append(_x(f"gemm_{c % 3}", ts + dur + 5, 10 + c % 7, 7, pid=0, cat="kernel", correlation=c,
                             stream=7, device=0))
                corr += 1
            elif kind == "annot":
                ev.append(_x(draw(st.sampled_from(["## forward ##", "## backward ##", "nccl:all_reduce"])), ts, dur,
                             tid, pid, cat="user_annotation"))
            elif kind == "step":
                ev.append(_x(f"ProfilerStep#{draw(st.integers(1, 3))}", ts, dur, tid, pid, cat="user_annotation"))
            else:
                ev.append(_x(draw(st.sampled_from(["aten::mm", "aten::add", "Megatron::tp_fwd"])), ts, dur, tid, pid))
    return {"traceEvents": ev}


def _outputs(tmp_path, name, trace, chunk):
    src = tmp_path / "t.json"
    src.write_text(json.dumps(trace))
    s = analyze([src], tmp_path / name, AnalyzeOptions(jobs=1, chunk_events=chunk, progress=False))
    rows = {}
    for r in s["ranks"]:
        for ds in ("kernels", "ops"):
            files = partition_files(tmp_path / name, ds, r["rank"], r["iteration"])
            rows[(ds, r["rank"], r["iteration"])] = read_partition(files) if files else None
    return [{k: v for k, v in r.items() if k != "source"} for r in s["ranks"]], rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces(), st.sampled_from([4, 32768]))
def test_batched_tracks_equal_one_at_a_time(tmp_path_factory, monkeypatch, trace, chunk):
    tmp = tmp_path_factory.mktemp("tb")
    batched = _outputs(tmp, "batched", trace, chunk)
    with monkeypatch.context() as m:
        m.setattr(TB, "SMALL_ROWS", 0)
        alone = _outputs(tmp, "alone", trace, chunk)
    assert batched[0] == alone[0]
    assert batched[1].keys() == alone[1].keys()
    for k, t in batched[1].items():
        assert (t is None and alone[1][k] is None) or t.equals(alone[1][k]), k


def test_far_apart_times_are_analysed_alone(tmp_path, monkeypatch):
    """A track 2**61 ns after the trace's start (the shift could overflow there) is analysed alone,
    and the results equal one track at a time."""
    big = 2 ** 61 // 1000                        # us
    ev = [_x("aten::mm", ts, 50, tid) for tid, ts in ((1, 0), (2, big), (3, 10), (4, 20))]
    ev += [_x("aten::add", ts + 5, 10, tid) for tid, ts in ((1, 0), (2, big), (3, 10))]
    batches = []
    real = TB.analyze_batch

    def spy(ctx, keys, parts, w):
        batches.append([k[3] for k in keys])
        return real(ctx, keys, parts, w)
    monkeypatch.setattr(TB, "analyze_batch", spy)
    batched = _outputs(tmp_path, "batched", {"traceEvents": ev}, 32768)
    assert batches == [[1], [3, 4]]
    monkeypatch.setattr(TB, "SMALL_ROWS", 0)
    alone = _outputs(tmp_path, "alone", {"traceEvents": ev}, 32768)
    assert batched[0] == alone[0]
    for k, t in batched[1].items():
        assert t.equals(alone[1][k]), k
