"""Model FLOPs per token of a decoder-only transformer (:func:`flops_per_token`) and MFU
(:func:`mfu`), as TorchTitan and Megatron-LM log them.

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
experts' FFN, ``V`` padded vocabulary.

Where they differ: TorchTitan counts every parameter (norm weights, the MoE router, biases);
Megatron counts only the matmul weights (QKV, output projection, MLP, logits) from the
arguments, so Megatron's is lower by 6 x (2 L h + h) for Llama (norms) and by the router's
6 x L x h x E with MoE.  Both leave out the embedding lookup and activation recomputation.
"""
from __future__ import annotations

from ..topology.trainconfig import ModelShape


def param_count(m: ModelShape, include_embedding: bool = False) -> int:
    """Parameters a token goes through, TorchTitan's way: attention (``Wq``, ``Wo``: h x a d;
    ``Wk``, ``Wv``: h x g d), MLP (2 or 3 x h x f per expert, ``top_k`` experts with MoE plus the
    router h x E and shared experts), two RMSNorm weights per layer, the final norm and the
    output projection (h x V); the token embedding (V x h) only with ``include_embedding``."""
    h, d = m.hidden, m.dhead
    attn = 2 * h * m.heads * d + 2 * h * m.kv_heads * d
    mats = 3 if m.swiglu else 2
    if m.experts:
        mlp = mats * h * m.ffn_hidden * m.top_k + h * m.experts + mats * h * m.shared_ffn_hidden
    else:
        mlp = mats * h * m.ffn_hidden
    n = m.layers * (attn + mlp + 2 * h) + h + h * m.vocab
    return n + (h * m.vocab if include_embedding else 0)


def flops_per_token(m: ModelShape, seq_len: int, convention: str = "torchtitan",
                    include_embedding: bool = False) -> float:
    """Training FLOPs (forward + backward) per token (see the module docstring for both
    formulas).  ``convention``: ``"torchtitan"`` or ``"megatron"``.  Raises ValueError for
    another convention."""
    if convention == "torchtitan":
        return 6.0 * param_count(m, include_embedding) + 12.0 * m.layers * m.heads * m.dhead * seq_len
    if convention != "megatron":
        raise ValueError(f"unknown FLOPs convention {convention!r}: torchtitan or megatron")
    L, h, a, g, s = m.layers, m.hidden, m.heads, m.kv_heads, seq_len
    glu = 1.5 if m.swiglu else 1.0
    k = m.top_k if m.experts else 1
    attn = (1 + g / a + s / h) * (a * m.dhead / h)
    mlp = (m.ffn_hidden / h) * k * glu + (m.shared_ffn_hidden / h) * glu
    return 12.0 * L * h * h * (attn + mlp + m.vocab / (2 * L * h))


def mfu(tokens_per_s: float, flops_token: float, gpus: int, peak_tflops: float) -> float:
    """Model FLOPs utilisation in % : achieved model FLOP/s (``tokens_per_s`` x ``flops_token``) /
    (``gpus`` x ``peak_tflops`` x 1e12)."""
    return 100.0 * tokens_per_s * flops_token / (gpus * peak_tflops * 1e12)
