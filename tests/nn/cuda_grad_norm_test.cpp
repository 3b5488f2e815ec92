// Gradient norms and clipping (dtr/nn/optim/clip_grad.h) on CUDA grads against the
// same calls on CPU copies: every norm type (2, 1, inf, 3, 0.5), every floating
// dtype, sizes around the kernel's chunk (16384) and vector widths, misaligned
// grads, more tensors than one launch's table, non-finite grads; clipping (scaled
// grads, untouched grads below max_norm); scale_grads_; determinism; bad input.
//
// Tolerances: the inf-norm is a max, so it must match exactly. Sums are taken in
// double on both devices over the same exactly-widened terms, in different orders:
// |gpu - cpu| <= 1e-12 * cpu (the bound for n <= 2^22 terms is ~1e-13). After a
// clip, each grad element may differ by one rounding of its dtype (the two
// coefficients differ in their last double bits): relative 2^-23 for f32, 2^-7
// bf16, 2^-10 f16, 1e-15 f64. scale_grads_ with the same coefficient is bitwise.
#include "dtr/base/error.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cuda/grad_norm.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;
using namespace dtr::nn::optim;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<int64_t> kSizes = {1, 2, 3, 0, 33, 127, 1000, 4097, 16383, 16384, 16385, 100003, (1 << 20) + 5};
const std::vector<double> kNormTypes = {2.0, 1.0, kInf, 3.0, 0.5};

// Parameter pairs (cpu, gpu) holding the same grads; the GPU grads are views at
// element offset `offset` of a larger buffer (offset 1: misaligned).
struct Pair {
  std::vector<Tensor> cpu, gpu;
};

Pair make_pair(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed, int64_t offset = 0, double scale = 1.0) {
  manual_seed(seed);
  Pair pair;
  for (int64_t n : sizes) {
    Tensor pc = zeros({n}, {.dtype = dtype});
    pc.requires_grad_();
    Tensor pg = zeros({n}, {.dtype = dtype, .device = kGpu});
    pg.requires_grad_();
    const Tensor g = (randn({n}) * scale).to(dtype);
    pc.set_grad(g.clone());
    Tensor buffer = zeros({n + offset}, {.dtype = dtype, .device = kGpu});
    Tensor view = buffer.narrow(0, offset, n);
    view.copy_(g);
    pg.set_grad(view);
    pair.cpu.push_back(pc);
    pair.gpu.push_back(pg);
  }
  return pair;
}

std::string describe(double got, double want) {
  std::ostringstream os;
  os << std::setprecision(17) << "gpu " << got << ", cpu " << want << ", relative difference "
     << (want != 0 ? std::fabs(got - want) / std::fabs(want) : std::fabs(got - want));
  return os.str();
}

void check_norm_close(double got, double want, double norm_type) {
  INFO("norm_type " << norm_type << ": " << describe(got, want));
  if (std::isnan(want) || std::isinf(want) || std::isinf(norm_type)) {
    CHECK(((std::isnan(got) && std::isnan(want)) || got == want));
  } else {
    CHECK(std::fabs(got - want) <= 1e-12 * std::fabs(want));
  }
}

double ulp_rtol(DType dtype) {
  switch (dtype) {
    case DType::f32: return std::ldexp(1.0, -23);
    case DType::bf16: return std::ldexp(1.0, -7);
    case DType::f16: return std::ldexp(1.0, -10);
    default: return 1e-15;
  }
}

// Absolute slack: one subnormal step of the dtype (f16's subnormals are coarse).
double ulp_atol(DType dtype) { return dtype == DType::f16 ? std::ldexp(1.0, -24) : 1e-30; }

// Each element of a within rtol * |b| + atol of b; the first miss described.
void check_grads_close(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, double rtol, double atol) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<double> g = gpu[i].grad().to(kCpu).to(DType::f64).to_vector<double>();
    const std::vector<double> c = cpu[i].grad().to(DType::f64).to_vector<double>();
    int64_t bad = 0, first = -1;
    for (size_t k = 0; k < c.size(); ++k) {
      if (!(std::fabs(g[k] - c[k]) <= rtol * std::fabs(c[k]) + atol)) {
        if (first < 0) first = static_cast<int64_t>(k);
        ++bad;
      }
    }
    INFO("grad " << i << " (" << c.size() << " elements, " << dtype_name(cpu[i].grad().dtype()) << "): " << bad
                 << " elements off; first at " << first << ": "
                 << (first >= 0 ? describe(g[first], c[first]) : std::string()));
    CHECK(bad == 0);
  }
}

uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

TEST_CASE("CUDA local_grad_norm_pow equals the CPU for every norm type and dtype", "[gpu][grad_norm]") {
  for (DType dtype : kFloating) {
    for (int64_t offset : {0, 1}) {
      const Pair pair = make_pair(kSizes, dtype, 11 + static_cast<uint64_t>(offset), offset);
      for (double p : kNormTypes) {
        CAPTURE(dtype_name(dtype), offset, p);
        check_norm_close(local_grad_norm_pow(pair.gpu, p), local_grad_norm_pow(pair.cpu, p), p);
        check_norm_close(global_grad_norm_pow(pair.gpu, p), global_grad_norm_pow(pair.cpu, p), p);
      }
    }
  }
}

TEST_CASE("CUDA grad norm of mixed dtypes, one-element and empty grads, and missing grads", "[gpu][grad_norm]") {
  Pair a = make_pair({5, 0, 1}, DType::f32, 21);
  const Pair b = make_pair({33, 16385}, DType::bf16, 22);
  const Pair c = make_pair({7}, DType::f64, 23);
  a.cpu.insert(a.cpu.end(), b.cpu.begin(), b.cpu.end());
  a.gpu.insert(a.gpu.end(), b.gpu.begin(), b.gpu.end());
  a.cpu.insert(a.cpu.end(), c.cpu.begin(), c.cpu.end());
  a.gpu.insert(a.gpu.end(), c.gpu.begin(), c.gpu.end());
  a.cpu[0].set_grad({});  // a parameter without a grad is skipped
  a.gpu[0].set_grad({});
  for (double p : kNormTypes) {
    CAPTURE(p);
    check_norm_close(local_grad_norm_pow(a.gpu, p), local_grad_norm_pow(a.cpu, p), p);
  }
  // No grads at all: 0.
  Tensor bare = zeros({4}, {.device = kGpu});
  bare.requires_grad_();
  CHECK(local_grad_norm_pow({bare}, 2.0) == 0.0);
  CHECK(clip_grad_norm_({bare}, 1.0) == 0.0);
}

TEST_CASE("CUDA grad norm over more tensors than one launch's table equals the CPU", "[gpu][grad_norm]") {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 2000; ++i) sizes.push_back(1 + (i * 53) % 700);
  const Pair pair = make_pair(sizes, DType::f32, 31);
  for (double p : {2.0, kInf}) {
    CAPTURE(p);
    check_norm_close(local_grad_norm_pow(pair.gpu, p), local_grad_norm_pow(pair.cpu, p), p);
  }
}

TEST_CASE("CUDA grad norm is bitwise reproducible and independent of alignment", "[gpu][grad_norm]") {
  const std::vector<int64_t> sizes = {3, 4097, 100003};
  const Pair aligned = make_pair(sizes, DType::f32, 41, 0);
  const Pair shifted = make_pair(sizes, DType::f32, 41, 1);  // the same values, misaligned
  for (double p : kNormTypes) {
    CAPTURE(p);
    const double first = local_grad_norm_pow(aligned.gpu, p);
    CHECK(bits_of(local_grad_norm_pow(aligned.gpu, p)) == bits_of(first));
    CHECK(bits_of(local_grad_norm_pow(shifted.gpu, p)) == bits_of(first));
  }
}

TEST_CASE("CUDA grad norm propagates inf and NaN like the CPU", "[gpu][grad_norm]") {
  for (double bad : {kInf, -kInf, std::numeric_limits<double>::quiet_NaN()}) {
    Pair pair = make_pair({100, 20000}, DType::f32, 51);
    for (auto* list : {&pair.cpu, &pair.gpu}) {
      Tensor g = (*list)[1].grad();
      g.narrow(0, 17000, 1).fill_(bad);
    }
    for (double p : kNormTypes) {
      CAPTURE(bad, p);
      check_norm_close(local_grad_norm_pow(pair.gpu, p), local_grad_norm_pow(pair.cpu, p), p);
    }
    // A non-finite norm leaves the grads unchanged on both devices.
    const Tensor before = pair.gpu[0].grad().clone();
    const double norm = clip_grad_norm_(pair.gpu, 1.0);
    CHECK(!std::isfinite(norm));
    CHECK(same_bits(pair.gpu[0].grad(), before));
  }
}

