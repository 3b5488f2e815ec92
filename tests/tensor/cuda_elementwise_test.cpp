// CUDA elementwise ops checked against the CPU ops on the same inputs: every unary,
// binary and comparison op, where(), and the in-place ops, for every dtype each is
// defined on, over tiny, empty, odd-sized, broadcast, transposed, sliced and
// misaligned (offset by one element, so not 16-byte aligned) operands.
//
// Inputs are fresh random values (a new seed per run, printed on failure). Results
// must be bit-identical to the CPU's for the exact ops (integer ops, add, sub, mul,
// div, square, sqrt, rsqrt, reciprocal, neg, abs, relu, maximum, minimum, add with
// alpha, comparisons, where); NaN must meet NaN, whatever its payload. The
// transcendentals use CUDA's libm, not glibc's: f32/f64 results may differ by
// 4 ulp (exp, log, sin, cos, tanh), 8 ulp (sigmoid, silu: one more rounding after
// exp), 16 ulp (pow, gelu_erf) and 64 ulp (gelu_tanh: exp(-2u) scales the rounding
// of u by up to |2u| ~ 25 on [-6, 6]); bf16/f16 results, rounded from float, by 1 ulp.
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

uint64_t seed() {
  static const uint64_t s = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return s;
}

Generator& rng() {
  static Generator gen(seed());
  return gen;
}

// --- inputs ---

// Uniform values in [lo, hi) of `dtype`, made on the CPU (integers truncate). Very
// wide i64 ranges get random low bits too, so wrapping products are not all zeros.
Tensor random_tensor(const Shape& shape, DType dtype, double lo, double hi) {
  if (dtype == DType::i64 && hi - lo > 0x1p53) {
    Tensor high = random_tensor(shape, DType::i64, -0x1p31, 0x1p31);
    Tensor low = random_tensor(shape, DType::i64, 0, 0x1p32);
    return high * (int64_t{1} << 32) + low;
  }
  Tensor t = empty(shape, {.dtype = DType::f64});
  uniform_(t, lo, hi, &rng());
  return t.to(dtype);
}

// The whole range of an integer dtype (wrapping arithmetic is exercised), or [lo, hi).
struct Range {
  double lo, hi;
};
Range int_range(DType dtype) {
  switch (dtype) {
    case DType::i32: return {-0x1p31, 0x1p31};
    case DType::i64: return {-0x1p63, 0x1p63};
    default: return {0, 256};
  }
}

