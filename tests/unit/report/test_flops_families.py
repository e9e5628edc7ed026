"""Model FLOPs per token of TorchTitan's model families by name (issue 31: llama3, llama4, qwen3,
deepseek_v3, kimi_k2_7, gpt_oss), against numbers that do not come from the code under test.

Sources:
* The flavours' published numbers, read from pytorch/torchtitan ``main`` (commit b5bcd76, Aug 2026):
  ``torchtitan/models/{llama3,qwen3,deepseek_v3,kimi_k2_7,gpt_oss}/__init__.py``; the arithmetic below is
  written out from them by hand.
* TorchTitan itself as the peer tool: each flavour built on the ``meta`` device from that commit's
  ``model_registry(flavor).model`` and its ``Config.get_nparams_and_flops(model, seq_len=4096)``
  (``torchtitan/models/utils.py``); the values it printed are ``TORCHTITAN_FLOPS``. llama4 is
  gone from that ``main``: its values come from its last version there (commit 43e52fd), run alike.
* Model cards (activated parameters, token embedding included unless said): Qwen3-30B-A3B 3.3 B,
  Qwen3-235B-A22B 22 B; DeepSeek-V3 37 B (arXiv:2412.19437); gpt-oss-20b 3.61 B and gpt-oss-120b
  5.13 B active, embedding excluded (OpenAI's gpt-oss model card).
"""
from __future__ import annotations

import pytest

from streamtrace.report.efficiency import efficiency_markdown, efficiency_section
from streamtrace.report.flops import flops_per_token, param_count
from streamtrace.report.options import EfficiencyOptions
from streamtrace.topology.torchtitan_models import KNOWN_MODELS, known_flavours
from streamtrace.topology.trainconfig import from_torchtitan_toml

T = 4096

#: (name, flavor): FLOPs per token at seq len 4096 as TorchTitan b5bcd76 computes them (llama4: 43e52fd)
TORCHTITAN_FLOPS = {
    ("llama3", "debugmodel"): 109334016, ("llama3", "1B"): 9025499136, ("llama3", "3B"): 23504357376,
    ("llama3", "8B"): 51471998976, ("llama3", "70B"): 449230454784, ("llama3", "405B"): 2523980857344,
    ("llama4", "debugmodel"): 112909824, ("llama4", "17bx16e"): 108910049280,
    ("llama4", "17bx128e"): 109075200000,
    ("qwen3", "debugmodel"): 997234176, ("qwen3", "debugmodel_non_fused_qkv"): 997234176,
    ("qwen3", "0.6B"): 6394871808, ("qwen3", "1.7B"): 13142022144, ("qwen3", "4B"): 31382565888,
    ("qwen3", "8B"): 52658190336, ("qwen3", "14B"): 94008698880, ("qwen3", "32B"): 217675069440,
    ("qwen3", "debugmodel_moe"): 1111266816, ("qwen3", "30B-A3B"): 27914883072,
    ("qwen3", "235B-A22B"): 167260001280,
    ("deepseek_v3", "debugmodel"): 920421888, ("deepseek_v3", "16B"): 18105996288,
    ("deepseek_v3", "236B"): 185507051520, ("deepseek_v3", "671B"): 281158232064,
    ("kimi_k2_7", "debugmodel"): 920421888, ("kimi_k2_7", "moonlight-16B-A3B"): 18872767488,
    ("kimi_k2_7", "Kimi-VL-A3B"): 18872767488, ("kimi_k2_7", "Kimi-K2.5"): 220824741888,
    ("gpt_oss", "debugmodel"): 1078183104, ("gpt_oss", "20b"): 26481681792, ("gpt_oss", "120b"): 38044854144,
}


def test_every_known_flavour_equals_torchtitans_own_count():
    assert {k for k in KNOWN_MODELS if k[0] != "kimi_k2_5"} == set(TORCHTITAN_FLOPS)
    for key, expected in TORCHTITAN_FLOPS.items():
        assert flops_per_token(KNOWN_MODELS[key], T) == expected, key
    # kimi_k2_7's ModelSpec calls itself kimi_k2_5: the same shapes under that name
    assert flops_per_token(KNOWN_MODELS[("kimi_k2_5", "Kimi-K2.5")], T) == TORCHTITAN_FLOPS[("kimi_k2_7", "Kimi-K2.5")]


