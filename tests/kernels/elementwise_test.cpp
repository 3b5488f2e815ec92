// CPU elementwise kernels against references computed here in double with plain loops.
// Tolerances: f32 within 1e-5 relative, f64 within 1e-12 relative, and a bf16 result
// within 1 bf16 ulp of the double reference rounded to bf16.
#include "dtr/kernels/cpu/elementwise.h"
#include "dtr/kernels/cpu/parallel.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::kernels::cpu;
using dtr::testing::bf16_order;
using dtr::testing::ref_sigmoid;

namespace {

// `slack` is an extra absolute allowance for the reference's own rounding error.
template <class T>
bool close_to(T got, double ref, double slack = 0) {
  double g = convert<double>(got);
  if (std::isnan(ref)) return std::isnan(g);
  if (std::isinf(ref)) return g == ref;
  if constexpr (std::is_same_v<T, float>) {
    return std::abs(g - ref) <= 1e-5 * std::abs(ref) + 1e-37;
  } else if constexpr (std::is_same_v<T, double>) {
    return std::abs(g - ref) <= 1e-12 * std::abs(ref) + 1e-300 + slack;
  } else if constexpr (std::is_same_v<T, bf16>) {
    bf16 want(static_cast<float>(ref));
    if (std::isinf(static_cast<float>(want)))
      return static_cast<float>(got) == static_cast<float>(want);
    return std::abs(bf16_order(got) - bf16_order(want)) <= 1;
  } else {
    return g == ref;
  }
}

// Checks got[i] against ref[i] for all i, reporting the first few mismatches.
template <class T>
void check_all_close(const std::vector<T>& got, const std::vector<double>& ref,
                     const std::vector<double>& inputs, const std::string& what,
                     double slack_per_input = 0) {
  REQUIRE(got.size() == ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    double slack = i < inputs.size() ? slack_per_input * std::abs(inputs[i]) : 0.0;
    if (!close_to(got[i], ref[i], slack)) {
      ++bad;
      FAIL_CHECK(what << ": element " << i << " (input " << (i < inputs.size() ? inputs[i] : 0.0)
                      << ") got " << convert<double>(got[i]) << ", reference " << ref[i]);
    }
  }
  CHECK(bad == 0);
}

// n values spread over [lo, hi] (cell centres, so never exactly lo, hi or 0 for symmetric ranges).
std::vector<double> grid(double lo, double hi, int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * (i + 0.5) / n;
  return v;
}

template <class T>
std::vector<T> cast_all(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = convert<T>(v[i]);
  return out;
}

struct UnaryKernelCase {
  UnaryOp op;
  double lo, hi;
  double (*ref)(double);
};

double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double ref_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

const std::vector<UnaryKernelCase>& unary_kernel_cases() {
  static const std::vector<UnaryKernelCase> cases = {
      {UnaryOp::neg, -10, 10, [](double x) { return -x; }},
      {UnaryOp::abs, -10, 10, [](double x) { return std::abs(x); }},
      {UnaryOp::exp, -20, 20, [](double x) { return std::exp(x); }},
      {UnaryOp::log, 1e-3, 100, [](double x) { return std::log(x); }},
      {UnaryOp::sqrt, 0, 100, [](double x) { return std::sqrt(x); }},
      {UnaryOp::rsqrt, 1e-3, 100, [](double x) { return 1.0 / std::sqrt(x); }},
      {UnaryOp::square, -10, 10, [](double x) { return x * x; }},
      {UnaryOp::reciprocal, -10, 10, [](double x) { return 1.0 / x; }},
      {UnaryOp::sin, -20, 20, [](double x) { return std::sin(x); }},
      {UnaryOp::cos, -20, 20, [](double x) { return std::cos(x); }},
      {UnaryOp::tanh, -10, 10, [](double x) { return std::tanh(x); }},
      {UnaryOp::sigmoid, -30, 30, ref_sigmoid},
      {UnaryOp::relu, -5, 5, [](double x) { return x > 0 ? x : 0.0; }},
      {UnaryOp::gelu_tanh, -5, 5, ref_gelu_tanh},
      {UnaryOp::gelu_erf, -6, 6, ref_gelu_erf},
      {UnaryOp::silu, -30, 30, [](double x) { return x * ref_sigmoid(x); }},
  };
  return cases;
}

template <class T>
void check_unary_table() {
  const int64_t n = 2001;
  const int64_t stride = 1;
  for (const UnaryKernelCase& c : unary_kernel_cases()) {
    std::vector<T> x = cast_all<T>(grid(c.lo, c.hi, static_cast<int>(n)));
    std::vector<double> xd(n), ref(n);
    for (int64_t i = 0; i < n; ++i) {
      xd[i] = convert<double>(x[i]);  // the input as actually stored in T
      ref[i] = c.ref(xd[i]);
    }
    std::vector<T> out(n);
    unary<T>(c.op, 1, &n, x.data(), &stride, out.data(), &stride);
    // In f64 the textbook gelu references lose digits to 1 + erf / 1 + tanh for x << 0:
    // their absolute error is about |x| * 2^-53, which the comparison allows for.
    check_all_close(out, ref, xd, std::string(unary_op_name(c.op)), 2e-16);
  }
}

}  // namespace

