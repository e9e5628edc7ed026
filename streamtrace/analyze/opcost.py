"""FLOPs and bytes of one CPU op from the shapes the profiler recorded (``record_shapes=True``:
``args["Input Dims"]``, ``args["Input type"]``, ``args["Concrete Inputs"]``): ``op_cost``.

FLOPs count a multiply-add as 2 and follow PyTorch's own ``torch.utils.flop_counter`` formulas
(``mm_flop``, ``addmm_flop``, ``bmm_flop``, ``baddbmm_flop``, ``sdpa_flop_count``,
``sdpa_backward_flop_count``), so that the counts equal ``FlopCounterMode``'s op by op:

* ``mm``  (m x k) @ (k x n): 2 m k n; ``addmm``: the same (the bias add is not counted);
* ``bmm`` / ``baddbmm`` (b x m x k) @ (b x k x n): 2 b m k n;
* grouped GEMMs (MoE experts, ``_grouped_mm``): tokens (m_total x k) against g expert matrices
  (g x k x n), each token row meeting its own group's: 2 m_total k n (3-D x 3-D inputs: as ``bmm``);
* ``matmul`` / ``linear``: 2 x (the output's elements) x k (the composite ops: their ``mm`` /
  ``addmm`` / ``bmm`` children carry the same count, ``opperf`` keeps only
  the innermost costed op of a nest);
* attention forward (queries b x h x s_q x d, keys b x h_kv x s_k x d, values ... x d_v):
  2 b h s_q s_k (d + d_v); backward (the scores recomputed, then four matmuls of the gradients):
  2 b h s_q s_k (3 d + 2 d_v).  The causal mask's saving is not subtracted (FlopCounterMode and
  TorchTitan's MFU convention alike; TraceLens's SDPA model halves it for causal attention).
  ``_scaled_dot_product_*`` take (b, h, s, d) tensors, ``_flash_attention_*`` and
  ``_efficient_attention_*`` (b, s, h, d); variable-length (3-D) inputs are not costed.

Bytes are the least traffic an op can cost: every tensor input read once and the output written
once (its size: the largest input's for elementwise ops and normalisations, m x n for GEMMs, the
query's for attention, q, k, v for the backward's gradients), at the element size of ``Input type``.
Normalisation and elementwise ops get bytes and 0 FLOPs (FlopCounterMode counts none).
"""
from __future__ import annotations

import math

from ..topology.hardware import dtype_bytes, dtype_key

GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
         "aten::_scaled_mm", "aten::_grouped_mm", "aten::_scaled_grouped_mm"}
ATTN_FWD_BHSD = {"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                 "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"}
ATTN_BWD_BHSD = {n + "_backward" for n in ATTN_FWD_BHSD}
ATTN_FWD_BSHD = {"aten::_flash_attention_forward", "aten::_efficient_attention_forward"}
ATTN_BWD_BSHD = {"aten::_flash_attention_backward", "aten::_efficient_attention_backward"}
NORMS = {"aten::native_layer_norm", "aten::layer_norm", "aten::_fused_rms_norm", "aten::rms_norm",
         "aten::native_layer_norm_backward", "aten::_fused_rms_norm_backward", "aten::native_batch_norm",
         "aten::native_group_norm", "aten::_batch_norm_impl_index"}
ELEMENTWISE = {f"aten::{n}{s}" for n in ("add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "silu",
                                         "gelu", "relu", "sigmoid", "tanh", "copy", "clamp", "where", "reciprocal")
               for s in ("", "_")} | {"aten::silu_backward", "aten::gelu_backward", "aten::threshold_backward",
                                      "aten::_to_copy", "aten::clone", "aten::fill_", "aten::zero_"}
#: every op name ``op_cost`` can cost
COSTED = GEMMS | ATTN_FWD_BHSD | ATTN_BWD_BHSD | ATTN_FWD_BSHD | ATTN_BWD_BSHD | NORMS | ELEMENTWISE


def _numel(dims) -> int:
    return math.prod(int(x) for x in dims) if isinstance(dims, list) else 0


def _tensors(dims, types):
    """``[(dims, dtype)]`` of the tensor inputs (a list of ints as dims and a known element size)."""
    out = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) else ""
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and dtype_bytes(t):
            out.append((d, t))
    return out


def _gemm(name, ts):
    """``(flops, out_elements, k)`` of a GEMM-like op from its tensor inputs."""
    if name in ("aten::addmm", "aten::baddbmm"):
        ts = ts[1:]
    if len(ts) < 2:
        return None
    a, b = ts[0][0], ts[1][0]
    if name in ("aten::_grouped_mm", "aten::_scaled_grouped_mm") and len(a) == 2 and len(b) == 3:
        if a[1] != b[1]:                        # tokens[m_total, k] x experts[g, k, n]: each row
            return None                         # meets one group's weights
        out = a[0] * b[2]
        return 2 * out * a[1], out, a[1]
    if name == "aten::linear":                  # x[..., k] @ w[n, k]^T
        if len(b) != 2 or a[-1] != b[1]:
            return None
        out = _numel(a[:-1]) * b[0]
        return 2 * out * a[-1], out, a[-1]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    k = a[-1]
    batch = max(_numel(a[:-2]), _numel(b[:-2]), 1)
    out = batch * a[-2] * b[-1]
    return 2 * out * k, out, k


def _attention(name, dims):
    """FLOPs of an attention op from its (b, h, s, d) or (b, s, h, d) tensors, None if not 4-D."""
    bwd = name in ATTN_BWD_BHSD or name in ATTN_BWD_BSHD
    q, k, v = (dims[1], dims[2], dims[3]) if bwd else (dims[0], dims[1], dims[2])
    if not all(isinstance(x, list) and len(x) == 4 for x in (q, k, v)):
        return None
    if name in ATTN_FWD_BSHD or name in ATTN_BWD_BSHD:
        q, k, v = ([x[0], x[2], x[1], x[3]] for x in (q, k, v))
    b, h, s_q, d = q
    s_k, d_v = k[2], v[3]
    return 2 * b * h * s_q * s_k * ((3 * d + 2 * d_v) if bwd else (d + d_v))


def op_cost(name: str, dims, types) -> tuple | None:
    """``(flops, bytes, dtype)`` of one op (int, int, ``DTYPES``
    key or None) from its ``Input Dims`` and ``Input type`` lists; None when the op is not in
    ``COSTED`` or its shapes do not fit the formula (see the module docstring for them)."""
    if name not in COSTED or not isinstance(dims, list) or not isinstance(types, list):
        return None
    ts = _tensors(dims, types)
    if not ts:
        return None
    elt = dtype_bytes(ts[0][1])
    dt = dtype_key(ts[0][1])
    read = sum(_numel(d) * dtype_bytes(t) for d, t in ts)
    if name in GEMMS:
        g = _gemm(name, ts)
        if g is None:
            return None
        flops, out, _ = g
        return flops, read + out * elt, dt
    if name in ATTN_FWD_BHSD or name in ATTN_FWD_BSHD or name in ATTN_BWD_BHSD or name in ATTN_BWD_BSHD:
        f = _attention(name, dims)
        if f is None:
            return None
        bwd = name in ATTN_BWD_BHSD or name in ATTN_BWD_BSHD
        q_at = 1 if bwd else 0
        written = sum(_numel(dims[i]) for i in (q_at, q_at + 1, q_at + 2)) if bwd else _numel(dims[0])
        return f, read + written * elt, dt
    largest = max(_numel(d) for d, _ in ts)          # normalisation, elementwise: bytes only
    return 0, read + largest * elt, dt