def test_llama3_1b_by_hand():
    # dim 2048, 16 layers, 32 heads (dim 64), 8 KV heads, MLP int(8 * 2048 / 3) = 5461, x 1.5 = 8191,
    # rounded up to a multiple of 1024 = 8192; tied embedding: the output projection counted once
    layer = 2 * 2048 * 2048 + 2 * 2048 * (8 * 64) + 3 * 2048 * 8192 + 2 * 2048
    n = 16 * layer + 2048 + 2048 * 128256
    assert param_count(KNOWN_MODELS[("llama3", "1B")]) == n
    assert flops_per_token(KNOWN_MODELS[("llama3", "1B")], T) == 6 * n + 12 * 16 * 32 * 64 * T


def test_llama4_17bx128e_by_hand():
    # TorchTitan's last llama4 (commit 43e52fd): dim 5120, 48 layers, 40 heads of 128, 8 KV heads,
    # vocabulary 202,048. Expert inner size (compute_moe_hidden_dim): int(8 * 5120 / 3) = 13653,
    # x 1.2 -> int(16383.6) = 16383, / (top-1 + 1 shared) -> int(8191.5) = 8191, up to a multiple of
    # 2048 -> 8192; interleave_moe_layer_step 1: an MoE in all 48 layers
    h = 5120
    attn = 2 * h * 5120 + 2 * h * (8 * 128)
    moe = h * 128 + 3 * h * 8192 + 3 * h * 8192          # router, 1 of 128 experts, 1 shared expert
    n = 48 * (attn + 2 * h + moe) + h + h * 202048
    m = KNOWN_MODELS[("llama4", "17bx128e")]
    assert param_count(m) == n
    assert flops_per_token(m, T) == 6 * n + 12 * 48 * 40 * 128 * T
    # Maverick and Scout: "17B active parameters" (Meta's Llama 4 model card), embedding included
    for f in ("17bx128e", "17bx16e"):
        assert param_count(KNOWN_MODELS[("llama4", f)], include_embedding=True) / 1e9 == pytest.approx(17.2, abs=0.05)


def test_llama4_debugmodel_interleaves_dense_and_moe_layers():
    # dim 256, 6 layers, 16 heads (= KV heads) of 16; layers 1, 3, 5 MoE (8 experts, top-1, 1 shared)
    # of compute_moe_hidden_dim(256) = int(682 / 2) = 341 -> 512, layers 0, 2, 4 a dense MLP of
    # compute_ffn_hidden_dim(256, 256) = 682 -> 768
    attn = 4 * 256 * 256
    n = 6 * (attn + 2 * 256) + 3 * 3 * 256 * 768 + 3 * (256 * 8 + 2 * 3 * 256 * 512) + 256 + 256 * 2048
    assert flops_per_token(KNOWN_MODELS[("llama4", "debugmodel")], T) == 6 * n + 12 * 6 * 16 * 16 * T


def test_qwen3_8b_dense_by_hand():
    # dim 4096, 36 layers, 32 heads and 8 KV heads of dim 128, q/k RMSNorms of 128, MLP 12,288
    layer = 2 * 4096 * (32 * 128) + 2 * 4096 * (8 * 128) + 2 * 128 + 3 * 4096 * 12288 + 2 * 4096
    n = 36 * layer + 4096 + 4096 * 151936
    assert flops_per_token(KNOWN_MODELS[("qwen3", "8B")], T) == 6 * n + 12 * 36 * 32 * 128 * T


def test_qwen3_30b_a3b_moe_by_hand():
    # dim 2048, 48 layers, 32 heads, 4 KV heads of 128; 128 experts of 768, top 8; router 2048 x 128
    attn = 2 * 2048 * (32 * 128) + 2 * 2048 * (4 * 128) + 2 * 128
    moe = 2048 * 128 + 8 * (3 * 2048 * 768)
    n = 48 * (attn + moe + 2 * 2048) + 2048 + 2048 * 151936
    m = KNOWN_MODELS[("qwen3", "30B-A3B")]
    assert param_count(m) == n
    assert flops_per_token(m, T) == 6 * n + 12 * 48 * 32 * 128 * T
    # the model card's 3.3 B activated parameters (embedding 151,936 x 2,048 included)
    assert (n + 151936 * 2048) / 1e9 == pytest.approx(3.3, abs=0.06)


