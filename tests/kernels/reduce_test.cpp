// Row reduction kernels (dtr/kernels/cpu/reduce.h) on raw buffers, against plain
// double-precision loops: accumulation type, pairwise accuracy, long rows split
// into chunks, NaN handling, integer sums and thread-count independence; the column
// kernels against the same loops and, bit for bit, the row kernels.
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/cpu/reduce.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace dtr;
using namespace dtr::kernels::cpu;
using dtr::testing::ThreadCountGuard;

namespace {

std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double ref_sum(const float* p, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("sum_rows accumulates bf16 and f16 in float: 4096 ones sum to exactly 4096",
          "[reduce][kernels]") {
  // Accumulating in bf16 would stall at 256 (256 + 1 rounds back to 256); in f16 at 2048.
  std::vector<bf16> b(4096, bf16(1.0f));
  bf16 bsum;
  sum_rows<bf16>(b.data(), 1, 4096, &bsum);
  CHECK(static_cast<float>(bsum) == 4096.0f);
  std::vector<f16> h(4096, f16(1.0f));
  f16 hsum;
  sum_rows<f16>(h.data(), 1, 4096, &hsum);
  CHECK(static_cast<float>(hsum) == 4096.0f);
  f16 hmean;
  mean_rows<f16>(h.data(), 1, 4096, &hmean);
  CHECK(static_cast<float>(hmean) == 1.0f);
}

TEST_CASE("sum_rows of a 1e6-element f32 row stays within 1e-6 relative of the double sum",
          "[reduce][kernels]") {
  // A sequential float sum of 1e6 copies of 0.1f is off by about 1%; pairwise
  // summation keeps the error near log2(n) ulps.
  const int64_t n = 1000000;
  std::vector<float> tenths(n, 0.1f);
  float s = 0;
  sum_rows<float>(tenths.data(), 1, n, &s);
  const double expected = ref_sum(tenths.data(), n);
  CHECK(std::abs(s - expected) <= 1e-6 * expected);

  std::vector<float> pos = random_floats(n, 7, 0.0f, 1.0f);
  sum_rows<float>(pos.data(), 1, n, &s);
  const double expected_pos = ref_sum(pos.data(), n);
  CHECK(std::abs(s - expected_pos) <= 1e-6 * expected_pos);

  float m = 0;
  mean_rows<float>(pos.data(), 1, n, &m);
  CHECK(std::abs(m - expected_pos / n) <= 1e-6 * (expected_pos / n));
}

TEST_CASE("row kernels match double loops on short rows and on rows split into chunks",
          "[reduce][kernels]") {
  struct Case {
    int64_t rows, cols;
  };
  for (Case c : {Case{7, 13}, Case{1, 1}, Case{5, 1000}, Case{3, 2 * kReduceChunk + 17}}) {
    CAPTURE(c.rows, c.cols);
    std::vector<float> x = random_floats(c.rows * c.cols, 11);
    std::vector<float> sum(c.rows), mean(c.rows), mx(c.rows), mn(c.rows);
    std::vector<int64_t> arg(c.rows);
    sum_rows<float>(x.data(), c.rows, c.cols, sum.data());
    mean_rows<float>(x.data(), c.rows, c.cols, mean.data());
    max_rows<float>(x.data(), c.rows, c.cols, mx.data());
    min_rows<float>(x.data(), c.rows, c.cols, mn.data());
    argmax_rows<float>(x.data(), c.rows, c.cols, arg.data());
    for (int64_t r = 0; r < c.rows; ++r) {
      CAPTURE(r);
      const float* row = x.data() + r * c.cols;
      double s = 0, hi = row[0], lo = row[0];
      int64_t at = 0;
      for (int64_t j = 0; j < c.cols; ++j) {
        s += row[j];
        if (row[j] > hi) {
          hi = row[j];
          at = j;
        }
        lo = std::min<double>(lo, row[j]);
      }
      CHECK(sum[r] == Approx(s).margin(1e-4));
      CHECK(mean[r] == Approx(s / c.cols).margin(1e-7));
      CHECK(mx[r] == hi);
      CHECK(mn[r] == lo);
      CHECK(arg[r] == at);
    }
  }
}

TEST_CASE("argmax_rows returns the first index of the maximum", "[reduce][kernels]") {
  std::vector<double> x = {1, 5, 3, 5, /* row 2: */ -2, -2, -2, -2};
  int64_t arg[2];
  argmax_rows<double>(x.data(), 2, 4, arg);
  CHECK(arg[0] == 1);
  CHECK(arg[1] == 0);
  // Ties across chunks of a long row keep the earliest chunk's index.
  std::vector<float> flat(3 * kReduceChunk, 0.0f);
  flat[kReduceChunk + 3] = 2.0f;
  flat[2 * kReduceChunk + 1] = 2.0f;
  argmax_rows<float>(flat.data(), 1, 3 * kReduceChunk, arg);
  CHECK(arg[0] == kReduceChunk + 3);
  // A row of -inf has its maximum at 0.
  std::vector<float> neg(5, -std::numeric_limits<float>::infinity());
  argmax_rows<float>(neg.data(), 1, 5, arg);
  CHECK(arg[0] == 0);
}

TEST_CASE("max, min and argmax propagate NaN and point at the first NaN", "[reduce][kernels]") {
  std::vector<float> x = {1, kNaN, 9, kNaN, /* row 2: */ 4, 3, 2, 1};
  float mx[2], mn[2];
  int64_t arg[2];
  max_rows<float>(x.data(), 2, 4, mx);
  min_rows<float>(x.data(), 2, 4, mn);
  argmax_rows<float>(x.data(), 2, 4, arg);
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mn[0]));
  CHECK(arg[0] == 1);
  CHECK(mx[1] == 4.0f);
  CHECK(mn[1] == 1.0f);
  CHECK(arg[1] == 0);

