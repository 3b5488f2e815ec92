// CUDA layer_norm and rms_norm (dtr/kernels/cuda/norm.h through dtr/tensor/ops/nn.h),
// forward and backward, against the CPU ops on the same inputs: rows in
// {1, 2, 3, 64, 1000} x cols in {1, 2, 3, 31, 32, 33, 127, 512, 1000, 4097, 8192}
// (every launch strategy: warp per row with 1, 2 and 4 vectors per lane, block
// per row, and, in a test of their own, rows too long for registers), weight and
// bias present or absent, every floating dtype; the kernels' mean and rstd; rows
// == 0 and cols == 0; bitwise run-to-run determinism; bad inputs.
//
// Inputs are fresh random values each run (the seed is printed on failure). The
// two devices compute in the same acc_t (float for f32/bf16/f16, double for f64)
// but sum in different orders, so results agree within
//   |gpu - cpu| <= acc_rtol * scale + out_rtol * |cpu|
// where scale is the size of the terms the result is made of (computed in double
// from the inputs: e.g. rstd * (|g| + mean|g| + (|xhat| + 1) * mean|g * xhat|) for
// dx, sum over rows of |dy| * (|xhat| + 1) for dweight), acc_rtol is 2e-5 for float
// accumulation and 1e-13 for double, and out_rtol is one rounding of the output
// type (2^-7 bf16, 2^-10 f16, 0 for f32 and f64), taken of max(|cpu|, 2^-14) since
// below f16's smallest normal 2^-14 one rounding is an absolute 2^-24.
#include "dtr/base/error.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cpu/norm.h"
#include "dtr/kernels/cuda/norm.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

const std::vector<int64_t> kRows = {1, 2, 3, 64, 1000};
// Every register plan of the forward and backward kernels is reached by some dtype:
// warp per row with 1, 2 or 4 vectors per lane (f32: up to 128, 256, 512 columns),
// block per row with 1, 2, 4 or 8 (f32: 1000, 1500, 3000, 8192 columns), and rows too
// long for registers.
const std::vector<int64_t> kCols = {1, 2, 3, 31, 32, 33, 127, 200, 512, 1000, 1500, 3000, 4097, 8192};

constexpr double kHalfMinNormal = 1.0 / 16384;  // 2^-14

// Elements with |got - want| > acc_rtol * scale + out_rtol * |want| (NaN must meet NaN,
// infinities must match), and the first one described.
struct Mismatches {
  int64_t count = 0;
  std::string first;
};

Mismatches compare(const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& scale, double tol, double rtol) {
  Mismatches m;
  if (got.size() != want.size()) {
    m.count = 1;
    m.first = "sizes differ: gpu " + std::to_string(got.size()) + ", cpu " + std::to_string(want.size());
    return m;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      ok = std::fabs(g - w) <= tol * scale[i] + rtol * std::max(std::fabs(w), kHalfMinNormal);
    }
    if (!ok && m.count++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": gpu " << g << ", cpu " << w << " (|diff| " << std::fabs(g - w)
         << ", allowed " << tol * scale[i] + rtol * std::max(std::fabs(w), kHalfMinNormal) << ")";
      m.first = os.str();
    }
  }
  return m;
}

#define CHECK_CLOSE(what, got, want, scale, tol, rtol)                                   \
  do {                                                                                   \
    const Mismatches mm_ = compare((got), (want), (scale), (tol), (rtol));               \
    INFO((what) << ": " << mm_.count << " mismatches; first at " << mm_.first);          \
    CHECK(mm_.count == 0);                                                               \
  } while (0)

// Which norm, and which parameters it gets.
struct Variant {
  bool layer;
  bool weight;
  bool bias;
  std::string name() const {
    return std::string(layer ? "layer_norm" : "rms_norm") + (weight ? " +weight" : " -weight") +
           (layer ? (bias ? " +bias" : " -bias") : "");
  }
  double eps() const { return layer ? 1e-5 : 1e-6; }
};

