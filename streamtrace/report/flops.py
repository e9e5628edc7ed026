"""Model FLOPs per token of a decoder-only transformer (``flops_per_token``) and MFU
(``mfu``), as TorchTitan and Megatron-LM log them.

**TorchTitan** (``torchtitan/models/utils.py`` ``get_dense_model_nparams_and_flops`` /
``get_moe_model_nparams_and_flops``; PaLM, arXiv:2204.02311, appendix B)::

    flops/token = 6 x N + 12 x L x H x Q x T

``N`` the parameters a token goes through, the token embedding excluded (TorchTitan's earlier
versions, e.g. the numbers of its ``docs/performance.md``, counted the embedding too:
``include_embedding=True``), with MoE only ``top_k`` of the routed experts (active parameters);
``L`` layers, ``H`` heads, ``Q`` head dim, ``T`` sequence length.  6 = 2 FLOPs per multiply-add x
(1 forward + 2 backward); the attention term is the ``Q K^T`` and ``P V`` matmuls, without the
causal mask's saving and without the flash-attention backward's recomputation.

**Megatron-LM** (``megatron/training/training.py`` ``num_floating_point_operations``, the non-MLA
branch; Narayanan et al., SC'21, arXiv:2104.04473, eq. 3 for GPT)::

    flops/token = 12 x L x h^2 x ((1 + g/a + s/h) x (a x d)/h + (f/h) x k x m + (f_sh/h) x m + V/(2 L h))

``h`` hidden, ``a`` heads, ``g`` query groups, ``d`` head dim (``kv_channels``), ``s`` sequence,
``f`` FFN (of one expert), ``k`` top-k (1 dense), ``m`` 3/2 with SwiGLU else 1, ``f_sh`` shared
experts' FFN, ``V`` padded vocabulary; with dense first layers (``dense_layers``) the MLP term
is summed per layer kind, as Megatron's ``num_dense_layers`` / ``num_moe_layers``.  With
multi-head latent attention (DeepSeek-V3) TorchTitan's attention term is 6 x L x H x (d_qk + d_v)
x T; Megatron's MLA branch is not implemented here.

Where they differ: TorchTitan counts every parameter (norm weights, the MoE router, biases);
Megatron counts only the matmul weights (QKV, output projection, MLP, logits) from the
arguments, so Megatron's is lower by 6 x (2 L h + h) for Llama (norms) and by the router's
6 x L x h x E with MoE.  Both leave out the embedding lookup and activation recomputation.
"""
from __future__ import annotations

from ..topology.modelshape import ModelShape


def attention_params(m: ModelShape) -> int:
    """One layer's attention parameters, TorchTitan's modules.  GQA: ``Wq``, ``Wo`` h x a d,
    ``Wk``, ``Wv`` h x g d; with ``bias`` (a + 2 g) d + h more and with ``sinks`` a more; with
    ``qk_norm`` 2 d (Qwen3).  MLA (DeepSeek-V3, ``torchtitan/models/deepseek_v3/model.py``):
    queries ``wq`` h x a (d + r) when ``q_lora_rank`` = 0, else ``wq_a`` h x q, its RMSNorm q and
    ``wq_b`` q x a (d + r); ``wkv_a`` h x (kv + r), its RMSNorm kv, ``wkv_b`` kv x a (d + d_v),
    ``wo`` a d_v x h (r = ``qk_rope_head_dim``, kv = ``kv_lora_rank``, q = ``q_lora_rank``)."""
    h, a, d = m.hidden, m.heads, m.dhead
    if m.mla:
        q, kv, r = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
        wq = h * a * (d + r) if q == 0 else h * q + q + q * a * (d + r)
        return wq + h * (kv + r) + kv + kv * a * (d + m.v_head_dim) + a * m.v_head_dim * h
    g = m.kv_heads
    n = 2 * h * a * d + 2 * h * g * d
    if m.bias:
        n += (a + 2 * g) * d + h
    if m.sinks:
        n += a
    if m.qk_norm:
        n += 2 * d
    return n