TEST_CASE("every unary op matches its double reference in f32, f64 and bf16",
          "[elementwise][kernels]") {
  SECTION("f32") { check_unary_table<float>(); }
  SECTION("f64") { check_unary_table<double>(); }
  SECTION("bf16") { check_unary_table<bf16>(); }
}

TEST_CASE("sigmoid, silu and gelu stay finite and accurate at large |x|",
          "[elementwise][kernels]") {
  const std::vector<float> x = {-1e30f, -1000.f, -100.f, -88.f, 88.f, 100.f, 1000.f, 1e30f};
  const int64_t n = static_cast<int64_t>(x.size()), one = 1;
  std::vector<float> sig(n), silu(n), gt(n), ge(n);
  unary<float>(UnaryOp::sigmoid, 1, &n, x.data(), &one, sig.data(), &one);
  unary<float>(UnaryOp::silu, 1, &n, x.data(), &one, silu.data(), &one);
  unary<float>(UnaryOp::gelu_tanh, 1, &n, x.data(), &one, gt.data(), &one);
  unary<float>(UnaryOp::gelu_erf, 1, &n, x.data(), &one, ge.data(), &one);
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << x[i]);
    CHECK(std::isfinite(sig[i]));
    CHECK(std::isfinite(silu[i]));
    CHECK(std::isfinite(gt[i]));
    CHECK(std::isfinite(ge[i]));
    if (x[i] > 0) {
      CHECK(sig[i] == 1.0f);
      CHECK(silu[i] == x[i]);
      CHECK(gt[i] == x[i]);
      CHECK(ge[i] == x[i]);
    } else {
      CHECK(gt[i] == 0.0f);
      CHECK(ge[i] == 0.0f);
    }
  }
  // exp(-100) ~ 3.72e-44 is a float subnormal (a multiple of 2^-149 ~ 1.4e-45): the
  // stable form keeps it instead of flushing 1 / (1 + inf) to zero.
  CHECK(std::abs(sig[2] - 3.720076e-44) <= 1.5e-45);
  CHECK(std::abs(silu[2] - -3.720076e-42) <= 1.5e-45 * 100);
  CHECK(sig[1] == 0.0f);
  // exp(-88) ~ 6.05e-39 is still a normal float: full precision.
  CHECK(sig[3] == Approx(6.0546018954011858e-39).epsilon(1e-5));
  // In f64 the same inputs keep full relative precision.
  const std::vector<double> xd = {-700.0, -100.0};
  const int64_t nd = 2;
  std::vector<double> sigd(2);
  unary<double>(UnaryOp::sigmoid, 1, &nd, xd.data(), &one, sigd.data(), &one);
  CHECK(sigd[0] == Approx(std::exp(-700.0)).epsilon(1e-12));
  CHECK(sigd[1] == Approx(3.7200759760208361e-44).epsilon(1e-12));
}

