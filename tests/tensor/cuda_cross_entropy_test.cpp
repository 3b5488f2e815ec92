// CUDA cross_entropy (dtr/tensor/ops/nn.h, dtr/kernels/cuda/cross_entropy.h) against
// the CPU op on the same inputs: the mean loss and the logits' gradient for every
// floating dtype over vocab sizes {1, 2, 3, 255, 256, 1000, 50257} and row counts
// {1, 2, 7, 512, 4096} (all pairs but 4096 x 50257, 206M logits), with and
// without label smoothing and ignored rows; ignore_index edge cases (every row
// ignored, an ignore_index inside the class range, no rows); non-contiguous
// logits, an incoming gradient other than 1, large logits; run-to-run
// determinism; out-of-range targets. The gradient of large bf16/f16 logits whose
// vocabulary is not a multiple of 8 has padded, 16-byte aligned rows
// (dtr/tensor/ops/gemm_aligned_rows.h), and a tied head's GEMMs read it in place
// (dh, dW against the CPU within the matmul tests' 2e-3 (f16), 1e-2 (bf16)).
//
// Tolerances (the kernels sum in another order than the CPU and use expf (f32) or
// __expf (bf16/f16, relative error ~1e-6), not Eigen's exp; everything is computed
// in float for f32/bf16/f16, in double for f64, and rounded once):
//   loss:     |gpu - cpu| <= atol + rtol * |cpu|, atol = rtol = 1e-5 (f32, bf16,
//             f16) or 1e-12 (f64), plus one rounding of the output for bf16
//             (2^-7 * |cpu|) and f16 (2^-10 * |cpu|);
//   dlogits:  |gpu - cpu| <= k * |scale| + r * |cpu| + s, scale = grad / counted
//             (every element is scale * (p - ...) with p in [0, 1]): k = 5e-6,
//             r = 1e-6 (f32), k = 1e-13, r = 1e-14 (f64), bf16 and f16 with k =
//             5e-6 and r one output rounding (2^-7, 2^-10); s = 2^-24 (one f16
//             subnormal step) for f16, else 0.
// Inputs are fresh random values each run (the seed is printed on failure).
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/matmul_backward.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

const std::vector<int64_t> kVocabs = {1, 2, 3, 255, 256, 1000, 50257};
const std::vector<int64_t> kRows = {1, 2, 7, 512, 4096};

// Logits uniform in [lo, hi) (f32, then rounded once to `dtype`).
Tensor random_logits(int64_t rows, int64_t cols, Generator& gen, double lo = -4, double hi = 4) {
  Tensor t = empty({rows, cols});
  uniform_(t, lo, hi, &gen);
  return t;
}

// Targets uniform in [0, cols), each replaced by ignore_index with probability `ignored`.
Tensor random_targets(int64_t rows, int64_t cols, std::mt19937& rng, double ignored,
                      int64_t ignore_index = -100) {
  std::uniform_int_distribution<int64_t> any(0, cols - 1);
  std::bernoulli_distribution skip(ignored);
  std::vector<int64_t> v(static_cast<size_t>(rows));
  for (int64_t& x : v) x = skip(rng) ? ignore_index : any(rng);
  return from_vector(v, {rows});
}

double out_rounding(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 1.01 / 128;
    case DType::f16: return 1.01 / 1024;
    default: return 0;
  }
}

// Counts elements with |got - want| > atol + rtol * |want| (NaN must meet NaN,
// infinities must match) and describes the first (flat index, row, col, values).
struct Mismatches {
  int64_t count = 0;
  std::string first;
};

