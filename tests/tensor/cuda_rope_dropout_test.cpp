// CUDA rope (dtr/kernels/cuda/rope.h), dropout (dtr/kernels/cuda/dropout.h) and the
// random fills uniform_ / normal_ / trunc_normal_ (dtr/kernels/cuda/random.h) against
// the CPU ops:
//   - rope forward and backward over shapes, offsets, thetas and every floating
//     dtype; non-contiguous inputs; bitwise determinism; bad shapes;
//   - dropout: the mask, scale and output bit for bit equal to the CPU's for the
//     same generator state (every dtype, odd sizes, p in {0.1, 0.5, 0.9}, views);
//     gradients equal; a restored generator state replays the mask (activation
//     checkpointing); p = 0, p = 1 and eval mode;
//   - fills: uniform_ bit for bit, normal_ / trunc_normal_ within a few ulp, whole
//     tensors, LogicalSlice boxes and strided destinations.
// Tolerances: rope results agree within 1e-6 (f32), 1e-14 (f64) times |x0| + |x1|
// of the pair, plus one output rounding (2^-7 bf16, 2^-10 f16); at least 99% of f32
// rope results must be bitwise the CPU's (the angles are the CPU's bits and the
// kernel rounds like the CPU; only CUDA's double cos/sin, within 2 ulp of glibc's,
// can move a table entry).
// normal_: |gpu - cpu| <= 2e-6 + 1e-6 |cpu| (f32), 1e-13 (1 + |cpu|) (f64), plus
// one output rounding for bf16/f16; trunc_normal_: 1e-12 (1 + |cpu|) plus one
// rounding of the output type (f32 included: the double values may straddle a
// rounding boundary).
#include "dtr/base/error.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/dropout.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/rope.h"
#include "dtr/tensor/random.h"

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

// The raw bytes of a tensor's elements in row-major order (copied to the host).
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor c = t.to(kCpu).contiguous();
  std::vector<unsigned char> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

// The first element where two same-dtype tensors differ in their bits, described.
std::string first_bit_difference(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  const std::vector<unsigned char> gb = bytes_of(got), wb = bytes_of(want);
  const size_t es = element_size(want.dtype());
  for (size_t i = 0; i < w.size() && (i + 1) * es <= gb.size(); ++i) {
    if (std::memcmp(gb.data() + i * es, wb.data() + i * es, es) != 0) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": gpu " << g[i] << ", cpu " << w[i];
      return os.str();
    }
  }
  return "none";
}

#define CHECK_SAME_BITS(what, got, want)                                               \
  do {                                                                                 \
    INFO((what) << ": first difference at " << first_bit_difference((got), (want)));   \
    CHECK(same_bits((got), (want)));                                                   \
  } while (0)

// Counts elements with |g - w| > allowed(i, w) (NaN meets NaN); describes the first.
template <class Allowed>
std::pair<int64_t, std::string> mismatches(const std::vector<double>& g, const std::vector<double>& w,
                                           Allowed&& allowed) {
  int64_t count = 0;
  std::string first;
  if (g.size() != w.size()) return {1, "sizes differ"};
  for (size_t i = 0; i < w.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) ||
                    std::fabs(g[i] - w[i]) <= allowed(i, w[i]);
    if (!ok && count++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": gpu " << g[i] << ", cpu " << w[i] << " (allowed "
         << allowed(i, w[i]) << ")";
      first = os.str();
    }
  }
  return {count, first};
}

#define CHECK_WITHIN(what, got, want, allowed)                                         \
  do {                                                                                 \
    const auto mm_ = mismatches((got), (want), (allowed));                             \
    INFO((what) << ": " << mm_.first << " (" << mm_.second << ")");                    \
    CHECK(mm_.first == 0);                                                             \
  } while (0)

// --- rope ---

double rope_tol(DType dtype) { return dtype == DType::f64 ? 1e-14 : 1e-6; }

