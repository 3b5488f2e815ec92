// Fused multi-tensor AdamW on a CUDA device: the CUDA twin of dtr/kernels/cpu/adamw.h,
// with the same per-element math, operation for operation, in T (f32 or f64):
//   p = p * decay
//   m = m * beta1 + one_minus_beta1 * g
//   v = v * beta2 + one_minus_beta2 * (g * g)
//   p = p + step_size * (m / (sqrt(v) / bias_correction2_sqrt + eps))
// with the per-tensor coefficients of cpu::adamw_coeffs (computed on the host,
// the very function the CPU kernel uses). Every operation is rounded on its own
// (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn and their double forms: no FMA
// contraction, IEEE division and square root, subnormals kept), so the result is
// bit-identical to the CPU kernel's, hence to the op-by-op AdamW's, for finite
// inputs (NaN payloads may differ). The grad may be bf16 or f16 for f32 params:
// it is widened to f32 exactly on load.
//
// Launch: every tensor of the call in one launch (dtr/kernels/cuda/multi_tensor.cuh:
// the per-tensor table {pointers, numel, coefficients} is the kernel parameter;
// more than a batch's capacity, several hundred tensors, takes one launch per
// batch). One 256-thread block per chunk of 8192 elements of a tensor; a tensor
// whose four arrays are aligned for it is read and written in 16-byte vectors of
// the parameter (f32: 4 elements, f64: 2), the others element by element.
// Each element's math is independent of the split, so results do not depend on
// the launch shape. Enqueues on `stream`; never synchronizes.
#pragma once

#include "dtr/kernels/cpu/adamw.h"  // AdamWHyper, AdamWTensor, adamw_coeffs (fmt-free)

#include <cuda_runtime.h>

#include <cstddef>

namespace dtr::kernels::cuda {

using cpu::AdamWHyper;
using cpu::AdamWTensor;

// Elements per block.
inline constexpr int64_t kAdamWChunk = 8192;

// Updates `count` tensors whose arrays are in device memory (the descriptors
// themselves are host memory). Instantiated for (T, G) = (float, float),
// (float, bf16), (float, f16), (double, double).
template <class T, class G>
void adamw(const AdamWTensor<T, G>* tensors, size_t count, const AdamWHyper& hyper,
           cudaStream_t stream);

}  // namespace dtr::kernels::cuda