Mismatches compare(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  const int64_t cols = want.dim() == 2 ? want.size(1) : 1;
  Mismatches m;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      ok = std::isnan(w[i]) && std::isnan(g[i]);
    } else if (std::isinf(w[i]) || std::isinf(g[i])) {
      ok = g[i] == w[i];
    } else {
      ok = std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    }
    if (!ok && m.count++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "flat index " << i << " (row " << static_cast<int64_t>(i) / cols << ", col "
         << static_cast<int64_t>(i) % cols << "): gpu " << g[i] << ", cpu " << w[i] << ", |diff| "
         << std::fabs(g[i] - w[i]) << " > " << atol + rtol * std::fabs(w[i]);
      m.first = os.str();
    }
  }
  return m;
}

#define CHECK_CLOSE(got, want, atol, rtol)                                                \
  do {                                                                                    \
    const Mismatches mm_ = compare((got), (want), (atol), (rtol));                        \
    INFO(mm_.count << " of " << (want).numel() << " elements differ; first at " << mm_.first); \
    CHECK(mm_.count == 0);                                                                \
  } while (0)

// "" when a and b have the same dtype, shape and bytes; else what differs first.
std::string bit_difference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes()) {
    return "dtype/shape " + name_of(got.dtype()) + shape_str(got.sizes()) + " vs " +
           name_of(want.dtype()) + shape_str(want.sizes());
  }
  const Tensor g = got.to(kCpu).contiguous(), w = want.to(kCpu).contiguous();
  if (g.numel() == 0 || std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()) == 0) return "";
  const Mismatches m = compare(g, w, 0, 0);
  return std::to_string(m.count) + " elements differ (or differ in bits only); first at " + m.first;
}

int64_t count_targets(const Tensor& targets, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t t : targets.to_vector<int64_t>()) n += t != ignore_index;
  return n;
}

// Runs cross_entropy forward and backward (with incoming gradient `grad`) on the
// CPU logits and on the GPU ones (same values; either may be a view) and compares
// the losses and the logits' gradients within the tolerances above.
void check_cross_entropy(const Tensor& cpu_logits, const Tensor& gpu_logits, const Tensor& targets,
                         int64_t ignore_index, double smoothing, double grad = 1.0) {
  const DType dtype = cpu_logits.dtype();
  CAPTURE(name_of(dtype), cpu_logits.sizes(), ignore_index, smoothing, grad);
  const Tensor xc = cpu_logits.detach().requires_grad_();
  const Tensor xg = gpu_logits.detach().requires_grad_();
  const Tensor want = cross_entropy(xc, targets, ignore_index, smoothing);
  const Tensor got = cross_entropy(xg, targets.to(kGpu), ignore_index, smoothing);
  REQUIRE(got.device() == kGpu);
  CHECK(got.dim() == 0);
  CHECK(got.dtype() == dtype);
  const bool f64 = dtype == DType::f64;
  const double loss_tol = f64 ? 1e-12 : 1e-5;
  {
    INFO("loss");
    CHECK_CLOSE(got, want, loss_tol, loss_tol + out_rounding(dtype));
  }
  want.backward(scalar_tensor(grad, dtype));
  got.backward(scalar_tensor(grad, dtype, kGpu));
  REQUIRE(xg.grad().defined());
  CHECK(xg.grad().device() == kGpu);
  CHECK(xg.grad().sizes() == cpu_logits.sizes());
  const int64_t counted = count_targets(targets, ignore_index);
  const double scale = counted > 0 ? std::fabs(grad) / static_cast<double>(counted) : 0.0;
  const double k = f64 ? 1e-13 : 5e-6;
  const double r = f64 ? 1e-14 : dtype == DType::f32 ? 1e-6 : out_rounding(dtype);
  const double s = dtype == DType::f16 ? std::ldexp(1.0, -24) : 0.0;
  INFO("dlogits, scale " << scale);
  CHECK_CLOSE(xg.grad(), xc.grad(), k * scale + s, r);
}

}  // namespace