TEST_CASE("floating-only unary ops reject integer element types, the others wrap",
          "[elementwise][kernels]") {
  const std::vector<int64_t> x = {-5, 0, 7, std::numeric_limits<int64_t>::min()};
  const int64_t n = 4, one = 1;
  std::vector<int64_t> out(n);
  CHECK_THROWS_AS(unary<int64_t>(UnaryOp::exp, 1, &n, x.data(), &one, out.data(), &one),
                  std::invalid_argument);
  unary<int64_t>(UnaryOp::neg, 1, &n, x.data(), &one, out.data(), &one);
  CHECK(out == std::vector<int64_t>{5, 0, -7, std::numeric_limits<int64_t>::min()});
  unary<int64_t>(UnaryOp::abs, 1, &n, x.data(), &one, out.data(), &one);
  CHECK(out == std::vector<int64_t>{5, 0, 7, std::numeric_limits<int64_t>::min()});
  unary<int64_t>(UnaryOp::relu, 1, &n, x.data(), &one, out.data(), &one);
  CHECK(out == std::vector<int64_t>{0, 0, 7, 0});
  unary<int64_t>(UnaryOp::square, 1, &n, x.data(), &one, out.data(), &one);
  CHECK(out == std::vector<int64_t>{25, 0, 49, 0});  // (-2^63)^2 wraps to 0

  const std::vector<uint8_t> u = {0, 1, 200};
  const int64_t nu = 3;
  std::vector<uint8_t> uo(nu);
  unary<uint8_t>(UnaryOp::neg, 1, &nu, u.data(), &one, uo.data(), &one);
  CHECK(uo == std::vector<uint8_t>{0, 255, 56});
  unary<uint8_t>(UnaryOp::square, 1, &nu, u.data(), &one, uo.data(), &one);
  CHECK(uo == std::vector<uint8_t>{0, 1, 64});  // 40000 mod 256
}

TEST_CASE("binary ops match double references in f32, f64 and bf16", "[elementwise][kernels]") {
  struct Case {
    BinaryOp op;
    double (*ref)(double, double);
  };
  const std::vector<Case> cases = {
      {BinaryOp::add, [](double a, double b) { return a + b; }},
      {BinaryOp::sub, [](double a, double b) { return a - b; }},
      {BinaryOp::mul, [](double a, double b) { return a * b; }},
      {BinaryOp::div, [](double a, double b) { return a / b; }},
      {BinaryOp::pow, [](double a, double b) { return std::pow(a, b); }},
      {BinaryOp::maximum, [](double a, double b) { return a > b ? a : b; }},
      {BinaryOp::minimum, [](double a, double b) { return a < b ? a : b; }},
  };
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = 1000, one = 1;
    // a in (0.1, 4) keeps pow real; b in (-3, 3) never hits 0 exactly.
    std::vector<T> a = cast_all<T>(grid(0.1, 4, n));
    std::vector<double> bg = grid(-3, 3, n);
    std::reverse(bg.begin(), bg.end());
    std::vector<T> b = cast_all<T>(bg);
    for (const Case& c : cases) {
      std::vector<double> ref(n), ad(n);
      for (int64_t i = 0; i < n; ++i) {
        ad[i] = convert<double>(a[i]);
        ref[i] = c.ref(ad[i], convert<double>(b[i]));
      }
      std::vector<T> out(n);
      binary<T>(c.op, 1, &n, a.data(), &one, b.data(), &one, out.data(), &one);
      check_all_close(out, ref, ad, std::string(binary_op_name(c.op)));
    }
  };
  SECTION("f32") { run(float{}); }
  SECTION("f64") { run(double{}); }
  SECTION("bf16") { run(bf16{}); }
}

