"""Which math the job's GEMMs ran in (``gemm_precision``): the one dtype whose dense peak the
report's MFU and its roofline chart are measured against.

First answer wins:

1. the GEMM kernels' names, by GPU time (``kernel_stats.parquet``): cuBLAS and CUTLASS name the math
   they run (``volta_sgemm_128x32_nn``: fp32 on the CUDA cores; ``ampere_tf32_s1688gemm_...``,
   ``cutlass_80_tensorop_s1688gemm_...``: fp32 data on TF32 tensor cores; ``..._bf16...``,
   ``volta_h884gemm...`` / ``..._f16...``: bf16 / fp16 tensor cores; ``e4m3`` / ``e5m2``: fp8), the
   only place TF32 shows (the ops' ``Input type`` stays ``float``);
2. the GEMM and attention ops' recorded ``Input type``, by GPU time (``op_perf.parquet``,
   ``record_shapes=True``);
3. the job's config (``mixed_precision_param``, Megatron's ``--bf16`` / ``--fp16``);
4. bf16 (fp16 on a GPU without bf16), said as assumed.

A name or dtype the rules do not read (Hopper's ``nvjet_*`` kernels name no dtype) is left out;
the dtype with the most GPU time among the rest wins.
"""
from __future__ import annotations

import re

import numpy as np

from ..aggregate.folder import KERNEL_STATS, OP_PERF, columns, read_aggregate_table, table_file
from ..topology.hardware import dtype_key
from ..trace.kernel_names import GEMM_KERNEL

#: the element type a templated GEMM kernel (``gemmSN_NN_kernel<float, ...>``) names first
TEMPLATE_DTYPES = {"float": "fp32", "double": "fp64", "__half": "fp16", "half": "fp16", "c10::half": "fp16",
                   "__nv_bfloat16": "bf16", "c10::bfloat16": "bf16"}
#: (pattern on a GEMM kernel's name, dtype), first match wins: fp8 and TF32 before the types their
#: names also hold, bf16 before f16 (``bf16`` contains ``f16``)
KERNEL_DTYPES = [
    (re.compile(r"e4m3|e5m2|fp8", re.I), "fp8"),
    (re.compile(r"tf32|s1688gemm", re.I), "tf32"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    (re.compile(r"f16|fp16|half|h884|h1688|h16816|hgemm", re.I), "fp16"),
    (re.compile(r"dgemm|f64|fp64|double", re.I), "fp64"),
    (re.compile(r"sgemm|f32f32_f32|fp32", re.I), "fp32"),
]


def kernel_dtype(name: str) -> str | None:
    """The math a GEMM kernel's name says it runs: its own name (before any template arguments) by
    ``KERNEL_DTYPES``, else its first template argument (a type, ``TEMPLATE_DTYPES``, or the
    name of the kernel a ``cutlass::Kernel<...>`` wraps, ``KERNEL_DTYPES``); None when it is
    no GEMM kernel (``GEMM_KERNEL`` on its own name) or names no type."""
    text = re.sub(r"^void\s+", "", (name or "").strip())
    base = re.split(r"[<(]", text, 1)[0]
    if not GEMM_KERNEL.search(base):
        return None
    found = next((dt for rx, dt in KERNEL_DTYPES if rx.search(base)), None)
    if found or "<" not in text:
        return found
    first = text.split("<", 1)[1].split(",", 1)[0].split(">", 1)[0].strip()     # cutlass::Kernel<its name>
    return TEMPLATE_DTYPES.get(first.lower()) or next((dt for rx, dt in KERNEL_DTYPES if rx.search(first)), None)


def _by_time(keys, times) -> tuple[str | None, float]:
    """The key with the most summed time and its share of the time of all keys (None, 0 when none)."""
    acc: dict = {}
    for k, t in zip(keys, times):
        if k:
            acc[k] = acc.get(k, 0) + int(t)
    if not acc or not sum(acc.values()):
        return None, 0.0
    best = max(sorted(acc), key=acc.get)
    return best, acc[best] / sum(acc.values())


def gemm_precision(aggdir, cfg=None, has=lambda dt: True) -> tuple[str, str]:
    """``(dtype, source)``: the ``DTYPES`` key the job's GEMMs ran
    in (module docstring) and where that came from, said for the report.  ``aggdir``: the aggregate
    folder (None: the config and the default only); ``cfg``: the job's
    ``TrainConfig`` or None; ``has(dtype)``: whether the GPU
    has that math (the default's bf16 / fp16 choice)."""
    if aggdir is not None:
        t = read_aggregate_table(aggdir, KERNEL_STATS, columns(KERNEL_STATS, "name", "kind", "total_ns"))
        if t and len(t.get("name", [])):
            comp = np.flatnonzero(t["kind"] == "compute")
            names = t["name"][comp].tolist()
            dts = {n: kernel_dtype(n) for n in set(names)}             # each distinct name once
            dt, share = _by_time([dts[n] for n in names], t["total_ns"][comp])
            if dt:
                return dt, (f"the GEMM kernels' names ({100 * share:.0f} % of their GPU time, "
                            f"{table_file(KERNEL_STATS)})")
        t = read_aggregate_table(aggdir, OP_PERF, columns(OP_PERF, "dtype", "flops", "gpu_busy_ns"))
        if t and len(t.get("dtype", [])):
            keep = np.flatnonzero(t["flops"] > 0)
            dt, share = _by_time([dtype_key(d) for d in t["dtype"][keep].tolist()], t["gpu_busy_ns"][keep])
            if dt:
                return dt, (f"the GEMM and attention ops' input type ({100 * share:.0f} % of their GPU time, "
                            f"{table_file(OP_PERF)})")
    dt = dtype_key(cfg.dtype if cfg else None)
    if dt:
        return dt, f"the config's precision ({cfg.source})"
    dt = "bf16" if has("bf16") else "fp16"
    return dt, f"assumed: neither the kernels, the ops nor a config name the GEMMs' dtype"
