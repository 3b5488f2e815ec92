// The values the collective tests make each rank contribute, and the results
// every reduce op must give, computed in closed form (shared by the MPI tests
// and the GPU tests of both backends).
#pragma once

#include "dtr/mesh/reduce_op.h"
#include "dtr/tensor/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dtr::testing {

// Rank r's value at index i: small integers, exact in every dtype tested (u8 included).
inline double contribution(int r, int64_t i) { return (r + 1) * (i % 7 + 1); }

inline std::vector<double> contributions(int r, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = contribution(r, i);
  return v;
}

// The reduction of every rank's contribution at index i over `size` ranks.
inline double reduce_expected(mesh::ReduceOp op, int64_t i, int size, DType dtype) {
  double sum = 0, max = -1e30, min = 1e30;
  for (int r = 0; r < size; ++r) {
    double v = contribution(r, i);
    sum += v;
    max = std::max(max, v);
    min = std::min(min, v);
  }
  switch (op.kind) {
    case mesh::ReduceOp::Kind::sum: return sum;
    case mesh::ReduceOp::Kind::avg: return is_floating(dtype) ? sum / size : std::trunc(sum / size);
    case mesh::ReduceOp::Kind::max: return max;
    case mesh::ReduceOp::Kind::min: return min;
    case mesh::ReduceOp::Kind::premul_sum: return sum * op.factor;
  }
  return 0;
}

}  // namespace dtr::testing