TEST_CASE("bf16 and f16 results are rounded once from float", "[elementwise][kernels]") {
  // 1 + alpha * 1 with alpha = 2^-8 + 2^-17 (a float, not a bf16): the exact sum lies just
  // above the tie between 1 and 1 + 2^-7, so one rounding gives 1 + 2^-7. Rounding alpha
  // (or alpha * b) to bf16 first would leave the exact tie, which rounds to even: 1.
  const std::vector<bf16> one_bf = {bf16(1.0f)};
  const int64_t n = 1, one = 1;
  std::vector<bf16> out(1);
  const float alpha = std::ldexp(1.0f, -8) + std::ldexp(1.0f, -17);
  add_scaled<bf16>(1, &n, one_bf.data(), &one, one_bf.data(), &one, alpha, out.data(), &one);
  CHECK(static_cast<float>(out[0]) == 1.0f + std::ldexp(1.0f, -7));
  const std::vector<f16> h = {f16(2.0f)};
  std::vector<f16> ho(1);
  add_scaled<f16>(1, &n, h.data(), &one, h.data(), &one, 0.5f, ho.data(), &one);
  CHECK(static_cast<float>(ho[0]) == 3.0f);
  binary<f16>(BinaryOp::div, 1, &n, h.data(), &one, h.data(), &one, ho.data(), &one);
  CHECK(static_cast<float>(ho[0]) == 1.0f);
}