// |gpu - cpu| of a rotated pair within tol * (|x0| + |x1|) + one output rounding.
void check_rope_close(const std::string& what, const Tensor& got, const Tensor& want,
                      const Tensor& input) {
  const std::vector<double> g = values_of(got), w = values_of(want), x = values_of(input);
  const double tol = rope_tol(want.dtype()), rtol = out_rtol(want.dtype());
  auto allowed = [&](size_t i, double wv) {
    const size_t pair = i - i % 2;
    return tol * (std::fabs(x[pair]) + std::fabs(x[pair + 1])) + rtol * std::fabs(wv);
  };
  CHECK_WITHIN(what, g, w, allowed);
  if (want.dtype() == DType::f32) {
    const std::vector<unsigned char> gb = bytes_of(got), wb = bytes_of(want);
    int64_t differ = 0;
    for (size_t i = 0; i + 4 <= wb.size(); i += 4) differ += std::memcmp(gb.data() + i, wb.data() + i, 4) != 0;
    INFO(what << ": " << differ << " of " << w.size() << " f32 results differ from the cpu's bits");
    CHECK(differ * 100 <= static_cast<int64_t>(w.size()));
  }
}

struct RopeCase {
  Shape shape;
  double theta;
  int64_t offset;
};

const std::vector<RopeCase> kRopeCases = {
    {{1, 1, 1, 2}, 10000.0, 0},    {{1, 3, 1, 2}, 10000.0, 5},    {{2, 3, 4, 8}, 10000.0, 0},
    {{1, 17, 3, 64}, 500000.0, 7}, {{3, 33, 5, 130}, 10000.0, 1000}, {{2, 128, 8, 128}, 10000.0, 0},
    {{1, 5, 2, 6}, 100.0, 123456}, {{0, 4, 2, 8}, 10000.0, 0},    {{2, 4, 3, 0}, 10000.0, 0},
    // More than 128 frequency pairs: the angle table takes several launches.
    {{1, 5, 2, 272}, 10000.0, 3},  {{2, 9, 3, 512}, 500000.0, 0},
};

}  // namespace

TEST_CASE("cuda rope forward and backward match the cpu for every dtype", "[gpu][rope]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : kFloating) {
    for (const RopeCase& c : kRopeCases) {
      CAPTURE(name_of(dtype), c.shape, c.theta, c.offset);
      const Tensor x = random_cpu(c.shape, dtype, gen, -2, 2);
      const Tensor dy = random_cpu(c.shape, dtype, gen, -1, 1);
      const Tensor x_cpu = x.detach().requires_grad_();
      const Tensor x_gpu = x.to(kGpu).requires_grad_();
      const Tensor want = rope(x_cpu, c.theta, c.offset);
      const Tensor got = rope(x_gpu, c.theta, c.offset);
      REQUIRE(got.device() == kGpu);
      CHECK(got.dtype() == dtype);
      CHECK(got.sizes() == c.shape);
      check_rope_close("rope forward", got, want, x);
      want.backward(dy);
      got.backward(dy.to(kGpu));
      REQUIRE(x_gpu.grad().defined());
      CHECK(x_gpu.grad().device() == kGpu);
      check_rope_close("rope backward", x_gpu.grad(), x_cpu.grad(), dy);
    }
  }
}

TEST_CASE("cuda rope of a non-contiguous view matches the cpu and is deterministic", "[gpu][rope]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(name_of(dtype));
    const Tensor base = random_cpu({2, 4, 9, 64}, dtype, gen, -2, 2);  // [B, H, T, D] -> view [B, T, H, D]
    const Tensor view_cpu = base.transpose(1, 2);
    const Tensor view_gpu = base.to(kGpu).transpose(1, 2);
    const Tensor want = rope(view_cpu, 10000.0, 3);
    const Tensor got = rope(view_gpu, 10000.0, 3);
    check_rope_close("rope of a transposed view", got, want, view_cpu);
    CHECK_SAME_BITS("rope run twice", rope(view_gpu, 10000.0, 3), got);
  }
}

TEST_CASE("cuda rope rejects bad shapes with dtr::Error", "[gpu][rope]") {
  CHECK_THROWS_AS(rope(zeros({1, 2, 3, 5}, {.device = kGpu})), Error);
  CHECK_THROWS_AS(rope(zeros({2, 3, 4}, {.device = kGpu})), Error);
  CHECK_THROWS_AS(rope(zeros({1, 2, 3, 4}, {.dtype = DType::i64, .device = kGpu})), Error);
  CHECK_THROWS_AS(rope(zeros({1, 2, 3, 4}, {.device = kGpu}), -1.0), Error);
}

