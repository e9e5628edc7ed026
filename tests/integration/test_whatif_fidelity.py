"""Fidelity of the what-if replay: the unmodified replay (``whatif_ranks.replay_end_ns``) reproduces
each rank's measured step on every real job of ``../shared/traces`` (both real-multi jobs, cpu-3d,
the single ranks of ``real/`` with steps): median error <= 2 %, worst <= 5 % of the rank's step.  The measured
step comes from the raw trace with ``json``: ``ProfilerStep#N``'s start to the later of its end and
the last end of the GPU events launched inside it (the replay's step is on aggregate's aligned
axis: compared as a length from the rank's step start)."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate

from support import CPU3D, SHARED, exact_ns, load_json

pytestmark = pytest.mark.slow
MULTI = SHARED / "traces" / "real-multi"
REAL = SHARED / "traces" / "real"
SINGLE = ["a100_rank3_of8", "a100_resnet_ddp_rank0_of2", "v100_ddp_rank1_of2", "v100_float_ns_rank0",
          "h100_qwen_inference", "cpu_only_gloo_rank34_of300", "mi250_rocm_minitoy", "a100_recsys_sampled_rank0_of128"]
"""Every single rank of ``real/`` with a ``ProfilerStep`` (``legacy_format_rank1`` has none: its
replay is of the whole capture, which the raw trace gives no step to compare with)."""
JOBS = {"megatron_tp2_v100x2": ([MULTI / "megatron_tp2_v100x2"], {"clock_sync": "collectives"}),
        "param_dlrm_v100x8": ([MULTI / "param_dlrm_v100x8"], {}), "cpu-3d": ([CPU3D], {}),
        **{n: ([REAL / f"{n}.json.gz"], {}) for n in SINGLE}}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def _steps(path) -> dict:
    """``{(rank, step number): measured step ns}`` of one raw trace."""
    doc = load_json(path, decimal=True)
    rank = (doc.get("distributedInfo") or {}).get("rank", 0)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launch = {}
    for e in ev:
        c = (e.get("args") or {}).get("correlation")
        if c is not None and e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime"):
            launch[c] = exact_ns(e["ts"])
    gpu = [(launch.get((e.get("args") or {}).get("correlation")), exact_ns(e["ts"]) + exact_ns(e["dur"]))
           for e in ev if e.get("cat") in GPU_CATS]
    out = {}
    for e in ev:
        name = str(e.get("name", ""))
        if name.startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation":
            lo, hi = exact_ns(e["ts"]), exact_ns(e["ts"]) + exact_ns(e["dur"])
            ends = [end for t, end in gpu if t is not None and lo <= t < hi]
            out[(int(rank), int(name.split("#")[1]))] = max([hi] + ends) - lo
    return out


@pytest.mark.parametrize("job", list(JOBS))
def test_unmodified_replay_reproduces_each_rank(job, tmp_path):
    src, opt = JOBS[job]
    if not src[0].exists():
        pytest.skip(f"{src[0]} is absent")
    analyze(src, tmp_path / "an", AnalyzeOptions(jobs=2))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=2, **opt))
    r = pq.read_table(tmp_path / "agg" / "whatif_ranks.parquet").to_pylist()
    files = [s for s in src if s.is_file()] + sorted(p for s in src if s.is_dir() for p in s.rglob("*trace.json*"))
    want = {}
    for f in files:
        want.update(_steps(f))
    errs = []
    for row in r:
        key = (row["rank"], row["step"])
        if key not in want:
            continue
        assert row["replay_end_ns"] >= 0
        errs.append(100.0 * abs((row["replay_end_ns"] - row["start_ns"]) - want[key]) / want[key])
    assert errs, f"no rank-step of {job} compared"
    assert float(np.median(errs)) <= 2.0 and max(errs) <= 5.0, errs
