"""The kernel classes by name: real kernel names (from H100/H200, A100 and V100 traces, cuBLAS,
CUTLASS, FBGEMM, PyTorch) against the class each belongs to, written by hand."""
import re

import pytest

from streamtrace.aggregate.whatif_changes import KERNEL_CLASSES
from streamtrace.report.precision import GEMM_KERNEL

NAMES = [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm"),          # Hopper cuBLASLt (CUDA >= 12.8)
    ("nvjet_tss_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("ampere_sgemm_128x64_tn", "gemm"),
    ("volta_h884gemm_64x64_ldg8_nn", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_tn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x5_tn_align4::Params)", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("void fbgemm_gpu::split_embedding_backward_codegen_sgd_unweighted_kernel_cta_per_row_1<float, float>(...)", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)", "reduce"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false>(Flash_fwd_params)", "attention"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
]


@pytest.mark.parametrize("name,cls", NAMES)
def test_a_kernel_is_in_its_class(name, cls):
    if cls is not None:
        assert re.search(KERNEL_CLASSES[cls], name, re.I)
    is_gemm = bool(re.search(KERNEL_CLASSES["gemm"], name, re.I))
    assert is_gemm == (cls == "gemm") or cls == "attention"      # FlashAttention's traits name CUTLASS
    assert bool(GEMM_KERNEL.search(name)) == is_gemm             # the what-if and the report: one table