TEST_CASE("bf16 results are bit-identical to rounding the float result with Eigen",
          "[elementwise][kernels]") {
  // Every 7th bf16 bit pattern (NaNs, infinities, subnormals included) times and plus 40
  // others: products of two 8-bit significands hit exact ties, overflow and inf * 0.
  std::vector<bf16> a, b;
  for (uint32_t bits = 0; bits < 0x10000; bits += 7)
    a.push_back(std::bit_cast<bf16>(uint16_t(bits)));
  for (uint32_t bits = 0x0001; bits < 0x10000; bits += 0x10000 / 40 + 3) {
    b.push_back(std::bit_cast<bf16>(uint16_t(bits)));
  }
  const int64_t sizes[2] = {static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size())};
  const int64_t a_st[2] = {1, 0}, b_st[2] = {0, 1}, o_st[2] = {sizes[1], 1};
  for (BinaryOp op : {BinaryOp::mul, BinaryOp::add}) {
    std::vector<bf16> out(a.size() * b.size());
    binary<bf16>(op, 2, sizes, a.data(), a_st, b.data(), b_st, out.data(), o_st);
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      for (size_t j = 0; j < b.size() && bad < 5; ++j) {
        float x = static_cast<float>(a[i]), y = static_cast<float>(b[j]);
        bf16 want(op == BinaryOp::mul ? x * y : x + y);  // Eigen's rounding
        bf16 got = out[i * b.size() + j];
        if (std::bit_cast<uint16_t>(got) != std::bit_cast<uint16_t>(want)) {
          ++bad;
          FAIL_CHECK(binary_op_name(op)
                     << "(" << x << ", " << y << "): got bits " << std::bit_cast<uint16_t>(got)
                     << ", want " << std::bit_cast<uint16_t>(want));
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("maximum and minimum propagate NaN from either side", "[elementwise][kernels]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a = {nan, 1.f, 2.f}, b = {1.f, nan, -3.f};
  const int64_t n = 3, one = 1;
  std::vector<float> mx(n), mn(n);
  binary<float>(BinaryOp::maximum, 1, &n, a.data(), &one, b.data(), &one, mx.data(), &one);
  binary<float>(BinaryOp::minimum, 1, &n, a.data(), &one, b.data(), &one, mn.data(), &one);
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2.f);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == -3.f);
}

TEST_CASE("integer binary ops truncate, wrap and never trap", "[elementwise][kernels]") {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> a = {-7, 7, -7, kMin, kMax, 3, -2, 2, 2, 5, 9};
  const std::vector<int64_t> b = {2, -2, -2, -1, 1, 4, 3, 63, 64, 0, -1};
  const int64_t n = static_cast<int64_t>(a.size()), one = 1;
  std::vector<int64_t> out(n);
  binary<int64_t>(BinaryOp::div, 1, &n, a.data(), &one, b.data(), &one, out.data(), &one);
  CHECK(out == std::vector<int64_t>{-3, -3, 3, kMin, kMax, 0, 0, 0, 0, 0, -9});
  binary<int64_t>(BinaryOp::add, 1, &n, a.data(), &one, b.data(), &one, out.data(), &one);
  CHECK(out[4] == kMin);  // kMax + 1 wraps
  binary<int64_t>(BinaryOp::pow, 1, &n, a.data(), &one, b.data(), &one, out.data(), &one);
  CHECK(out[5] == 81);
  CHECK(out[6] == -8);
  CHECK(out[7] == kMin);  // 2^63 wraps
  CHECK(out[8] == 0);     // 2^64 wraps to 0
  CHECK(out[9] == 1);     // 5^0
  CHECK(out[10] == 0);    // 9^-1 truncates to 0 (the ops reject this case first)

  const std::vector<int32_t> a32 = {100000, -9, 17}, b32 = {100000, 4, -5};
  const int64_t n32 = 3;
  std::vector<int32_t> o32(n32);
  binary<int32_t>(BinaryOp::mul, 1, &n32, a32.data(), &one, b32.data(), &one, o32.data(), &one);
  CHECK(o32[0] == static_cast<int32_t>(10000000000LL % (1LL << 32)));
  CHECK(o32[1] == -36);
  binary<int32_t>(BinaryOp::div, 1, &n32, a32.data(), &one, b32.data(), &one, o32.data(), &one);
  CHECK(o32 == std::vector<int32_t>{1, -2, -3});

  const std::vector<uint8_t> a8 = {200, 3, 250}, b8 = {100, 5, 7};
  std::vector<uint8_t> o8(3);
  binary<uint8_t>(BinaryOp::add, 1, &n32, a8.data(), &one, b8.data(), &one, o8.data(), &one);
  CHECK(o8 == std::vector<uint8_t>{44, 8, 1});
  binary<uint8_t>(BinaryOp::sub, 1, &n32, a8.data(), &one, b8.data(), &one, o8.data(), &one);
  CHECK(o8 == std::vector<uint8_t>{100, 254, 243});
  binary<uint8_t>(BinaryOp::div, 1, &n32, a8.data(), &one, b8.data(), &one, o8.data(), &one);
  CHECK(o8 == std::vector<uint8_t>{2, 0, 35});
}

TEST_CASE("broadcast strides: (4,1,3) + (5,1) gives (4,5,3)", "[elementwise][kernels]") {
  std::vector<float> a(12), b(5);
  for (int i = 0; i < 12; ++i) a[i] = 0.5f * i;
  for (int j = 0; j < 5; ++j) b[j] = 100.f * (j + 1);
  const int64_t sizes[3] = {4, 5, 3};
  const int64_t a_st[3] = {3, 0, 1}, b_st[3] = {0, 1, 0}, o_st[3] = {15, 3, 1};
  std::vector<float> out(60, -1.f);
  binary<float>(BinaryOp::sub, 3, sizes, a.data(), a_st, b.data(), b_st, out.data(), o_st);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) {
      for (int k = 0; k < 3; ++k) {
        INFO(i << "," << j << "," << k);
        CHECK(out[i * 15 + j * 3 + k] == a[i * 3 + k] - b[j]);
      }
    }
  }
}

