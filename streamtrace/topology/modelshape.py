"""A decoder-only transformer's shape (``ModelShape``): the inputs of the model-FLOPs formulas
of ``streamtrace.report.flops``, for dense, mixture-of-experts (MoE) and multi-head latent
attention (MLA, DeepSeek-V2/V3) models, and Llama's SwiGLU inner-size rule
(``torchtitan_ffn_hidden``)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelShape:
    """A decoder-only transformer's shape.

    Every model: ``layers``, ``hidden`` (model dim), ``ffn_hidden`` (one MLP's inner dim; of one
    routed expert with MoE), ``heads``, ``kv_heads`` (query groups; = heads without GQA),
    ``vocab``, ``swiglu`` (three MLP matrices instead of two), ``head_dim`` (0: hidden // heads;
    with MLA the query/key head dim without RoPE, ``qk_nope_head_dim``).

    MoE: ``experts`` and ``top_k`` (routed experts and experts per token; 0 = dense),
    ``shared_ffn_hidden`` (shared experts' inner dim, all of them together; 0 none),
    ``dense_layers`` (how many layers keep a dense MLP of ``dense_ffn_hidden`` instead of the MoE:
    DeepSeek's first ``n_dense_layers``, every other layer of Llama 4's
    ``interleave_moe_layer_step`` 2; only their number matters to the formulas).

    Extra parameters some families have: ``qk_norm`` (an RMSNorm of ``head_dim`` on the queries
    and one on the keys, Qwen3), ``bias`` (biases on the QKV and output projections, the router
    and the experts, GPT-OSS), ``sinks`` (one attention-sink logit per head, GPT-OSS).

    MLA (when ``kv_lora_rank`` > 0): ``q_lora_rank`` (0: one query projection, else a low-rank
    pair with an RMSNorm between), ``kv_lora_rank``, ``qk_rope_head_dim`` (the RoPE part of each
    query/key head, shared by the heads on the key side), ``v_head_dim``."""
    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    swiglu: bool = True
    experts: int = 0
    top_k: int = 0
    shared_ffn_hidden: int = 0
    head_dim: int = 0
    dense_layers: int = 0
    dense_ffn_hidden: int = 0
    qk_norm: bool = False
    bias: bool = False
    sinks: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def dhead(self) -> int:
        """The query/key head dim without RoPE (= the value head dim except with MLA)."""
        return self.head_dim or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def qk_dim(self) -> int:
        """One head's query/key dim (with MLA: ``head_dim`` + ``qk_rope_head_dim``)."""
        return self.dhead + (self.qk_rope_head_dim if self.mla else 0)

    @property
    def v_dim(self) -> int:
        """One head's value dim (with MLA: ``v_head_dim``)."""
        return self.v_head_dim if self.mla else self.dhead

    @property
    def moe_layers(self) -> int:
        """Layers with an MoE (all but ``dense_layers``; 0 for a dense model)."""
        return self.layers - self.dense_layers if self.experts else 0


def torchtitan_ffn_hidden(dim: int, multiple_of: int, multiplier: float | None = None) -> int:
    """TorchTitan's / Llama's SwiGLU inner size (``compute_ffn_hidden_dim``): 2/3 of 4 x ``dim``,
    times ``multiplier``, rounded up to a multiple of ``multiple_of``."""
    h = int(2 * 4 * dim / 3)
    if multiplier is not None:
        h = int(multiplier * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)
