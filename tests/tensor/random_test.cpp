// dtr/tensor/random.h: slice invariance (a box of the logical tensor gets exactly the
// whole fill's values there), strided destinations, the generator's offset and state,
// meta fills, thread-count independence, distribution moments against analytic
// values, and every error message.
#include "dtr/tensor/random.h"

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/philox.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

enum class Kind { uniform, normal, trunc_normal };
constexpr Kind kKinds[] = {Kind::uniform, Kind::normal, Kind::trunc_normal};
constexpr DType kFloating[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::uniform: return "uniform";
    case Kind::normal: return "normal";
    case Kind::trunc_normal: return "trunc_normal";
  }
  return "?";
}

void fill(Kind kind, Tensor& t, Generator& g, const LogicalSlice& slice = {}) {
  switch (kind) {
    case Kind::uniform: uniform_(t, -1, 3, &g, slice); break;
    case Kind::normal: normal_(t, 0.5, 2, &g, slice); break;
    case Kind::trunc_normal: trunc_normal_(t, 0.25, 1.5, -1, 2, &g, slice); break;
  }
}

// The tensor's elements in row-major order, as raw bytes (bit-for-bit comparisons).
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  if (p == nullptr) return {};
  return std::vector<unsigned char>(p, p + c.nbytes());
}

struct Moments {
  double mean = 0, var = 0, kurtosis = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  double m2 = 0, m4 = 0;
  for (double x : v) {
    double d = (x - m.mean) * (x - m.mean);
    m2 += d;
    m4 += d * d;
  }
  m.var = m2 / static_cast<double>(v.size());
  m.kurtosis = m4 / static_cast<double>(v.size()) / (m.var * m.var);
  return m;
}

double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi); }
double Phi(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

// Mean and variance of normal(mu, sigma) truncated to [a, b] (textbook formulas).
Moments truncated_normal_moments(double mu, double sigma, double a, double b) {
  double al = (a - mu) / sigma, be = (b - mu) / sigma;
  double z = Phi(be) - Phi(al);
  double pa = std::isinf(al) ? 0 : phi(al), pb = std::isinf(be) ? 0 : phi(be);
  double apa = std::isinf(al) ? 0 : al * pa, bpb = std::isinf(be) ? 0 : be * pb;
  double shift = (pa - pb) / z;
  return {mu + sigma * shift, sigma * sigma * (1 + (apa - bpb) / z - shift * shift), 0};
}

// The bf16 nearest to x (ties to even), found by comparing x with bf16 neighbours exactly.
uint16_t nearest_bf16_bits(double x) {
  auto bits_to_double = [](uint16_t b) {
    return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
  };
  auto f = static_cast<float>(x);
  auto below = static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);  // truncation of f
  // Truncating f may land one step off truncating x; search the neighbours.
  uint16_t best = below;
  for (int delta = -2; delta <= 2; ++delta) {
    auto c = static_cast<uint16_t>(below + delta);
    double dc = std::fabs(bits_to_double(c) - x), db = std::fabs(bits_to_double(best) - x);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return best;
}

}  // namespace

TEST_CASE("filling rows k..m through a LogicalSlice equals those rows of the whole fill",
          "[random]") {
  const int64_t n = 37, d = 5;  // odd sizes put box edges inside Philox blocks and pairs
  const std::pair<int64_t, int64_t> row_ranges[] = {{0, 37}, {0, 1},   {3, 4},  {5, 17},
                                                    {17, 17}, {36, 37}, {10, 37}};
  for (Kind kind : kKinds) {
    for (DType dtype : kFloating) {
      Generator whole_gen(1234);
      Tensor whole = empty({n, d}, {.dtype = dtype});
      fill(kind, whole, whole_gen);
      for (auto [k, m] : row_ranges) {
        INFO(kind_name(kind) << " " << dtype_name(dtype) << " rows [" << k << ", " << m << ")");
        Generator g(1234);
        Tensor part = empty({m - k, d}, {.dtype = dtype});
        fill(kind, part, g, {.logical_shape = {n, d}, .offset = {k, 0}});
        CHECK(bytes_of(part) == bytes_of(whole.narrow(0, k, m - k)));
        CHECK(g.state() == whole_gen.state());
      }
    }
  }
}

