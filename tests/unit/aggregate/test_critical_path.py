"""The critical path across ranks (``critical_path.parquet``, ``critical_path_summary.parquet``)
against faults injected into the synthetic job with a known effect.  Expected values come from the
generated trace files read with ``json`` (the injected op, the GEMM kernels, every rank's step
window and last GPU end), never from streamtrace."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.synth.faults import LOADER, Fault

from support import exact_ns, load_json

STALL_NS = 5_000_000


def _run(tmp, spec):
    truth = generate_job(tmp / "traces", spec)
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "out", AggregateOptions(jobs=1))
    segs = pq.read_table(tmp / "out" / "critical_path.parquet").to_pylist()
    summ = pq.read_table(tmp / "out" / "critical_path_summary.parquet").to_pylist()
    summ += [dict(r, what="ranks") for r in pq.read_table(tmp / "out" / "critical_path_ranks.parquet").to_pylist()]
    events = {r.rank: load_json(r.path)["traceEvents"] for r in truth.ranks}
    return truth, segs, summ, events


def _span(events) -> int:
    """The step's span from the raw files: the last rank's end (its ProfilerStep end or last GPU end,
    whichever is later) - the first rank's ProfilerStep start (one clock: no skew in these specs)."""
    starts, ends = [], []
    for ev in events.values():
        step = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")][0]
        gpu = [exact_ns(e["ts"]) + exact_ns(e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                       "gpu_memset")]
        starts.append(exact_ns(step["ts"]))
        ends.append(max([exact_ns(step["ts"]) + exact_ns(step["dur"])] + gpu))
    return max(ends) - min(starts)


def _ranks(summ, column) -> dict:
    """``{rank: critical_path_ranks.parquet's column}``."""
    return {r["rank"]: r[column] for r in summ if r["what"] == "ranks"}


def _contiguous(segs):
    for a, b in zip(segs, segs[1:]):
        assert b["start_ns"] == a["end_ns"], (a, b)


@pytest.fixture(scope="module")
def stall(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("stall"), SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=2,
                                                             faults=(Fault("cpu_stall", 1, delay_ns=STALL_NS),)))


def test_cpu_stall_is_on_the_path_and_everyone_else_waits_for_it(stall):
    truth, segs, summ, events = stall
    loader = [e for e in events[1] if e.get("name") == LOADER]
    assert len(loader) == 1
    want = exact_ns(loader[0]["dur"])                       # the injected stall as the file holds it
    assert STALL_NS <= want <= STALL_NS + 2_000
    hit = [s for s in segs if s["name"] == LOADER]
    assert [(s["rank"], s["category"]) for s in hit] == [(1, "cpu_op")]
    assert sum(s["weight_ns"] for s in hit) == want
    _contiguous(segs)
    path = sum(s["weight_ns"] for s in segs)
    assert abs(path - _span(events)) <= 0.01 * _span(events)
    wait, lead = _ranks(summ, "wait_ns"), _ranks(summ, "lead_ns")
    # the three other ranks waited for rank 1 at their first collective: the stall, to within the
    # generator's jitter (launch and op gaps of a few us, collective end skew <= 2 us), plus the
    # few us of skew at each later collective of the step; rank 1 alone held that collective for
    # the stall (its lead over the next-latest arrival)
    for r in (0, 2, 3):
        assert 0.98 * want <= wait[r] <= 1.03 * want, (r, wait[r])
    # rank 1 is in two groups (TP {0, 1}, DP {1, 3}): the first collective of each after the stall
    # it held alone for the stall, the others by a few us of jitter: its lead is two stalls
    assert wait[1] < 0.05 * want and abs(lead[1] - 2 * want) <= 0.03 * want, (wait[1], lead[1])
    # rank 0 waited for rank 1 in their TP all-reduce, so it arrives a stall late at its own DP
    # collective with rank 2: the delay spreads, and rank 0 holds that one; ranks 2, 3 hold none
    assert abs(lead[0] - want) <= 0.03 * want and all(lead[r] < 0.05 * want for r in (2, 3)), lead
    slack, on = _ranks(summ, "slack_ns"), _ranks(summ, "on_path")
    assert on[1] and slack[1] == 0 and all(slack[r] == 0 for r in on if on[r])
    top = [r for r in summ if r["what"] == "cpu_op"][0]
    assert top["key"] == LOADER and top["ns"] == want


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("gemm"), SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=2,
                                                           faults=(Fault("slow_gemm", 1, factor=3.0),)))