TEST_CASE("CUDA clip_grad_norm_ returns the CPU norm and scales grads like the CPU", "[gpu][grad_norm]") {
  for (DType dtype : kFloating) {
    for (double p : kNormTypes) {
      CAPTURE(dtype_name(dtype), p);
      Pair pair = make_pair({1, 3, 1000, 16385, 100003}, dtype, 61, 1, 0.5);
      const double cpu_norm = clip_grad_norm_(pair.cpu, 0.25, p);
      const double gpu_norm = clip_grad_norm_(pair.gpu, 0.25, p);
      check_norm_close(gpu_norm, cpu_norm, p);
      check_grads_close(pair.gpu, pair.cpu, ulp_rtol(dtype), ulp_atol(dtype));
      // The clipped grads now have (about) norm max_norm, unless the clip scaled half-precision
      // grads into underflow (p = 1 and 0.5 norms are large, so their coefficients are tiny).
      if (dtype == DType::f32 || dtype == DType::f64 || p == 2.0 || std::isinf(p)) {
        CHECK(total_norm_from_pow(global_grad_norm_pow(pair.gpu, p), p) ==
              Approx(0.25).epsilon(dtype == DType::bf16 ? 2e-2 : 2e-3));
      }
    }
  }
}

TEST_CASE("CUDA clip_grad_norm_ below max_norm or with max_norm inf leaves grads bitwise unchanged",
          "[gpu][grad_norm]") {
  Pair pair = make_pair({5, 4097}, DType::f32, 71);
  std::vector<Tensor> before;
  for (const Tensor& p : pair.gpu) before.push_back(p.grad().clone());
  const double norm = clip_grad_norm_(pair.gpu, 1e6);
  CHECK(norm == Approx(total_norm_from_pow(local_grad_norm_pow(pair.cpu, 2.0), 2.0)).epsilon(1e-12));
  clip_grad_norm_(pair.gpu, kInf);
  for (size_t i = 0; i < before.size(); ++i) CHECK(same_bits(pair.gpu[i].grad(), before[i]));
}

TEST_CASE("CUDA scale_grads_ equals the CPU's mul_ bit for bit", "[gpu][grad_norm]") {
  for (DType dtype : kFloating) {
    for (int64_t offset : {0, 1}) {
      CAPTURE(dtype_name(dtype), offset);
      Pair pair = make_pair({1, 7, 33, 8193, 100003}, dtype, 81, offset);
      scale_grads_(pair.cpu, 0.3711);
      scale_grads_(pair.gpu, 0.3711);
      for (size_t i = 0; i < pair.cpu.size(); ++i) {
        INFO("grad " << i);
        CHECK(same_bits(pair.gpu[i].grad(), pair.cpu[i].grad()));
      }
    }
  }
  // A strided grad goes through the elementwise op.
  Tensor p = zeros({6, 4}, {.device = kGpu});
  p.requires_grad_();
  const Tensor g = randn({4, 6});
  p.set_grad(g.to(kGpu).t());
  scale_grads_({p}, 0.5);
  CHECK(same_bits(p.grad(), mul(g.t(), 0.5)));
}

TEST_CASE("CUDA grad norm refuses bad norm types, bad max_norm and integer grads", "[gpu][grad_norm]") {
  const Pair pair = make_pair({5}, DType::f32, 91);
  CHECK_THROWS_WITH(local_grad_norm_pow(pair.gpu, 0.0), Catch::Contains("norm_type must be > 0 or inf"));
  CHECK_THROWS_WITH(clip_grad_norm_(pair.gpu, 1.0, -1.0), Catch::Contains("norm_type"));
  CHECK_THROWS_WITH(clip_grad_norm_(pair.gpu, -1.0), Catch::Contains("max_norm must be >= 0"));
  double* out = nullptr;
  CHECK_THROWS_AS(kernels::cuda::norm_pow_fold(out, 0, std::numeric_limits<double>::quiet_NaN(), false, out,
                                               cuda::current_stream(0)),
                  Error);
  Tensor ip = zeros({3}, {.dtype = DType::i32, .device = kGpu});  // set_grad takes a grad of its own dtype
  ip.set_grad(zeros({3}, {.dtype = DType::i32, .device = kGpu}));
  CHECK_THROWS_AS(local_grad_norm_pow({ip}, 2.0), Error);
}