TEST_CASE("uneven dim-0 shards filled into one buffer reassemble the whole fill", "[random]") {
  const int64_t n = 11, d = 3;
  for (Kind kind : kKinds) {
    Generator whole_gen(99);
    Tensor whole = empty({n, d});
    fill(kind, whole, whole_gen);
    Tensor assembled = zeros({n, d});
    const std::pair<int64_t, int64_t> shards[] = {{0, 3}, {3, 6}, {6, 9}, {9, 11}};
    for (auto [k, m] : shards) {
      Generator g(99);  // every "rank" starts from the same state
      Tensor shard = assembled.narrow(0, k, m - k);
      fill(kind, shard, g, {.logical_shape = {n, d}, .offset = {k, 0}});
      CHECK(g.state() == whole_gen.state());
    }
    INFO(kind_name(kind));
    CHECK(bytes_of(assembled) == bytes_of(whole));
  }
}

TEST_CASE("N-d boxes, including a column box on dim 1 of a 3-d tensor, match the whole fill",
          "[random]") {
  const Shape logical = {4, 6, 3};
  struct Box {
    Shape offset, size;
  };
  const Box boxes[] = {{{0, 2, 0}, {4, 3, 3}},   // columns [2, 5) of dim 1
                       {{1, 1, 1}, {2, 4, 2}},   // an interior box
                       {{3, 5, 2}, {1, 1, 1}},   // the last element
                       {{0, 6, 0}, {4, 0, 3}}};  // empty
  for (Kind kind : kKinds) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Generator whole_gen(7);
      Tensor whole = empty(logical, {.dtype = dtype});
      fill(kind, whole, whole_gen);
      for (const Box& box : boxes) {
        INFO(kind_name(kind) << " " << dtype_name(dtype) << " box at " << shape_str(box.offset)
                             << " of size " << shape_str(box.size));
        Tensor expected = whole;
        for (int dim = 0; dim < 3; ++dim) {
          expected = expected.narrow(dim, box.offset[dim], box.size[dim]);
        }
        Generator g(7);
        Tensor part = empty(box.size, {.dtype = dtype});
        fill(kind, part, g, {.logical_shape = logical, .offset = box.offset});
        CHECK(bytes_of(part) == bytes_of(expected));
        CHECK(g.state() == whole_gen.state());
        // The same box written through a strided destination (a transposed buffer).
        Generator g2(7);
        Tensor buffer = empty({box.size[2], box.size[1], box.size[0]}, {.dtype = dtype});
        Tensor strided = buffer.permute({2, 1, 0});
        fill(kind, strided, g2, {.logical_shape = logical, .offset = box.offset});
        CHECK(bytes_of(strided) == bytes_of(expected));
      }
    }
  }
}

TEST_CASE("a transposed destination gets each element's logical-index value", "[random]") {
  const int64_t n = 9, d = 7;
  Generator g(2024);
  const kernels::PhiloxStream s0{.seed = 2024, .offset = 0};
  Tensor buffer = empty({d, n});
  Tensor view = buffer.t();  // [n, d] with strides (1, n)
  uniform_(view, 0, 1, &g);
  const kernels::PhiloxStream s1{.seed = 2024, .offset = g.offset()};
  Tensor buffer64 = empty({d, n}, {.dtype = DType::f64});
  Tensor view64 = buffer64.t();
  normal_(view64, 0, 1, &g);
  const float* p = buffer.data<float>();
  const double* p64 = buffer64.data<double>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      auto i = static_cast<uint64_t>(r * d + c);
      INFO("element (" << r << ", " << c << ")");
      CHECK(p[c * n + r] == kernels::uniform_float(s0, i));
      CHECK(p64[c * n + r] == kernels::normal_double(s1, i));
    }
  }
}

