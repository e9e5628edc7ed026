"""The shapes of TorchTitan's model flavours by ``([model] name, flavor)`` (``KNOWN_MODELS``),
so that a TorchTitan TOML, which names a model but not its shape, gives the model FLOPs per token.

Read from pytorch/torchtitan ``main`` (commit b5bcd76, Aug 2026), one flavour-building function each:

* ``llama3``: ``torchtitan/models/llama3/__init__.py`` (``llama3_configs``): dim, n_layers,
  n_heads, n_kv_heads, MLP inner size ``compute_ffn_hidden_dim(dim, multiple_of,
  ffn_dim_multiplier)``; vocabulary 128,256 (the debug model 2,048). 1B and 3B tie the embedding
  to the output projection, which leaves TorchTitan's FLOPs unchanged (the shared weight is
  counted once, as the output projection).
* ``llama4``: no longer in ``main``; read from its last version there (commit 43e52fd, June 2026,
  the parent of the commit that removed it), ``torchtitan/models/llama4/__init__.py``
  (``llama4_configs``): dim 5,120, 48 layers, 40 heads, 8 KV heads, vocabulary 202,048; one routed
  (top-1) and one shared expert of ``compute_moe_hidden_dim`` (``llama4_moe_hidden``); an MoE
  in every layer of 17bx16e and 17bx128e (``interleave_moe_layer_step`` 1), in every other layer
  of the debug model (8 experts), the rest a dense MLP of ``compute_ffn_hidden_dim``.
* ``qwen3``: ``torchtitan/models/qwen3/__init__.py`` (``qwen3_configs``): head dim 128 set apart
  from dim, an RMSNorm on the queries and one on the keys (``qk_norm``), the MLP inner size given
  as a number; MoE flavours (``debugmodel_moe``, ``30B-A3B``, ``235B-A22B``) have an MoE in every
  layer, no shared experts, a router without bias; vocabulary 151,936.
* ``deepseek_v3``: ``torchtitan/models/deepseek_v3/__init__.py`` (``deepseekv3_configs``):
  multi-head latent attention (``q_lora_rank``, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 128,
  ``qk_rope_head_dim`` 64, ``v_head_dim`` 128), the first ``n_dense_layers`` layers with a dense
  MLP, then MoE with ``num_shared_experts`` x ``moe_hidden_dim`` of shared experts; without the
  multi-token-prediction layers (``num_mtp_layers`` = 0, the default).
* ``kimi_k2_7`` (its ``ModelSpec`` says ``kimi_k2_5``; both names known):
  ``torchtitan/models/kimi_k2_7/__init__.py`` (``kimi_k2_5_configs``): DeepSeek-V3's MLA + MoE
  layers (``build_mla_moe_layers``) with sigmoid routing; vocabulary 163,840; the vision tower of
  Kimi-VL-A3B and Kimi-K2.5 is left out, as TorchTitan leaves it out of the FLOPs.
* ``gpt_oss``: ``torchtitan/models/gpt_oss/__init__.py`` (``gptoss_configs``): 64 heads, 8 KV
  heads of dim 64 (the attention defaults), biases on the QKV and output projections, the router
  and the experts, one sink logit per head, MoE in every layer with experts of inner size 2,880;
  vocabulary 201,088.  The sliding-window layers count as full attention, as TorchTitan counts
  them.

TorchTitan's own count (``get_dense_model_nparams_and_flops`` / ``get_moe_model_nparams_and_flops``
in ``torchtitan/models/utils.py``, called by each model's ``Config.get_nparams_and_flops``) is
``streamtrace.report.flops.flops_per_token``.  Not here: ``qwen3_5`` and ``muse_glimmer``
(linear-attention layers), ``flux`` (a diffusion model): those need ``--flops-per-token``.
"""
from __future__ import annotations

from .modelshape import ModelShape, torchtitan_ffn_hidden as ffn


def _llama3() -> dict:
    v = 128256
    rows = {"debugmodel": (6, 256, ffn(256, 256), 16, 16, 2048),
            "1B": (16, 2048, ffn(2048, 1024, 1.5), 32, 8, v),
            "3B": (28, 3072, ffn(3072, 1024, 1.0), 24, 8, v),
            "8B": (32, 4096, ffn(4096, 1024, 1.3), 32, 8, v),
            "70B": (80, 8192, ffn(8192, 4096, 1.3), 64, 8, v),
            "405B": (126, 16384, ffn(16384, 4096, 1.2), 128, 8, v)}
    return {("llama3", f): ModelShape(f"llama3 {f}", *r) for f, r in rows.items()}


def _qwen3() -> dict:
    v = 151936
    # flavor: layers, dim, MLP (of one expert with MoE), heads, KV heads, vocabulary, experts, top-k
    rows = {"debugmodel": (8, 256, 3072, 16, 8, 2048, 0, 0),
            "debugmodel_non_fused_qkv": (8, 256, 3072, 16, 8, 2048, 0, 0),
            "0.6B": (28, 1024, 3072, 16, 8, v, 0, 0),
            "1.7B": (28, 2048, 6144, 16, 8, v, 0, 0),
            "4B": (36, 2560, 9728, 32, 8, v, 0, 0),
            "8B": (36, 4096, 12288, 32, 8, v, 0, 0),
            "14B": (40, 5120, 17408, 40, 8, v, 0, 0),
            "32B": (64, 5120, 25600, 64, 8, v, 0, 0),
            "debugmodel_moe": (8, 256, 768, 16, 8, 2048, 64, 8),
            "30B-A3B": (48, 2048, 768, 32, 4, v, 128, 8),
            "235B-A22B": (94, 4096, 1536, 64, 4, v, 128, 8)}
    return {("qwen3", f): ModelShape(f"qwen3 {f}", *r[:6], experts=r[6], top_k=r[7], head_dim=128, qk_norm=True)
            for f, r in rows.items()}


