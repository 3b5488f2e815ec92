// StridedIndexer: maps a linear element index of an N-D iteration shape to
// element offsets in K strided operands, inside CUDA kernels. Built on the host
// from sizes and per-operand strides, after merging dims that are contiguous for
// every operand (so most tensors become 1-D and index with no division).
//
// Splitting a linear index into per-dim indices divides by each dim's size. When
// the tensor has at most INT32_MAX elements (decided once in make(), so the branch
// in offsets() is uniform across a launch), offsets() does it with 32-bit
// multiply-shift dividers (dtr/kernels/int_divider.h) instead of 64-bit `/` and `%`,
// which are long software routines on NVIDIA GPUs; the offsets themselves stay
// 64-bit (index * stride can exceed 32 bits). Larger tensors take the 64-bit path.
#pragma once

#include "dtr/kernels/cpu/strided_loop.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/int_divider.h"

#include <array>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace dtr::kernels::cuda {

inline constexpr int kMaxIndexerDims = 10;

template <int K>
struct StridedIndexer {
  int ndim = 0;
  // offsets() takes the 32-bit path (div32); set by make() when 0 < numel <= INT32_MAX.
  bool use32 = false;
  int64_t numel = 1;
  int64_t sizes[kMaxIndexerDims] = {};
  int64_t strides[K][kMaxIndexerDims] = {};
  IntDivider32 div32[kMaxIndexerDims] = {};  // by sizes[d], when use32

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
    // Every size divides numel, so numel <= INT32_MAX bounds each size and every
    // linear index below numel by 2^31 - 1 (IntDivider32's range).
    ix.use32 = ix.numel > 0 && ix.numel <= std::numeric_limits<int32_t>::max();
    if (ix.use32) {
      for (int d = 0; d < ix.ndim; ++d) {
        ix.div32[d] = IntDivider32(static_cast<uint32_t>(ix.sizes[d]));
      }
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

  // The K offsets of element `linear`, which must lie in [0, numel).
  DTR_HOST_DEVICE void offsets(int64_t linear, int64_t (&out)[K]) const {
    for (int k = 0; k < K; ++k) out[k] = 0;
    if (use32) {
      // The outermost dim needs no division: what is left of linear < numel is
      // already below sizes[0].
      uint32_t rest = static_cast<uint32_t>(linear);
      for (int d = ndim - 1; d > 0; --d) {
        const DivMod32 qr = div32[d].divmod(rest);
        rest = qr.quot;
        for (int k = 0; k < K; ++k) out[k] += int64_t{qr.rem} * strides[k][d];
      }
      for (int k = 0; k < K; ++k) out[k] += int64_t{rest} * strides[k][0];
      return;
    }
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
