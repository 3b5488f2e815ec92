// StridedIndexer: maps a linear element index of an N-D iteration shape to
// element offsets in K strided operands, inside CUDA kernels. Built on the host
// from sizes and per-operand strides, after merging dims that are contiguous for
// every operand (so most tensors become 1-D and index with no division).
#pragma once

#include "kernels/cpu/strided_loop.h"
#include "kernels/cuda/cuda_check.h"

#include <array>
#include <algorithm>
#include <cstdint>
#include <string>

namespace dtr::kernels::cuda {

inline constexpr int kMaxIndexerDims = 10;

template <int K>
struct StridedIndexer {
  int ndim = 0;
  int64_t numel = 1;
  int64_t sizes[kMaxIndexerDims] = {};
  int64_t strides[K][kMaxIndexerDims] = {};

  static StridedIndexer make(int nd, const int64_t* shape,
                             const std::array<const int64_t*, K>& operand_strides) {
    StridedIndexer ix;
    for (int d = 0; d < nd; ++d) ix.numel *= shape[d];
    auto c = coalesce<K>(nd, shape, operand_strides);
    DTR_CUDA_KERNEL_CHECK(static_cast<int>(c.sizes.size()) <= kMaxIndexerDims,
                          "CUDA kernels support at most " + std::to_string(kMaxIndexerDims) +
                              " non-mergeable dims, got " + std::to_string(c.sizes.size()));
    ix.ndim = static_cast<int>(c.sizes.size());
    for (int d = 0; d < ix.ndim; ++d) {
      ix.sizes[d] = c.sizes[d];
      for (int k = 0; k < K; ++k) ix.strides[k][d] = c.strides[k][d];
    }
    return ix;
  }

  // True when every operand is contiguous: offsets equal the linear index.
  bool is_linear() const {
    if (ndim != 1) return false;
    for (int k = 0; k < K; ++k) {
      if (strides[k][0] != 1) return false;
    }
    return true;
  }

  __device__ void offsets(int64_t linear, int64_t (&out)[K]) const {
    for (int k = 0; k < K; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < K; ++k) out[k] += i * strides[k][d];
    }
  }
};

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535 * 8));
}

}  // namespace dtr::kernels::cuda