TEST_CASE("fills equal the per-element Philox draws for every kind and dtype", "[random]") {
  const int64_t n = 1001;
  const kernels::PhiloxStream s{.seed = 31, .offset = 0};
  auto fresh = [](DType dtype) { return empty({n}, {.dtype = dtype}); };
  Generator g(31);
  Tensor u32 = fresh(DType::f32), u64 = fresh(DType::f64), n32 = fresh(DType::f32),
         n64 = fresh(DType::f64), ubf = fresh(DType::bf16);
  uniform_(u32, 0, 1, &g);
  g.set_state({31, 0});
  uniform_(u64, 0, 1, &g);
  g.set_state({31, 0});
  normal_(n32, 0, 1, &g);
  g.set_state({31, 0});
  normal_(n64, 0, 1, &g);
  g.set_state({31, 0});
  uniform_(ubf, 0, 1, &g);
  auto vu32 = u32.to_vector<float>(), vn32 = n32.to_vector<float>();
  auto vu64 = u64.to_vector<double>(), vn64 = n64.to_vector<double>();
  auto vubf = ubf.to_vector<bf16>();
  for (int64_t i = 0; i < n; ++i) {
    auto k = static_cast<uint64_t>(i);
    INFO("element " << i);
    CHECK(vu32[i] == kernels::uniform_float(s, k));
    CHECK(vu64[i] == kernels::uniform_double(s, k));
    CHECK(vn32[i] == kernels::normal_float(s, k));
    CHECK(vn64[i] == kernels::normal_double(s, k));
    // bf16 rounds the float draw once; a draw that rounds up to 1 becomes the bf16 below 1.
    float expected = static_cast<float>(bf16(kernels::uniform_float(s, k)));
    if (expected == 1.0f) expected = 1.0f - 0x1p-8f;
    CHECK(static_cast<float>(vubf[i]) == expected);
  }
}

TEST_CASE("trunc_normal_ inverts the normal CDF at the per-element uniform draw", "[random]") {
  const int64_t n = 2000;
  struct Case {
    double mean, std, a, b;
    bool mirrored;  // the kernel samples [-b', -a'] when a' = (a - mean) / std > 0
  };
  for (Case c : {Case{0, 1, -2, 2, false}, Case{1, 2, -3, 1.5, false}, Case{0, 1, 0.5, 3, true},
                 Case{0, 1, -INFINITY, 0.3, false}}) {
    Generator g(5);
    Tensor t = empty({n}, {.dtype = DType::f64});
    trunc_normal_(t, c.mean, c.std, c.a, c.b, &g);
    auto v = t.to_vector<double>();
    double al = (c.a - c.mean) / c.std, be = (c.b - c.mean) / c.std;
    for (int64_t i = 0; i < n; ++i) {
      double u = kernels::uniform_double({.seed = 5, .offset = 0}, static_cast<uint64_t>(i));
      double x = (v[i] - c.mean) / c.std;
      INFO("case a = " << c.a << " b = " << c.b << ", element " << i << " u " << u << " x " << x);
      // Phi(x) is where the uniform draw lands in [Phi(alpha), Phi(beta)].
      double p = c.mirrored ? Phi(-be) + u * (Phi(-al) - Phi(-be))
                            : Phi(al) + u * (Phi(be) - Phi(al));
      double got = c.mirrored ? Phi(-x) : Phi(x);
      CHECK(got == Approx(p).epsilon(1e-12).margin(1e-15));
    }
  }
}

