// Internal to the CUDA GEMM: the epilogue of the 16-bit kernels (gemm.cu's mma.sync,
// gemm_sm90_kernel.cuh's wgmma), applied to accumulators on their way to C. Its arithmetic is
// dtr/kernels/gemm_epilogue.h's: v = alpha * acc + beta * C + bias[col], rounded once; C
// gets the activation of the rounded v, and pre (when set) the rounded v itself.
//
// The kernels' parameter blocks carry the fields these helpers read: alpha, beta, n,
// bias and c_pairs (C, and pre when set, allow 4-byte stores of two elements). The
// activation comes as an argument: p.act, or NoActivation{} in kernels built without
// one. GELU's code inlined into every one of a tile's fully unrolled stores made
// plain GEMMs up to 3x slower on an H100 even where it never ran; a kernel
// without the activation compiles none of it.
// Cvt converts between float and the raw 16-bit element (to_float, from_float).
#pragma once

#include "dtr/kernels/gemm_epilogue.h"

#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cuda::gemm_detail {

// The activation of kernels that have none: a compile-time GemmActivation::none.
using NoActivation = std::integral_constant<GemmActivation, GemmActivation::none>;

// v + bias[col]; v itself without a bias (so -0 stays -0) or past the last column.
template <class Cvt, class Params>
__device__ inline float add_bias(const Params& p, int col, float v) {
  return p.bias != nullptr && col < p.n ? v + Cvt::to_float(p.bias[col]) : v;
}

// v rounded into `pre`; returns what C stores: the rounded v, or its activation.
template <class Cvt, class Act>
__device__ inline uint16_t finish(float v, Act act, uint16_t& pre) {
  pre = Cvt::from_float(v);
  if (act == GemmActivation::none) return pre;
  return Cvt::from_float(apply_gemm_activation(act, Cvt::to_float(pre)));
}

__device__ inline uint32_t pack_pair(uint16_t lo, uint16_t hi) { return uint32_t{lo} | (uint32_t{hi} << 16); }

// Whether the pairs of this row of C (and of pre) may go out as 4-byte stores: in every
// row (c_pairs), or in this one because it starts 4-byte aligned. With an odd ldc (GPT-2's
// logits, 50257 wide) every other row does, so half the rows store pairs.
template <class Params>
__device__ inline bool row_takes_pairs(const Params& p, const uint16_t* crow, const uint16_t* prow) {
  return p.c_pairs || ((reinterpret_cast<uintptr_t>(crow) | reinterpret_cast<uintptr_t>(prow)) & 3u) == 0;
}

// Columns col and col + 1 (col even) of one row of C (crow) and of pre (prow, or null),
// from the accumulators x0 and x1; columns past n are left alone.
template <class Cvt, class Params, class Act>
__device__ inline void store_pair(const Params& p, Act act, uint16_t* crow, uint16_t* prow, int col, float x0,
                                  float x1) {
  float v0 = p.alpha * x0;
  float v1 = p.alpha * x1;
  if (col + 1 < p.n && row_takes_pairs(p, crow, prow)) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(crow + col);
    if (p.beta != 0.f) {
      const uint32_t old = *dst;
      v0 += p.beta * Cvt::to_float(static_cast<uint16_t>(old & 0xffffu));
      v1 += p.beta * Cvt::to_float(static_cast<uint16_t>(old >> 16));
    }
    v0 = add_bias<Cvt>(p, col, v0);
    v1 = add_bias<Cvt>(p, col + 1, v1);
    uint16_t pre0, pre1;
    const uint16_t c0 = finish<Cvt>(v0, act, pre0);
    const uint16_t c1 = finish<Cvt>(v1, act, pre1);
    *dst = pack_pair(c0, c1);
    if (prow != nullptr) *reinterpret_cast<uint32_t*>(prow + col) = pack_pair(pre0, pre1);
    return;
  }
  const float xs[2] = {v0, v1};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (col + j >= p.n) continue;
    float v = xs[j];
    if (p.beta != 0.f) v += p.beta * Cvt::to_float(crow[col + j]);
    v = add_bias<Cvt>(p, col + j, v);
    uint16_t pre;
    crow[col + j] = finish<Cvt>(v, act, pre);
    if (prow != nullptr) prow[col + j] = pre;
  }
}

}  // namespace dtr::kernels::cuda::gemm_detail
