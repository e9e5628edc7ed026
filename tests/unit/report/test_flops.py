"""Model FLOPs per token and MFU (issue 31) against published numbers and formulas worked by hand.

Sources:
* TorchTitan ``docs/performance.md`` (Llama 3 on 64 A100 80GB, FSDP2, local batch 1, seq 8192):
  8B 2,973 tokens/s per GPU at 58.2 % MFU (selective op AC); 70B 331 tokens/s at 51.7 % (full AC);
  MFU against the A100's 312 TFLOP/s BF16 peak; that version of TorchTitan counted every parameter,
  the token embedding included (``6 * num_params + 12 * l * h * q * t``).
* Llama 3 8B has 8.03 B parameters, 70B 70.6 B (Meta's Llama 3 model card).
* Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (SC'21, arXiv:2104.04473), eq. (3) without recomputation: a GPT iteration is
  ``72 B s l h^2 (1 + s / 6h + V / 12 l h)`` FLOPs; GPT-3 175B: l 96, h 12,288, s 2,048, V 51,200.
"""
from __future__ import annotations

import pytest

from streamtrace.report.flops import flops_per_token, mfu, param_count
from streamtrace.topology.hardware import gpu_spec
from streamtrace.topology.trainconfig import KNOWN_MODELS, ModelShape


def test_llama3_parameter_counts_match_the_model_card():
    assert param_count(KNOWN_MODELS[("llama3", "8B")], include_embedding=True) / 1e9 == pytest.approx(8.03, abs=0.005)
    assert param_count(KNOWN_MODELS[("llama3", "70B")], include_embedding=True) / 1e9 == pytest.approx(70.55, abs=0.05)


@pytest.mark.parametrize("flavor,tps,published", [("8B", 2973, 58.2), ("70B", 331, 51.7)])
def test_torchtitan_published_mfu(flavor, tps, published):
    m = KNOWN_MODELS[("llama3", flavor)]
    peak = gpu_spec("NVIDIA A100-SXM4-80GB").peak("bf16")
    assert peak == 312
    got = mfu(tps, flops_per_token(m, 8192, "torchtitan", include_embedding=True), 1, peak)
    assert got == pytest.approx(published, abs=0.05)


def test_llama3_8b_by_hand():
    # 6 N + 12 L H Q T with N the non-embedding parameters: per layer wq 4096^2, wk and wv 4096 x 1024,
    # wo 4096^2, w1 w2 w3 4096 x 14336, two norms 4096; plus final norm 4096 and output 4096 x 128256
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    n = 32 * layer + 4096 + 4096 * 128256
    assert flops_per_token(KNOWN_MODELS[("llama3", "8B")], 8192) == 6 * n + 12 * 32 * 32 * 128 * 8192


def test_gpt3_175b_megatron_equals_the_papers_formula():
    l, h, s, V = 96, 12288, 2048, 51200
    gpt3 = ModelShape("gpt3 175B", l, h, 4 * h, 96, 96, V, swiglu=False)
    per_token_paper = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    assert flops_per_token(gpt3, s, "megatron") == pytest.approx(per_token_paper, rel=1e-12)


def test_where_the_conventions_differ():
    # same matmuls; TorchTitan also counts the RMSNorm weights (2 per layer + the final one) x 6
    m = KNOWN_MODELS[("llama3", "70B")]
    diff = flops_per_token(m, 8192, "torchtitan") - flops_per_token(m, 8192, "megatron")
    assert diff == pytest.approx(6 * (2 * 80 * 8192 + 8192), rel=1e-6)


def test_moe_counts_active_experts_only():
    dense = ModelShape("d", 2, 64, 128, 4, 4, 100)
    moe = ModelShape("m", 2, 64, 128, 4, 4, 100, experts=8, top_k=2)
    # two experts' MLPs instead of one, plus the router's 64 x 8 per layer
    extra = 2 * (3 * 64 * 128 + 64 * 8)
    assert flops_per_token(moe, 32) - flops_per_token(dense, 32) == 6 * extra
    # Megatron: the MLP term scales with top-k (12 L h^2 x (f/h) x k x 3/2)
    d = flops_per_token(moe, 32, "megatron") - flops_per_token(dense, 32, "megatron")
    assert d == pytest.approx(12 * 2 * 64 * 64 * (128 / 64) * 1 * 1.5)


def test_peak_table_names():
    assert gpu_spec("NVIDIA H100 80GB HBM3").peak("bf16") == 989
    assert gpu_spec("NVIDIA H100 PCIe").peak("bf16") == 756
    assert gpu_spec("AMD Instinct MI300X").peak("bf16") == pytest.approx(1307.4)
    assert gpu_spec("Tesla V100-SXM2-16GB").peak("fp32") == 15.7
    assert gpu_spec("Some Future GPU") is None
    with pytest.raises(ValueError):
        flops_per_token(KNOWN_MODELS[("llama3", "8B")], 8, "palm")