TEST_CASE("trunc_normal_ in f32, bf16 and f16 is the f64 value rounded once", "[random]") {
  const int64_t n = 20000;
  Generator g64(77);
  Tensor t64 = empty({n}, {.dtype = DType::f64});
  trunc_normal_(t64, 0.1, 0.7, -1.2, 1.3, &g64);
  auto v64 = t64.to_vector<double>();
  Generator g32(77), gbf(77), gh(77);
  Tensor t32 = empty({n}), tbf = empty({n}, {.dtype = DType::bf16}),
         th = empty({n}, {.dtype = DType::f16});
  trunc_normal_(t32, 0.1, 0.7, -1.2, 1.3, &g32);
  trunc_normal_(tbf, 0.1, 0.7, -1.2, 1.3, &gbf);
  trunc_normal_(th, 0.1, 0.7, -1.2, 1.3, &gh);
  auto v32 = t32.to_vector<float>();
  auto vbf = tbf.to_vector<bf16>();
  auto vh = th.to_vector<f16>();
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i << " f64 value " << v64[i]);
    CHECK(v32[i] == static_cast<float>(v64[i]));
    CHECK(std::bit_cast<uint16_t>(vbf[i]) == nearest_bf16_bits(v64[i]));
    // f16 has 11 significant bits: the nearest f16 is within half an ulp (2^-11 relative).
    double h = static_cast<double>(static_cast<float>(vh[i]));
    CHECK(std::fabs(h - v64[i]) <= std::ldexp(std::fabs(v64[i]), -11) + 0x1p-25);
  }
}

TEST_CASE("uniform_ has mean 1/2 and variance 1/12 and stays in lo..hi", "[random][stats]") {
  // 1e6 samples: the standard error of the mean is 2.9e-4 and of the variance 7.5e-5;
  // the tolerances are about 5 standard errors.
  const int64_t n = 1'000'000;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    Generator g(11);
    auto v = values_of(rand({n}, {.dtype = dtype}, &g));
    Moments m = moments(v);
    INFO(dtype_name(dtype));
    CHECK(m.mean == Approx(0.5).margin(1.5e-3));
    CHECK(m.var == Approx(1.0 / 12).margin(dtype == DType::bf16 ? 5e-4 : 4e-4));
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
  }
  Generator g(12);
  Tensor t = empty({n});
  uniform_(t, -3, 5, &g);
  auto v = values_of(t);
  Moments m = moments(v);
  CHECK(m.mean == Approx(1.0).margin(8 * 1.5e-3));
  CHECK(m.var == Approx(64.0 / 12).margin(64 * 4e-4));
  CHECK(*std::min_element(v.begin(), v.end()) >= -3.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 5.0);
}

TEST_CASE("bf16 and f16 uniforms never reach hi, and lo == hi fills lo", "[random]") {
  Generator g(3);
  auto vbf = values_of(rand({200000}, {.dtype = DType::bf16}, &g));
  CHECK(*std::max_element(vbf.begin(), vbf.end()) == 1.0 - 0x1p-8);  // the bf16 below 1
  auto vh = values_of(rand({200000}, {.dtype = DType::f16}, &g));
  CHECK(*std::max_element(vh.begin(), vh.end()) == 1.0 - 0x1p-11);  // the f16 below 1
  Tensor t = empty({5, 3});
  uniform_(t, 2.5, 2.5, &g);
  for (double x : values_of(t)) CHECK(x == 2.5);
}

TEST_CASE("normal_ has mean 0, std 1 and normal tails", "[random][stats]") {
  // 1e6 samples: standard errors 1e-3 (mean), 7e-4 (std), 4.7e-4 (fraction within 1),
  // 4.9e-3 (kurtosis); tolerances are about 5 standard errors.
  const int64_t n = 1'000'000;
  for (DType dtype : {DType::f32, DType::f64}) {
    Generator g(13);
    auto v = values_of(randn({n}, {.dtype = dtype}, &g));
    Moments m = moments(v);
    INFO(dtype_name(dtype));
    CHECK(m.mean == Approx(0).margin(5e-3));
    CHECK(std::sqrt(m.var) == Approx(1).margin(4e-3));
    CHECK(m.kurtosis == Approx(3).margin(0.025));
    auto within_1 = std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 1; });
    CHECK(static_cast<double>(within_1) / n == Approx(0.682689).margin(2.4e-3));
    for (double x : v) {
      if (!std::isfinite(x)) FAIL("a non-finite normal sample");
    }
  }
  Generator g(14);
  Tensor t = empty({n});
  normal_(t, 2, 3, &g);
  Moments m = moments(values_of(t));
  CHECK(m.mean == Approx(2).margin(3 * 5e-3));
  CHECK(std::sqrt(m.var) == Approx(3).margin(3 * 4e-3));
}

