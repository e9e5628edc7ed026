"""Cross-stream waits as newer Kineto links them: a ``cuda_sync`` ``Stream Wait Event`` on the
waiting stream names the ``cudaEventRecord`` (``wait_on_cuda_event_record_corr_id``) and the stream
it recorded on (``wait_on_stream``).  The trace is built here, as Kineto writes one rank (times in
us, ``ph: X``; GPU events on ``pid`` = device, ``tid`` = stream; runtime calls and kernels share
``correlation``); the expected paths are computed by hand below, never by streamtrace."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate

T0 = 1_000_000          # us: the step starts here; every time below is T0 + offset (us)
CPU_PID, TID, DEV = 4242, 1, 0


def _events(with_link: bool) -> list:
    """One step, two streams.  CPU (thread 1):

    ======  =========================  ==========================================
    us      call (correlation)         GPU event it leads to
    ======  =========================  ==========================================
    0-100   ProfilerStep#1
    2-4     cudaLaunchKernel (1)       gemm_A on stream 7, 10-50
    5-6     cudaEventRecord (2)        (records an event after gemm_A on stream 7)
    6-8     cudaLaunchKernel (3)       gemm_C on stream 7, 50-80 (launched after the record)
    9-10    cudaStreamWaitEvent (4)    stream 8 waits for the event recorded by (2)
    11-13   cudaLaunchKernel (5)       gemm_B on stream 8, 82-112
    ======  =========================  ==========================================

    ``with_link``: also the ``cuda_sync`` event Kineto writes for (4) on stream 8 at 12 us."""
    cpu = lambda name, ts, dur, cat="cuda_runtime", **a: {  # noqa: E731
        "ph": "X", "cat": cat, "name": name, "pid": CPU_PID, "tid": TID, "ts": T0 + ts, "dur": dur, "args": a}
    gpu = lambda name, stream, ts, dur, corr: {  # noqa: E731
        "ph": "X", "cat": "kernel", "name": name, "pid": DEV, "tid": stream, "ts": T0 + ts, "dur": dur,
        "args": {"device": DEV, "stream": stream, "correlation": corr, "External id": corr}}
    ev = [cpu("ProfilerStep#1", 0, 100, "user_annotation"),
          cpu("cudaLaunchKernel", 2, 2, correlation=1), cpu("cudaEventRecord", 5, 1, correlation=2),
          cpu("cudaLaunchKernel", 6, 2, correlation=3), cpu("cudaStreamWaitEvent", 9, 1, correlation=4),
          cpu("cudaLaunchKernel", 11, 2, correlation=5),
          gpu("gemm_A", 7, 10, 40, 1), gpu("gemm_C", 7, 50, 30, 3), gpu("gemm_B", 8, 82, 30, 5)]
    if with_link:
        ev.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": DEV, "tid": 8, "ts": T0 + 12,
                   "dur": 1, "args": {"cuda_sync_kind": "Stream Wait Event", "stream": 8, "correlation": 4,
                                      "device": DEV, "context": 1, "wait_on_stream": 7,
                                      "wait_on_cuda_event_record_corr_id": 2, "wait_on_cuda_event_id": 3}})
    return ev


def _run(tmp, with_link):
    src = tmp / f"rank0_{int(with_link)}.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _events(with_link)}))
    analyze([src], tmp / "an", AnalyzeOptions(jobs=1, progress=False))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1, progress=False))
    segs = pq.read_table(tmp / "agg" / "critical_path.parquet").to_pylist()
    return tmp / "an", segs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {w: _run(tmp_path_factory.mktemp(f"link{int(w)}"), w) for w in (True, False)}


def _on_path(segs, cat):
    return [(s["name"], s["weight_ns"]) for s in segs if s["category"] == cat and s["weight_ns"] > 0]


def test_the_explicit_link_moves_the_wait_onto_the_recorded_kernel(runs):
    # with the link: gemm_B (stream 8) waits for the kernel launched on stream 7 before
    # cudaEventRecord (2): gemm_A (correlation 1 < 2; gemm_C's 3 came after the record).  The path:
    # step start 0 -> launch (1) at 2 us (host_gap 2) -> gemm_A 10-50 (launch_delay 8, kernel 40)
    # -> gemm_B starts 82 (kernel_gap 32: the wait edge gemm_A end -> gemm_B start) -> 112 (kernel
    # 30) = the step end (the last GPU end).  gemm_C is not on it.
    _, segs = runs[True]
    assert _on_path(segs, "compute_kernel") == [("gemm_A", 40_000), ("gemm_B", 30_000)]
    assert _on_path(segs, "kernel_gap") == [("gemm_B", 32_000)]
    assert _on_path(segs, "launch_delay") == [("gemm_A", 8_000)]
    assert sum(s["weight_ns"] for s in segs) == 112_000


def test_without_the_link_the_wait_is_inferred(runs):
    # the same trace without the cuda_sync event: the wait call (4) lies between stream 8's step
    # start and gemm_B's launch, so gemm_B waits for the latest end on another stream before its
    # start: gemm_C (80 us), itself after gemm_A on stream 7.  Path: 2 (host_gap) + 8 (launch) +
    # 40 (gemm_A) + 0 (stream order A -> C) + 30 (gemm_C) + 2 (kernel_gap C -> B) + 30 (gemm_B) = 112.
    _, segs = runs[False]
    assert _on_path(segs, "compute_kernel") == [("gemm_A", 40_000), ("gemm_C", 30_000), ("gemm_B", 30_000)]
    assert _on_path(segs, "kernel_gap") == [("gemm_B", 2_000)]
    assert sum(s["weight_ns"] for s in segs) == 112_000


def test_cuda_sync_rows_are_kept_apart_and_change_no_other_table(runs):
    # kernels stay kernels; the ops table keeps the one row it always held for the cuda_sync event
    # (a GPU event on the device's pid, read as a CPU op before this), nothing else changes
    linked, plain = runs[True][0], runs[False][0]
    read = lambda d, name: pq.read_table(next((d / name).rglob("*.parquet"))).to_pylist()  # noqa: E731
    assert read(linked, "kernels") == read(plain, "kernels")
    ops = read(linked, "ops")
    drop = lambda rows: [{c: v for c, v in r.items() if c != "parent"} for r in rows]  # noqa: E731 (row numbers)
    assert drop(r for r in ops if r["name"] != "Stream Wait Event") == drop(read(plain, "ops"))
    assert [r["cat"] for r in ops if r["name"] == "Stream Wait Event"] == ["cuda_sync"]
    assert not (plain / "cuda_sync").exists()
    assert read(linked, "cuda_sync") == [{"device": 0, "stream": 8, "ts_ns": (T0 + 12) * 1000, "dur_ns": 1000,
                                          "name": "Stream Wait Event", "correlation": 4, "wait_on_stream": 7,
                                          "record_correlation": 2}]


def test_the_analysis_folder_owns_cuda_sync(tmp_path):
    # analyze replaces its output folder as a whole: a second run into it must accept cuda_sync/,
    # and streamtrace.load reads it like the other datasets (one row: the event written above)
    import streamtrace
    src = tmp_path / "rank0.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _events(True)}))
    for _ in range(2):
        analyze([src], tmp_path / "an", AnalyzeOptions(jobs=1, progress=False))
    t = streamtrace.load(tmp_path / "an").cuda_sync
    assert t.column("record_correlation").to_pylist() == [2] and t.column("rank").to_pylist() == [0]