// --- dropout ---

TEST_CASE("cuda dropout draws the cpu's mask bit for bit, with equal gradients", "[gpu][dropout]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const std::vector<Shape> shapes = {{1}, {3}, {4}, {5}, {1000}, {4097}, {3, 33, 7}, {64, 1000}};
  for (DType dtype : kFloating) {
    for (const Shape& shape : shapes) {
      for (double p : {0.1, 0.5, 0.9}) {
        CAPTURE(name_of(dtype), shape, p);
        const Tensor x = random_cpu(shape, dtype, gen, -2, 2);
        const Tensor dy = random_cpu(shape, dtype, gen, -1, 1);
        const uint64_t gseed = gen();
        Generator g_cpu(gseed), g_gpu(gseed);
        // Start both from the same non-zero offset.
        g_cpu.next_fill(5);
        g_gpu.next_fill(5);
        const Tensor x_cpu = x.detach().requires_grad_();
        const Tensor x_gpu = x.to(kGpu).requires_grad_();
        const Tensor want = dropout(x_cpu, p, true, &g_cpu);
        const Tensor got = dropout(x_gpu, p, true, &g_gpu);
        REQUIRE(got.device() == kGpu);
        CHECK(got.dtype() == dtype);
        CHECK_SAME_BITS("dropout output", got, want);
        CHECK(g_gpu.state() == g_cpu.state());
        want.backward(dy);
        got.backward(dy.to(kGpu));
        REQUIRE(x_gpu.grad().defined());
        CHECK_SAME_BITS("dropout gradient", x_gpu.grad(), x_cpu.grad());
      }
    }
  }
}

TEST_CASE("cuda dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)", "[gpu][dropout]") {
  Generator g(77);
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    const Tensor out = dropout(ones({n}, {.device = kGpu}), p, true, &g);
    const std::vector<double> v = values_of(out);
    const double scale = static_cast<double>(static_cast<float>(1.0 / (1.0 - p)));
    int64_t kept = 0;
    bool only_zero_or_scale = true;
    for (double e : v) {
      if (e != 0) ++kept;
      only_zero_or_scale = only_zero_or_scale && (e == 0 || e == scale);
    }
    CHECK(only_zero_or_scale);
    const double frac = static_cast<double>(kept) / static_cast<double>(n);
    // 1 - p within 6 standard deviations of a binomial fraction.
    CHECK(std::fabs(frac - (1 - p)) <= 6 * std::sqrt(p * (1 - p) / static_cast<double>(n)));
  }
}

TEST_CASE("cuda dropout with a restored generator state replays the same mask", "[gpu][dropout]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(name_of(dtype));
    const Tensor x = random_cpu({37, 129}, dtype, gen, -2, 2).to(kGpu);
    Generator g(gen());
    const GeneratorState saved = g.state();
    const Tensor first = dropout(x, 0.3, true, &g);
    const GeneratorState after = g.state();
    g.set_state(saved);  // what activation checkpointing does before its recompute
    const Tensor again = dropout(x, 0.3, true, &g);
    CHECK_SAME_BITS("replayed dropout", again, first);
    CHECK(g.state() == after);
    const Tensor next = dropout(x, 0.3, true, &g);  // a later call draws a new mask
    CHECK_FALSE(same_bits(next, first));
    // The default generator, reseeded, gives the same mask on cpu and cuda.
    manual_seed(4242);
    const Tensor on_gpu = dropout(x, 0.3, true);
    manual_seed(4242);
    const Tensor on_cpu = dropout(x.to(kCpu), 0.3, true);
    CHECK_SAME_BITS("default generator", on_gpu, on_cpu);
  }
}