def mlp_params(m: ModelShape, dense: bool) -> int:
    """One layer's MLP parameters that a token goes through.  Dense (``dense`` True, or a model
    without experts): 2 or 3 x h x f, f = ``dense_ffn_hidden`` in an MoE model's first layers,
    else ``ffn_hidden``.  MoE: the router h x E (+ E with ``bias``), ``top_k`` experts of 2 or 3
    x h x f (+ (2 or 1) f + h biases with ``bias``, GPT-OSS), the shared experts; TorchTitan
    counts the routed experts as all of them x ``top_k`` / E
    (``get_moe_model_nparams_and_flops``), which is ``top_k`` experts when all layers have E."""
    h, mats = m.hidden, (3 if m.swiglu else 2)
    if dense or not m.experts:
        return mats * h * (m.dense_ffn_hidden or m.ffn_hidden)
    f = m.ffn_hidden
    expert = mats * h * f + ((mats - 1) * f + h if m.bias else 0)
    router = h * m.experts + (m.experts if m.bias else 0)
    return router + m.top_k * expert + mats * h * m.shared_ffn_hidden


def param_count(m: ModelShape, include_embedding: bool = False) -> int:
    """Parameters a token goes through, TorchTitan's way: per layer ``attention_params``,
    ``mlp_params`` (the first ``dense_layers`` dense) and two RMSNorm weights; the final norm
    and the output projection (h x V); the token embedding (V x h) only with
    ``include_embedding``.  A tied embedding (TorchTitan's ``enable_weight_tying``) is the
    output projection, counted once, so the count is the same."""
    h = m.hidden
    moe = m.moe_layers
    layer = attention_params(m) + 2 * h
    n = m.layers * layer + (m.layers - moe) * mlp_params(m, True) + moe * mlp_params(m, False)
    n += h + h * m.vocab
    return n + (h * m.vocab if include_embedding else 0)


def flops_per_token(m: ModelShape, seq_len: int, convention: str = "torchtitan",
                    include_embedding: bool = False) -> float:
    """Training FLOPs (forward + backward) per token (see the module docstring for both
    formulas); TorchTitan's attention term is 6 x L x H x (d_qk + d_v) x T, which is 12 L H Q T
    when the query/key and value head dims are equal (MLA: d_qk = ``head_dim`` +
    ``qk_rope_head_dim``, d_v = ``v_head_dim``).  ``convention``: ``"torchtitan"`` or
    ``"megatron"``.  Raises ValueError for another convention, and for ``"megatron"`` with MLA
    (Megatron's MLA branch is not implemented here)."""
    if convention == "torchtitan":
        attn = 6.0 * m.layers * m.heads * (m.qk_dim + m.v_dim) * seq_len
        return 6.0 * param_count(m, include_embedding) + attn
    if convention != "megatron":
        raise ValueError(f"unknown FLOPs convention {convention!r}: torchtitan or megatron")
    if m.mla:
        raise ValueError(f"{m.name}: Megatron-LM's formula for multi-latent attention is not implemented")
    L, h, a, g, s = m.layers, m.hidden, m.heads, m.kv_heads, seq_len
    glu = 1.5 if m.swiglu else 1.0
    attn = (1 + g / a + s / h) * (a * m.dhead / h)
    moe = m.moe_layers
    ffn = (L - moe) * (m.dense_ffn_hidden or m.ffn_hidden) + moe * (m.ffn_hidden * m.top_k + m.shared_ffn_hidden)
    mlp = ffn / (L * h) * glu
    return 12.0 * L * h * h * (attn + mlp + m.vocab / (2 * L * h))


def mfu(tokens_per_s: float, flops_token: float, gpus: int, peak_tflops: float) -> float:
    """Model FLOPs utilisation in % : achieved model FLOP/s (``tokens_per_s`` x ``flops_token``) /
    (``gpus`` x ``peak_tflops`` x 1e12)."""
    return 100.0 * tokens_per_s * flops_token / (gpus * peak_tflops * 1e12)
