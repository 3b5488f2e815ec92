// Helpers shared by the tests: a tensor's values read back as doubles,
// element-wise closeness of two value lists, and the CPU kernels' thread count set
// for one scope.
#pragma once

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/tensor/tensor.h"

#include <catch2/catch.hpp>

#include <cstddef>
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

// Runs the CPU kernels on `n` threads until the end of the scope.
struct ThreadCount {
  int saved = kernels::num_threads();
  explicit ThreadCount(int n) { kernels::set_num_threads(n); }
  ~ThreadCount() { kernels::set_num_threads(saved); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
};

}  // namespace dtr::testing