// The sizes of the terms each result is made of, in double from the (rounded) inputs.
struct Scales {
  std::vector<double> y, dx, dweight, dbias;
};

Scales norm_scales(const Variant& v, const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& b, const std::vector<double>& dy, int64_t rows,
                   int64_t cols) {
  Scales s;
  s.y.resize(x.size());
  s.dx.resize(x.size());
  s.dweight.assign(static_cast<size_t>(cols), 0.0);
  s.dbias.assign(static_cast<size_t>(cols), 0.0);
  const auto n = static_cast<double>(cols);
  std::vector<double> xh(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double mu = 0, mean_abs = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) {
      mu += xr[c];
      mean_abs += std::fabs(xr[c]);
    }
    mu = v.layer ? mu / n : 0.0;
    mean_abs /= n;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    const double rs = 1.0 / std::sqrt(var / n + v.eps());
    double s1 = 0, s2 = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double wc = v.weight ? w[c] : 1.0;
      xh[c] = (xr[c] - mu) * rs;
      g[c] = dyr[c] * wc;
      s1 += std::fabs(g[c]);
      s2 += std::fabs(g[c] * xh[c]);
      s.y[r * cols + c] = rs * std::fabs(wc) * (std::fabs(xr[c] - mu) + (v.layer ? mean_abs : 0.0)) +
                          (v.bias ? std::fabs(b[c]) : 0.0);
      s.dweight[c] += std::fabs(dyr[c]) * (std::fabs(xh[c]) + 1);
      s.dbias[c] += std::fabs(dyr[c]);
    }
    s1 /= n;
    s2 /= n;
    for (int64_t c = 0; c < cols; ++c) {
      s.dx[r * cols + c] = rs * (std::fabs(g[c]) + s1 + (std::fabs(xh[c]) + 1) * s2);
    }
  }
  return s;
}

// y and the gradients of x, weight and bias (undefined when absent) for upstream grad dy.
struct NormResult {
  Tensor y, dx, dweight, dbias;
};

NormResult run_norm(const Variant& v, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& dy, Device device) {
  const Tensor xl = x.to(device).detach().requires_grad_();
  const Tensor wl = v.weight ? w.to(device).detach().requires_grad_() : Tensor();
  const Tensor bl = v.layer && v.bias ? b.to(device).detach().requires_grad_() : Tensor();
  const int64_t cols = x.size(-1);
  const Tensor y = v.layer ? layer_norm(xl, cols, wl, bl, v.eps()) : rms_norm(xl, wl, v.eps());
  y.backward(dy.to(device));
  NormResult out{y.detach(), xl.grad(), Tensor(), Tensor()};
  if (wl.defined()) out.dweight = wl.grad();
  if (bl.defined()) out.dbias = bl.grad();
  return out;
}

// Random inputs of one shape and dtype, and their values in double.
struct NormInputs {
  Tensor x, w, b, dy;
  std::vector<double> xv, wv, bv, dyv;
};

NormInputs make_inputs(DType dtype, int64_t rows, int64_t cols, std::mt19937& gen) {
  NormInputs in;
  in.x = random_cpu({rows, cols}, dtype, gen, -2, 2);
  in.w = random_cpu({cols}, dtype, gen, 0.5, 1.5);
  in.b = random_cpu({cols}, dtype, gen, -1, 1);
  in.dy = random_cpu({rows, cols}, dtype, gen, -1, 1);
  in.xv = values_of(in.x);
  in.wv = values_of(in.w);
  in.bv = values_of(in.b);
  in.dyv = values_of(in.dy);
  return in;
}

