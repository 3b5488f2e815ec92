// Helpers shared by the tests: a tensor's values read back as doubles,
// element-wise closeness of two value lists, bf16 values in order (for distances
// in ulps), the logistic sigmoid in double for references, a tensor counting 0, 1,
// 2, ..., and the CPU kernels' thread count set, or restored, for one scope.
#pragma once

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/scalar_types.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/tensor.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtr::testing {

// The values of `t` (any device, dtype or layout) as doubles, in row-major order.
inline std::vector<double> values_of(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
}

// Each element of `got` within `tol` of `want`'s, relative or absolute.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

// Ordered integer for a bf16 bit pattern, so that adjacent values differ by 1 (+0 == -0).
inline int32_t bf16_order(bf16 v) {
  auto b = std::bit_cast<uint16_t>(v);
  return (b & 0x8000) ? -static_cast<int32_t>(b & 0x7FFF) : static_cast<int32_t>(b);
}

// The logistic sigmoid 1 / (1 + e^-x), in double.
inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// 0, 1, 2, ... in row-major order, of `shape` and `dtype`.
inline Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return arange(numel_of(shape), {.dtype = dtype}).view(shape);
}

// Runs the CPU kernels on `n` threads until the end of the scope.
struct ThreadCount {
  int saved = kernels::num_threads();
  explicit ThreadCount(int n) { kernels::set_num_threads(n); }
  ~ThreadCount() { kernels::set_num_threads(saved); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
};

// Puts the CPU kernels' thread count back at the end of the scope, for tests that
// change it (kernels::set_num_threads) as they go.
struct ThreadCountGuard {
  int saved = kernels::num_threads();
  ~ThreadCountGuard() { kernels::set_num_threads(saved); }
};

}  // namespace dtr::testing
