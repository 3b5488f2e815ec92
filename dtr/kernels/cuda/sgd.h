// Fused multi-tensor SGD on a CUDA device: the CUDA twin of dtr/kernels/cpu/sgd.h, with
// the same per-element math, operation for operation, in T (f32 or f64), from the
// same per-tensor coefficients (cpu::sgd_coeffs, computed on the host). Every
// operation is rounded on its own (dtr/kernels/cuda/ieee_ops.cuh: no FMA contraction), so
// the result is bit-identical to the CPU kernel's, hence to the op-by-op SGD's, for
// finite inputs (NaN payloads may differ).
//
// Launch: every tensor of the call in one launch (dtr/kernels/cuda/multi_tensor.cuh), one
// 256-thread block per chunk of kSGDChunk elements of a tensor; a tensor whose arrays
// are aligned for it is read and written in 16-byte vectors (f32: 4 elements, f64: 2),
// the others element by element. Enqueues on `stream`; never synchronizes.
#pragma once

#include "dtr/kernels/cpu/sgd.h"  // SGDHyper, SGDTensor, sgd_coeffs

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cuda {

using cpu::SGDHyper;
using cpu::SGDTensor;

// Elements per block.
inline constexpr int64_t kSGDChunk = 8192;

// Updates `count` tensors whose arrays are in device memory (the descriptors
// themselves are host memory). Instantiated for float and double.
template <class T>
void sgd(const SGDTensor<T>* tensors, size_t count, const SGDHyper& hyper, cudaStream_t stream);

}  // namespace dtr::kernels::cuda
