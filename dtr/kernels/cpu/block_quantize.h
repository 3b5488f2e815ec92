// Symmetric block quantization on the CPU: int8 or int4 codes and one f32 absmax
// per block (the math and the layout: dtr/kernels/block_quantize.h). Blocks are
// independent, so the results do not depend on the thread count, and they are
// bit-identical to the CUDA kernels' (dtr/kernels/cuda/block_quantize.h).
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

#include <cstdint>

namespace dtr::kernels::cpu {

// x: n contiguous elements, in blocks of `block` (even, > 0) elements; bits 8 or
// 4. Writes block_quantize_code_bytes(n, bits) bytes of codes and ceil(n / block)
// absmax values. Instantiated for float and bf16.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void block_quantize(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes,
                                           float* absmax);)
template <class T>
void block_quantize(const T* x, int64_t n, int64_t block, int bits, uint8_t* codes, float* absmax) {
  return DTR_CPU_DISPATCH(block_quantize<T>)(x, n, block, bits, codes, absmax);
}

// The inverse: n elements of T from the codes and absmax values block_quantize
// wrote (rounded once to T). Instantiated for float and bf16.
DTR_CPU_AT_EVERY_LEVEL(template <class T>
                       void block_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                                             int bits, T* out);)
template <class T>
void block_dequantize(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, int bits, T* out) {
  return DTR_CPU_DISPATCH(block_dequantize<T>)(codes, absmax, n, block, bits, out);
}

}  // namespace dtr::kernels::cpu