TEST_CASE("transposed and scalar-broadcast operands read through strides",
          "[elementwise][kernels]") {
  // a is a row-major [3, 4] buffer read as its [4, 3] transpose; b is one value.
  std::vector<double> a(12);
  for (int i = 0; i < 12; ++i) a[i] = i * 1.25 - 3;
  const double b = 2.0;
  const int64_t sizes[2] = {4, 3};
  const int64_t a_st[2] = {1, 4}, b_st[2] = {0, 0}, o_st[2] = {3, 1};
  std::vector<double> out(12);
  binary<double>(BinaryOp::mul, 2, sizes, a.data(), a_st, &b, b_st, out.data(), o_st);
  binary<double>(BinaryOp::div, 2, sizes, &b, b_st, out.data(), o_st, out.data(),
                 o_st);  // in place
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) CHECK(out[r * 3 + c] == Approx(2.0 / (a[c * 4 + r] * 2.0)));
  }
  std::vector<double> neg(12);
  unary<double>(UnaryOp::neg, 2, sizes, a.data(), a_st, neg.data(), o_st);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) CHECK(neg[r * 3 + c] == -a[c * 4 + r]);
  }
}

TEST_CASE("comparisons write u8 0/1 and treat NaN as unordered", "[elementwise][kernels]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a = {1.f, 2.f, 3.f, nan};
  const float b = 2.f;
  const int64_t n = 4, one = 1, zero = 0;
  auto run = [&](CompareOp op) {
    std::vector<uint8_t> out(n, 7);
    compare<float>(op, 1, &n, a.data(), &one, &b, &zero, out.data(), &one);
    return out;
  };
  CHECK(run(CompareOp::eq) == std::vector<uint8_t>{0, 1, 0, 0});
  CHECK(run(CompareOp::ne) == std::vector<uint8_t>{1, 0, 1, 1});
  CHECK(run(CompareOp::lt) == std::vector<uint8_t>{1, 0, 0, 0});
  CHECK(run(CompareOp::le) == std::vector<uint8_t>{1, 1, 0, 0});
  CHECK(run(CompareOp::gt) == std::vector<uint8_t>{0, 0, 1, 0});
  CHECK(run(CompareOp::ge) == std::vector<uint8_t>{0, 1, 1, 0});
  // bf16 compares exactly: 1 + 2^-7 and 1 differ.
  const std::vector<bf16> h = {bf16(1.0f), bf16(1.0f + std::ldexp(1.0f, -7))};
  const bf16 h1(1.0f);
  const int64_t n2 = 2;
  std::vector<uint8_t> out(2);
  compare<bf16>(CompareOp::eq, 1, &n2, h.data(), &one, &h1, &zero, out.data(), &one);
  CHECK(out == std::vector<uint8_t>{1, 0});
}

TEST_CASE("where picks a or b by a broadcast u8 condition", "[elementwise][kernels]") {
  // cond [3, 1], a [1, 4], b a single value: out [3, 4].
  const std::vector<uint8_t> cond = {1, 0, 2};
  const std::vector<int64_t> a = {10, 11, 12, 13};
  const int64_t b = -1;
  const int64_t sizes[2] = {3, 4};
  const int64_t c_st[2] = {1, 0}, a_st[2] = {0, 1}, b_st[2] = {0, 0}, o_st[2] = {4, 1};
  std::vector<int64_t> out(12);
  where<int64_t>(2, sizes, cond.data(), c_st, a.data(), a_st, &b, b_st, out.data(), o_st);
  CHECK(out == std::vector<int64_t>{10, 11, 12, 13, -1, -1, -1, -1, 10, 11, 12, 13});
}

TEST_CASE("any_element finds zero divisors and negative exponents", "[elementwise][kernels]") {
  std::vector<int32_t> v(100000, 3);
  const int64_t n = static_cast<int64_t>(v.size()), one = 1;
  CHECK_FALSE(any_element<int32_t>(ElementTest::zero, 1, &n, v.data(), &one));
  CHECK_FALSE(any_element<int32_t>(ElementTest::negative, 1, &n, v.data(), &one));
  v[99999] = 0;
  v[5] = -4;
  CHECK(any_element<int32_t>(ElementTest::zero, 1, &n, v.data(), &one));
  CHECK(any_element<int32_t>(ElementTest::negative, 1, &n, v.data(), &one));
  // Only the strided elements are looked at: every other one, which skips index 5.
  const int64_t half = n / 2, two = 2;
  CHECK_FALSE(any_element<int32_t>(ElementTest::negative, 1, &half, v.data(), &two));
  const std::vector<uint8_t> u = {1, 255};
  const int64_t nu = 2;
  CHECK_FALSE(any_element<uint8_t>(ElementTest::negative, 1, &nu, u.data(), &one));
}