TEST_CASE("trunc_normal_ stays within a..b with the truncated normal's mean and variance",
          "[random][stats]") {
  const int64_t n = 1'000'000;
  struct Case {
    double mean, std, a, b;
  };
  for (Case c : {Case{0, 1, -2, 2}, Case{0.5, 2, -1, 3}, Case{0, 1, 1.5, 4}, Case{0, 1, 5, 6},
                 Case{0, 1, 0, INFINITY}, Case{-1, 0.5, -INFINITY, -1.2}}) {
    Generator g(15);
    Tensor t = empty({n}, {.dtype = DType::f64});
    trunc_normal_(t, c.mean, c.std, c.a, c.b, &g);
    auto v = values_of(t);
    Moments got = moments(v), want = truncated_normal_moments(c.mean, c.std, c.a, c.b);
    INFO("mean " << c.mean << " std " << c.std << " [" << c.a << ", " << c.b << "]: expected mean "
                 << want.mean << " var " << want.var);
    CHECK(*std::min_element(v.begin(), v.end()) >= c.a);
    CHECK(*std::max_element(v.begin(), v.end()) <= c.b);
    // Standard error of the mean sqrt(var / n); of the variance about var * sqrt(2 / n).
    CHECK(got.mean == Approx(want.mean).margin(6 * std::sqrt(want.var / n)));
    CHECK(got.var == Approx(want.var).margin(6 * want.var * std::sqrt(2.0 / n)));
  }
  // f32 and bf16 fills of the default [-2, 2] stay inside too.
  for (DType dtype : {DType::f32, DType::bf16}) {
    Generator g(16);
    Tensor t = empty({n}, {.dtype = dtype});
    trunc_normal_(t, 0, 1, -2, 2, &g);
    auto v = values_of(t);
    CHECK(*std::min_element(v.begin(), v.end()) >= -2.0);
    CHECK(*std::max_element(v.begin(), v.end()) <= 2.0);
  }
}

TEST_CASE("trunc_normal_ with std 0 or no representable mass fills the clamped mean",
          "[random]") {
  Generator g(1);
  Tensor t = empty({6});
  trunc_normal_(t, 3, 0, -1, 1, &g);
  for (double x : values_of(t)) CHECK(x == 1.0);
  trunc_normal_(t, 0.5, 0, -1, 1, &g);
  for (double x : values_of(t)) CHECK(x == 0.5);
  trunc_normal_(t, 0, 1, 100, 101, &g);  // 100 std above the mean: Phi underflows
  for (double x : values_of(t)) CHECK(x == 100.0);
  // Rounded once from double: 1 + 2^-8 + 2^-30 is just above the midpoint between the
  // bf16 values 1 and 1 + 2^-7, so it rounds up; rounding through float first would land
  // on the midpoint and tie to 1. Likewise for f16 with 1 + 2^-11 + 2^-30.
  Tensor b = empty({3}, {.dtype = DType::bf16});
  trunc_normal_(b, 1 + 0x1p-8 + 0x1p-30, 0, -10, 10, &g);
  for (double x : values_of(b)) CHECK(x == 1 + 0x1p-7);
  Tensor h = empty({3}, {.dtype = DType::f16});
  trunc_normal_(h, 1 + 0x1p-11 + 0x1p-30, 0, -10, 10, &g);
  for (double x : values_of(h)) CHECK(x == 1 + 0x1p-10);
  trunc_normal_(h, -(1 + 0x1p-11 + 0x1p-30), 0, -10, 10, &g);
  for (double x : values_of(h)) CHECK(x == -(1 + 0x1p-10));
}