TEST_CASE("cuda dropout of a non-contiguous view matches the cpu", "[gpu][dropout]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const Tensor base = random_cpu({33, 65}, DType::f32, gen, -2, 2);
  Generator g_cpu(5), g_gpu(5);
  const Tensor want = dropout(base.t(), 0.4, true, &g_cpu);
  const Tensor got = dropout(base.to(kGpu).t(), 0.4, true, &g_gpu);
  CHECK(got.sizes() == Shape{65, 33});
  CHECK_SAME_BITS("dropout of a transpose", got, want);
}

TEST_CASE("cuda dropout with p = 0, p = 1 or in eval mode draws nothing", "[gpu][dropout]") {
  const Tensor x = full({4, 5}, 3.0, {.device = kGpu});
  Generator g(9);
  const GeneratorState start = g.state();
  CHECK(dropout(x, 0.0, true, &g).is_same(x));
  CHECK(dropout(x, 0.5, false, &g).is_same(x));
  CHECK(g.state() == start);
  const Tensor xr = full({4, 5}, 3.0, {.device = kGpu}).requires_grad_();
  const Tensor zero = dropout(xr, 1.0, true, &g);
  CHECK(g.state() == start);
  CHECK(zero.device() == kGpu);
  CHECK(values_of(zero) == std::vector<double>(20, 0.0));
  zero.backward(ones({4, 5}, {.device = kGpu}));
  REQUIRE(xr.grad().defined());
  CHECK(values_of(xr.grad()) == std::vector<double>(20, 0.0));
  CHECK_THROWS_AS(dropout(x, 1.5, true, &g), Error);
  CHECK_THROWS_AS(dropout(zeros({3}, {.dtype = DType::i32, .device = kGpu}), 0.5, true, &g), Error);
}

// --- random fills ---

enum class Fill { uniform, normal, trunc_normal };

const char* fill_name(Fill f) {
  switch (f) {
    case Fill::uniform: return "uniform_";
    case Fill::normal: return "normal_";
    case Fill::trunc_normal: return "trunc_normal_";
  }
  return "?";
}

void do_fill(Fill f, const Tensor& t, Generator& g, const LogicalSlice& slice = {}) {
  switch (f) {
    case Fill::uniform: uniform_(t, -0.75, 1.5, &g, slice); break;
    case Fill::normal: normal_(t, 0.5, 2.0, &g, slice); break;
    case Fill::trunc_normal: trunc_normal_(t, 0.0, 1.0, -1.5, 2.0, &g, slice); break;
  }
}

// uniform_: bit for bit; normal_ and trunc_normal_: within the tolerances above.
void check_fill(Fill f, const Tensor& got, const Tensor& want) {
  const DType dtype = want.dtype();
  CAPTURE(fill_name(f), name_of(dtype), want.sizes());
  if (f == Fill::uniform) {
    CHECK_SAME_BITS("uniform_", got, want);
    return;
  }
  const double rtol = out_rtol(dtype);
  auto allowed = [&](size_t, double w) {
    if (f == Fill::trunc_normal) {
      // Double values 1e-15 apart may round to neighbouring floats: one f32 ulp too.
      const double round = dtype == DType::f32 ? 0x1p-23 : rtol;
      return 1e-12 * (1 + std::fabs(w)) + round * std::fabs(w);
    }
    if (dtype == DType::f64) return 1e-13 * (1 + std::fabs(w));
    return 2e-6 + 1e-6 * std::fabs(w) + rtol * std::fabs(w);
  };
  CHECK_WITHIN(fill_name(f), values_of(got), values_of(want), allowed);
}

TEST_CASE("cuda uniform_, normal_ and trunc_normal_ give the cpu's values", "[gpu][random]") {
  for (Fill f : {Fill::uniform, Fill::normal, Fill::trunc_normal}) {
    for (DType dtype : kFloating) {
      for (const Shape& shape : std::vector<Shape>{{1}, {7}, {1001}, {33, 65}, {4, 5, 6}, {}}) {
        Generator g_cpu(31337), g_gpu(31337);
        const Tensor want = empty(shape, {.dtype = dtype});
        const Tensor got = empty(shape, {.dtype = dtype, .device = kGpu});
        do_fill(f, want, g_cpu);
        do_fill(f, got, g_gpu);
        check_fill(f, got, want);
        CHECK(g_gpu.state() == g_cpu.state());
      }
    }
  }
}