// Where an operand sits: a freshly allocated base tensor and a view of it.
struct Layout {
  std::string name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

Tensor same(const Tensor& t) { return t; }

Layout contiguous(const Shape& shape) {
  return {"contiguous " + shape_str(shape), shape, same};
}

std::vector<Layout> layouts() {
  return {
      contiguous({0}),
      contiguous({}),
      contiguous({1}),
      contiguous({7}),
      contiguous({1000003}),
      contiguous({4, 0, 3}),
      {"transposed [29, 37]", {37, 29}, [](const Tensor& t) { return t.t(); }},
      {"sliced [64, 22]", {64, 50}, [](const Tensor& t) { return t.slice(1, 3, 47, 2); }},
      {"misaligned [1000]", {1001}, [](const Tensor& t) { return t.narrow(0, 1, 1000); }},
      {"misaligned [3, 333]", {1000},
       [](const Tensor& t) { return t.narrow(0, 1, 999).view({3, 333}); }},
      {"misaligned [100003]", {100004}, [](const Tensor& t) { return t.narrow(0, 1, 100003); }},
  };
}

// The same values on the CPU and on the GPU, in the same layout.
struct Both {
  Tensor cpu, gpu;
};

Both on_both(const Layout& layout, const Tensor& base) {
  return {layout.view(base), layout.view(base.to(kGpu))};
}

Both random_both(const Layout& layout, DType dtype, Range r) {
  return on_both(layout, random_tensor(layout.base, dtype, r.lo, r.hi));
}

// --- comparison ---

template <class T>
__int128 ordered(T v) {
  if constexpr (std::is_same_v<T, double>) {
    const auto b = std::bit_cast<uint64_t>(v);
    const auto m = static_cast<__int128>(b & 0x7FFFFFFFFFFFFFFFull);
    return (b >> 63) ? -m : m;
  } else if constexpr (std::is_same_v<T, float>) {
    const auto b = std::bit_cast<uint32_t>(v);
    const auto m = static_cast<__int128>(b & 0x7FFFFFFFu);
    return (b >> 31) ? -m : m;
  } else {
    const auto b = std::bit_cast<uint16_t>(v);
    const auto m = static_cast<__int128>(b & 0x7FFFu);
    return (b >> 15) ? -m : m;
  }
}

// The tolerance of a floating result: `ulps` for f32/f64, at most 1 for bf16/f16 (math
// in float, one rounding on store), 0 stays 0 (bit-identical).
int64_t tolerance(DType dtype, int64_t ulps) {
  return (dtype == DType::bf16 || dtype == DType::f16) ? std::min<int64_t>(ulps, 1) : ulps;
}

// The GPU result equals the CPU result: integers exactly, floating values within
// `ulps` units in the last place (0: bit for bit), NaN only where the CPU has NaN.
void check_same(const Tensor& gpu, const Tensor& cpu, int64_t ulps, const std::string& what) {
  INFO(what << " (seed " << seed() << ")");
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.sizes() == cpu.sizes());
  const int64_t tol = tolerance(cpu.dtype(), ulps);
  dispatch_dtype(cpu.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> g = gpu.to_vector<T>(), c = cpu.to_vector<T>();
    int64_t bad = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      bool ok;
      if constexpr (is_floating_v<T>) {
        const bool gn = std::isnan(convert<double>(g[i])), cn = std::isnan(convert<double>(c[i]));
        if (gn || cn) {
          ok = gn && cn;
        } else {
          const __int128 d = ordered(g[i]) - ordered(c[i]);
          ok = (d < 0 ? -d : d) <= tol;
        }
      } else {
        ok = g[i] == c[i];
      }
      if (!ok && ++bad <= 3) {
        FAIL_CHECK("element " << i << ": gpu " << convert<double>(g[i]) << ", cpu "
                              << convert<double>(c[i]) << " (tolerance " << tol << " ulp)");
      }
    }
    CHECK(bad == 0);
  });
}

// --- op tables ---

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  Range range;  // for floating dtypes; integers use their whole range
  int64_t ulps;
  bool floating_only;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, {-6, 6}, 0, false},
      {"abs", [](const Tensor& x) { return abs(x); }, {-6, 6}, 0, false},
      {"square", [](const Tensor& x) { return square(x); }, {-6, 6}, 0, false},
      {"relu", [](const Tensor& x) { return relu(x); }, {-6, 6}, 0, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, {0, 100}, 0, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, {0.01, 100}, 0, true},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, {-10, 10}, 0, true},
      {"exp", [](const Tensor& x) { return exp(x); }, {-10, 10}, 4, true},
      {"log", [](const Tensor& x) { return log(x); }, {0.01, 100}, 4, true},
      {"sin", [](const Tensor& x) { return sin(x); }, {-6, 6}, 4, true},
      {"cos", [](const Tensor& x) { return cos(x); }, {-6, 6}, 4, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, {-6, 6}, 4, true},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {-20, 20}, 8, true},
      {"silu", [](const Tensor& x) { return silu(x); }, {-20, 20}, 8, true},
      {"gelu_erf", [](const Tensor& x) { return gelu(x); }, {-6, 6}, 16, true},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, {-6, 6}, 64,
       true},
  };
}

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  Range a, b;  // floating dtypes
  int64_t ulps;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, {-10, 10}, {-10, 10}, 0},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 3); }, {-10, 10},
       {-10, 10}, 0},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, {-10, 10}, {-10, 10}, 0},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, {-10, 10}, {-10, 10}, 0},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, {-10, 10}, {-10, 10}, 0},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, {-10, 10},
       {-10, 10}, 0},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, {-10, 10},
       {-10, 10}, 0},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, {0.1, 4}, {-3, 3}, 16},
  };
}

