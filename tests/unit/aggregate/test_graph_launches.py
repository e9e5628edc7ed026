"""``launch_stats``' CUDA-graph kernels: those whose launch op names a graph launch, any case, a null launch
op none (counted here row by row in plain Python)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, strategies as st

from streamtrace.aggregate.stats import launch_stats

OPS = [None, "cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "CUDAGRAPHLAUNCH", "cudaLaunchKernel",
       "cudaGraph", "graph launch", "aten::mm"]


@given(st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(["compute", "memory"]), st.integers(1, 2)),
                min_size=1, max_size=30))
def test_graph_kernels_are_the_graph_launches(rows):
    n = len(rows)
    k = pa.table({"step": pa.array([r[2] for r in rows], pa.int64()), "kind": [r[1] for r in rows],
                  "ts_ns": pa.array(np.arange(n) * 100, pa.int64()), "dur_ns": pa.array(np.full(n, 10), pa.int64()),
                  "launch_op": pa.array([r[0] for r in rows], pa.string())})
    zeros = np.zeros(n, np.int64)
    out = launch_stats(k, np.ones(n, bool), zeros, zeros)
    got = {(r["step"], r["kind"]): r["graph_kernels"] for r in out}              # (a row per step and kind)
    assert got
    for (s, kd), g in got.items():
        want = sum(1 for op, kind, st_ in rows if st_ == s and kd in ("all", kind) and op is not None
                   and "graphlaunch" in op.lower())
        assert g == want