def llama4_moe_hidden(dim: int, multiple_of: int = 256, multiplier: float | None = None, per_token: int = 2) -> int:
    """Llama 4's expert inner size (TorchTitan's ``compute_moe_hidden_dim``): 2/3 of 4 x ``dim``,
    times ``multiplier``, divided by the experts a token goes through (``per_token`` = top-k +
    shared experts), then rounded up to a multiple of ``multiple_of`` (rounded last, unlike
    ``torchtitan_ffn_hidden``)."""
    h = int(2 * 4 * dim / 3)
    if multiplier is not None:
        h = int(multiplier * h)
    h = int(h / per_token)
    return h + (-h % multiple_of)


def _llama4() -> dict:
    # an MoE in every layer (interleave_moe_layer_step 1), in every other one in the debug model (step
    # 2, the others a dense MLP); one routed expert (top-1) and one shared expert of the same size
    moe, dense = llama4_moe_hidden(5120, 2048, 1.2), ffn(5120, 2048, 1.2)
    rows = {"debugmodel": (6, 256, llama4_moe_hidden(256), 16, 16, 2048, 8, 3, ffn(256, 256)),
            "17bx16e": (48, 5120, moe, 40, 8, 202048, 16, 0, dense),
            "17bx128e": (48, 5120, moe, 40, 8, 202048, 128, 0, dense)}
    return {("llama4", f): ModelShape(f"llama4 {f}", L, h, fe, a, g, v, experts=e, top_k=1, shared_ffn_hidden=fe,
                                      dense_layers=nd, dense_ffn_hidden=fd)
            for f, (L, h, fe, a, g, v, e, nd, fd) in rows.items()}


def _mla_moe(name: str, rows: dict) -> dict:
    """DeepSeek-V3's layer builder (``build_mla_moe_layers``), which kimi_k2_7 reuses: KV rank 512,
    head dims 128 + 64 RoPE, value 128; ``rows``: flavor -> (layers, dim, expert MLP, heads,
    vocabulary, experts, top-k, shared experts, dense layers, dense MLP, q_lora_rank)."""
    out = {}
    for f, (L, h, fe, a, v, e, k, sh, nd, fd, qr) in rows.items():
        out[(name, f)] = ModelShape(
            f"{name} {f}", L, h, fe, a, a, v, experts=e, top_k=k, shared_ffn_hidden=sh * fe, head_dim=128,
            dense_layers=nd, dense_ffn_hidden=fd, q_lora_rank=qr, kv_lora_rank=512, qk_rope_head_dim=64,
            v_head_dim=128)
    return out


def _deepseek_v3() -> dict:
    return _mla_moe("deepseek_v3", {"debugmodel": (6, 256, 256, 16, 2048, 8, 3, 2, 1, 1024, 0),
                                    "16B": (27, 2048, 1408, 16, 102400, 64, 6, 2, 1, 10944, 0),
                                    "236B": (60, 5120, 1536, 128, 102400, 160, 6, 2, 1, 12288, 1536),
                                    "671B": (61, 7168, 2048, 128, 129280, 256, 8, 1, 3, 18432, 1536)})


def _kimi() -> dict:
    # the text tower only: TorchTitan leaves the vision encoder's parameters out of the FLOPs
    m = _mla_moe("kimi_k2_7", {"debugmodel": (6, 256, 256, 16, 2048, 8, 3, 2, 1, 1024, 0),
                               "moonlight-16B-A3B": (27, 2048, 1408, 16, 163840, 64, 6, 2, 1, 11264, 0),
                               "Kimi-VL-A3B": (27, 2048, 1408, 16, 163840, 64, 6, 2, 1, 11264, 0),
                               "Kimi-K2.5": (61, 7168, 2048, 64, 163840, 384, 8, 1, 1, 18432, 1536)})
    return {**m, **{("kimi_k2_5", f): s for (_, f), s in m.items()}}     # the ModelSpec's name


def _gpt_oss() -> dict:
    rows = {"debugmodel": (4, 256, 8, 2048), "20b": (24, 2880, 32, 201088), "120b": (36, 2880, 128, 201088)}
    return {("gpt_oss", f): ModelShape(f"gpt_oss {f}", L, h, 2880, 64, 8, v, experts=e, top_k=4, head_dim=64,
                                       bias=True, sinks=True)
            for f, (L, h, e, v) in rows.items()}


#: shapes of TorchTitan's model flavours, by ``(name, flavor)`` (sources in the module docstring)
KNOWN_MODELS = {**_llama3(), **_llama4(), **_qwen3(), **_deepseek_v3(), **_kimi(), **_gpt_oss()}


def known_flavours(name: str) -> list:
    """The flavours of model ``name`` in ``KNOWN_MODELS`` (empty for an unknown model)."""
    return [f for n, f in KNOWN_MODELS if n == name]
