// Symmetric block quantization, the per-element math shared by the CPU and CUDA
// kernels (dtr/kernels/cpu/block_quantize.h, dtr/kernels/cuda/block_quantize.h),
// so both give the same bits. ZeRO++'s quantized collectives send these codes:
// int8 weights for the all-gather between hosts (qwZ), int8 or int4 partial
// gradient sums (qgZ).
//
// A tensor is cut into blocks of `block` consecutive elements (the last may be
// shorter). A block keeps its largest magnitude, absmax (f32), and each element
// x the integer code q = rint(x / absmax * qmax), qmax = 127 (int8) or 7 (int4),
// rounded to nearest, ties to even; it comes back as absmax * (q / qmax). So:
//   - the error of an element is at most half a step, absmax / qmax / 2 (up to
//     float rounding);
//   - the values absmax * (k / qmax) of the grid come back exactly, and so does a
//     block of one value (its code is +-qmax, and qmax / qmax is 1);
//   - a block of zeros has absmax 0 and comes back as zeros;
//   - a block holding a NaN or an infinity has absmax NaN, and every element of
//     it comes back NaN: a non-finite value is never turned into a finite one
//     (training then sees the non-finite step as it would unquantized).
// Storage: int8 codes one byte each (two's complement); int4 codes two per byte,
// element i in byte i / 2, the low nibble first. Blocks have an even size, so no
// byte holds codes of two blocks.
#pragma once

#include "dtr/kernels/host_device.h"

#include <cmath>
#include <cstdint>

namespace dtr::kernels {

// The largest code magnitude for `bits` (8 or 4).
DTR_HOST_DEVICE constexpr int block_quantize_qmax(int bits) { return bits == 4 ? 7 : 127; }

// Bytes of codes for n elements.
DTR_HOST_DEVICE constexpr int64_t block_quantize_code_bytes(int64_t n, int bits) {
  return bits == 4 ? (n + 1) / 2 : n;
}

// What an element adds to its block's absmax: its magnitude, or +infinity when
// it is not finite (the block's absmax then becomes NaN: block_absmax_of).
DTR_HOST_DEVICE DTR_FORCE_INLINE float block_magnitude(float x) {
  return (x - x == 0.0f) ? fabsf(x) : INFINITY;  // x - x is NaN for NaN and +-inf
}

// A block's absmax from the largest block_magnitude of its elements.
DTR_HOST_DEVICE DTR_FORCE_INLINE float block_absmax_of(float largest_magnitude) {
  return largest_magnitude == INFINITY ? NAN : largest_magnitude;
}

DTR_HOST_DEVICE DTR_FORCE_INLINE int block_quantize_value(float x, float absmax, int qmax) {
  if (!(absmax > 0.0f)) return 0;  // zeros, or a non-finite block (absmax NaN)
  const float q = rintf(x / absmax * static_cast<float>(qmax));
  return static_cast<int>(fminf(fmaxf(q, static_cast<float>(-qmax)), static_cast<float>(qmax)));
}

// A non-finite block gives the one quiet NaN, the same bits on every device (a
// product with NaN would keep the host's payload but not the GPU's).
DTR_HOST_DEVICE DTR_FORCE_INLINE float block_dequantize_value(int q, float absmax, int qmax) {
  if (absmax != absmax) return NAN;
  return absmax * (static_cast<float>(q) / static_cast<float>(qmax));
}

// An int4 code from its nibble (two's complement in 4 bits).
DTR_HOST_DEVICE DTR_FORCE_INLINE int int4_from_nibble(unsigned nibble) {
  return static_cast<int>((nibble & 0xFu) ^ 0x8u) - 8;
}

}  // namespace dtr::kernels