TEST_CASE("large tensors split across threads match the reference", "[elementwise][kernels]") {
  const int saved = kernels::num_threads();
  kernels::set_num_threads(4);  // force the split even on a one-core machine
  // One long contiguous row of 300k elements (the row itself is split).
  const int64_t n = 300000, one = 1;
  std::vector<float> a(n), b(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>((i % 1000) * 0.01 - 5);
    b[i] = static_cast<float>((i % 77) * 0.5 + 1);
  }
  binary<float>(BinaryOp::div, 1, &n, a.data(), &one, b.data(), &one, out.data(), &one);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += out[i] != a[i] / b[i];  // one IEEE division each
  CHECK(bad == 0);
  std::vector<float> t(n);
  unary<float>(UnaryOp::tanh, 1, &n, a.data(), &one, t.data(), &one);
  std::vector<double> ref(n), ad(n);
  for (int64_t i = 0; i < n; ++i) {
    ad[i] = a[i];
    ref[i] = std::tanh(ad[i]);
  }
  check_all_close(t, ref, ad, "tanh 300k");
  // 600 rows of 500 where b is a transposed [500, 600] buffer: rows are split.
  const int64_t sizes[2] = {600, 500};
  const int64_t a_st[2] = {500, 1}, b_st[2] = {1, 600}, o_st[2] = {500, 1};
  std::vector<double> a2(n), b2(n), o2(n);
  for (int64_t i = 0; i < n; ++i) {
    a2[i] = static_cast<double>(i);
    b2[i] = 0.5 * static_cast<double>(i % 600);
  }
  binary<double>(BinaryOp::add, 2, sizes, a2.data(), a_st, b2.data(), b_st, o2.data(), o_st);
  bad = 0;
  for (int64_t r = 0; r < 600; ++r) {
    for (int64_t c = 0; c < 500; ++c) bad += o2[r * 500 + c] != a2[r * 500 + c] + b2[c * 600 + r];
  }
  CHECK(bad == 0);
  kernels::set_num_threads(saved);
}

// The op layer asks has_grad_kernel() before calling unary_grad(); the kernel's own
// table must agree for every op, and refuse the others (and integer types) clearly.
TEST_CASE("unary_grad covers exactly the ops has_grad_kernel names, for floating types only",
          "[elementwise][kernels]") {
  const int64_t n = 3, one = 1;
  const std::vector<float> g = {1.0F, -2.0F, 0.5F}, s = {0.25F, -1.0F, 3.0F};
  std::vector<float> out(n);
  for (int k = 0; k <= static_cast<int>(UnaryOp::silu); ++k) {
    const auto op = static_cast<UnaryOp>(k);
    INFO(unary_op_name(op));
    if (has_grad_kernel(op)) {
      CHECK_NOTHROW(unary_grad<float>(op, 1, &n, g.data(), &one, s.data(), &one, out.data(), &one));
    } else {
      CHECK_THROWS_AS(unary_grad<float>(op, 1, &n, g.data(), &one, s.data(), &one, out.data(), &one),
                      std::invalid_argument);
    }
  }
  const std::vector<int32_t> gi = {1, 2, 3};
  std::vector<int32_t> oi(n);
  CHECK_THROWS_AS(unary_grad<int32_t>(UnaryOp::relu, 1, &n, gi.data(), &one, gi.data(), &one, oi.data(), &one),
                  std::invalid_argument);
  // relu's gradient passes g where the output is positive: relu'(0) = 0.
  const std::vector<float> y = {0.0F, 2.0F, -0.0F};
  unary_grad<float>(UnaryOp::relu, 1, &n, g.data(), &one, y.data(), &one, out.data(), &one);
  CHECK(out == std::vector<float>{0.0F, -2.0F, 0.0F});
}
