"""The math a GEMM kernel's name says it runs (issue 47, item 2): kernel names as cuBLAS, cuBLASLt and
CUTLASS print them in real traces (``volta_sgemm_128x32_nn``: ../shared/traces/real-multi; the others as
HolisticTraceAnalysis' and TraceLens' test traces and NVIDIA's forums show them)."""
from __future__ import annotations

import pytest

from streamtrace.report.precision import gemm_precision, kernel_dtype


@pytest.mark.parametrize("name, dtype", [
    ("volta_sgemm_128x32_nn", "fp32"),
    ("ampere_sgemm_128x64_tn", "fp32"),
    ("ampere_tf32_s1688gemm_tf32_256x128_16x3_nn", "tf32"),
    ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "tf32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4", "tf32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "bf16"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", "bf16"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_32x3_nn", "fp16"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("volta_dgemm_64x64_nn", "fp64"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", None),            # Hopper's cuBLASLt: no dtype named
    ("void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<float const>>", "fp32"),
    ("void gemmk1_kernel<int, float, 256, 5, false>(cublasGemmk1Params<float>)", None),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(cutlass_80_tensorop_s1688gemm_64x64"
     "_32x4_nn_align1::Params)", "tf32"),                                   # a100_rank3_of8 (HolisticTraceAnalysis)
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", None),
    ("void split_embedding_backward_codegen_adagrad_kernel<c10::Half, float>(fbgemm_gpu::gemm_args)", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda>", None),
])
def test_kernel_names(name, dtype):
    assert kernel_dtype(name) == dtype


def test_without_tables_the_config_then_bf16_said_as_assumed():
    class Cfg:
        dtype, source = "float32", "job.toml"
    assert gemm_precision(None, Cfg()) == ("fp32", "the config's precision (job.toml)")
    dt, why = gemm_precision(None, None, has=lambda d: d != "bf16")
    assert dt == "fp16" and why.startswith("assumed")

