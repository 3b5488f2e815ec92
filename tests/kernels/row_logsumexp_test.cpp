// dtr/kernels/row_logsumexp.h: a row folded as the CUDA cross-entropy kernels fold it (each
// of n threads takes vectors t, t + n, ... of N elements, then the threads' states are
// combined) against a direct computation in double of the row's max, sum of
// exp(x - max), sum of (x - max) and count; over rows with NaN, +-inf, all -inf and
// large values, several thread counts and vector widths, with and without the
// label-smoothing sum.
#include "dtr/kernels/row_logsumexp.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using dtr::kernels::RowState;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Reference {
  double max, sum_exp, sum_shift;
  int64_t n;
};

Reference direct(const std::vector<double>& x) {
  Reference r{-kInf, 0, 0, static_cast<int64_t>(x.size())};
  for (double v : x) {
    if (v > r.max || std::isnan(v)) r.max = std::isnan(r.max) ? r.max : v;
  }
  for (double v : x) {
    if (v == -kInf) {
      r.sum_shift += v;
    } else {
      r.sum_exp += std::exp(v - r.max);
      r.sum_shift += v - r.max;
    }
  }
  return r;
}

struct StdExp {
  template <class A>
  A operator()(A v) const {
    return std::exp(v);
  }
};

// Folds x as n threads with vectors of N elements, then combines the threads' states
// pairwise (a tree, like the kernels' shuffles) or in thread order.
template <class A, int N, bool kSmooth>
RowState<A> fold(const std::vector<double>& x, int threads, bool tree) {
  const int64_t cols = static_cast<int64_t>(x.size());
  const int64_t vecs = (cols + N - 1) / N;
  std::vector<RowState<A>> part(static_cast<size_t>(threads), dtr::kernels::empty_row_state<A>());
  for (int t = 0; t < threads; ++t) {
    for (int64_t i = t; i < vecs; i += threads) {
      A a[N];
      for (int k = 0; k < N; ++k) a[k] = i * N + k < cols ? static_cast<A>(x[static_cast<size_t>(i * N + k)]) : A(0);
      const int valid = static_cast<int>(std::min<int64_t>(N, cols - i * N));
      dtr::kernels::add_values<kSmooth>(part[static_cast<size_t>(t)], a, valid, StdExp{});
    }
  }
  if (!tree) {
    RowState<A> s = part[0];
    for (size_t t = 1; t < part.size(); ++t) s = dtr::kernels::combine_row_states(s, part[t], StdExp{});
    return s;
  }
  for (size_t width = 1; width < part.size(); width *= 2) {
    for (size_t t = 0; t + width < part.size(); t += 2 * width) {
      part[t] = dtr::kernels::combine_row_states(part[t], part[t + width], StdExp{});
    }
  }
  return part[0];
}

bool close(double got, double want, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= rtol * std::max(1.0, std::fabs(want));
}

// A row of `cols` values: normal(0, 3) with, depending on `kind`, NaN, +inf, -inf,
// +-80 or every value -inf mixed in.
std::vector<double> make_row(std::mt19937& rng, int64_t cols, int kind) {
  std::normal_distribution<double> normal(0, 3);
  std::uniform_int_distribution<int64_t> pos(0, cols - 1);
  std::vector<double> x(static_cast<size_t>(cols));
  for (double& v : x) v = normal(rng);
  auto at = [&] { return static_cast<size_t>(pos(rng)); };
  switch (kind) {
    case 1: x[at()] = std::nan(""); break;
    case 2: x[at()] = kInf; break;
    case 3: x[at()] = -kInf; x[at()] = -kInf; break;
    case 4: std::fill(x.begin(), x.end(), -kInf); break;
    case 5: x[at()] = 80; x[at()] = -80; break;
    case 6: x[at()] = -kInf; x[at()] = std::nan(""); break;
    default: break;
  }
  return x;
}

template <class A, int N, bool kSmooth>
void check_rows(double rtol) {
  std::mt19937 rng(5);
  int failures = 0;
  for (int64_t cols : {1, 2, 3, 7, 8, 9, 31, 64, 100, 257}) {
    for (int kind = 0; kind <= 6; ++kind) {
      std::vector<double> x = make_row(rng, cols, kind);
      for (double& v : x) v = static_cast<double>(static_cast<A>(v));  // the values the fold sees
      const Reference want = direct(x);
      for (int threads : {1, 2, 3, 7, 32}) {
        for (bool tree : {false, true}) {
          const RowState<A> got = fold<A, N, kSmooth>(x, threads, tree);
          const bool ok = close(got.max, want.max, 0) && close(got.sum_exp, want.sum_exp, rtol) &&
                          (!kSmooth || close(got.sum_shift, want.sum_shift, rtol)) && got.n == want.n;
          if (!ok && failures++ < 5) {
            INFO("cols " << cols << ", kind " << kind << ", threads " << threads << ", tree " << tree << ": max "
                         << got.max << " vs " << want.max << ", sum_exp " << got.sum_exp << " vs " << want.sum_exp
                         << ", sum_shift " << got.sum_shift << " vs " << want.sum_shift << ", n " << got.n);
            CHECK(ok);
          }
        }
      }
    }
  }
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("a row's log-sum-exp state folded by threads and vectors matches the direct sums", "[kernels]") {
  SECTION("float, 8 per vector (bf16 rows)") { check_rows<float, 8, false>(1e-4); }
  SECTION("float, 4 per vector (f32 rows), with the smoothing sum") { check_rows<float, 4, true>(1e-4); }
  SECTION("double, 2 per vector (f64 rows), with the smoothing sum") { check_rows<double, 2, true>(1e-12); }
  SECTION("float, 8 per vector, with the smoothing sum") { check_rows<float, 8, true>(1e-4); }
}