  // In a long row the NaN sits in a later chunk than a larger finite value.
  const int64_t n = 3 * kReduceChunk;
  std::vector<float> row(n, 1.0f);
  row[10] = 100.0f;
  row[2 * kReduceChunk + 5] = kNaN;
  row[2 * kReduceChunk + 9] = kNaN;
  max_rows<float>(row.data(), 1, n, mx);
  argmax_rows<float>(row.data(), 1, n, arg);
  CHECK(std::isnan(mx[0]));
  CHECK(arg[0] == 2 * kReduceChunk + 5);

  std::vector<bf16> b = {bf16(1.0f), bf16(kNaN), bf16(3.0f)};
  bf16 bmax;
  int64_t barg;
  max_rows<bf16>(b.data(), 1, 3, &bmax);
  argmax_rows<bf16>(b.data(), 1, 3, &barg);
  CHECK(std::isnan(static_cast<float>(bmax)));
  CHECK(barg == 1);
}

TEST_CASE("integer sums produce int64 without overflow", "[reduce][kernels]") {
  std::vector<uint8_t> u(1000, 255);
  int64_t us;
  sum_rows<uint8_t>(u.data(), 1, 1000, &us);
  CHECK(us == 255000);
  std::vector<int32_t> i = {2000000000, 2000000000, -7, 2000000000};
  int64_t is[2];
  sum_rows<int32_t>(i.data(), 2, 2, is);
  CHECK(is[0] == 4000000000LL);
  CHECK(is[1] == 1999999993LL);
  uint8_t umax, umin;
  std::vector<uint8_t> v = {3, 200, 0, 7};
  max_rows<uint8_t>(v.data(), 1, 4, &umax);
  min_rows<uint8_t>(v.data(), 1, 4, &umin);
  CHECK(umax == 200);
  CHECK(umin == 0);
}

TEST_CASE("empty rows: sum 0, mean NaN, max -inf, min +inf, argmax -1", "[reduce][kernels]") {
  float dummy = 0, s = 1, m = 1, mx = 1, mn = 1;
  int64_t arg = 5;
  sum_rows<float>(&dummy, 1, 0, &s);
  mean_rows<float>(&dummy, 1, 0, &m);
  max_rows<float>(&dummy, 1, 0, &mx);
  min_rows<float>(&dummy, 1, 0, &mn);
  argmax_rows<float>(&dummy, 1, 0, &arg);
  CHECK(s == 0.0f);
  CHECK(std::isnan(m));
  CHECK(mx == -std::numeric_limits<float>::infinity());
  CHECK(mn == std::numeric_limits<float>::infinity());
  CHECK(arg == -1);
}

