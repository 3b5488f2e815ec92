// Symmetric block quantization of tensors, for collectives that send fewer bytes
// (ZeRO++: int8 weights in the all-gather between hosts, int8 or int4 partial
// gradient sums). The elements, in their flat order, are cut into blocks of
// `block` values; each block keeps its largest magnitude (f32) and each value an
// int8 or int4 code. The rounding, the exact cases and the NaN/Inf rule are
// dtr/kernels/block_quantize.h's:
//
//   BlockQuantized q = block_quantize(shard, 256, 8);   // shard: f32 or bf16, CPU or CUDA
//   Tensor back = block_dequantize(q, shard.sizes(), DType::bf16);
//   // |back - shard| <= absmax of the block / 127 / 2, element by element
//
// Not differentiable: the codes are what a collective sends, not a step of the
// model's computation.
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>

namespace dtr {

struct BlockQuantized {
  Tensor codes;    // u8: numel bytes (int8), or (numel + 1) / 2 (int4: two per byte, low nibble first)
  Tensor absmax;   // f32 [ceil(numel / block)]
  int64_t numel = 0;
  int64_t block = 256;
  int bits = 8;
};

// x: contiguous, f32 or bf16, on the CPU or a CUDA device; block even and positive;
// bits 8 or 4. The codes and absmax are on x's device.
BlockQuantized block_quantize(const Tensor& x, int64_t block = 256, int bits = 8);

// The sizes block_quantize gives `numel` values: code bytes, and blocks (absmax values).
int64_t block_quantized_code_bytes(int64_t numel, int bits);
int64_t block_quantized_blocks(int64_t numel, int64_t block);
// block_quantize into q's codes and absmax (contiguous, of those sizes, on x's device;
// e.g. parts of a buffer a collective sends); q.numel, q.block and q.bits say how.
void block_quantize_into(const Tensor& x, const BlockQuantized& q);

// Writes the dequantized values into `out`: contiguous, f32 or bf16, q.numel
// elements, on the codes' device.
void block_dequantize_into(const BlockQuantized& q, const Tensor& out);

// A new tensor of `shape` (q.numel elements) and `dtype` (f32 or bf16).
Tensor block_dequantize(const BlockQuantized& q, const Shape& shape, DType dtype);

}  // namespace dtr