// One variant on one input: forward and every gradient, gpu against cpu.
void check_norm_case(const Variant& v, const NormInputs& in) {
  const DType dtype = in.x.dtype();
  const int64_t rows = in.x.size(0), cols = in.x.size(1);
  CAPTURE(v.name(), name_of(dtype), rows, cols);
  const NormResult want = run_norm(v, in.x, in.w, in.b, in.dy, kCpu);
  const NormResult got = run_norm(v, in.x, in.w, in.b, in.dy, kGpu);
  REQUIRE(got.y.device() == kGpu);
  REQUIRE(got.dx.defined());
  REQUIRE(got.dx.device() == kGpu);
  CHECK(got.y.dtype() == dtype);
  CHECK(got.dx.dtype() == dtype);
  const Scales s = norm_scales(v, in.xv, in.wv, in.bv, in.dyv, rows, cols);
  const double tol = acc_rtol(dtype), rtol = out_rtol(dtype);
  CHECK_CLOSE("y", values_of(got.y), values_of(want.y), s.y, tol, rtol);
  CHECK_CLOSE("dx", values_of(got.dx), values_of(want.dx), s.dx, tol, rtol);
  if (v.weight) {
    REQUIRE(got.dweight.defined());
    CHECK(got.dweight.device() == kGpu);
    CHECK_CLOSE("dweight", values_of(got.dweight), values_of(want.dweight), s.dweight, tol, rtol);
  }
  if (v.layer && v.bias) {
    REQUIRE(got.dbias.defined());
    CHECK(got.dbias.device() == kGpu);
    CHECK_CLOSE("dbias", values_of(got.dbias), values_of(want.dbias), s.dbias, tol, rtol);
  }
}

// The kernel's mean and rstd against the CPU kernel's (same tolerances, scale 1 for
// the mean's sum and rstd for rstd), through the launchers directly.
template <class T>
void check_stats(bool layer, int64_t rows, int64_t cols, std::mt19937& gen) {
  using A = acc_t<T>;
  const DType dtype = dtype_of<T>;
  const DType adtype = dtype_of<A>;
  CAPTURE(layer, name_of(dtype), rows, cols);
  const Tensor x = random_cpu({rows, cols}, dtype, gen, -2, 2);
  const double eps = 1e-5;
  Tensor y_cpu = empty({rows, cols}, {.dtype = dtype});
  Tensor mean_cpu = empty({rows}, {.dtype = adtype});
  Tensor rstd_cpu = empty({rows}, {.dtype = adtype});
  const Tensor xg = x.to(kGpu);
  Tensor y_gpu = empty({rows, cols}, {.dtype = dtype, .device = kGpu});
  Tensor mean_gpu = empty({rows}, {.dtype = adtype, .device = kGpu});
  Tensor rstd_gpu = empty({rows}, {.dtype = adtype, .device = kGpu});
  cudaStream_t stream = cuda::current_stream(0);
  if (layer) {
    kernels::cpu::layer_norm_forward<T>(x.data<T>(), nullptr, nullptr, rows, cols, eps,
                                        y_cpu.data<T>(), mean_cpu.data<A>(), rstd_cpu.data<A>());
    kernels::cuda::layer_norm_forward<T>(xg.data<T>(), nullptr, nullptr, rows, cols, eps,
                                         y_gpu.data<T>(), mean_gpu.data<A>(), rstd_gpu.data<A>(),
                                         stream);
  } else {
    kernels::cpu::rms_norm_forward<T>(x.data<T>(), nullptr, rows, cols, eps, y_cpu.data<T>(),
                                      rstd_cpu.data<A>());
    kernels::cuda::rms_norm_forward<T>(xg.data<T>(), nullptr, rows, cols, eps, y_gpu.data<T>(),
                                       rstd_gpu.data<A>(), stream);
  }
  const std::vector<double> rstd_want = values_of(rstd_cpu);
  CHECK_CLOSE("rstd", values_of(rstd_gpu), rstd_want, rstd_want, acc_rtol(dtype), 0.0);
  if (layer) {
    CHECK_CLOSE("mean", values_of(mean_gpu), values_of(mean_cpu),
                std::vector<double>(static_cast<size_t>(rows), 2.0), acc_rtol(dtype), 0.0);
  }
}

}  // namespace