def test_slow_gemm_rank_holds_the_path(gemm):
    truth, segs, summ, events = gemm
    gemms = [e for e in events[1] if e.get("cat") == "kernel" and "gemm" in e["name"]]
    extra = sum(exact_ns(e["dur"]) for e in gemms) * 2 // 3          # 3x: two thirds are injected
    _contiguous(segs)
    path = sum(s["weight_ns"] for s in segs)
    assert abs(path - _span(events)) <= 0.01 * _span(events)
    on_1 = sum(s["weight_ns"] for s in segs if s["rank"] == 1 and s["category"] == "compute_kernel"
               and "gemm" in s["name"])
    assert on_1 >= 0.8 * sum(exact_ns(e["dur"]) for e in gemms)      # rank 1's GEMMs are on the path
    # the other data-parallel replica (ranks 2, 3) waits for rank 1's replica at the gradient
    # reduce-scatter: its wait is the injected GEMM time, to within the jitter and the part of the
    # GEMMs that overlaps rank 1's own communication (measured: 97.8 %)
    wait = _ranks(summ, "wait_ns")
    for r in (2, 3):
        assert 0.95 * extra <= wait[r] <= 1.03 * extra, (r, wait[r], extra)
    by_rank = {r["rank"]: r["pct"] for r in summ if r["what"] == "rank"}
    assert max(by_rank, key=by_rank.get) == 1


def test_slow_send_stage_is_on_the_path(tmp_path):
    delay = 3_000_000
    truth, segs, summ, events = _run(tmp_path, SynthSpec(world_size=4, tp=2, pp=2, layers=1, microbatches=2,
                                                         faults=(Fault("slow_send", 0, delay_ns=delay),)))
    _contiguous(segs)
    path = sum(s["weight_ns"] for s in segs)
    assert abs(path - _span(events)) <= 0.01 * _span(events)
    # stage 0 (ranks 0, 1) sends to stage 1 (ranks 2, 3): a receive the path waits on takes the delay
    slow = [s for s in segs if s["category"] == "comm_transfer" and "SendRecv" in s["name"] and s["rank"] in (2, 3)
            and s["weight_ns"] >= delay]
    assert slow
    sends = [e for e in events[0] if e.get("cat") == "kernel" and "SendRecv" in e["name"]
             and e["args"]["Collective name"] == "send"]
    assert max(exact_ns(e["dur"]) for e in sends) >= delay          # the fault is in the file


def test_no_fault_path_sums_to_span_and_load_sees_it(tmp_path):
    import streamtrace
    truth, segs, summ, events = _run(tmp_path, SynthSpec(world_size=4, tp=2, pp=2, layers=1, microbatches=2))
    _contiguous(segs)
    assert abs(sum(s["weight_ns"] for s in segs) - _span(events)) <= 0.01 * _span(events)
    out = streamtrace.load(tmp_path / "out")
    assert {"critical_path", "critical_path_summary"} <= set(out.tables())
    assert out.critical_path.num_rows == len(segs)
    cats = {r["key"] for r in summ if r["what"] == "category"}
    assert cats <= {"cpu_op", "launch_delay", "compute_kernel", "comm_transfer", "memcpy", "kernel_gap", "sync",
                    "host_gap", "wait"}