// Integer operands: the whole range, except divisors (non-zero) and exponents (small,
// non-negative, still large enough to wrap).
Both integer_operand(const std::string& op, bool rhs, const Layout& layout, DType dtype) {
  if (rhs && op == "div") {
    Tensor base = random_tensor(layout.base, dtype, dtype == DType::u8 ? 1 : -50, 50);
    base = where(eq(base, 0), scalar_tensor(7, dtype), base);
    return on_both(layout, base);
  }
  if (op == "pow") {
    if (rhs) return random_both(layout, dtype, {0, 40});
    return random_both(layout, dtype, {dtype == DType::u8 ? 0.0 : -10.0, 10});
  }
  return random_both(layout, dtype, int_range(dtype));
}

// Pairs of operand layouts whose shapes broadcast together.
struct LayoutPair {
  Layout a, b;
};

std::vector<LayoutPair> layout_pairs() {
  std::vector<LayoutPair> pairs;
  for (const Layout& l : layouts()) pairs.push_back({l, l});
  pairs.push_back({contiguous({4, 1, 3}), contiguous({5, 1})});
  pairs.push_back({contiguous({1000003}), contiguous({})});  // tensor (op) scalar
  pairs.push_back({contiguous({}), contiguous({7})});        // scalar (op) tensor
  pairs.push_back({contiguous({29, 37}), layouts()[6]});     // contiguous with transposed
  pairs.push_back({layouts()[8], contiguous({1000})});       // misaligned with aligned
  pairs.push_back({contiguous({1000}), layouts()[8]});
  pairs.push_back({layouts()[6], contiguous({37})});  // transposed with a broadcast row
  return pairs;
}

std::string describe(const std::string& op, DType dtype, const LayoutPair& p) {
  return op + " " + std::string(dtype_name(dtype)) + " on " + p.a.name + " and " + p.b.name;
}

}  // namespace

TEST_CASE("cuda unary ops match the cpu ops for every dtype and layout", "[gpu][elementwise]") {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dtype : c.floating_only ? kFloating : kAllDtypes) {
      const Range r = is_floating(dtype) ? c.range : int_range(dtype);
      for (const Layout& l : layouts()) {
        Both x = random_both(l, dtype, r);
        Tensor got = c.op(x.gpu);
        check_same(got, c.op(x.cpu), c.ulps,
                   c.name + " " + std::string(dtype_name(dtype)) + " on " + l.name);
      }
    }
  }
}

TEST_CASE("cuda binary ops match the cpu ops, with broadcasting and strided operands",
          "[gpu][elementwise]") {
  for (const BinaryCase& c : binary_cases()) {
    for (DType dtype : kAllDtypes) {
      for (const LayoutPair& p : layout_pairs()) {
        Both a, b;
        if (is_floating(dtype)) {
          a = random_both(p.a, dtype, c.a);
          b = random_both(p.b, dtype, c.b);
        } else {
          a = integer_operand(c.name, false, p.a, dtype);
          b = integer_operand(c.name, true, p.b, dtype);
        }
        Tensor got = c.op(a.gpu, b.gpu);
        check_same(got, c.op(a.cpu, b.cpu), is_floating(dtype) ? c.ulps : 0,
                   describe(c.name, dtype, p));
      }
    }
  }
}

TEST_CASE("cuda binary ops with a Scalar operand match the cpu ops", "[gpu][elementwise]") {
  for (DType dtype : kAllDtypes) {
    const Range r = is_floating(dtype) ? Range{-10, 10} : int_range(dtype);
    Both x = random_both(contiguous({1000003}), dtype, r);
    const std::string name(dtype_name(dtype));
    check_same(x.gpu + 3, x.cpu + 3, 0, "x + 3 " + name);
    check_same(2.5 - x.gpu, 2.5 - x.cpu, 0, "2.5 - x " + name);
    check_same(x.gpu * -7, x.cpu * -7, 0, "x * -7 " + name);
    check_same(x.gpu / 3, x.cpu / 3, 0, "x / 3 " + name);
    check_same(maximum(x.gpu, 1), maximum(x.cpu, 1), 0, "maximum(x, 1) " + name);
    check_same(minimum(1, x.gpu), minimum(1, x.cpu), 0, "minimum(1, x) " + name);
    check_same(pow(x.gpu, 2), pow(x.cpu, 2), is_floating(dtype) ? 16 : 0, "pow(x, 2) " + name);
  }
}

