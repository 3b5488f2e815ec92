// Internal to the CUDA GEMM: the parameter block every kernel receives, the tile
// walk order, the grid shape, and the float (SIMT) kernel's entry point, shared by
// gemm.cu (tensor cores and dispatch) and gemm_simt.cu (float).
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/gemm_epilogue.h"
#include "dtr/kernels/transpose.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace dtr::kernels::cuda::gemm_detail {

template <class Raw>
struct GemmParams {
  const Raw* a;
  const Raw* b;
  Raw* c;
  int m, n, k;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int64_t batch;
  float alpha, beta;
  bool c_pairs;  // C's (and pre's) pointer, ldc and batch stride allow 4-byte stores of two elements
  // The epilogue (dtr/kernels/gemm_epilogue.h): pre has C's ldc and batch stride.
  const Raw* bias;
  Raw* pre;
  GemmActivation act;
};

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The output tile of this block: consecutive blocks walk down groups of 8 tile rows
// before moving right, so that the A and B tiles they share stay in L2.
__device__ inline void tile_coords(int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroup = 8;
  const int tile = static_cast<int>(blockIdx.x);
  const int per_group = kGroup * tiles_n;
  const int first_m = (tile / per_group) * kGroup;
  const int group_m = min(tiles_m - first_m, kGroup);
  const int in_group = tile % per_group;
  tm = first_m + in_group % group_m;
  tn = in_group / group_m;
}

inline dim3 gemm_grid(int m, int n, int bm, int bn, int64_t batch) {
  const int64_t tiles = int64_t{ceil_div(m, bm)} * ceil_div(n, bn);
  DTR_CUDA_KERNEL_CHECK(tiles <= std::numeric_limits<int>::max(), "gemm: too many output tiles");
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
}

// C = alpha * op(A) . op(B) + beta * C in float on CUDA cores (gemm_simt.cu).
void launch_simt(Transpose ta, Transpose tb, const GemmParams<float>& p, cudaStream_t stream);

}  // namespace dtr::kernels::cuda::gemm_detail
