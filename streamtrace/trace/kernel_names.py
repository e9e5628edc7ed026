"""What a GPU kernel's name says about the work it runs: the kernel classes that a what-if's
``kernels`` change may name (``streamtrace.aggregate.whatif_changes``) and the GEMM kernels whose
math the report's MFU reads (``streamtrace.report.precision``), one table for both.

Names are matched with ``re.search``, case-insensitive.  The GEMM class covers cuBLAS / cuBLASLt
(``volta_sgemm_*``, ``ampere_*_s1688gemm_*``, ``sm90_xmma_gemm_*``, Hopper's ``nvjet_*`` since CUDA
12.8), CUTLASS (``cutlass_*``, ``*wgmma*``), Triton's (``triton_*_mm_*``, ``*matmul*``), but not FBGEMM's
embedding kernels, whose namespace (``fbgemm_gpu::``) says gemm.
"""
from __future__ import annotations

import re

GEMM = r"(?<!fb)gemm|cublas|cutlass|xmma|matmul|_mm_|wgmma|nvjet"
"""A kernel that runs a GEMM, by its own name (pattern text)."""

KERNEL_CLASSES = {
    "gemm": GEMM,
    "attention": r"flash|attention|fmha|sdpa|softmax",
    "elementwise": r"elementwise|vectorized|unrolled_elementwise",
    "reduce": r"reduce_kernel|reduction|norm",
    "memcpy": r"^Memcpy|^Memset",
}
"""The kernel classes by name: class -> pattern text (``re.search``, case-insensitive)."""

GEMM_KERNEL = re.compile(GEMM, re.I)
"""``GEMM`` compiled."""
