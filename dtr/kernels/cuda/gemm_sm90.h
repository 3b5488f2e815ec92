// Internal to the CUDA GEMM (gemm.cu): the Hopper path, a wgmma.mma_async kernel fed by
// bulk tensor copies (TMA): host side in gemm_sm90.cu, kernels (compiled for sm_90a) in
// gemm_sm90_kernel.cuh. gemm.cu asks it first for bf16/f16 GEMMs and falls back to its
// mma.sync kernels when it declines.
#pragma once

#include "dtr/kernels/gemm_epilogue.h"
#include "dtr/kernels/transpose.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace dtr::kernels::cuda::sm90 {

enum class Elem { bf16, f16 };

// One (batched) GEMM in gemm.h's terms, elements as raw 16-bit words.
struct GemmArgs {
  Elem elem;
  Transpose trans_a, trans_b;
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* c;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;  // 0 for A or B broadcasts it
  int64_t batch;
  float alpha, beta;
  // The epilogue (dtr/kernels/gemm_epilogue.h); pre has C's ldc and batch stride.
  const uint16_t* bias;
  uint16_t* pre;
  GemmActivation act;
};

// Whether this build holds the sm_90a kernels (CMAKE_CUDA_ARCHITECTURES had 90).
bool compiled();

// Whether the current device can run them: compiled(), compute capability 9.0, and the
// loaded module image is the sm_90a one. Cached per device.
bool device_supported();

// Runs the GEMM with the wgmma kernel and returns true, or returns false without touching
// anything when the arguments do not fit it: k == 0, an operand pointer,
// leading dim or batch stride not 16-byte aligned, sizes beyond the copy engine's
// limits, or an activation when C cannot be bulk-stored from the staging buffer (beta !=
// 0, C or pre not 16-byte aligned by row and batch). Call only when device_supported().
bool gemm(const GemmArgs& args, cudaStream_t stream);

// Benchmarks and tests only: force the block tile's width (128 or 256); 0 restores the
// heuristic.
void set_tile_n(int bn);

}  // namespace dtr::kernels::cuda::sm90