TEST_CASE("CUDA cross_entropy loss and gradient match the CPU for every dtype and size",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  int64_t shape_index = 0;
  for (int64_t cols : kVocabs) {
    for (int64_t rows : kRows) {
      if (rows * cols > 30'000'000) continue;  // 4096 x 50257
      const Tensor base = random_logits(rows, cols, gen);
      // About 10% of rows ignored once there are 7 or more (1 and 2 rows: never).
      const Tensor targets = random_targets(rows, cols, rng, rows >= 7 ? 0.1 : 0.0);
      for (DType dtype : kFloating) {
        const Tensor cpu = base.to(dtype);
        const Tensor gpu = cpu.to(kGpu);
        for (double smoothing : {0.0, 0.1}) {
          // The 50257-class shapes alternate between the two, to keep the test fast.
          if (cols == 50257 && (shape_index % 2 == 0) != (smoothing == 0.0)) continue;
          check_cross_entropy(cpu, gpu, targets, -100, smoothing);
        }
      }
      ++shape_index;
    }
  }
}

TEST_CASE("CUDA cross_entropy ignore_index and label smoothing edge cases match the CPU",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kFloating) {
    const Tensor cpu = random_logits(33, 127, gen).to(dtype);
    const Tensor gpu = cpu.to(kGpu);
    for (double smoothing : {0.0, 0.25, 1.0}) {
      // Half the rows ignored, with the default and with a custom ignore_index.
      check_cross_entropy(cpu, gpu, random_targets(33, 127, rng, 0.5), -100, smoothing);
      check_cross_entropy(cpu, gpu, random_targets(33, 127, rng, 0.5, 4000), 4000, smoothing);
      // ignore_index inside the class range: rows whose target is 0 are left out.
      std::vector<int64_t> t = random_targets(33, 127, rng, 0.0).to_vector<int64_t>();
      for (size_t i = 0; i < t.size(); i += 3) t[i] = 0;
      check_cross_entropy(cpu, gpu, from_vector(t, {33}), 0, smoothing);
    }
    // Every row ignored: the loss is 0 / 0 = NaN and the gradient exactly 0.
    const Tensor all_ignored = full({33}, -100, {.dtype = DType::i64});
    const Tensor x = gpu.detach().requires_grad_();
    const Tensor loss = cross_entropy(x, all_ignored.to(kGpu));
    CHECK(std::isnan(loss.item()));
    CHECK(std::isnan(cross_entropy(cpu, all_ignored).item()));
    loss.backward();
    CHECK(bit_difference(x.grad(), zeros({33, 127}, {.dtype = dtype})) == "");
    // No rows at all: NaN as well.
    CHECK(std::isnan(cross_entropy(empty({0, 5}, {.dtype = dtype, .device = kGpu}),
                                   empty({0}, {.dtype = DType::i64, .device = kGpu}))
                         .item()));
  }
}

TEST_CASE("CUDA cross_entropy of strided and large logits, with an incoming gradient, matches the CPU",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : kFloating) {
    // A transposed view ([300, 41], non-contiguous) and a row slice starting
    // mid-storage (its rows are not 16-byte aligned).
    const Tensor wide = random_logits(41, 300, gen).to(dtype);
    const Tensor targets = random_targets(300, 41, rng, 0.1);
    check_cross_entropy(wide.t(), wide.to(kGpu).t(), targets, -100, 0.1);
    const Tensor rows = random_logits(20, 1001, gen).to(dtype);
    const Tensor sliced_targets = random_targets(19, 1001, rng, 0.1);
    check_cross_entropy(rows.narrow(0, 1, 19), rows.to(kGpu).narrow(0, 1, 19), sliced_targets, -100,
                        0.0);
    // Incoming gradients other than 1 (also negative).
    for (double grad : {2.5, -0.75}) {
      const Tensor cpu = random_logits(64, 1000, gen).to(dtype);
      check_cross_entropy(cpu, cpu.to(kGpu), random_targets(64, 1000, rng, 0.2), -100, 0.1, grad);
    }
    // Large logits: the max is subtracted first, nothing overflows.
    const Tensor big = random_logits(16, 5000, gen, 9000, 10000).to(dtype);
    check_cross_entropy(big, big.to(kGpu), random_targets(16, 5000, rng, 0.0), -100, 0.1);
    CHECK(std::isfinite(cross_entropy(big.to(kGpu), random_targets(16, 5000, rng, 0.0).to(kGpu)).item()));
  }
  // The loss inside a larger graph: mul(loss, 3) sends 3 back.
  const Tensor cpu = random_logits(50, 256, gen);
  const Tensor targets = random_targets(50, 256, rng, 0.1);
  const Tensor xc = cpu.detach().requires_grad_(), xg = cpu.to(kGpu).requires_grad_();
  mul(cross_entropy(xc, targets), 3.0).backward();
  mul(cross_entropy(xg, targets.to(kGpu)), 3.0).backward();
  CHECK_CLOSE(xg.grad(), xc.grad(), 5e-6 * 3.0 / 50, 1e-6);
}