def _one_step(wait_at):
    """A step (0-100 ns) on thread 1: kernel A on stream 7 (20-60) launched at 10, kernel B on
    stream 8 (61-70) launched at 14; a cudaStreamWaitEvent call at ``wait_at`` (None: none)."""
    import numpy as np
    from streamtrace.aggregate.critical_graph import edge_texts
    from streamtrace.aggregate.critical_local import step_graph
    rows = [("ProfilerStep#1", 0, 100, 0, -1, 0), ("cudaLaunchKernel", 10, 2, 1, 0, 1),
            ("cudaLaunchKernel", 14, 2, 1, 0, 2)]
    if wait_at is not None:
        rows.append(("cudaStreamWaitEvent", wait_at, 1, 1, 0, 0))
    rows.sort(key=lambda r: r[1])
    ops = {"tid": np.ones(len(rows), np.int64), "name": np.asarray([r[0] for r in rows], object),
           "ts_ns": np.asarray([r[1] for r in rows], np.int64), "dur_ns": np.asarray([r[2] for r in rows], np.int64),
           "depth": np.asarray([r[3] for r in rows], np.int64), "parent": np.asarray([r[4] for r in rows], np.int64),
           "correlation": np.asarray([r[5] for r in rows], np.int64), "cat": np.full(len(rows), "", object)}
    ops["external_id"] = np.arange(len(rows), dtype=np.int64)
    ops["is_step"] = ops["name"] == "ProfilerStep#1"
    ops["is_sync"] = np.zeros(len(rows), bool)
    ops["is_wait"] = ops["name"] == "cudaStreamWaitEvent"
    ops["any_wait"] = bool(ops["is_wait"].any())
    k = {"device": np.zeros(2, np.int64), "stream": np.asarray([7, 8]), "ts_ns": np.asarray([20, 61]),
         "end_ns": np.asarray([60, 70]), "name": np.asarray(["A", "B"], object),
         "kind": np.asarray(["kernel", "kernel"], object), "correlation": np.asarray([1, 2]), "step": np.ones(2, np.int64)}
    t, cols, _, _ = step_graph(ops, k, 1, 1, 0, 100)
    src, dst, w, cat, _, _, ref = cols[:7]
    lane, name = edge_texts(cols)
    into_b = (name == "B") & (t[dst] == 61) & (w > 0)
    return {(int(t[s]), int(w_)) for s, w_ in zip(src[into_b], w[into_b])}


def test_cross_stream_wait_only_after_a_wait_call():
    # B starts 1 ns after A ends on the other stream, 47 ns after its launch: it waited for A only
    # when a cudaStreamWaitEvent was called between its stream's previous launch and its own
    assert _one_step(13) == {(60, 1)}                 # wait call before B's launch: A -> B
    assert _one_step(17) == {(14, 47)}                # wait call after it: B waited for its launch
    assert _one_step(None) == {(60, 1)}               # no wait call recorded at all: inferred


def _queued_step(prior_step, prior_corr, prior_end):
    """A step (0-100 ns) on thread 1: kernel A on stream 7 launched at 10 (correlation 5), running
    80-95; before it on stream 7 kernel P (-50 .. ``prior_end``, correlation ``prior_corr``) of step
    ``prior_step``, its launch not in the step.  Returns the edges into A's start as
    ``{(source time, weight, category)}`` and the categories of the edges named P."""
    import numpy as np
    from streamtrace.aggregate.critical_graph import CATEGORIES
    from streamtrace.aggregate.critical_graph import edge_texts
    from streamtrace.aggregate.critical_local import step_graph
    rows = [("ProfilerStep#1", 0, 100, 0, -1, 0), ("cudaLaunchKernel", 10, 2, 1, 0, 5)]
    ops = {"tid": np.ones(2, np.int64), "name": np.asarray([r[0] for r in rows], object),
           "ts_ns": np.asarray([r[1] for r in rows], np.int64), "dur_ns": np.asarray([r[2] for r in rows], np.int64),
           "depth": np.asarray([r[3] for r in rows], np.int64), "parent": np.asarray([r[4] for r in rows], np.int64),
           "correlation": np.asarray([r[5] for r in rows], np.int64), "cat": np.full(2, "", object),
           "external_id": np.arange(2, dtype=np.int64)}
    ops["is_step"] = ops["name"] == "ProfilerStep#1"
    ops["is_sync"] = ops["is_wait"] = np.zeros(2, bool)
    ops["any_wait"] = False
    k = {"device": np.zeros(2, np.int64), "stream": np.asarray([7, 7]), "ts_ns": np.asarray([-50, 80]),
         "end_ns": np.asarray([prior_end, 95]), "name": np.asarray(["P", "A"], object),
         "kind": np.asarray(["kernel", "kernel"], object), "correlation": np.asarray([prior_corr, 5]),
         "step": np.asarray([prior_step, 1])}
    t, cols, _, _ = step_graph(ops, k, 1, 1, 0, 100)
    src, dst, w, cat, _, _, ref = cols[:7]
    lane, name = edge_texts(cols)
    into_a = (name == "A") & (t[dst] == 80)
    return ({(int(t[s]), int(w_), CATEGORIES[c]) for s, w_, c in zip(src[into_a], w[into_a], cat[into_a])},
            {CATEGORIES[c] for c in cat[name == "P"]})


