// Helpers shared by the single-GPU tests (tests/<layer>/cuda_*_test.cpp), which check the cuda
// ops against the same ops on the cpu: the two devices, dtype lists and names,
// random cpu inputs, values and bits read back to the host, the relative error of
// a result, the output-rounding tolerances, a fresh seed per test case, and a scope
// that switches the wgmma GEMM off.
// Comparisons whose tolerance formula belongs to one op (Mismatches / compare,
// bit_difference, CHECK_CLOSE) stay in the test files that use them.
//
//   using namespace dtr::testing::gpu;
//   std::mt19937 gen(seed);
//   const Tensor x = random_cpu({64, 128}, DType::bf16, gen, -2, 2);
//   CHECK(relative_error(f(x.to(kGpu)), f(x)) <= 1e-2);
#pragma once

#include "dtr/base/error.h"
#include "dtr/kernels/cuda/gemm.h"
#include "dtr/kernels/cuda/gemm_sm90.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"
#include "dtr/tensor/tensor.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace dtr::testing::gpu {

inline const Device kGpu = Device::cuda(0);
inline const Device kCpu = Device::cpu();

inline const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};
inline const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                              DType::i32, DType::i64, DType::u8};

// A new seed per call (the tests print it with CAPTURE so a failure can be replayed).
inline unsigned fresh_seed() { return std::random_device{}(); }

inline std::string name_of(DType dtype) { return std::string(dtype_name(dtype)); }

// Uniform values in [lo, hi) drawn in double from `gen` (one draw per element, in
// row-major order), then rounded to `dtype`; on the cpu. Floating dtypes only
// make sense here (integers would truncate).
inline Tensor random_cpu(const Shape& shape, DType dtype, std::mt19937& gen, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) x = dist(gen);
  return from_vector(v, shape).to(dtype);
}

// Random values of any `dtype` on the cpu from dtr's Philox generator (fast for
// big tensors): floats uniform in [lo, hi), drawn directly in `dtype`; integers
// drawn in f64 over a wide range ([0, 256) for u8, [-1e9, 1e9) otherwise) and
// truncated to `dtype`.
inline Tensor random_cpu_philox(const Shape& shape, DType dtype, Generator& gen, double lo, double hi) {
  if (is_floating(dtype)) {
    Tensor t = empty(shape, {.dtype = dtype});
    uniform_(t, lo, hi, &gen);
    return t;
  }
  Tensor wide = empty(shape, {.dtype = DType::f64});
  uniform_(wide, dtype == DType::u8 ? 0 : -1e9, dtype == DType::u8 ? 256 : 1e9, &gen);
  return wide.to(dtype);
}

// The values of `t` (any device, dtype or layout) as doubles, in row-major order.
inline std::vector<double> values_of(const Tensor& t) {
  return t.to(kCpu).to(DType::f64).contiguous().to_vector<double>();
}

// Same dtype, shape and bytes (any devices and layouts).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kCpu).contiguous(), y = b.to(kCpu).contiguous();
  return x.dtype() == y.dtype() && x.sizes() == y.sizes() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// ||got - want|| / ||want|| over all elements (the plain norm of the difference
// when want is 0). REQUIREs equal element counts.
inline double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  REQUIRE(g.size() == w.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// One rounding of an output stored in `dtype`, relative: 2^-7 (bf16), 2^-10
// (f16), 0 for f32 and f64.
inline double out_rtol(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 1.0 / 128;
    case DType::f16: return 1.0 / 1024;
    default: return 0;
  }
}

// Summation error allowed relative to the size of the summed terms: 2e-5 for
// float accumulation (f32, bf16, f16), 1e-13 for double (f64).
inline double acc_rtol(DType dtype) { return dtype == DType::f64 ? 1e-13 : 2e-5; }

// The exception message of f(), or "" when it does not throw dtr::Error.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Switches the Hopper wgmma GEMM off for one scope (the mma.sync kernels then run), and
// back to what it was at the end, so that scopes nest.
struct WgmmaOff {
  WgmmaOff() : was_enabled_(kernels::cuda::gemm_enable_wgmma(false)) {}
  ~WgmmaOff() { kernels::cuda::gemm_enable_wgmma(was_enabled_); }
  WgmmaOff(const WgmmaOff&) = delete;
  WgmmaOff& operator=(const WgmmaOff&) = delete;

 private:
  bool was_enabled_;
};

// Forces a tile width (128 or 256 columns) of the wgmma GEMM for one scope; 0 keeps the
// automatic choice.
struct WgmmaTileWidth {
  explicit WgmmaTileWidth(int bn) { kernels::cuda::sm90::set_tile_n(bn); }
  ~WgmmaTileWidth() { kernels::cuda::sm90::set_tile_n(0); }
  WgmmaTileWidth(const WgmmaTileWidth&) = delete;
  WgmmaTileWidth& operator=(const WgmmaTileWidth&) = delete;
};

// Which GEMM kernels a test runs the bf16/f16 cases on: wgmma at its own tile width or
// forced to 128 or 256 columns, or wgmma off (mma.sync). GemmKernelsScope selects one.
struct GemmKernels {
  bool wgmma;
  int tile_n;  // 0: wgmma's own choice
};
inline const std::vector<GemmKernels> kEveryGemmKernel = {{true, 0}, {true, 128}, {true, 256}, {false, 0}};

struct GemmKernelsScope {
  explicit GemmKernelsScope(const GemmKernels& kernels) : width_(kernels.tile_n) {
    if (!kernels.wgmma) off_.emplace();
  }

 private:
  WgmmaTileWidth width_;
  std::optional<WgmmaOff> off_;
};

}  // namespace dtr::testing::gpu
