// for_each_row: the N-D loop under every strided CPU kernel.
//
// K operands share one iteration shape; each has its own element strides (0 on
// broadcast dims). Dims that are contiguous for every operand are merged and
// size-1 dims dropped, so most calls become a single long inner row. fn is
// called as fn(offsets, n, inner_strides): `offsets[k]` is operand k's element
// offset of the row's first element, `n` the row length and `inner_strides[k]`
// operand k's stride along the row. Rows are split across threads when the
// total work is at least kParallelGrain elements.
#pragma once

#include "dtr/kernels/cpu/parallel.h"

#include <array>
#include <cstdint>
#include <vector>

namespace dtr::kernels {

template <size_t K>
struct CoalescedShape {
  std::vector<int64_t> sizes;                   // innermost last
  std::array<std::vector<int64_t>, K> strides;  // per operand, same length as sizes
};

template <size_t K>
CoalescedShape<K> coalesce(int ndim, const int64_t* sizes,
                           const std::array<const int64_t*, K>& strides) {
  CoalescedShape<K> out;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    if (!out.sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < K; ++k) {
        if (out.strides[k].back() != strides[k][d] * sizes[d]) mergeable = false;
      }
      if (mergeable) {
        out.sizes.back() *= sizes[d];
        for (size_t k = 0; k < K; ++k) out.strides[k].back() = strides[k][d];
        continue;
      }
    }
    out.sizes.push_back(sizes[d]);
    for (size_t k = 0; k < K; ++k) out.strides[k].push_back(strides[k][d]);
  }
  if (out.sizes.empty()) {  // a single element
    out.sizes.push_back(1);
    for (size_t k = 0; k < K; ++k) out.strides[k].push_back(0);
  }
  return out;
}

template <size_t K, class Fn>
void for_each_row(int ndim, const int64_t* sizes, const std::array<const int64_t*, K>& strides,
                  Fn&& fn, bool allow_parallel = true) {
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 0) return;
  }
  CoalescedShape<K> c = coalesce<K>(ndim, sizes, strides);
  const int outer_dims = static_cast<int>(c.sizes.size()) - 1;
  const int64_t n = c.sizes.back();
  std::array<int64_t, K> inner{};
  for (size_t k = 0; k < K; ++k) inner[k] = c.strides[k].back();
  int64_t rows = 1;
  for (int d = 0; d < outer_dims; ++d) rows *= c.sizes[d];

  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    // Multi-index of row_begin, then an odometer over the outer dims.
    std::vector<int64_t> index(outer_dims, 0);
    std::array<int64_t, K> offsets{};
    int64_t rem = row_begin;
    for (int d = outer_dims - 1; d >= 0; --d) {
      index[d] = rem % c.sizes[d];
      rem /= c.sizes[d];
      for (size_t k = 0; k < K; ++k) offsets[k] += index[d] * c.strides[k][d];
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      fn(offsets, n, inner);
      for (int d = outer_dims - 1; d >= 0; --d) {
        ++index[d];
        for (size_t k = 0; k < K; ++k) offsets[k] += c.strides[k][d];
        if (index[d] < c.sizes[d]) break;
        for (size_t k = 0; k < K; ++k) offsets[k] -= c.sizes[d] * c.strides[k][d];
        index[d] = 0;
      }
    }
  };
  if (allow_parallel && rows * n >= kParallelGrain) {
    if (rows == 1) {  // one long row: split the row itself
      parallel_for(0, n, kParallelGrain, [&](int64_t lo, int64_t hi) {
        std::array<int64_t, K> offsets{};
        for (size_t k = 0; k < K; ++k) offsets[k] = lo * inner[k];
        fn(offsets, hi - lo, inner);
      });
      return;
    }
    parallel_for(0, rows, (kParallelGrain + n - 1) / n, run_rows);
    return;
  }
  run_rows(0, rows);
}

}  // namespace dtr::kernels
