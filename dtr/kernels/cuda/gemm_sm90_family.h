// Internal to the Hopper GEMM: what its host side (gemm_sm90.cu) shares with its kernels
// (gemm_sm90_kernel.cuh). The kernels compile in one translation unit per family, an
// element type and a tile width, so that the families build in parallel: kernels/CMakeLists.txt
// generates those units from gemm_sm90_instance.cu.in. Only with DTR_GEMM_SM90.
#pragma once

#include "dtr/kernels/gemm_epilogue.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda::sm90::detail {

// Element tags (the kernels' template arguments).
struct Bf16 {};
struct F16 {};

constexpr int kBM = 128;       // rows of a block tile: 64 per consumer warpgroup
constexpr int kBK = 64;        // k per stage: one 128-byte swizzle row of 16-bit elements
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups

struct KernelParams {
  uint16_t* c;
  int m, n, k;
  int64_t ldc, stride_c;
  int tiles_m, tiles_n, batch;
  float alpha, beta;
  bool a_batched, b_batched;  // false: one matrix serves every batch entry
  bool c_pairs;               // C (and pre) allow 4-byte stores of two elements
  bool c_tma;                 // beta == 0 and map_c (map_pre) describe C (pre): stage tiles, store them in bulk
  // The epilogue (dtr/kernels/gemm_epilogue.h).
  const uint16_t* bias;
  uint16_t* pre;
  GemmActivation act;
};

// The four kernels (one per operand layout) for elements E and block tiles of 128 x BN
// (BN = 256 or 128). The members are defined in gemm_sm90_kernel.cuh and instantiated once,
// in the family's generated translation unit.
template <class E, int BN>
struct KernelFamily {
  // Launches the kernel for the layout (A [m, k] when a_k_major, else [k, m]; B [n, k] when
  // b_k_major, else [k, n]) on one persistent block per SM, at most one per output tile.
  static void launch(bool a_k_major, bool b_k_major, const CUtensorMap& map_a, const CUtensorMap& map_b,
                     const CUtensorMap& map_c, const CUtensorMap& map_pre, const KernelParams& p, int tiles,
                     int device, cudaStream_t stream);
  // cudaFuncGetAttributes of the kernel with both operands K-major.
  static cudaError_t attributes(cudaFuncAttributes* attr);
};

}  // namespace dtr::kernels::cuda::sm90::detail