TEST_CASE("the same seed gives the same values, other seeds and later fills differ", "[random]") {
  const int64_t n = 4096;
  for (Kind kind : kKinds) {
    INFO(kind_name(kind));
    Generator a(42), b(42), c(43);
    Tensor ta = empty({n}), tb = empty({n}), tc = empty({n}), ta2 = empty({n});
    fill(kind, ta, a);
    fill(kind, tb, b);
    fill(kind, tc, c);
    fill(kind, ta2, a);
    CHECK(bytes_of(ta) == bytes_of(tb));
    auto va = values_of(ta), vc = values_of(tc), va2 = values_of(ta2);
    int64_t same_seed = 0, same_next = 0;
    for (int64_t i = 0; i < n; ++i) {
      same_seed += va[i] == vc[i];
      same_next += va[i] == va2[i];
    }
    CHECK(same_seed < n / 100);
    CHECK(same_next < n / 100);
  }
  // The default generator: manual_seed restarts it.
  manual_seed(8);
  Tensor x = rand({100});
  CHECK(default_generator().state() == GeneratorState{8, 50});
  manual_seed(8);
  Tensor y = rand({100});
  CHECK(bytes_of(x) == bytes_of(y));
}

TEST_CASE("the generator offset moves by ceil(logical numel / 2) for every kind of fill",
          "[random]") {
  Generator g(9);
  Tensor whole = empty({7, 3});
  uniform_(whole, 0, 1, &g);
  CHECK(g.state() == GeneratorState{9, 11});
  Tensor rows = empty({2, 3});
  normal_(rows, 0, 1, &g, {.logical_shape = {7, 3}, .offset = {4, 0}});
  CHECK(g.offset() == 22);
  Tensor none = empty({0, 3});
  trunc_normal_(none, 0, 1, -2, 2, &g, {.logical_shape = {7, 3}, .offset = {7, 0}});
  CHECK(g.offset() == 33);
  Tensor f64 = empty({7, 3}, {.dtype = DType::f64});
  uniform_(f64, 0, 1, &g);
  CHECK(g.offset() == 44);
  Tensor empty_logical = empty({0});
  uniform_(empty_logical, 0, 1, &g);
  CHECK(g.offset() == 44);
  g.manual_seed(10);
  CHECK(g.state() == GeneratorState{10, 0});
}

TEST_CASE("a saved generator state replays the same fills", "[random]") {
  Generator g(123);
  Tensor warmup = empty({10});
  normal_(warmup, 0, 1, &g);
  GeneratorState saved = g.state();
  Tensor first = empty({64}), second = empty({64});
  trunc_normal_(first, 0, 1, -2, 2, &g);
  GeneratorState after = g.state();
  Generator restored;  // default seed, offset 0
  restored.set_state(saved);
  trunc_normal_(second, 0, 1, -2, 2, &restored);
  CHECK(bytes_of(first) == bytes_of(second));
  CHECK(restored.state() == after);
  Generator copy = g;
  CHECK(copy.state() == g.state());
}

TEST_CASE("meta fills allocate nothing but advance the generator like real fills", "[random]") {
  Generator meta_gen(55), real_gen(55);
  int64_t allocations_before = memory_stats(Device::cpu()).total.num_allocations;
  Tensor meta = empty({8, 5}, {.device = Device::meta()});
  uniform_(meta, 0, 1, &meta_gen);
  normal_(meta, 0, 1, &meta_gen, {.logical_shape = {16, 5}, .offset = {8, 0}});
  trunc_normal_(meta, 0, 1, -2, 2, &meta_gen);
  CHECK(memory_stats(Device::cpu()).total.num_allocations == allocations_before);
  CHECK(meta.raw_data() == nullptr);
  CHECK(meta_gen.offset() == 20 + 40 + 20);
  // A real fill after the meta ones draws what it would after real fills of the same sizes.
  Tensor real = empty({8, 5});
  uniform_(real, 0, 1, &real_gen);
  Tensor rows = empty({8, 5});
  normal_(rows, 0, 1, &real_gen, {.logical_shape = {16, 5}, .offset = {8, 0}});
  trunc_normal_(real, 0, 1, -2, 2, &real_gen);
  Tensor after_meta = empty({4}), after_real = empty({4});
  uniform_(after_meta, 0, 1, &meta_gen);
  uniform_(after_real, 0, 1, &real_gen);
  CHECK(bytes_of(after_meta) == bytes_of(after_real));
}

