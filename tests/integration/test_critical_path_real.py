"""The critical path on real multi-rank jobs (``../shared/traces/real-multi``, ``../shared/traces/cpu-3d``):
the path is contiguous, it sums to the step span of the rank it ends on (computed here from the raw
trace with ``json``: the ``ProfilerStep#N`` start to the later of its end and the last GPU end of the
kernels launched inside it), and its story, read by hand from the traces, is in each test's comment."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.job import AggregateOptions, aggregate

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
    ev = load_json(path)["traceEvents"]
    step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
            and e.get("cat") != "gpu_user_annotation"][0]
    lo, hi = exact_ns(step["ts"]), exact_ns(step["ts"]) + exact_ns(step["dur"])
    corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"
            and "correlation" in e.get("args", {}) and lo <= exact_ns(e["ts"]) < hi}
    ends = [exact_ns(e["ts"]) + exact_ns(e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e.get("args", {}).get("correlation") in corr]
    return max([hi] + ends) - lo


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
    # compute kernels. Rank 1 has ~15 ms of slack at its end.
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


def test_dlrm_v100x8(tmp_path):
    # Story: DLRM on 8 V100s, one step. Its NCCL kernels carry no collective args (older
    # Kineto), so the all-to-alls are not matched across ranks and each counts as its rank's own
    # transfer: the path is the last rank's own step (rank 4 here), whose longest pieces are the
    # data loader, "## backward ##" and a ~4.9 ms SendRecv all-to-all kernel.
    segs, summ = _run(MULTI / "param_dlrm_v100x8", tmp_path)
    total = _check_shape(segs)
    ranks = {s["rank"] for s in segs}
    assert len(ranks) == 1
    r = ranks.pop()
    src = [p for p in (MULTI / "param_dlrm_v100x8").glob("*.json.gz") if p.name.startswith(f"worker{r}_")][0]
    assert abs(total - _step_span(src)) <= 0.01 * total
    kern = max((s for s in segs if s["category"] in ("compute_kernel", "comm_transfer", "memcpy")),
               key=lambda s: s["weight_ns"])
    assert "SendRecv" in kern["name"]


def test_cpu_3d(tmp_path):
    # Story: a CPU-only (gloo) 8-rank TP2 x PP2 x DP2 run. Without GPU kernels there are no
    # collective anchors to join ranks (the CPU c10d ops are not matched), so the path is the
    # last-ending rank's main thread: its whole ProfilerStep, mostly inside communication ops
    # (the loss all-gather, start_grad_sync, recv_backward).
    segs, summ = _run(CPU3D, tmp_path)
    total = _check_shape(segs)
    ranks = {s["rank"] for s in segs}
    assert len(ranks) == 1
    r = ranks.pop()
    src = sorted((CPU3D / "iteration_4").glob("*.json"))[r]
    assert total == _step_span(src)
    assert {s["category"] for s in segs} <= {"cpu_op", "host_gap"}