TEST_CASE("cuda comparisons match the cpu comparisons", "[gpu][elementwise]") {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>>
      ops = {{"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
             {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
             {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
             {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
             {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
             {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
  for (const auto& [name, op] : ops) {
    for (DType dtype : kAllDtypes) {
      for (const LayoutPair& p : layout_pairs()) {
        // Few distinct values (small integers), so that equal pairs are common.
        auto operand = [&](const Layout& l) {
          Tensor base = random_tensor(l.base, DType::i32, dtype == DType::u8 ? 0 : -3, 4);
          return on_both(l, base.to(dtype));
        };
        Both a = operand(p.a), b = operand(p.b);
        Tensor got = op(a.gpu, b.gpu);
        REQUIRE(got.dtype() == DType::u8);
        check_same(got, op(a.cpu, b.cpu), 0, describe(name, dtype, p));
      }
    }
  }
}

TEST_CASE("cuda where matches the cpu where, with broadcast cond, a and b", "[gpu][elementwise]") {
  struct Triple {
    Layout cond, a, b;
  };
  std::vector<Triple> triples;
  for (const Layout& l : layouts()) triples.push_back({l, l, l});
  triples.push_back({contiguous({4, 1, 3}), contiguous({5, 1}), contiguous({3})});
  triples.push_back({contiguous({}), layouts()[8], contiguous({1000})});
  triples.push_back({layouts()[8], contiguous({1000}), contiguous({})});
  triples.push_back({layouts()[6], contiguous({29, 37}), layouts()[6]});
  for (DType dtype : kAllDtypes) {
    const Range r = is_floating(dtype) ? Range{-10, 10} : int_range(dtype);
    for (const Triple& t : triples) {
      Both cond = on_both(t.cond, random_tensor(t.cond.base, DType::u8, 0, 2));
      Both a = random_both(t.a, dtype, r), b = random_both(t.b, dtype, r);
      check_same(where(cond.gpu, a.gpu, b.gpu), where(cond.cpu, a.cpu, b.cpu), 0,
                 "where " + std::string(dtype_name(dtype)) + " on " + t.cond.name + ", " +
                     t.a.name + ", " + t.b.name);
    }
  }
}

TEST_CASE("cuda in-place ops match the cpu ones and write only self's elements",
          "[gpu][elementwise]") {
  const std::vector<Layout> selves = {contiguous({1000003}), layouts()[6], layouts()[7],
                                      layouts()[8], layouts()[9]};
  using InPlace = std::function<void(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, InPlace>> ops = {
      {"add_", [](const Tensor& s, const Tensor& o) { add_(s, o); }},
      {"add_ alpha", [](const Tensor& s, const Tensor& o) { add_(s, o, -3); }},
      {"add_ scalar", [](const Tensor& s, const Tensor&) { add_(s, 5); }},
      {"sub_", [](const Tensor& s, const Tensor& o) { sub_(s, o); }},
      {"sub_ scalar", [](const Tensor& s, const Tensor&) { sub_(s, 2); }},
      {"mul_", [](const Tensor& s, const Tensor& o) { mul_(s, o); }},
      {"mul_ scalar", [](const Tensor& s, const Tensor&) { mul_(s, -3); }},
      {"div_", [](const Tensor& s, const Tensor& o) { div_(s, o); }},
      {"div_ scalar", [](const Tensor& s, const Tensor&) { div_(s, 3); }},
  };
  for (const auto& [name, op] : ops) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
      const Range r = is_floating(dtype) ? Range{-10, 10} : int_range(dtype);
      for (const Layout& l : selves) {
        for (bool row : {false, true}) {
          Tensor self_base = random_tensor(l.base, dtype, r.lo, r.hi);
          Tensor cpu_base = self_base.clone(), gpu_base = self_base.to(kGpu);
          Tensor cpu_self = l.view(cpu_base), gpu_self = l.view(gpu_base);
          // other: the same shape, or one row broadcast over self's leading dims.
          Shape other_shape = cpu_self.sizes();
          if (row && !other_shape.empty()) {
            other_shape.erase(other_shape.begin(), other_shape.end() - 1);  // keep the last dim
          }
          Tensor other = name.starts_with("div_")
                             ? integer_operand("div", true, contiguous(other_shape), dtype).cpu
                             : random_tensor(other_shape, dtype, r.lo, r.hi);
          if (is_floating(dtype) && name.starts_with("div_")) {
            other = random_tensor(other_shape, dtype, 0.5, 10);
          }
          op(cpu_self, other);
          op(gpu_self, other.to(kGpu));
          const std::string what = name + " " + std::string(dtype_name(dtype)) + " on " + l.name +
                                   (row ? " with a broadcast row" : "");
          check_same(gpu_self, cpu_self, 0, what);
          check_same(gpu_base, cpu_base, 0, what + " (whole base)");
        }
      }
    }
  }
}

TEST_CASE("cuda in-place ops read an overlapping other as it was before the write",
          "[gpu][elementwise]") {
  Tensor base = random_tensor({1001}, DType::f32, -10, 10);
  Tensor cpu = base.clone(), gpu = base.to(kGpu);
  add_(cpu.narrow(0, 1, 1000), cpu.narrow(0, 0, 1000));
  add_(gpu.narrow(0, 1, 1000), gpu.narrow(0, 0, 1000));
  check_same(gpu, cpu, 0, "add_ of a shifted view of self");
}

TEST_CASE("cuda maximum, minimum and comparisons treat NaN like the cpu",
          "[gpu][elementwise]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> av = {nan, 1, nan, -inf, 2, -0.0, 0.0, 3};
  std::vector<double> bv = {1, nan, nan, 5, inf, 0.0, -0.0, 3};
  for (DType dtype : kFloating) {
    Tensor a = from_vector(av).to(dtype), b = from_vector(bv).to(dtype);
    Tensor ag = a.to(kGpu), bg = b.to(kGpu);
    const std::string name(dtype_name(dtype));
    Tensor mx = maximum(ag, bg), mn = minimum(ag, bg);
    check_same(mx, maximum(a, b), 0, "maximum with NaN " + name);
    check_same(mn, minimum(a, b), 0, "minimum with NaN " + name);
    std::vector<double> got = mx.to(DType::f64).to_vector<double>();
    CHECK(std::isnan(got[0]));
    CHECK(std::isnan(got[1]));
    CHECK(std::isnan(got[2]));
    CHECK(got[4] == inf);
    check_same(eq(ag, bg), eq(a, b), 0, "eq with NaN " + name);
    check_same(ne(ag, bg), ne(a, b), 0, "ne with NaN " + name);
    check_same(lt(ag, bg), lt(a, b), 0, "lt with NaN " + name);
    check_same(ge(ag, bg), ge(a, b), 0, "ge with NaN " + name);
  }
}

TEST_CASE("cuda sigmoid, silu and gelu stay finite at large |x| like the cpu",
          "[gpu][elementwise]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xv = {-1e4, -200, -100, -30, -20, -10, 10, 20, 30, 100, 200, 1e4, -inf, inf};
  for (DType dtype : kFloating) {
    Tensor x = from_vector(xv).to(dtype);
    Tensor xg = x.to(kGpu);
    const std::string name(dtype_name(dtype));
    check_same(sigmoid(xg), sigmoid(x), 8, "sigmoid at large |x| " + name);
    check_same(silu(xg), silu(x), 8, "silu at large |x| " + name);
    check_same(gelu(xg), gelu(x), 16, "gelu_erf at large |x| " + name);
    check_same(gelu(xg, GeluApproximation::tanh), gelu(x, GeluApproximation::tanh), 64,
               "gelu_tanh at large |x| " + name);
  }
}

TEST_CASE("cuda integer division truncates and wraps INT_MIN / -1 like the cpu",
          "[gpu][elementwise]") {
  const int32_t lo32 = std::numeric_limits<int32_t>::min(), hi32 = std::numeric_limits<int32_t>::max();
  Tensor a = from_vector<int32_t>({lo32, hi32, -7, 7, -9, 9, lo32, 5});
  Tensor b = from_vector<int32_t>({-1, -1, 2, -2, 4, 4, 1, lo32});
  check_same(div(a.to(kGpu), b.to(kGpu)), div(a, b), 0, "i32 div edges");
  check_same(pow(a.to(kGpu), from_vector<int32_t>({3}).to(kGpu)), pow(a, from_vector<int32_t>({3})),
             0, "i32 pow wraps");
  const int64_t lo64 = std::numeric_limits<int64_t>::min();
  Tensor c = from_vector<int64_t>({lo64, -7, 7, lo64});
  Tensor d = from_vector<int64_t>({-1, 2, -2, 3});
  check_same(div(c.to(kGpu), d.to(kGpu)), div(c, d), 0, "i64 div edges");
  check_same(-c.to(kGpu), -c, 0, "i64 neg of INT_MIN");
  check_same(abs(c.to(kGpu)), abs(c), 0, "i64 abs of INT_MIN");
  CHECK(div(c.to(kGpu), d.to(kGpu)).to_vector<int64_t>() ==
        std::vector<int64_t>{lo64, -3, -3, lo64 / 3});
}

TEST_CASE("cuda integer division by zero and negative powers are clear errors",
          "[gpu][elementwise]") {
  for (DType dtype : {DType::i32, DType::i64, DType::u8}) {
    INFO(dtype_name(dtype));
    Tensor a = random_tensor({1000003}, dtype, 1, 100).to(kGpu);
    Tensor z = ones({1000003}, {.dtype = dtype});
    z.narrow(0, 999999, 1).fill_(0);
    Tensor zg = z.to(kGpu);
    CHECK_THROWS_WITH(div(a, zg), Catch::Contains("div") && Catch::Contains("division by zero"));
    CHECK_THROWS_WITH(div(a, 0), Catch::Contains("division by zero"));
    CHECK_THROWS_WITH(div(5, zg), Catch::Contains("division by zero"));
    Tensor self = a.clone();
    CHECK_THROWS_WITH(div_(self, zg),
                      Catch::Contains("div_") && Catch::Contains("division by zero"));
    check_same(self, a.to(Device::cpu()), 0, "div_ by zero leaves self untouched");
    // A zero in a strided (transposed) divisor is found too; none is none.
    Tensor zt = ones({37, 29}, {.dtype = dtype});
    zt.select(0, 36).select(0, 28).fill_(0);
    Tensor num = random_tensor({29, 37}, dtype, 1, 100).to(kGpu);
    CHECK_THROWS_WITH(num / zt.to(kGpu).t(), Catch::Contains("division by zero"));
    CHECK_NOTHROW(num / ones({37, 29}, {.dtype = dtype}).to(kGpu).t());
    CHECK_NOTHROW(div(a, ones({1000003}, {.dtype = dtype}).to(kGpu)));
    if (dtype != DType::u8) {
      Tensor e = ones({7}, {.dtype = dtype});
      e.narrow(0, 6, 1).fill_(-1);
      CHECK_THROWS_WITH(pow(a.narrow(0, 0, 7), e.to(kGpu)),
                        Catch::Contains("pow") && Catch::Contains("negative"));
    }
  }
}

TEST_CASE("cuda elementwise ops reject mixed devices and integer transcendentals",
          "[gpu][elementwise]") {
  Tensor g = ones({3}, {.device = kGpu});
  Tensor c = ones({3});
  CHECK_THROWS_WITH(add(g, c), Catch::Contains("add") && Catch::Contains("cuda:0") &&
                                   Catch::Contains("cpu"));
  CHECK_THROWS_WITH(exp(ones({3}, {.dtype = DType::i64, .device = kGpu})),
                    Catch::Contains("exp") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(where(g, g, g), Catch::Contains("where") && Catch::Contains("u8"));
  check_same(exp(g), exp(c), 4, "exp of ones");
}
