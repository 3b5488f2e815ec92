// The CPU GEMM kernel against a naive triple loop in double: every transpose
// combination, odd and non-square sizes, alpha/beta (beta == 0 over NaN), padded
// leading dims (padding holds NaN, so reading it shows), strided and broadcast
// batches, f32 accumulation for bf16/f16, bitwise equality across thread counts, and
// the epilogue (bias row, GELU, pre-activation) against double references.
#include "dtr/kernels/cpu/gemm.h"
#include "dtr/kernels/cpu/parallel.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dtr;
using dtr::testing::ThreadCount;
using kernels::cpu::Transpose;

namespace {

const float kQuietNaN = std::numeric_limits<float>::quiet_NaN();

// Error bound per dtype, relative to sum_k |a_ik b_kj| * |alpha| + |beta c_ij| (the
// magnitude of the reference's terms): one rounding on store (the unit roundoff of T)
// plus k roundings of the accumulator type (f32 for the half types). Results in T's
// subnormal range also get an absolute half of T's smallest spacing (see below).
template <class T>
double tolerance(int64_t k) {
  if constexpr (std::is_same_v<T, double>) return (k + 2) * 0x1p-53;
  if constexpr (std::is_same_v<T, float>) return (k + 2) * 0x1p-24;
  if constexpr (std::is_same_v<T, bf16>) return 0x1p-8 + (k + 2) * 0x1p-24;
  if constexpr (std::is_same_v<T, f16>) return 0x1p-11 + (k + 2) * 0x1p-24;
}

template <class T>
double subnormal_tolerance() {
  return 0.5 * static_cast<double>(static_cast<float>(std::numeric_limits<T>::denorm_min()));
}

double to_double(float v) { return v; }
double to_double(double v) { return v; }
double to_double(bf16 v) { return static_cast<float>(v); }
double to_double(f16 v) { return static_cast<float>(v); }

template <class T>
bool same_bits(T x, T y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

// A row-major matrix with row stride `ld`: values uniform in [-1, 1] rounded to T,
// the padding past `cols` in each row NaN.
template <class T>
struct Stored {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<T> data;

  Stored(int64_t r, int64_t c, int64_t pad, std::mt19937& rng) : rows(r), cols(c), ld(c + pad) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    data.assign(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), T(kQuietNaN));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) data[i * ld + j] = T(dist(rng));
    }
  }
};

// One GEMM problem, its operands, and the double-precision reference.
template <class T>
struct Problem {
  Transpose ta = Transpose::no, tb = Transpose::no;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;

  std::string describe() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " trans_a=" + (ta == Transpose::yes ? "yes" : "no") +
           " trans_b=" + (tb == Transpose::yes ? "yes" : "no") + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta);
  }
};

// op(X)[i, j] of a stored matrix.
template <class T>
double op_at(const Stored<T>& x, Transpose t, int64_t i, int64_t j) {
  return to_double(t == Transpose::no ? x.data[i * x.ld + j] : x.data[j * x.ld + i]);
}

// Checks c_after (one C of p) against alpha * op(A) op(B) + beta * c_before in double,
// and that C's padding was not written. Returns the number of wrong elements.
template <class T>
int64_t count_mismatches(const Problem<T>& p, const Stored<T>& a, const Stored<T>& b,
                         const T* c_before, const T* c_after, int64_t ldc) {
  int64_t bad = 0;
  const double tol = tolerance<T>(p.k);
  const double abs_tol = subnormal_tolerance<T>();
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const T got = c_after[i * ldc + j];
      if (j >= p.n) {  // padding
        if (!same_bits(got, c_before[i * ldc + j])) ++bad;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double term = op_at(a, p.ta, i, l) * op_at(b, p.tb, l, j);
        sum += term;
        magnitude += std::abs(term);
      }
      double expected = p.alpha * sum;
      magnitude = std::abs(p.alpha) * magnitude;
      if (p.beta != 0) {
        expected += p.beta * to_double(c_before[i * ldc + j]);
        magnitude += std::abs(p.beta * to_double(c_before[i * ldc + j]));
      }
      const double g = to_double(got);
      if (!(std::abs(g - expected) <= tol * magnitude + abs_tol)) {
        if (bad == 0) {
          UNSCOPED_INFO("first mismatch at [" << i << ", " << j << "]: got " << g << ", expected "
                                              << expected << " (tolerance "
                                              << tol * magnitude + abs_tol << ")");
        }
        ++bad;
      }
    }
  }
  return bad;
}