def test_deepseek_v3_671b_mla_by_hand():
    h, a, nope, rope, v, q, kv = 7168, 128, 128, 64, 128, 1536, 512
    mla = (h * q + q + q * a * (nope + rope)          # wq_a, its RMSNorm, wq_b
           + h * (kv + rope) + kv                     # wkv_a, its RMSNorm
           + kv * a * (nope + v) + a * v * h)         # wkv_b, wo
    dense_mlp = 3 * h * 18432                         # the first 3 layers
    moe = h * 256 + 8 * 3 * h * 2048 + 1 * 3 * h * 2048   # router, 8 of 256 experts, 1 shared expert
    n = 61 * (mla + 2 * h) + 3 * dense_mlp + 58 * moe + h + h * 129280
    m = KNOWN_MODELS[("deepseek_v3", "671B")]
    assert param_count(m) == n
    # attention: 6 L H (d_qk + d_v) T with d_qk = 128 + 64, d_v = 128
    assert flops_per_token(m, T) == 6 * n + 6 * 61 * 128 * (192 + 128) * T
    assert (n + 129280 * h) / 1e9 == pytest.approx(37, abs=0.6)      # "37B activated"


def test_deepseek_v3_16b_without_query_compression():
    # q_lora_rank 0: one query projection h x a (d + r), no query RMSNorm
    h, a = 2048, 16
    mla = h * a * 192 + h * (512 + 64) + 512 + 512 * a * 256 + a * 128 * h
    moe = h * 64 + 6 * 3 * h * 1408 + 3 * h * (2 * 1408)
    n = 27 * (mla + 2 * h) + 1 * 3 * h * 10944 + 26 * moe + h + h * 102400
    assert flops_per_token(KNOWN_MODELS[("deepseek_v3", "16B")], T) == 6 * n + 6 * 27 * a * 320 * T


def test_kimi_k2_5_text_tower_by_hand():
    # DeepSeek-V3's MLA + MoE layers with 64 heads, 384 experts (top 8), 1 shared, 1 dense layer;
    # the vision tower is not counted (TorchTitan leaves it out)
    h, a = 7168, 64
    mla = h * 1536 + 1536 + 1536 * a * 192 + h * (512 + 64) + 512 + 512 * a * 256 + a * 128 * h
    moe = h * 384 + 8 * 3 * h * 2048 + 3 * h * 2048
    n = 61 * (mla + 2 * h) + 3 * h * 18432 + 60 * moe + h + h * 163840
    assert flops_per_token(KNOWN_MODELS[("kimi_k2_7", "Kimi-K2.5")], T) == 6 * n + 6 * 61 * a * 320 * T


def test_gpt_oss_20b_by_hand():
    h, a, g, d, f, E, k = 2880, 64, 8, 64, 2880, 32, 4
    attn = h * (a + 2 * g) * d + (a + 2 * g) * d + a * d * h + h + a    # fused QKV + bias, wo + bias, sinks
    expert = h * 2 * f + 2 * f + f * h + h                               # mlp1 (gate and up) + bias, mlp2 + bias
    moe = h * E + E + k * expert                                         # router with bias, 4 of 32 experts
    n = 24 * (attn + moe + 2 * h) + h + h * 201088
    m = KNOWN_MODELS[("gpt_oss", "20b")]
    assert param_count(m) == n
    assert flops_per_token(m, T) == 6 * n + 12 * 24 * a * d * T
    assert n / 1e9 == pytest.approx(3.61, abs=0.005)                    # OpenAI: 3.61 B active