TEST_CASE("cuda layer_norm and rms_norm forward and backward match the cpu over rows x cols",
          "[gpu][norm]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const std::vector<Variant> variants = {
      {true, true, true}, {true, false, false}, {false, true, false}, {false, false, false}};
  for (DType dtype : kFloating) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kCols) {
        const NormInputs in = make_inputs(dtype, rows, cols, gen);
        for (const Variant& v : variants) check_norm_case(v, in);
      }
    }
  }
}

TEST_CASE("cuda layer_norm with only a weight or only a bias matches the cpu", "[gpu][norm]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : kFloating) {
    for (int64_t cols : {3, 33, 1000, 8192}) {
      const NormInputs in = make_inputs(dtype, 64, cols, gen);
      check_norm_case({true, true, false}, in);
      check_norm_case({true, false, true}, in);
    }
  }
}

TEST_CASE("cuda norms of rows too long for registers match the cpu", "[gpu][norm]") {
  // Forward: past 16384 f32 / bf16 / f16 elements (8192 f64) a row is read once per
  // pass; backward: past 8192 (4096 f64). 16385 and 40000 take those paths for every
  // dtype; 8193 takes the backward's for every dtype and the forward's for f64 only.
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : kFloating) {
    for (int64_t cols : {8193, 16385, 40000}) {
      for (int64_t rows : {1, 3}) {
        const NormInputs in = make_inputs(dtype, rows, cols, gen);
        check_norm_case({true, true, true}, in);
        check_norm_case({false, true, false}, in);
      }
    }
  }
}

TEST_CASE("cuda norm kernels write the cpu kernels' mean and rstd", "[gpu][norm]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (bool layer : {true, false}) {
    for (int64_t rows : {1, 3, 1000}) {
      for (int64_t cols : {1, 2, 33, 512, 4097, 20000}) {
        check_stats<float>(layer, rows, cols, gen);
        check_stats<double>(layer, rows, cols, gen);
        check_stats<bf16>(layer, rows, cols, gen);
        check_stats<f16>(layer, rows, cols, gen);
      }
    }
  }
}

TEST_CASE("cuda norm kernels: cols == 0 gives NaN statistics, rows == 0 zero dweight and dbias",
          "[gpu][norm]") {
  cudaStream_t stream = cuda::current_stream(0);
  // cols == 0: mean and rstd of every row are NaN, like the cpu kernel.
  Tensor x = empty({3, 0}, {.device = kGpu});
  Tensor y = empty({3, 0}, {.device = kGpu});
  Tensor mean = zeros({3}, {.device = kGpu});
  Tensor rstd = zeros({3}, {.device = kGpu});
  kernels::cuda::layer_norm_forward<float>(x.data<float>(), nullptr, nullptr, 3, 0, 1e-5,
                                           y.data<float>(), mean.data<float>(), rstd.data<float>(),
                                           stream);
  for (double v : values_of(mean)) CHECK(std::isnan(v));
  for (double v : values_of(rstd)) CHECK(std::isnan(v));
  // rows == 0: dweight and dbias are zeros (they start as ones here).
  Tensor none = empty({0, 5}, {.device = kGpu});
  Tensor stats = empty({0}, {.device = kGpu});
  Tensor w = ones({5}, {.device = kGpu});
  Tensor dw = ones({5}, {.device = kGpu});
  Tensor db = ones({5}, {.device = kGpu});
  CHECK(kernels::cuda::norm_backward_scratch_elements(0, 5, true, true) == 0);
  kernels::cuda::layer_norm_backward<float>(none.data<float>(), none.data<float>(),
                                            stats.data<float>(), stats.data<float>(),
                                            w.data<float>(), 0, 5, none.data<float>(),
                                            dw.data<float>(), db.data<float>(), nullptr, stream);
  CHECK(values_of(dw) == std::vector<double>(5, 0.0));
  CHECK(values_of(db) == std::vector<double>(5, 0.0));
  // The same through the ops: empty results, and gradients of the right shapes.
  const Tensor xe = empty({0, 5}, {.device = kGpu}).requires_grad_();
  const Tensor we = ones({5}, {.device = kGpu}).requires_grad_();
  const Tensor be = zeros({5}, {.device = kGpu}).requires_grad_();
  const Tensor ye = layer_norm(xe, 5, we, be);
  CHECK(ye.sizes() == Shape{0, 5});
  CHECK(ye.device() == kGpu);
  const Tensor xz = empty({4, 0}, {.device = kGpu});
  CHECK(rms_norm(xz).sizes() == Shape{4, 0});
}