// C for a problem: m rows of ldc = n + pad; values in [-1, 1], or all NaN when
// beta == 0 (the kernel must not read it); padding holds a sentinel.
template <class T>
std::vector<T> make_c(const Problem<T>& p, int64_t ldc, int64_t batch, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> c(static_cast<size_t>(std::max<int64_t>(batch * p.m * ldc, 1)), T(7.0f));
  for (int64_t e = 0; e < batch * p.m; ++e) {
    for (int64_t j = 0; j < p.n; ++j) c[e * ldc + j] = p.beta == 0 ? T(kQuietNaN) : T(dist(rng));
  }
  return c;
}

template <class T>
void run_and_check(const Problem<T>& p, std::mt19937& rng, int64_t pad = 3) {
  const Stored<T> a(p.ta == Transpose::no ? p.m : p.k, p.ta == Transpose::no ? p.k : p.m, pad, rng);
  const Stored<T> b(p.tb == Transpose::no ? p.k : p.n, p.tb == Transpose::no ? p.n : p.k, pad + 2,
                    rng);
  const int64_t ldc = p.n + pad + 1;
  std::vector<T> c = make_c(p, ldc, 1, rng);
  const std::vector<T> before = c;
  kernels::cpu::gemm<T>(p.ta, p.tb, p.m, p.n, p.k, static_cast<acc_t<T>>(p.alpha), a.data.data(),
                        a.ld, b.data.data(), b.ld, static_cast<acc_t<T>>(p.beta), c.data(), ldc);
  INFO(p.describe());
  CHECK(count_mismatches(p, a, b, before.data(), c.data(), ldc) == 0);
}

constexpr Transpose kBoth[] = {Transpose::no, Transpose::yes};

// Sets the kernel thread count for a scope.
}  // namespace