def test_moe_counting_rule():
    """Only top-k routed experts count, plus the router (all E columns) and the shared experts."""
    m = KNOWN_MODELS[("qwen3", "30B-A3B")]
    one_more_expert = type(m)(**{**m.__dict__, "top_k": 9})
    assert flops_per_token(one_more_expert, T) - flops_per_token(m, T) == 6 * 48 * 3 * 2048 * 768
    twice_the_experts = type(m)(**{**m.__dict__, "experts": 256})
    assert flops_per_token(twice_the_experts, T) - flops_per_token(m, T) == 6 * 48 * 2048 * 128   # router only
    ds = KNOWN_MODELS[("deepseek_v3", "671B")]
    no_shared = type(ds)(**{**ds.__dict__, "shared_ffn_hidden": 0})
    assert flops_per_token(ds, T) - flops_per_token(no_shared, T) == 6 * 58 * 3 * 7168 * 2048
    one_more_dense = type(ds)(**{**ds.__dict__, "dense_layers": 4})
    moe_layer = 7168 * 256 + 9 * 3 * 7168 * 2048
    assert flops_per_token(one_more_dense, T) - flops_per_token(ds, T) == 6 * (3 * 7168 * 18432 - moe_layer)


def test_megatron_convention_for_the_new_shapes():
    # Qwen3 8B, Megatron's matmul-only count: TorchTitan's minus 6 x the norms (2 per layer + final + q/k)
    m = KNOWN_MODELS[("qwen3", "8B")]
    diff = flops_per_token(m, T) - flops_per_token(m, T, "megatron")
    assert diff == pytest.approx(6 * (36 * (2 * 4096 + 2 * 128) + 4096), rel=1e-9)
    with pytest.raises(ValueError, match="multi-latent"):
        flops_per_token(KNOWN_MODELS[("deepseek_v3", "16B")], T, "megatron")


def _section(tmp_path, name, flavor):
    p = tmp_path / "cfg.toml"
    p.write_text(f'[model]\nname = "{name}"\nflavor = "{flavor}"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n'
                 '[parallelism]\ndata_parallel_shard_degree = -1\n')
    return efficiency_section({"world_size": 8}, [], EfficiencyOptions(torchtitan_config=str(p)))


def test_a_toml_naming_a_new_family(tmp_path):
    sec = _section(tmp_path, "deepseek_v3", "671B")
    inp = sec["inputs"]
    assert inp["flops_per_token"] == TORCHTITAN_FLOPS[("deepseek_v3", "671B")]
    assert "TorchTitan" in inp["flops_per_token_from"] and "deepseek_v3 671B" in inp["flops_per_token_from"]
    assert list(inp["flops_per_token_by_convention"]) == ["torchtitan"]       # no Megatron MLA formula
    md = "\n".join(efficiency_markdown(sec))
    assert "the two conventions" not in md
    gpt = _section(tmp_path, "gpt_oss", "120b")["inputs"]
    assert gpt["flops_per_token"] == TORCHTITAN_FLOPS[("gpt_oss", "120b")]
    assert set(gpt["flops_per_token_by_convention"]) == {"torchtitan", "megatron"}


def test_an_unknown_flavour_asks_for_flops_per_token(tmp_path):
    assert "999B" not in known_flavours("qwen3") and known_flavours("qwen3_5") == []
    for name, flavor in (("qwen3", "999B"), ("qwen3_5", "27B")):
        inp = _section(tmp_path, name, flavor)["inputs"]
        assert from_torchtitan_toml(tmp_path / "cfg.toml").model is None
        assert inp["flops_per_token"] is None
        assert f"no model shape for {name} {flavor}" in inp["flops_per_token_from"]
        assert "give --flops-per-token" in inp["flops_per_token_from"]


def test_a_new_shape_survives_aggregate_json(tmp_path):
    """aggregate.json keeps the config (``TrainConfig.to_json``) and the report reads it back."""
    import json

    from streamtrace.topology.trainconfig import train_config_from_json
    p = tmp_path / "cfg.toml"
    p.write_text('[model]\nname = "deepseek_v3"\nflavor = "16B"\n[training]\nseq_len = 4096\n')
    back = train_config_from_json(json.loads(json.dumps(from_torchtitan_toml(p).to_json())))
    assert back.model == KNOWN_MODELS[("deepseek_v3", "16B")]
    assert flops_per_token(back.model, T) == TORCHTITAN_FLOPS[("deepseek_v3", "16B")]