TEST_CASE("CUDA cross_entropy gives bitwise the same loss and gradient on every run",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(name_of(dtype));
    const Tensor logits = random_logits(512, 50257, gen).to(dtype).to(kGpu);
    const Tensor targets = random_targets(512, 50257, rng, 0.1).to(kGpu);
    auto run = [&] {
      const Tensor x = logits.detach().requires_grad_();
      const Tensor loss = cross_entropy(x, targets, -100, 0.1);
      loss.backward();
      return std::make_pair(loss, x.grad());
    };
    const auto first = run();
    for (int i = 0; i < 2; ++i) {
      const auto again = run();
      CHECK(bit_difference(again.first, first.first) == "");
      CHECK(bit_difference(again.second, first.second) == "");
    }
  }
}

TEST_CASE("CUDA cross_entropy with an out-of-range target gives the CPU's error",
          "[gpu][cross_entropy]") {
  const Tensor logits = zeros({2, 3});
  const Tensor logits_gpu = logits.to(kGpu);
  auto both = [&](const Tensor& lg, const Tensor& lg_gpu, const Tensor& targets, int64_t ignore) {
    const std::string cpu = error_of([&] { cross_entropy(lg, targets, ignore); });
    const std::string gpu = error_of([&] { cross_entropy(lg_gpu, targets.to(kGpu), ignore); });
    CHECK(gpu == cpu);  // the same check, line and message
    return gpu;
  };
  CHECK_THAT(both(logits, logits_gpu, from_vector<int64_t>({0, 3}), -100),
             Catch::Contains("cross_entropy: target 3 at row 1 is out of range for 3 classes "
                             "(expected 0 <= target < 3, or ignore_index -100)"));
  CHECK_THAT(both(logits, logits_gpu, from_vector<int64_t>({-1, 0}), -100),
             Catch::Contains("cross_entropy: target -1 at row 0 is out of range"));
  // An ignored target is never checked; the first bad row wins across kernel blocks.
  CHECK(both(logits, logits_gpu, from_vector<int64_t>({7, 2}), 7).empty());
  const Tensor tall = zeros({300000, 2});
  std::vector<int64_t> t(300000, 1);
  t[3] = -100;
  t[250001] = 2;
  t[299999] = -3;
  CHECK_THAT(both(tall, tall.to(kGpu), from_vector(t, {300000}), -100),
             Catch::Contains("cross_entropy: target 2 at row 250001 is out of range for 2 classes"));
  // The device stays usable, and mixed devices are an error.
  CHECK(std::isfinite(cross_entropy(logits_gpu, from_vector<int64_t>({0, 2}).to(kGpu)).item()));
  CHECK_THROWS_WITH(cross_entropy(logits_gpu, from_vector<int64_t>({0, 2})),
                    Catch::Contains("cross_entropy: expected all operands on cuda:0, but operand 1 is on cpu"));
}