TEMPLATE_TEST_CASE("gemm matches a double triple loop for every size mix and transpose", "[gemm]",
                   float, double, bf16, f16) {
  using T = TestType;
  std::mt19937 rng(1234);
  const int64_t sizes[] = {1, 7, 33, 129};
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      for (int64_t m : sizes) {
        for (int64_t n : sizes) {
          for (int64_t k : sizes) {
            run_and_check<T>({.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = 1, .beta = 0},
                             rng);
            run_and_check<T>(
                {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = 0.75, .beta = -0.5}, rng);
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("gemm spans several cache blocks of m, n and k", "[gemm]", float, bf16, f16) {
  // dtr's packed GEMM blocks m by 192 rows (avx512; fewer below), n by 1024 columns
  // and k by 256, and half types sum into float tiles of 384 x 1024 (avx512; fewer
  // below): each dimension here crosses its block and tile edges and ends in a
  // partial register tile, and beta applies once, in the first block of k.
  using T = TestType;
  std::mt19937 rng(7);
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      if constexpr (std::is_same_v<T, float>) {
        run_and_check<T>({.ta = ta, .tb = tb, .m = 203, .n = 2083, .k = 531, .alpha = 0.5, .beta = -1.5}, rng);
      } else {
        run_and_check<T>({.ta = ta, .tb = tb, .m = 401, .n = 1061, .k = 300, .alpha = 0.5, .beta = -1.5}, rng);
      }
    }
  }
}

TEMPLATE_TEST_CASE("gemm alpha and beta edge cases follow BLAS", "[gemm]", float, double, bf16,
                   f16) {
  using T = TestType;
  std::mt19937 rng(99);
  SECTION("beta == 1 accumulates into C") {
    run_and_check<T>({.m = 33, .n = 7, .k = 129, .alpha = 2, .beta = 1}, rng);
  }
  SECTION("beta == 0 overwrites NaN in C, also for tiny problems") {
    run_and_check<T>({.m = 1, .n = 1, .k = 1, .alpha = -1, .beta = 0}, rng);
    run_and_check<T>({.m = 2, .n = 3, .k = 4, .alpha = 1, .beta = 0}, rng);
  }
  SECTION("alpha == 0 scales C and never reads A or B") {
    const T nan_a[] = {T(kQuietNaN), T(kQuietNaN), T(kQuietNaN), T(kQuietNaN)};
    T c[] = {T(1.0f), T(-2.0f), T(0.5f), T(4.0f)};
    kernels::cpu::gemm<T>(Transpose::no, Transpose::no, 2, 2, 2, acc_t<T>(0), nan_a, 2, nan_a, 2,
                          acc_t<T>(2), c, 2);
    CHECK(to_double(c[0]) == 2.0);
    CHECK(to_double(c[1]) == -4.0);
    CHECK(to_double(c[2]) == 1.0);
    CHECK(to_double(c[3]) == 8.0);
  }
  SECTION("k == 0 gives beta * C, and zeros when beta == 0") {
    T c[] = {T(kQuietNaN), T(kQuietNaN), T(3.0f), T(kQuietNaN)};
    kernels::cpu::gemm<T>(Transpose::no, Transpose::no, 1, 2, 0, acc_t<T>(1), nullptr, 1, nullptr,
                          2, acc_t<T>(0), c, 3);
    CHECK(to_double(c[0]) == 0.0);
    CHECK(to_double(c[1]) == 0.0);
    CHECK(to_double(c[2]) == 3.0);  // padding untouched
    T d[] = {T(1.5f), T(-1.0f)};
    kernels::cpu::gemm<T>(Transpose::yes, Transpose::yes, 1, 2, 0, acc_t<T>(1), nullptr, 1, nullptr,
                          1, acc_t<T>(-2), d, 2);
    CHECK(to_double(d[0]) == -3.0);
    CHECK(to_double(d[1]) == 2.0);
  }
}

TEMPLATE_TEST_CASE("gemm_batched with strided and broadcast (stride 0) operands", "[gemm]", float,
                   double, bf16, f16) {
  using T = TestType;
  std::mt19937 rng(7);
  const int64_t batch = 3, pad = 2;
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      for (int64_t stride_zero : {0, 1, 2}) {  // which of A, B is broadcast (2: neither)
        Problem<T> p{.ta = ta, .tb = tb, .m = 7, .n = 33, .k = 129, .alpha = 1.25, .beta = 0.5};
        const int64_t a_rows = ta == Transpose::no ? p.m : p.k;
        const int64_t a_cols = ta == Transpose::no ? p.k : p.m;
        const int64_t b_rows = tb == Transpose::no ? p.k : p.n;
        const int64_t b_cols = tb == Transpose::no ? p.n : p.k;
        // Each batch entry is its own Stored matrix; the kernel sees them at a fixed stride
        // (with a gap of 5 elements between entries), or only entry 0 with stride 0.
        std::vector<Stored<T>> as, bs;
        for (int64_t i = 0; i < batch; ++i) {
          as.emplace_back(a_rows, a_cols, pad, rng);
          bs.emplace_back(b_rows, b_cols, pad, rng);
        }
        const int64_t sa = stride_zero == 0 ? 0 : a_rows * (a_cols + pad) + 5;
        const int64_t sb = stride_zero == 1 ? 0 : b_rows * (b_cols + pad) + 5;
        std::vector<T> a_all(batch * (a_rows * (a_cols + pad) + 5), T(kQuietNaN));
        std::vector<T> b_all(batch * (b_rows * (b_cols + pad) + 5), T(kQuietNaN));
        for (int64_t i = 0; i < batch; ++i) {
          if (sa != 0) std::copy(as[i].data.begin(), as[i].data.end(), a_all.begin() + i * sa);
          if (sb != 0) std::copy(bs[i].data.begin(), bs[i].data.end(), b_all.begin() + i * sb);
        }
        if (sa == 0) std::copy(as[0].data.begin(), as[0].data.end(), a_all.begin());
        if (sb == 0) std::copy(bs[0].data.begin(), bs[0].data.end(), b_all.begin());
        const int64_t ldc = p.n + 1;
        std::vector<T> c = make_c(p, ldc, batch, rng);
        const std::vector<T> before = c;
        kernels::cpu::gemm_batched<T>(batch, ta, tb, p.m, p.n, p.k, acc_t<T>(p.alpha), a_all.data(),
                                      as[0].ld, sa, b_all.data(), bs[0].ld, sb, acc_t<T>(p.beta),
                                      c.data(), ldc, p.m * ldc);
        for (int64_t i = 0; i < batch; ++i) {
          INFO(p.describe() << " batch entry " << i << " broadcast operand " << stride_zero);
          const Stored<T>& a = sa == 0 ? as[0] : as[i];
          const Stored<T>& b = sb == 0 ? bs[0] : bs[i];
          CHECK(count_mismatches(p, a, b, before.data() + i * p.m * ldc, c.data() + i * p.m * ldc,
                                 ldc) == 0);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("half-type gemm accumulates in f32", "[gemm]", bf16, f16) {
  using T = TestType;
  // Sums of ones that a T accumulator could not reach: bf16 stops counting at 256
  // (256 + 1 rounds back to 256), f16 at 2048. Both results are exact in T.
  const int64_t k = std::is_same_v<T, bf16> ? 300 : 3000;
  const std::vector<T> ones(k, T(1.0f));
  T c = T(kQuietNaN);
  kernels::cpu::gemm<T>(Transpose::no, Transpose::no, 1, 1, k, 1.0f, ones.data(), k, ones.data(), 1,
                        0.0f, &c, 1);
  CHECK(to_double(c) == static_cast<double>(k));
}

TEMPLATE_TEST_CASE("multi-threaded gemm is correct and bitwise equal to one thread", "[gemm]",
                   float, double, bf16, f16) {
  using T = TestType;
  struct Shape {
    int64_t m, n, k;
  };
  // Large enough to be split: square; odd rows (cut along rows); few rows (cut along columns);
  // rows and columns balanced alike, more columns (cut along columns); few rows and parts
  // wider than a block of columns (op(A) packed once and shared); one row and one column.
  const Shape shapes[] = {{256, 256, 256}, {301, 257, 129}, {8, 611, 515}, {128, 384, 96},
                          {40, 2500, 300}, {1, 4099, 300},  {2050, 1, 600}};
  std::mt19937 rng(42);
  for (const Shape& s : shapes) {
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        Problem<T> p{.ta = ta, .tb = tb, .m = s.m, .n = s.n, .k = s.k, .alpha = 1, .beta = -1};
        const Stored<T> a(ta == Transpose::no ? p.m : p.k, ta == Transpose::no ? p.k : p.m, 1, rng);
        const Stored<T> b(tb == Transpose::no ? p.k : p.n, tb == Transpose::no ? p.n : p.k, 0, rng);
        const int64_t ldc = p.n;
        const std::vector<T> before = make_c(p, ldc, 1, rng);
        std::vector<T> one = before, two = before;
        {
          ThreadCount threads(1);
          kernels::cpu::gemm<T>(ta, tb, p.m, p.n, p.k, acc_t<T>(1), a.data.data(), a.ld,
                                b.data.data(), b.ld, acc_t<T>(-1), one.data(), ldc);
        }
        {
          ThreadCount threads(2);
          kernels::cpu::gemm<T>(ta, tb, p.m, p.n, p.k, acc_t<T>(1), a.data.data(), a.ld,
                                b.data.data(), b.ld, acc_t<T>(-1), two.data(), ldc);
        }
        INFO(p.describe());
        CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(T)) == 0);
        CHECK(count_mismatches(p, a, b, before.data(), two.data(), ldc) == 0);
      }
    }
  }
}

namespace {

// GELU in double, in forms without cancellation for negative x: 0.5 (1 + tanh u) =
// 1 / (1 + exp(-2u)) and 0.5 (1 + erf z) = 0.5 erfc(-z).
double gelu_reference(kernels::GemmActivation act, double x) {
  if (act == kernels::GemmActivation::gelu_tanh) {
    return x / (1 + std::exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }
  if (act == kernels::GemmActivation::gelu_erf) return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
  return x;
}

// The error allowed for act(x): f32 roundings in the functor, amplified by the
// function's condition number |x act'(x) / act(x)| (large for GELU's far negative
// tail), then one rounding to T; plus an absolute term for results the f32 functor
// flushes to zero (below about 1e-37).
template <class T>
double activation_tolerance(kernels::GemmActivation act, double x) {
  const double h = 1e-6 * std::max(1.0, std::abs(x));
  const double slope = (gelu_reference(act, x + h) - gelu_reference(act, x - h)) / (2 * h);
  const double value = gelu_reference(act, x);
  const double f32_error = 16 * 0x1p-24 * (std::abs(value) + std::abs(x * slope));
  return (is_half_v<T> ? tolerance<T>(0) * std::abs(value) : 0.0) + f32_error +
         std::max(subnormal_tolerance<T>(), 1e-37);
}

// batch GEMMs of p with a bias row and `act` in the epilogue, at `threads` threads;
// returns C then pre (both batch x m x n, contiguous). With `check`, checks them
// against double references: pre = alpha * op(A) op(B) + beta * C + bias, C = act(pre).
template <class T>
std::pair<std::vector<T>, std::vector<T>> run_epilogue(const Problem<T>& p, kernels::GemmActivation act,
                                                       int threads, uint32_t seed, bool check) {
  std::mt19937 rng(seed);
  constexpr int64_t kBatch = 2;
  const int64_t a_rows = p.ta == Transpose::no ? p.m : p.k, a_cols = p.ta == Transpose::no ? p.k : p.m;
  const int64_t b_rows = p.tb == Transpose::no ? p.k : p.n, b_cols = p.tb == Transpose::no ? p.n : p.k;
  const Stored<T> a(kBatch * a_rows, a_cols, 0, rng);
  const Stored<T> b(kBatch * b_rows, b_cols, 0, rng);
  const Stored<T> bias(1, p.n, 0, rng);
  std::vector<T> c = make_c(p, p.n, kBatch, rng);
  const std::vector<T> before = c;
  std::vector<T> pre(c.size(), T(kQuietNaN));
  {
    ThreadCount count(threads);
    kernels::cpu::gemm_batched<T>(kBatch, p.ta, p.tb, p.m, p.n, p.k, acc_t<T>(p.alpha), a.data.data(), a.ld,
                                  a_rows * a.ld, b.data.data(), b.ld, b_rows * b.ld, acc_t<T>(p.beta),
                                  c.data(), p.n, p.m * p.n,
                                  {.bias = bias.data.data(), .activation = act, .pre = pre.data()});
  }
  const bool has_act = act != kernels::GemmActivation::none;
  if (!check) return {c, pre};
  int64_t bad_pre = 0, bad_act = 0;
  for (int64_t e = 0; e < kBatch; ++e) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const double x = to_double(p.ta == Transpose::no ? a.data[(e * a_rows + i) * a.ld + l]
                                                           : a.data[(e * a_rows + l) * a.ld + i]);
          const double y = to_double(p.tb == Transpose::no ? b.data[(e * b_rows + l) * b.ld + j]
                                                           : b.data[(e * b_rows + j) * b.ld + l]);
          sum += x * y;
          magnitude += std::abs(x * y);
        }
        const size_t at = static_cast<size_t>((e * p.m + i) * p.n + j);
        const double bias_j = to_double(bias.data[j]);
        double expected = p.alpha * sum + bias_j;
        magnitude = std::abs(p.alpha) * magnitude + std::abs(bias_j);
        if (p.beta != 0) {
          expected += p.beta * to_double(before[at]);
          magnitude += std::abs(p.beta * to_double(before[at]));
        }
        const double v = to_double(has_act ? pre[at] : c[at]);
        if (!(std::abs(v - expected) <= tolerance<T>(p.k + 1) * magnitude + subnormal_tolerance<T>())) {
          if (bad_pre++ == 0) UNSCOPED_INFO("pre-activation [" << e << ", " << i << ", " << j << "]: " << v << " vs " << expected);
        }
        if (has_act) {
          const double x = to_double(pre[at]);
          const double want = gelu_reference(act, x);
          const double got = to_double(c[at]);
          if (!(std::abs(got - want) <= activation_tolerance<T>(act, x))) {
            if (bad_act++ == 0) UNSCOPED_INFO("activation [" << e << ", " << i << ", " << j << "]: " << got << " vs " << want);
          }
        }
      }
    }
  }
  CHECK(bad_pre == 0);
  CHECK(bad_act == 0);
  if (!has_act) CHECK(std::all_of(pre.begin(), pre.end(), [](T x) { return std::isnan(to_double(x)); }));
  return {c, pre};
}

}  // namespace