def test_a_step_queued_behind_the_previous_steps_gpu_work():
    # the GPU runs the previous step's P until 80: A, launched at 10, waits for it, not for its launch
    into, p = _queued_step(prior_step=0, prior_corr=3, prior_end=80)
    assert (0, 80, "queued") in into and (10, 0, "wait") in into
    assert p == set()                                   # P is not the step's work
    # P done at 5, before A's launch: A waited for its launch (70 ns of launch delay), nothing queued
    into, _ = _queued_step(prior_step=0, prior_corr=3, prior_end=5)
    assert (10, 70, "launch_delay") in into and not any(c == "queued" for _, _, c in into)


def test_work_launched_before_the_profiler_window_is_earlier_work():
    # P executes in the window (the analysis gave it the step) but its launch came before the
    # profiler started (no launch in the step, a smaller correlation id): A queues behind it
    into, p = _queued_step(prior_step=1, prior_corr=3, prior_end=80)
    assert (0, 80, "queued") in into
    assert p == set()
    # the same event with a correlation id above the step's launches stays the step's own work
    into, p = _queued_step(prior_step=1, prior_corr=9, prior_end=80)
    assert "compute_kernel" in p and not any(c == "queued" for _, _, c in into)


def _event_sync_step(syncs):
    """A step (0-100 ns): kernel A on stream 7 (20-60, launched at 10, correlation 1), kernel B on
    stream 8 (30-61, launched at 12, correlation 2), ``cudaEventRecord`` on stream 7 at 14
    (correlation 3), ``cudaEventSynchronize`` 40-62 (correlation 4).  Returns the sync edges into
    the call's end as ``{(source time, weight)}``."""
    import numpy as np
    from streamtrace.aggregate.critical_graph import CATEGORIES
    from streamtrace.aggregate.critical_graph import edge_texts
    from streamtrace.aggregate.critical_local import step_graph
    rows = [("ProfilerStep#1", 0, 100, 0, -1, 0), ("cudaLaunchKernel", 10, 1, 1, 0, 1),
            ("cudaLaunchKernel", 12, 1, 1, 0, 2), ("cudaEventRecord", 14, 1, 1, 0, 3),
            ("cudaEventSynchronize", 40, 22, 1, 0, 4)]
    n = len(rows)
    ops = {"tid": np.ones(n, np.int64), "name": np.asarray([r[0] for r in rows], object),
           "ts_ns": np.asarray([r[1] for r in rows], np.int64), "dur_ns": np.asarray([r[2] for r in rows], np.int64),
           "depth": np.asarray([r[3] for r in rows], np.int64), "parent": np.asarray([r[4] for r in rows], np.int64),
           "correlation": np.asarray([r[5] for r in rows], np.int64), "cat": np.full(n, "", object),
           "external_id": np.arange(n, dtype=np.int64)}
    ops["is_step"] = ops["name"] == "ProfilerStep#1"
    ops["is_sync"] = ops["name"] == "cudaEventSynchronize"
    ops["is_wait"] = np.zeros(n, bool)
    ops["any_wait"] = False
    k = {"device": np.zeros(2, np.int64), "stream": np.asarray([7, 8]), "ts_ns": np.asarray([20, 30]),
         "end_ns": np.asarray([60, 61]), "name": np.asarray(["A", "B"], object),
         "kind": np.asarray(["kernel", "kernel"], object), "correlation": np.asarray([1, 2]), "step": np.ones(2, np.int64)}
    t, cols, _, _ = step_graph(ops, k, 1, 1, 0, 100, syncs=syncs)
    src, dst, w, cat, _, _, ref = cols[:7]
    lane, name = edge_texts(cols)
    m = cat == CATEGORIES.index("sync")
    return {(int(t[s]), int(w_)) for s, w_ in zip(src[m], w[m])}


def test_an_event_sync_waits_for_the_recorded_stream_not_the_latest_kernel():
    # without Kineto's link: the latest GPU end inside the call (B, stream 8, at 61)
    assert _event_sync_step(None) == {(61, 1)}
    # with it (Event Sync of the record with correlation 3 on stream 7): A, launched before the record
    assert _event_sync_step({4: ("Event Sync", 7, 3, -1)}) == {(60, 2)}
    # a Stream Sync of stream 8 waits for B; a Context Sync for the latest end of all launched before
    assert _event_sync_step({4: ("Stream Sync", -1, -1, 8)}) == {(61, 1)}
    assert _event_sync_step({4: ("Context Sync", -1, -1, -1)}) == {(61, 1)}
    # a record made before any event of its stream was launched: nothing to wait for, no GPU edge
    assert _event_sync_step({4: ("Event Sync", 7, 1, -1)}) == set()