TEST_CASE("CUDA cross_entropy writes the gradient of large bf16 and f16 logits into padded aligned rows",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  std::mt19937 rng(seed);
  // [1024, 1025]: 1049600 >= 2^20 elements, rows of 2050 bytes; the gradient's rows are
  // padded to 1032 elements (2064 bytes), so a GEMM reads them on the tensor cores.
  const Tensor targets = random_targets(1024, 1025, rng, 0.1);
  for (DType dtype : {DType::bf16, DType::f16}) {
    const Tensor cpu = random_logits(1024, 1025, gen).to(dtype);
    const Tensor gpu = cpu.to(kGpu);
    check_cross_entropy(cpu, gpu, targets, -100, 0.1);
    // The gradient as the backward hands it on (a leaf's .grad is a contiguous copy).
    const Tensor x = gpu.detach().requires_grad_();
    Tensor seen;
    x.register_hook([&](const Tensor& g) {
      seen = g;
      return Tensor();
    });
    cross_entropy(x, targets.to(kGpu), -100, 0.1).backward();
    REQUIRE(seen.defined());
    CHECK(seen.sizes() == Shape{1024, 1025});
    CHECK(seen.strides() == Shape{1032, 1});
    CHECK(reinterpret_cast<uintptr_t>(seen.raw_data()) % 16 == 0);
    CHECK(x.grad().is_contiguous());
    CHECK(bit_difference(x.grad(), seen) == "");
  }
  // No padding: f32, rows already a multiple of 8, or too few elements.
  auto grad_strides = [&](const Shape& shape, DType dtype) {
    const Tensor x = random_logits(shape[0], shape[1], gen).to(dtype).to(kGpu).requires_grad_();
    Shape strides;
    x.register_hook([&](const Tensor& g) {
      strides = g.strides();
      return Tensor();
    });
    cross_entropy(x, random_targets(shape[0], shape[1], rng, 0.0).to(kGpu)).backward();
    return strides;
  };
  CHECK(grad_strides({1024, 1025}, DType::f32) == Shape{1025, 1});
  CHECK(grad_strides({1024, 1024}, DType::bf16) == Shape{1024, 1});
  CHECK(grad_strides({1000, 1025}, DType::f16) == Shape{1025, 1});
}

TEST_CASE("CUDA cross_entropy's padded gradient feeds a tied head's GEMMs in place and matches the CPU",
          "[gpu][cross_entropy]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // logits = h . W^T with W [1025, 96], like GPT-2's tied head over an odd vocabulary.
  const Tensor targets = random_targets(1024, 1025, gen, 0.1);
  for (DType dtype : {DType::bf16, DType::f16}) {
    CAPTURE(name_of(dtype));
    const Tensor h = random_cpu({1024, 96}, dtype, gen, -1, 1), w = random_cpu({1025, 96}, dtype, gen, -0.3, 0.3);
    Tensor dh[2], dw[2];
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? kCpu : kGpu;
      const Tensor hd = h.to(device).detach().requires_grad_(), wd = w.to(device).detach().requires_grad_();
      const Tensor logits = matmul(hd, wd.t());
      bool checked = false;
      if (device == kGpu) {
        logits.register_hook([&](const Tensor& g) {
          CHECK(g.strides() == Shape{1032, 1});
          // The matmul backward reads it as it is: no copy into aligned rows.
          CHECK(ops::with_gemm_aligned_rows(g).is_same(g));
          checked = true;
          return Tensor();
        });
      }
      cross_entropy(logits, targets.to(device)).backward();
      CHECK(checked == (device == kGpu));
      dh[d] = hd.grad();
      dw[d] = wd.grad();
    }
    // The last GEMM (dW = dlogits^T . h) ran on the tensor cores, not the guarded loads.
    CHECK(kernels::cuda::gemm_last_path() != kernels::cuda::GemmPath::mma_sync_guarded);
    const double tol = dtype == DType::f16 ? 2e-3 : 1e-2;
    CHECK(relative_error(dh[1], dh[0]) <= tol);
    CHECK(relative_error(dw[1], dw[0]) <= tol);
  }
}