TEST_CASE("cuda trunc_normal_ with std 0 or no representable mass fills the clamped mean",
          "[gpu][random]") {
  for (DType dtype : kFloating) {
    CAPTURE(name_of(dtype));
    Generator g_cpu(8), g_gpu(8);
    const Tensor want = empty({5, 3}, {.dtype = dtype});
    const Tensor got = empty({5, 3}, {.dtype = dtype, .device = kGpu});
    trunc_normal_(want, 3.0, 0.0, -1.0, 2.0, &g_cpu);
    trunc_normal_(got, 3.0, 0.0, -1.0, 2.0, &g_gpu);
    CHECK(values_of(got) == std::vector<double>(15, 2.0));
    CHECK_SAME_BITS("std 0", got, want);
    trunc_normal_(want, 0.0, 1.0, 50.0, 60.0, &g_cpu);  // 50 std away: the bound nearest the mean
    trunc_normal_(got, 0.0, 1.0, 50.0, 60.0, &g_gpu);
    CHECK_SAME_BITS("no representable mass", got, want);
    CHECK(g_gpu.state() == g_cpu.state());
  }
}

// Both bounds above the mean: the draw is mirrored (the mass lies in the upper tail),
// and a bf16 uniform_ range that rounds to one value.
TEST_CASE("cuda trunc_normal_ with both bounds above the mean and a one-value uniform_ give the cpu's values",
          "[gpu][random]") {
  for (DType dtype : kFloating) {
    CAPTURE(name_of(dtype));
    Generator g_cpu(77), g_gpu(77);
    const Tensor want = empty({33, 65}, {.dtype = dtype});
    const Tensor got = empty({33, 65}, {.dtype = dtype, .device = kGpu});
    trunc_normal_(want, 0.0, 1.0, 0.5, 3.0, &g_cpu);
    trunc_normal_(got, 0.0, 1.0, 0.5, 3.0, &g_gpu);
    check_fill(Fill::trunc_normal, got, want);
    const std::vector<double> values = values_of(got);
    CHECK(*std::min_element(values.begin(), values.end()) >= 0.5);
    CHECK(*std::max_element(values.begin(), values.end()) <= 3.0);
    uniform_(want, 1.0, 1.001, &g_cpu);
    uniform_(got, 1.0, 1.001, &g_gpu);
    CHECK_SAME_BITS("uniform_ over a narrow range", got, want);
    CHECK(g_gpu.state() == g_cpu.state());
  }
}

TEST_CASE("cuda fills of LogicalSlice boxes and strided destinations equal the cpu's", "[gpu][random]") {
  const Shape logical = {10, 12, 3};
  for (Fill f : {Fill::uniform, Fill::normal, Fill::trunc_normal}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      // A box [4, 6, 3] at offset [2, 3, 0] of the logical tensor, contiguous and permuted.
      Generator g_cpu(11), g_gpu(11), g_gpu2(11);
      const LogicalSlice slice{.logical_shape = logical, .offset = {2, 3, 0}};
      const Tensor want = empty({4, 6, 3}, {.dtype = dtype});
      do_fill(f, want, g_cpu, slice);
      const Tensor got = empty({4, 6, 3}, {.dtype = dtype, .device = kGpu});
      do_fill(f, got, g_gpu, slice);
      check_fill(f, got, want);
      const Tensor buffer = empty({3, 6, 4}, {.dtype = dtype, .device = kGpu});
      const Tensor strided = buffer.permute({2, 1, 0});
      do_fill(f, strided, g_gpu2, slice);
      check_fill(f, strided, want);
      CHECK(g_gpu.state() == g_cpu.state());
      CHECK(g_gpu2.state() == g_cpu.state());
    }
  }
  // rand / randn on the device equal the cpu's (uniform bit for bit).
  Generator a(3), b(3);
  CHECK_SAME_BITS("rand", rand({17, 3}, {.device = kGpu}, &a), rand({17, 3}, {}, &b));
  check_fill(Fill::normal, randn({17, 3}, {.device = kGpu}, &a), randn({17, 3}, {}, &b));
}
