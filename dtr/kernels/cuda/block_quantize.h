// Symmetric block quantization on a CUDA device: the CUDA twin of
// dtr/kernels/cpu/block_quantize.h, with the same per-element math
// (dtr/kernels/block_quantize.h), so the codes, the absmax values and the
// dequantized values are the CPU kernels' bits.
//
// Launch: one 256-thread block per quantization block; each thread takes the
// elements (int4: pairs of elements) t, t + 256, ... of it, and the block's
// largest magnitude is a block all-reduction (max, which does not depend on the
// order). Enqueues on `stream`; never synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda {

// As cpu::block_quantize, with every array in device memory. Instantiated for
// float and bf16.
template <class T>
void block_quantize(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes, float* absmax,
                    cudaStream_t stream);

// As cpu::block_dequantize, with every array in device memory. Instantiated for
// float and bf16.
template <class T>
void block_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, int bits, T* out,
                      cudaStream_t stream);

}  // namespace dtr::kernels::cuda