TEST_CASE("fill values do not depend on the thread count", "[random]") {
  const int saved_threads = kernels::num_threads();
  // One long row (the row itself is split), many rows of a column box, and an odd row
  // count, so that chunk edges fall inside Philox blocks and Box-Muller pairs.
  const Shape logical = {601, 333};
  auto run = [&](Kind kind, int threads) {
    kernels::set_num_threads(threads);
    Generator g(2718);
    Tensor flat = empty({200001});
    fill(kind, flat, g);
    Tensor box = empty({601, 200});
    fill(kind, box, g, {.logical_shape = logical, .offset = {0, 101}});
    std::vector<unsigned char> out = bytes_of(flat);
    std::vector<unsigned char> b = bytes_of(box);
    out.insert(out.end(), b.begin(), b.end());
    return out;
  };
  for (Kind kind : kKinds) {
    INFO(kind_name(kind));
    auto one = run(kind, 1);
    CHECK(run(kind, 4) == one);
    CHECK(run(kind, 7) == one);
  }
  kernels::set_num_threads(saved_threads);
}

TEST_CASE("rand and randn make new tensors filled like uniform_ and normal_", "[random]") {
  Generator g1(600), g2(600);
  Tensor r = rand({3, 4}, {.dtype = DType::f64}, &g1);
  CHECK(r.sizes() == Shape{3, 4});
  CHECK(r.dtype() == DType::f64);
  Tensor u = empty({3, 4}, {.dtype = DType::f64});
  uniform_(u, 0, 1, &g2);
  CHECK(bytes_of(r) == bytes_of(u));
  Tensor z = randn({5}, {.dtype = DType::bf16}, &g1);
  Tensor nz = empty({5}, {.dtype = DType::bf16});
  normal_(nz, 0, 1, &g2);
  CHECK(bytes_of(z) == bytes_of(nz));
  Tensor m = randn({1000, 1000}, {.device = Device::meta()}, &g1);
  CHECK(m.device().is_meta());
  CHECK(g1.offset() == 6 + 3 + 500000);
}

