"""``op_perf.parquet``: the job's costed ops (``analyze --op-perf``'s per-rank ``op_perf/``) summed
over ranks per distinct op (name, input shapes, dtype): ``write_op_perf``.

Columns: ``name``, ``dtype``, ``input_dims`` (JSON), ``bound`` (``compute`` / ``memory``, empty
when the GPU is not in the table), ``count`` (calls over all ranks), ``ranks``, ``flops``, ``bytes``,
``kernel_time_ns``, ``gpu_busy_ns``, ``bound_ns``, ``lost_ns`` (sums), ``achieved_tflops`` and
``achieved_gbps`` (sums of FLOPs / bytes over the summed GPU time), ``intensity`` (FLOP/byte) and
``pct_of_bound`` (100 x ``bound_ns`` / ``gpu_busy_ns``); rows by ``lost_ns`` descending.  The
per-op formulas: ``streamtrace.analyze.opcost`` and ``streamtrace.analyze.opperf``.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..analyze.outputs import OP_PERF as OP_PERF_DATASET
from .folder import OP_PERF, OP_PERF_COLUMNS
from ..events.dataset import write_table

_SUMS = ("flops", "bytes", "kernel_time_ns", "gpu_busy_ns", "bound_ns", "lost_ns")


def write_op_perf(outdir, parts) -> list:
    """Write ``outdir/op_perf.parquet`` from the ``op_perf`` partitions of ``parts`` (the job's
    ``Part`` list); ``[]`` (nothing written) when no rank has one.
    Raises ``DataError`` naming a damaged partition."""
    acc: dict = defaultdict(lambda: {"count": 0, "ranks": set(), **dict.fromkeys(_SUMS, 0.0)})
    for p in parts:
        if not p.files(OP_PERF_DATASET):
            continue
        t = p.read(OP_PERF_DATASET, ["name", "dtype", "input_dims", "bound", *_SUMS]).to_pydict()
        for i in range(len(t["name"])):
            a = acc[(t["name"][i], t["dtype"][i] or "", t["input_dims"][i], t["bound"][i] or "")]
            a["count"] += 1
            a["ranks"].add(p.rank)
            for k in _SUMS:
                a[k] += t[k][i] or 0
    if not acc:
        return []
    keys = sorted(acc, key=lambda k: (-acc[k]["lost_ns"], -acc[k]["gpu_busy_ns"], k))
    rows = [acc[k] for k in keys]
    busy = np.asarray([r["gpu_busy_ns"] for r in rows], float)
    flops = np.asarray([r["flops"] for r in rows], float)
    nbytes = np.asarray([r["bytes"] for r in rows], float)
    bound = np.asarray([r["bound_ns"] for r in rows], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = {"name": np.asarray([k[0] for k in keys], object), "dtype": np.asarray([k[1] for k in keys], object),
                "input_dims": np.asarray([k[2] for k in keys], object),
                "bound": np.asarray([k[3] for k in keys], object),
                "count": np.asarray([r["count"] for r in rows], np.int64),
                "ranks": np.asarray([len(r["ranks"]) for r in rows], np.int64),
                **{k: np.asarray([r[k] for r in rows], np.int64 if k in ("flops", "bytes", "kernel_time_ns",
                                                                         "gpu_busy_ns") else float) for k in _SUMS},
                "achieved_tflops": np.where(busy > 0, flops / busy / 1e3, np.nan),
                "achieved_gbps": np.where(busy > 0, nbytes / busy, np.nan),
                "intensity": np.where(nbytes > 0, flops / nbytes, np.nan),
                "pct_of_bound": np.where((busy > 0) & (bound > 0), 100 * bound / busy, np.nan)}
    return write_table(outdir, OP_PERF, cols, OP_PERF_COLUMNS)