TEST_CASE("cuda norms give bitwise the same results on every run", "[gpu][norm]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : kFloating) {
    for (const Shape& shape : std::vector<Shape>{{1000, 4097}, {64, 8192}, {3, 40000}, {1000, 33}, {2, 5, 512}}) {
      CAPTURE(name_of(dtype), shape);
      const int64_t cols = shape.back();
      const Tensor x = random_cpu(shape, dtype, gen, -2, 2);
      const Tensor w = random_cpu({cols}, dtype, gen, 0.5, 1.5);
      const Tensor b = random_cpu({cols}, dtype, gen, -1, 1);
      const Tensor dy = random_cpu(shape, dtype, gen, -1, 1);
      for (const Variant& v : {Variant{true, true, true}, Variant{false, true, false}}) {
        CAPTURE(v.name());
        const NormResult first = run_norm(v, x, w, b, dy, kGpu);
        const NormResult second = run_norm(v, x, w, b, dy, kGpu);
        CHECK(same_bits(first.y, second.y));
        CHECK(same_bits(first.dx, second.dx));
        CHECK(same_bits(first.dweight, second.dweight));
        if (v.layer) CHECK(same_bits(first.dbias, second.dbias));
      }
    }
  }
}

TEST_CASE("cuda norms of 3-D and non-contiguous inputs match the cpu", "[gpu][norm]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const Tensor base = random_cpu({6, 40, 5}, DType::f32, gen, -2, 2);
  const Tensor x_cpu = base.transpose(1, 2);  // [6, 5, 40], rows not contiguous
  const Tensor x_gpu = base.to(kGpu).transpose(1, 2);
  const Tensor w = random_cpu({40}, DType::f32, gen, 0.5, 1.5);
  const Tensor want = layer_norm(x_cpu, 40, w);
  const Tensor got = layer_norm(x_gpu, 40, w.to(kGpu));
  CHECK(got.sizes() == want.sizes());
  const std::vector<double> g = values_of(got), c = values_of(want);
  double worst = 0;
  for (size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::fabs(g[i] - c[i]));
  CHECK(worst <= 1e-5);
  const Tensor r_want = rms_norm(x_cpu, w);
  const Tensor r_got = rms_norm(x_gpu, w.to(kGpu));
  const std::vector<double> rg = values_of(r_got), rc = values_of(r_want);
  worst = 0;
  for (size_t i = 0; i < rc.size(); ++i) worst = std::max(worst, std::fabs(rg[i] - rc[i]));
  CHECK(worst <= 1e-5);
}

TEST_CASE("cuda norms reject bad inputs with dtr::Error", "[gpu][norm]") {
  const Tensor x = zeros({4, 8}, {.device = kGpu});
  CHECK_THROWS_AS(layer_norm(x, 8, zeros({7}, {.device = kGpu})), Error);
  CHECK_THROWS_WITH(layer_norm(x, 8, ones({8})), Catch::Contains("weight is on cpu"));
  CHECK_THROWS_AS(rms_norm(x, ones({8}, {.dtype = DType::bf16, .device = kGpu})), Error);
  CHECK_THROWS_AS(layer_norm(zeros({4, 8}, {.dtype = DType::i32, .device = kGpu}), 8), Error);
  CHECK_THROWS_AS(layer_norm(x, 9), Error);
  CHECK_THROWS_AS(kernels::cuda::layer_norm_forward<float>(nullptr, nullptr, nullptr, -1, 8, 1e-5,
                                                           nullptr, nullptr, nullptr,
                                                           cuda::current_stream(0)),
                  Error);
}