TEST_CASE("random fills reject bad input with clear messages and leave the generator alone",
          "[random][errors]") {
  Generator g(1);
  Tensor t = empty({4, 3});
  Tensor ints = empty({4}, {.dtype = DType::i64});
  Tensor undefined;
  CHECK_THROWS_WITH(uniform_(ints, 0, 1, &g),
                    Catch::Contains("uniform_: expected a floating dtype (f32, f64, bf16, f16), "
                                    "got i64"));
  CHECK_THROWS_WITH(normal_(ints, 0, 1, &g), Catch::Contains("normal_: expected a floating dtype"));
  CHECK_THROWS_WITH(trunc_normal_(ints, 0, 1, -2, 2, &g),
                    Catch::Contains("trunc_normal_: expected a floating dtype"));
  Tensor meta_ints = empty({4}, {.dtype = DType::i32, .device = Device::meta()});
  CHECK_THROWS_WITH(uniform_(meta_ints, 0, 1, &g), Catch::Contains("got i32"));
  CHECK_THROWS_WITH(uniform_(undefined, 0, 1, &g), Catch::Contains("undefined tensor"));
  CHECK_THROWS_WITH(rand({2}, {.dtype = DType::u8}, &g), Catch::Contains("got u8"));

  // Slices that do not fit.
  CHECK_THROWS_WITH(uniform_(t, 0, 1, &g, {.logical_shape = {6, 3}, .offset = {3, 0}}),
                    Catch::Contains("uniform_: a box of shape [4, 3] at offset [3, 0] does not fit "
                                    "in the logical shape [6, 3] (dim 0: [3, 7) is outside "
                                    "[0, 6))"));
  CHECK_THROWS_WITH(normal_(t, 0, 1, &g, {.logical_shape = {8, 3}, .offset = {0, 1}}),
                    Catch::Contains("dim 1: [1, 4) is outside [0, 3)"));
  CHECK_THROWS_WITH(normal_(t, 0, 1, &g, {.logical_shape = {8, 3}, .offset = {-1, 0}}),
                    Catch::Contains("dim 0: [-1, 3) is outside [0, 8)"));
  CHECK_THROWS_WITH(uniform_(t, 0, 1, &g, {.logical_shape = {8, 3, 1}, .offset = {0, 0, 0}}),
                    Catch::Contains("uniform_: the slice's logical shape [8, 3, 1] and offset "
                                    "[0, 0, 0] must have one entry per dim of the 2-d tensor of "
                                    "shape [4, 3]"));
  CHECK_THROWS_WITH(uniform_(t, 0, 1, &g, {.logical_shape = {8, 3}, .offset = {}}),
                    Catch::Contains("must have one entry per dim"));
  CHECK_THROWS_WITH(uniform_(t, 0, 1, &g, {.logical_shape = {}, .offset = {0, 0}}),
                    Catch::Contains("must have one entry per dim"));

  // Overlapping destination.
  Tensor expanded = empty({1, 3}).expand({4, 3});
  CHECK_THROWS_WITH(uniform_(expanded, 0, 1, &g),
                    Catch::Contains("uniform_: the destination has overlapping elements (dim 0 "
                                    "has size 4 and stride 0"));

  // Parameters.
  CHECK_THROWS_WITH(uniform_(t, 2, 1, &g),
                    Catch::Contains("uniform_: expected lo <= hi, got lo = 2 > hi = 1"));
  CHECK_THROWS_WITH(uniform_(t, 0, INFINITY, &g),
                    Catch::Contains("uniform_: expected finite lo and hi, got lo = 0, hi = inf"));
  CHECK_THROWS_WITH(uniform_(t, -3e38, 3e38, &g),
                    Catch::Contains("uniform_: hi - lo overflows for lo = -3e+38, hi = 3e+38 in "
                                    "f32"));
  Tensor half = empty({4}, {.dtype = DType::f16});
  CHECK_THROWS_WITH(uniform_(half, 0, 1e5, &g),
                    Catch::Contains("uniform_: [lo, hi) = [0, 100000) is outside the finite range "
                                    "of f16 (+-65504)"));
  CHECK_THROWS_WITH(normal_(t, 0, -1, &g),
                    Catch::Contains("normal_: expected std >= 0, got std = -1"));
  CHECK_THROWS_WITH(normal_(t, NAN, 1, &g),
                    Catch::Contains("normal_: expected finite mean and std, got mean = nan"));
  CHECK_THROWS_WITH(trunc_normal_(t, 0, -0.5, -2, 2, &g),
                    Catch::Contains("trunc_normal_: expected std >= 0, got std = -0.5"));
  CHECK_THROWS_WITH(trunc_normal_(t, 0, 1, 2, 2, &g),
                    Catch::Contains("trunc_normal_: expected a < b, got a = 2, b = 2"));
  CHECK_THROWS_WITH(trunc_normal_(t, 0, 1, 3, -1, &g),
                    Catch::Contains("trunc_normal_: expected a < b, got a = 3, b = -1"));
  CHECK_THROWS_WITH(trunc_normal_(t, 0, 1, NAN, 1, &g), Catch::Contains("expected a < b"));

  CHECK(g.state() == GeneratorState{1, 0});  // no failed fill moved the offset
}
