"""The critical path on real multi-rank jobs (``../shared/traces/real-multi``, ``../shared/traces/cpu-3d``):
the path is contiguous, it sums to the step span it covers (computed here from the raw traces with
``json``: the ``ProfilerStep#N`` start of the rank it begins on to the step end of the rank it ends
on, a step's end the later of its ``ProfilerStep`` end and the last GPU end of the kernels launched
inside it; the ranks of one job share a clock, their raw ``ts`` are compared as they are), it crosses
ranks where a matched collective made a rank wait, and its story, read by hand from the traces, is in
each test's comment."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate

from support import CPU3D, SHARED, exact_ns, load_json

MULTI = SHARED / "traces" / "real-multi"


def _run(src, tmp, **opt):
    if not src.exists():
        pytest.skip(f"{src} is absent")
    analyze([src], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "out", AggregateOptions(jobs=1, **opt))
    return (pq.read_table(tmp / "out" / "critical_path.parquet").to_pylist(),
            pq.read_table(tmp / "out" / "critical_path_summary.parquet").to_pylist())


def _step_span(path) -> int:
    """ProfilerStep start -> max(its end, last end of the GPU events whose runtime call lies in it)."""
    lo, hi = _step_bounds(path)
    return hi - lo


def _step_bounds(path) -> tuple:
    """(ProfilerStep start, max(its end, last end of the GPU events launched inside it)), raw int ns."""
    ev = load_json(path, decimal=True)["traceEvents"]
    step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
            and e.get("cat") != "gpu_user_annotation"][0]
    lo, hi = exact_ns(step["ts"]), exact_ns(step["ts"]) + exact_ns(step["dur"])
    corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"
            and "correlation" in e.get("args", {}) and lo <= exact_ns(e["ts"]) < hi}
    ends = [exact_ns(e["ts"]) + exact_ns(e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e.get("args", {}).get("correlation") in corr]
    return lo, max([hi] + ends)


def _events(path, name) -> list:
    """``(start, end)`` raw int ns of the complete events called ``name`` (prefix), by start."""
    ev = load_json(path, decimal=True)["traceEvents"]
    return sorted((exact_ns(e["ts"]), exact_ns(e["ts"]) + exact_ns(e["dur"])) for e in ev
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith(name))


def _check_shape(segs):
    for a, b in zip(segs, segs[1:]):
        assert b["start_ns"] == a["end_ns"]
    total = sum(s["weight_ns"] for s in segs)
    assert total == segs[-1]["end_ns"] - segs[0]["start_ns"]       # contiguous, no unexplained wait
    return total


def _share(summ, what):
    return {r["key"]: r["pct"] for r in summ if r["what"] == what}


def test_megatron_tp2(tmp_path):
    # Story (read in the traces): a small fp32 Megatron model on two V100s. The GPUs are nearly
    # idle; each step is a chain of tiny kernels whose CPU side (Python, aten ops, a memcpy to
    # pageable memory and a cudaStreamSynchronize every few kernels: Megatron's loss-scale /
    # grad-norm checks) decides everything. The path stays on one rank, ~98 % CPU ops, host gaps
    # and launch delays (the GPU starts the kernel after each sync ~2.4 ms late), under 1 %
    # compute kernels. Rank 1 has ~15 ms of slack at its end. The backward pass: rank 0's main
    # thread (1375) calls backward() after _VocabParallelCrossEntropy and shows no op for ~15.9 ms,
    # while the autograd thread (1738, "pt_autograd_0") runs 122 top-level
    # "autograd::engine::evaluate_function: ...Backward" ops from 30.05 to 45.51 ms into the step:
    # the path runs through that thread, from its first op's start to its last op's end.
    segs, summ = _run(MULTI / "megatron_tp2_v100x2", tmp_path, clock_sync="collectives")
    total = _check_shape(segs)
    ranks = {s["rank"] for s in segs}
    assert len(ranks) == 1
    r = ranks.pop()
    src = [p for p in (MULTI / "megatron_tp2_v100x2").glob("*.json.gz")
           if load_json(p)["distributedInfo"]["rank"] == r][0]
    assert abs(total - _step_span(src)) <= 0.01 * total
    cat = _share(summ, "category")
    assert cat.get("cpu_op", 0) + cat.get("host_gap", 0) + cat.get("launch_delay", 0) > 90
    assert cat.get("compute_kernel", 0) < 1
    ranks = pq.read_table(tmp_path / "out" / "critical_path_ranks.parquet").to_pylist()
    assert _backward_thread(segs, ranks, src, r) >= 15_000_000


def _backward_thread(segs, ranks, src, rank, whole=True):
    """The path runs through the rank's autograd thread (the thread whose top-level ops are
    ``autograd::engine::evaluate_function``s), from its first such op's start to its last one's end
    in the step (from the raw trace, relative to the ProfilerStep start; ``ranks``:
    critical_path_ranks.parquet's rows, the rank's aligned step start), and the lane says it is the
    backward pass (``whole=False``: from the first op's start only: the path may leave the thread for
    the GPU work it launches).  Returns the time the path spends on that thread."""
    ev = load_json(src, decimal=True)["traceEvents"]
    step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
            and e.get("cat") != "gpu_user_annotation"][0]
    lo, hi = exact_ns(step["ts"]), exact_ns(step["ts"]) + exact_ns(step["dur"])
    auto = [e for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith(
        "autograd::engine::evaluate_function") and e["tid"] != step["tid"] and lo <= exact_ns(e["ts"]) < hi]
    tid = {e["tid"] for e in auto}
    assert len(tid) == 1
    tid = tid.pop()
    lane = [x for x in segs if x["rank"] == rank and x["lane"] == f"thread {tid} (backward)"
            and x["category"] != "thread_wait"]                # its own work, not the hand-over into it
    # nearly all of the range on that thread (the rest: the thread's own syncs with the GPU)
    assert lane and sum(x["weight_ns"] for x in lane) >= 0.95 * (lane[-1]["end_ns"] - lane[0]["start_ns"])
    inside = auto
    first, end = min(exact_ns(e["ts"]) for e in inside), max(exact_ns(e["ts"]) + exact_ns(e["dur"]) for e in inside)
    s0 = [r["start_ns"] for r in ranks if r["rank"] == rank][0]
    assert lane[0]["start_ns"] - s0 == first - lo and (not whole or lane[-1]["end_ns"] - s0 == end - lo)
    return sum(x["weight_ns"] for x in lane)


def test_dlrm_v100x8(tmp_path):
    # Story (read in the eight traces): DLRM on 8 V100s, one step. Its all-to-alls are matched
    # across the 8 ranks (by order: the older Kineto records no collective args). Rank 7 comes to
    # the all-to-alls last: its data loader and its launches (copy_batch_to_gpu, forward, pageable
    # copies each followed by a cudaStreamSynchronize or blocking in cudaMemcpyAsync) keep it on the
    # CPU, and every rank's all-to-all ends only after rank 7's kernel starts. From there the path is
    # on rank 4, the last rank to end its step: its pageable memcpys with a cudaStreamSynchronize
    # each, "## backward ##" on the main thread (59815), which waits there while the autograd thread
    # (60015) runs 114 backward ops (~4.1 ms on the path), the Adagrad step. So the path begins at
    # rank 7's ProfilerStep start, crosses to rank 4 in an all-to-all rank 7 was last to, and ends at
    # rank 4's step end, through the backward thread.
    segs, summ = _run(MULTI / "param_dlrm_v100x8", tmp_path)
    total = _check_shape(segs)
    src = {int(p.name[len("worker"):].split("_")[0]): p for p in (MULTI / "param_dlrm_v100x8").glob("*.json.gz")}
    bounds = {r: _step_bounds(p) for r, p in src.items()}
    first, last = segs[0]["rank"], segs[-1]["rank"]
    assert last == max(bounds, key=lambda r: bounds[r][1])        # the last rank to end its step
    assert abs(total - (bounds[last][1] - bounds[first][0])) <= 0.01 * total
    # the k-th SendRecv kernel of the step on each rank (matched by order): the path crosses from
    # rank 7 to rank 4 at one that rank 7 starts last (it arrives late at several: every such
    # crossing gives a path of the same length), from rank 7's start to rank 4's end of it
    a2a = {r: [k for k in _events(p, "ncclKernel_SendRecv") if k[0] >= bounds[r][0]] for r, p in src.items()}
    assert first == 7 and last == 4
    assert [s["rank"] for s in segs] == sorted((s["rank"] for s in segs), key=lambda r: r != first)  # 7 then 4
    cross = [s for s in segs if s["category"] == "comm_transfer" and s["rank"] == last][0]
    k = [x[0] - bounds[first][0] for x in a2a[first]].index(cross["start_ns"] - segs[0]["start_ns"])
    assert a2a[first][k][0] - bounds[first][0] == max(a2a[r][k][0] - bounds[first][0] for r in a2a)
    assert cross["end_ns"] - segs[0]["start_ns"] == a2a[last][k][1] - bounds[first][0]
    assert "SendRecv" in cross["name"]
    # the two ranks on the path have no slack, every other rank some (critical_path_ranks.parquet)
    ranks = pq.read_table(tmp_path / "out" / "critical_path_ranks.parquet").to_pylist()
    assert _backward_thread(segs, ranks, src[4], 4, whole=False) >= 3_500_000
    slack = {r["rank"]: r for r in ranks}
    assert slack[7]["slack_ns"] == 0 and slack[4]["slack_ns"] == 0 and slack[7]["on_path"] and slack[4]["on_path"]
    assert all(slack[r]["slack_ns"] > 0 and not slack[r]["on_path"] for r in slack if r not in (4, 7))


def test_cpu_3d(tmp_path):
    # Story (read in the eight traces): a CPU-only (gloo) 8-rank TP2 x DP2 x PP2 run (rank = tp +
    # 2 dp + 4 pp). Its c10d calls are matched across ranks (gloo collectives from the CPU ops), so
    # the path follows the pipeline: rank 0 (stage 0) computes its first micro-batch and queues a TP
    # all-reduce, which rank 1 finishes; rank 1's send_forward feeds rank 5's recv (stage 1); rank 5
    # and rank 4 all-reduce (TP), rank 4 runs forward and backward, sends the gradient back to
    # rank 0 (recv_backward on rank 0 ends right after rank 4's send starts); rank 0 runs its
    # backward, its two DP gradient all-reduces (each queued ~2-5 ms on gloo's worker threads), and
    # comes last (55.2 ms into the job) to the loss all-gather, which spans all 8 ranks; gloo's
    # all-gather then runs 7-21 ms more on the members, rank 2's ending last (~20.7 ms after rank 0
    # arrived), and rank 2 is the last rank to end its step. So the path begins at rank 0's step
    # start and ends at rank 2's step end, through the gloo transfers.
    segs, summ = _run(CPU3D, tmp_path)
    total = _check_shape(segs)
    src = sorted((CPU3D / "iteration_4").glob("*.json"))
    bounds = [_step_bounds(p) for p in src]
    first, last = segs[0]["rank"], segs[-1]["rank"]
    assert (first, last) == (0, 2)
    assert last == max(range(8), key=lambda r: bounds[r][1])        # the last rank to end its step
    assert total == bounds[last][1] - bounds[first][0]
    assert {0, 1, 2, 4, 5} <= {s["rank"] for s in segs}
    # pipeline: a transfer on rank 5 runs from rank 1's k-th gloo:send start to rank 5's k-th
    # gloo:recv end (send_forward 1 -> 5: the k-th send of the step pairs with the k-th receive)
    t0 = bounds[first][0]
    rel = lambda x: x - t0  # noqa: E731
    recv5 = [s for s in segs if s["category"] == "comm_transfer" and s["rank"] == 5]
    sends1 = [e for e in _events(src[1], "gloo:send") if e[0] >= bounds[1][0]]
    recvs5 = [e for e in _events(src[5], "gloo:recv") if e[0] >= bounds[5][0]]
    assert any((s["start_ns"] - segs[0]["start_ns"], s["end_ns"] - segs[0]["start_ns"]) in
               {(rel(a[0]), rel(b[1])) for a, b in zip(sends1, recvs5)} for s in recv5)
    # the loss all-gather (every rank): rank 0 arrives last, rank 2's all-gather ends last
    ag_runs = [_events(src[r], "gloo:all_gather")[-1] for r in range(8)]
    g0, g2 = ag_runs[0], ag_runs[2]
    assert g0[0] == max(a[0] for a in ag_runs) and g2[1] == max(a[1] for a in ag_runs)
    ag = [s for s in segs if s["category"] == "comm_transfer"][-1]
    assert (ag["rank"], ag["name"]) == (2, "gloo:all_gather")
    assert (ag["start_ns"] - segs[0]["start_ns"], ag["end_ns"] - segs[0]["start_ns"]) == (rel(g0[0]), rel(g2[1]))
    cat = _share(summ, "category")
    assert cat["comm_transfer"] > 30 and set(cat) <= {"cpu_op", "host_gap", "comm_transfer", "sync"}


def test_cpu_3d_callers_wait_for_their_gloo_runs(tmp_path):
    # A gloo collective's run on a worker thread that ends inside a stretch of its caller (the thread
    # of the rank's c10d:: calls) with no op boundary, begun after the call: the caller was blocked
    # on it. Read from the raw traces with json: each such stretch is, in the rank's step
    # graph, a zero-weight wait on the caller's lane, and the run's end -> the stretch's end a sync
    # of exactly that gap (before: the stretch was the caller's own time, cpu_op / host_gap).
    if not CPU3D.exists():
        pytest.skip(f"{CPU3D} is absent")
    from streamtrace.aggregate.critical_graph import CATEGORIES, edge_texts
    from streamtrace.aggregate.critical_local import part_graphs, part_reads
    from streamtrace.aggregate.whatif import Aggregate, PartsJob, parts_of
    _run(CPU3D, tmp_path)
    parts = parts_of(Aggregate.read(tmp_path / "out").summary)
    src = sorted((CPU3D / "iteration_4").glob("*.json"))
    checked = 0
    for part in parts.values():
        ev = [e for e in load_json(src[part.rank], decimal=True)["traceEvents"] if e.get("ph") == "X"]
        callers = [e["tid"] for e in ev if str(e.get("name", "")).startswith("c10d::")]
        main = max(set(callers), key=callers.count)
        lo = _step_bounds(src[part.rank])[0]
        inst = sorted({t for e in ev if e["tid"] == main for t in (exact_ns(e["ts"]), exact_ns(e["ts"])
                                                                   + exact_ns(e["dur"]))})
        start = lambda e: exact_ns(e["ts"])  # noqa: E731
        calls = sorted((e for e in ev if e["tid"] == main and str(e["name"]).startswith("c10d::")), key=start)
        runs = sorted((e for e in ev if str(e["name"]).startswith("gloo:")), key=start)
        assert len(calls) == len(runs)                  # the k-th call's run is the k-th run to start
        want = set()
        for c, e in zip(calls, runs):
            if e["tid"] != main:
                r1 = start(e) + exact_ns(e["dur"])
                want |= {(a - lo, b - lo, b - r1) for a, b in zip(inst, inst[1:])
                         if start(c) <= a < r1 <= b and b - a >= 20_000}
        graphs = part_graphs(PartsJob(), part, part_reads(part))
        got = set()
        for step, tid, s0, s1 in graphs.windows(None):
            t, cols, _, _ = graphs.build(step, tid, s0, s1)
            src_, dst, w, cat = cols[:4]
            lane, _ = edge_texts(cols)
            on = [i for i in range(len(src_)) if lane[i] == f"thread {main}"]
            waits = {(t[src_[i]] - s0, t[dst[i]] - s0) for i in on if CATEGORIES[cat[i]] == "wait" and w[i] == 0}
            syncs = {(t[dst[i]] - s0, w[i]) for i in on if CATEGORIES[cat[i]] == "sync"}
            got |= {(a, b, g) for a, b in waits for b2, g in syncs if b2 == b}
        assert want <= got, (part.rank, sorted(want - got))
        checked += len(want)
    assert checked >= 8, checked