TEST_CASE("row sums are bitwise the same for 1, 2 and 4 threads", "[reduce][kernels]") {
  ThreadCountGuard guard;
  struct Case {
    int64_t rows, cols;
  };
  for (Case c :
       {Case{1, 40 * kReduceChunk + 123}, Case{3, 5 * kReduceChunk + 1}, Case{4096, 300}}) {
    CAPTURE(c.rows, c.cols);
    std::vector<float> x = random_floats(c.rows * c.cols, 3);
    std::vector<std::vector<float>> sums;
    for (int threads : {1, 2, 4}) {
      kernels::set_num_threads(threads);
      std::vector<float> s(c.rows);
      sum_rows<float>(x.data(), c.rows, c.cols, s.data());
      sums.push_back(s);
    }
    for (size_t k = 1; k < sums.size(); ++k) {
      CHECK(std::memcmp(sums[0].data(), sums[k].data(), sums[0].size() * sizeof(float)) == 0);
    }
    // And the sums are right, not merely repeatable.
    for (int64_t r = 0; r < c.rows; ++r) {
      CHECK(sums[0][r] == Approx(ref_sum(x.data() + r * c.cols, c.cols)).margin(1e-3));
    }
  }
}

TEST_CASE("column sums and means match double loops and the row kernel on the transposed copy bitwise",
          "[reduce][kernels]") {
  ThreadCountGuard guard;
  struct Case {
    int64_t outer, inner;
  };
  // Narrow and wide blocks of columns, leaves, splits, and pieces of kReduceChunk rows.
  for (Case c : {Case{1, 1}, Case{7, 3}, Case{256, 130}, Case{129, 64}, Case{1000, 65},
                 Case{2 * kReduceChunk + 17, 5}, Case{0, 4}}) {
    CAPTURE(c.outer, c.inner);
    const std::vector<float> x = random_floats(c.outer * c.inner, 21);
    std::vector<float> transposed(x.size());
    for (int64_t i = 0; i < c.outer; ++i) {
      for (int64_t j = 0; j < c.inner; ++j) transposed[j * c.outer + i] = x[i * c.inner + j];
    }
    std::vector<float> row_sum(c.inner), row_mean(c.inner);
    sum_rows<float>(transposed.data(), c.inner, c.outer, row_sum.data());
    mean_rows<float>(transposed.data(), c.inner, c.outer, row_mean.data());
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      kernels::set_num_threads(threads);
      std::vector<float> sum(c.inner), mean(c.inner);
      sum_cols<float>(x.data(), c.outer, c.inner, sum.data());
      mean_cols<float>(x.data(), c.outer, c.inner, mean.data());
      for (int64_t j = 0; j < c.inner; ++j) {
        CAPTURE(j);
        double s = 0;
        for (int64_t i = 0; i < c.outer; ++i) s += x[i * c.inner + j];
        CHECK(sum[j] == Approx(s).margin(1e-4));
        if (c.outer > 0) {
          CHECK(mean[j] == Approx(s / static_cast<double>(c.outer)).margin(1e-7));
        } else {
          CHECK(std::isnan(mean[j]));
        }
      }
      CHECK(std::memcmp(sum.data(), row_sum.data(), sum.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(mean.data(), row_mean.data(), mean.size() * sizeof(float)) == 0);
    }
  }
  // bf16 accumulates in float and integers in int64, as the rows do.
  const std::vector<bf16> ones(4096 * 3, bf16(1.0f));
  std::vector<bf16> bf16_sum(3);
  sum_cols<bf16>(ones.data(), 4096, 3, bf16_sum.data());
  for (bf16 v : bf16_sum) CHECK(static_cast<float>(v) == 4096.0f);
  const std::vector<int32_t> big(4 * 2, std::numeric_limits<int32_t>::max());
  std::vector<int64_t> int_sum(2);
  sum_cols<int32_t>(big.data(), 4, 2, int_sum.data());
  for (int64_t v : int_sum) CHECK(v == 4 * int64_t{std::numeric_limits<int32_t>::max()});
}
