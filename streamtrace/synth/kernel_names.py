"""The compute kernels the synthetic generator (``streamtrace.synth.job``) launches: their real
names as an H100 run of Megatron-LM writes them (cuBLAS, flash-attention, PyTorch's elementwise and
reduction kernels), grid and block, by the generator's kernel key (``KERNELS``)."""
from __future__ import annotations

_AN = "at::native::(anonymous namespace)::"
_EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{0}, std::array<char*, {1}ul> >(int, at::native::{0}, std::array<char*, {1}ul>)"
_RED = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::{0}, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::{0}, unsigned int, float, 4>)"
_MTA = "void {2}multi_tensor_apply_kernel<{2}{0}, {2}{1}>({2}{0}, {2}{1})"
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_%s_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
_FLASH = "void pytorch_flash::flash_%s_kernel<Flash_%s_kernel_traits<%s, cutlass::bfloat16_t, Flash_kernel_traits<%s, cutlass::bfloat16_t> >, %s>(pytorch_flash::Flash_%s_params)"
_GELU = "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16"
KERNELS = {  # kernel key -> (name, grid, block)
    "fprop": (_GEMM % "tn", [132, 1, 1], [384, 1, 1]),
    "dgrad": (_GEMM % "nn", [132, 1, 1], [384, 1, 1]),
    "wgrad": (_GEMM % "nt", [132, 1, 1], [384, 1, 1]),
    "ln": (f"void {_AN}vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", [2048, 1, 1], [128, 1, 1]),
    "ln_bwd": (f"void {_AN}layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)", [2048, 1, 1], [128, 1, 1]),
    "flash": (_FLASH % ("fwd", "fwd", "128, 128, 64, 4, false, false", "128, 128, 64, 4", "false, true, false, false, true, true, false, false", "fwd"), [16, 16, 1], [128, 1, 1]),
    "flash_bwd": (_FLASH % ("bwd_dq_dk_dv_loop_seqk_parallel", "bwd", "128, 64, 128, 8, 2, 4, 2, false, false", "128, 64, 128, 8", "true, false, false, false, false, true, false", "bwd"), [32, 1, 16], [256, 1, 1]),
    "add": (_EW.format("CUDAFunctor_add<c10::BFloat16>", 3), [8192, 1, 1], [128, 1, 1]),
    "gelu": (_EW.format(f"GeluCUDAKernelImpl{_GELU})#1}}", 2), [16384, 1, 1], [128, 1, 1]),
    "gelu_bwd": (_EW.format(f"GeluBackwardCUDAKernelImpl{_GELU}, c10::BFloat16)#1}}", 3), [16384, 1, 1], [128, 1, 1]),
    "emb": (f"void {_AN}indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)", [4096, 1, 1], [128, 1, 1]),
    "emb_bwd": (f"void {_AN}embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)", [128, 1, 1], [32, 32, 1]),
    "max": (_RED.format("MaxOps<float>"), [2048, 1, 1], [32, 16, 1]),
    "sum": (_RED.format("func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>"), [2048, 1, 1], [32, 16, 1]),
    "mul": (_EW.format("AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >", 2), [65536, 1, 1], [128, 1, 1]),
    "norm": (_MTA.format("TensorListMetadata<1>", "LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float*, int", _AN), [320, 1, 1], [512, 1, 1]),
    "adam": (_MTA.format("FusedOptimizerTensorListMetadata<4>", "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*", _AN), [320, 1, 1], [512, 1, 1]),
}