TEMPLATE_TEST_CASE("gemm epilogue adds the bias row and applies GELU to the rounded sum", "[gemm]", float,
                   double, bf16, f16) {
  using T = TestType;
  using kernels::GemmActivation;
  struct Shape {
    int64_t m, n, k;
  };
  // Small; cut along rows at two threads; cut along columns (the bias and pre shift with them).
  const Shape shapes[] = {{5, 7, 3}, {301, 257, 129}, {8, 611, 515}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        for (GemmActivation act : {GemmActivation::none, GemmActivation::gelu_tanh, GemmActivation::gelu_erf}) {
          for (double beta : {0.0, 0.5}) {
            const Problem<T> p{.ta = ta, .tb = tb, .m = s.m, .n = s.n, .k = s.k, .alpha = 2, .beta = beta};
            INFO(p.describe() << " activation " << static_cast<int>(act));
            ++seed;
            const auto one = run_epilogue(p, act, 1, seed, true);
            const auto two = run_epilogue(p, act, 2, seed, false);
            CHECK(std::memcmp(one.first.data(), two.first.data(), one.first.size() * sizeof(T)) == 0);
            CHECK(std::memcmp(one.second.data(), two.second.data(), one.second.size() * sizeof(T)) == 0);
          }
        }
      }
    }
  }
}
