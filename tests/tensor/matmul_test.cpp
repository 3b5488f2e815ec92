// matmul, mm, bmm and addmm against hand-computed values and a reference written
// here (plain loops in double with its own broadcasting): result shapes for every
// 1-D/2-D/N-D combination, transposed, sliced and permuted views, the half types,
// addmm's beta/alpha, meta inputs, and each error message.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

// t's elements in row-major order, as doubles.
// A tensor of `shape` with values uniform in [-1, 1] (drawn in double, then converted).
Tensor random(const Shape& shape, DType dtype = DType::f64, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) x = dist(rng);
  return from_vector(v, shape).to(dtype);
}

struct Expected {
  Shape shape;
  std::vector<double> data;
  std::vector<double> magnitude;  // sum_k |a_ik b_kj| per element, for tolerances
};

// torch.matmul in plain loops: 1-D operands promoted (and their dim dropped from the
// result), leading dims broadcast right-aligned, size-1 dims repeating.
Expected reference_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.sizes(), bs = b.sizes();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const size_t nb = std::max(as.size(), bs.size()) - 2;
  Shape a_batch(nb, 1), b_batch(nb, 1), batch(nb);
  std::copy(as.begin(), as.end() - 2, a_batch.end() - static_cast<int64_t>(as.size() - 2));
  std::copy(bs.begin(), bs.end() - 2, b_batch.end() - static_cast<int64_t>(bs.size() - 2));
  for (size_t d = 0; d < nb; ++d) batch[d] = a_batch[d] == 1 ? b_batch[d] : a_batch[d];
  const std::vector<double> av = values_of(a), bv = values_of(b);
  Expected out;
  int64_t count = 1;
  for (int64_t s : batch) count *= s;
  for (int64_t e = 0; e < count; ++e) {
    // e's multi-index, mapped into each operand (index 0 on its size-1 dims).
    int64_t rem = e, ea = 0, eb = 0, step_a = 1, step_b = 1;
    for (size_t d = nb; d-- > 0;) {
      const int64_t i = rem % batch[d];
      rem /= batch[d];
      ea += (a_batch[d] == 1 ? 0 : i) * step_a;
      eb += (b_batch[d] == 1 ? 0 : i) * step_b;
      step_a *= a_batch[d];
      step_b *= b_batch[d];
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double t = av[(ea * m + i) * k + l] * bv[(eb * k + l) * n + j];
          sum += t;
          mag += std::abs(t);
        }
        out.data.push_back(sum);
        out.magnitude.push_back(mag);
      }
    }
  }
  out.shape = batch;
  if (a.dim() > 1) out.shape.push_back(m);
  if (b.dim() > 1) out.shape.push_back(n);
  return out;
}

// Relative tolerance of a product's elements for a dtype with k-term sums: one
// rounding on store plus the accumulation in f64 / f32.
double tolerance(DType dtype, int64_t k) {
  const double acc = dtype == DType::f64 ? 0x1p-53 : 0x1p-24;
  const double store = dtype == DType::bf16  ? 0x1p-8
                       : dtype == DType::f16 ? 0x1p-11
                       : dtype == DType::f32 ? 0x1p-24
                                             : 0x1p-53;
  return store + (k + 2) * acc;
}

// got equals the reference in shape and, element by element, within tolerance.
void check_matches(const Tensor& got, const Expected& expected, int64_t k) {
  REQUIRE(got.sizes() == expected.shape);
  const std::vector<double> g = values_of(got);
  const double tol = tolerance(got.dtype(), k);
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    // 1e-30 absolute: an exactly-zero magnitude must give exactly zero.
    if (!(std::abs(g[i] - expected.data[i]) <= tol * expected.magnitude[i] + 1e-30)) {
      if (bad++ == 0) {
        UNSCOPED_INFO("first mismatch at flat index " << i << ": got " << g[i] << ", expected "
                                                      << expected.data[i]);
      }
    }
  }
  CHECK(bad == 0);
}

void check_matmul(const Tensor& a, const Tensor& b) {
  INFO("a " << shape_str(a.sizes()) << " strides " << shape_str(a.strides()) << ", b "
            << shape_str(b.sizes()) << " strides " << shape_str(b.strides()) << ", "
            << dtype_name(a.dtype()));
  check_matches(matmul(a, b), reference_matmul(a, b), a.size(-1));
}

}  // namespace

TEST_CASE("matmul of small integer matrices gives hand-computed values", "[matmul]") {
  const Tensor a = arange(6).view({2, 3});  // [[0, 1, 2], [3, 4, 5]]
  const Tensor b = arange(6).view({3, 2});  // [[0, 1], [2, 3], [4, 5]]
  const Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{2, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{10, 13, 28, 40});
  // b^T a^T = (a b)^T, read through transposed views.
  CHECK(matmul(b.t(), a.t()).to_vector<float>() == std::vector<float>{10, 28, 13, 40});

  const Tensor dot = matmul(from_vector<float>({1, 2, 3}), from_vector<float>({4, 5, 6}));
  CHECK(dot.dim() == 0);
  CHECK(dot.item<float>() == 32.0f);
  // [2, 3] . [3] -> [2]; [3] . [3, 2] -> [2].
  CHECK(matmul(a, from_vector<float>({1, 0, -1})).to_vector<float>() == std::vector<float>{-2, -2});
  CHECK(matmul(from_vector<float>({1, 1, 1}), b).to_vector<float>() == std::vector<float>{6, 9});
}

TEST_CASE("matmul shapes follow torch.matmul for 1-D, 2-D and broadcast batches", "[matmul]") {
  struct Case {
    Shape a, b, result;
  };
  const Case cases[] = {
      {{5}, {5}, {}},
      {{4, 5}, {5}, {4}},
      {{5}, {5, 3}, {3}},
      {{4, 5}, {5, 3}, {4, 3}},
      {{2, 4, 5}, {5}, {2, 4}},
      {{5}, {2, 5, 3}, {2, 3}},
      {{2, 4, 5}, {5, 3}, {2, 4, 3}},
      {{4, 5}, {2, 5, 3}, {2, 4, 3}},
      {{2, 4, 5}, {2, 5, 3}, {2, 4, 3}},
      {{1, 4, 5}, {3, 5, 2}, {3, 4, 2}},
      {{6, 1, 4, 5}, {3, 5, 2}, {6, 3, 4, 2}},
      {{2, 1, 3, 4, 5}, {1, 7, 1, 5, 2}, {2, 7, 3, 4, 2}},
      {{0, 4, 5}, {5, 3}, {0, 4, 3}},
      {{4, 0}, {0, 3}, {4, 3}},  // empty sum: zeros
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    const Tensor a = random(c.a, DType::f64, ++seed);
    const Tensor b = random(c.b, DType::f64, ++seed);
    CHECK(matmul(a, b).sizes() == c.result);
    check_matmul(a, b);
    check_matmul(a.to(DType::f32), b.to(DType::f32));
  }
}

TEST_CASE("matmul of transposed views equals the product of contiguous copies", "[matmul]") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const Tensor at = random({33, 7}, dtype, 1).t();   // [7, 33], column-major
    const Tensor bt = random({20, 33}, dtype, 2).t();  // [33, 20]
    REQUIRE_FALSE(at.is_contiguous());
    check_matmul(at, bt);
    check_matches(matmul(at.contiguous(), bt.contiguous()), reference_matmul(at, bt), 33);
    check_matmul(at, bt.contiguous());
    check_matmul(at.contiguous(), bt);
    // Batched, transposed in the last two dims.
    const Tensor x = random({3, 40, 9}, dtype, 3).transpose(1, 2);   // [3, 9, 40]
    const Tensor y = random({3, 11, 40}, dtype, 4).transpose(1, 2);  // [3, 40, 11]
    check_matmul(x, y);
    check_matmul(x, random({40, 11}, dtype, 5));  // N-D . 2-D with a transposed N-D side
    check_matmul(random({40}, dtype, 6), y);      // 1-D . transposed batch
  }
}

TEST_CASE("matmul of sliced, narrowed, permuted and expanded inputs", "[matmul]") {
  const Tensor big = random({12, 50}, DType::f32, 7);
  // Row stride 50 over 20 columns (read in place with a leading dim).
  check_matmul(big.narrow(1, 3, 20), random({20, 6}, DType::f32, 8));
  // Every other column: no unit stride, copied first.
  check_matmul(big.slice(1, 0, 50, 2), random({25, 6}, DType::f32, 9));
  // Every other row of a transposed view.
  check_matmul(random({6, 12}, DType::f32, 10), big.t().slice(0, 1, 24, 2));
  // Batch dims that do not merge: every other entry of 5 along dim 1.
  const Tensor a = random({2, 5, 4, 8}, DType::f64, 11).slice(1, 0, 5, 2);  // [2, 3, 4, 8]
  check_matmul(a, random({2, 3, 8, 5}, DType::f64, 12));
  check_matmul(a, random({8, 5}, DType::f64, 13));  // N-D . 2-D whose rows cannot be merged
  // Permuted batch: [m, batch, k] viewed as [batch, m, k].
  check_matmul(random({4, 3, 8}, DType::f64, 14).permute({1, 0, 2}),
               random({3, 8, 2}, DType::f64, 15));
  // Broadcast rows and columns materialised by expand (stride 0 in a matrix dim).
  check_matmul(random({1, 8}, DType::f64, 16).expand({4, 8}),
               random({8, 1}, DType::f64, 17).expand({8, 3}));
  // Expanded batch dims.
  check_matmul(random({1, 4, 8}, DType::f64, 18).expand({3, 4, 8}),
               random({3, 8, 2}, DType::f64, 19));
}

TEST_CASE("matmul in bf16 and f16 matches the f64 product of the rounded inputs", "[matmul]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    check_matmul(random({17, 130}, dtype, 20), random({130, 9}, dtype, 21));
    check_matmul(random({2, 3, 17, 40}, dtype, 22), random({3, 40, 9}, dtype, 23));
    const Tensor r = matmul(random({4, 5}, dtype), random({5, 2}, dtype));
    CHECK(r.dtype() == dtype);
  }
}

TEST_CASE("matmul of large operands across threads matches the reference", "[matmul]") {
  check_matmul(random({2, 160, 300}, DType::f32, 24), random({300, 200}, DType::f32, 25));
  check_matmul(random({160, 300}, DType::f32, 26).t().t(), random({200, 300}, DType::f32, 27).t());
}

TEST_CASE("mm and bmm compute the plain and batched products", "[matmul]") {
  const Tensor a = random({5, 7}, DType::f64, 30), b = random({7, 3}, DType::f64, 31);
  check_matches(mm(a, b), reference_matmul(a, b), 7);
  check_matches(mm(b.t(), a.t()), reference_matmul(b.t(), a.t()), 7);
  const Tensor x = random({4, 5, 7}, DType::f32, 32), y = random({4, 7, 3}, DType::f32, 33);
  check_matches(bmm(x, y), reference_matmul(x, y), 7);
  check_matches(bmm(x, y.transpose(1, 2).contiguous().transpose(1, 2)), reference_matmul(x, y), 7);
}

TEST_CASE("addmm returns beta * c + alpha * a.b with c broadcast", "[matmul]") {
  const Tensor a = random({4, 6}, DType::f64, 40), b = random({6, 3}, DType::f64, 41);
  const Expected ab = reference_matmul(a, b);
  // c as a full matrix, a row (bias) and a column.
  for (const Shape& c_shape : {Shape{4, 3}, Shape{3}, Shape{4, 1}, Shape{}}) {
    const Tensor c = random(c_shape, DType::f64, 42);
    const std::vector<double> cv = values_of(c.expand({4, 3}).contiguous());
    Expected expected = ab;
    for (size_t i = 0; i < expected.data.size(); ++i) {
      expected.data[i] = 0.5 * cv[i] - 2.0 * ab.data[i];
      expected.magnitude[i] = 0.5 * std::abs(cv[i]) + 2.0 * ab.magnitude[i];
    }
    INFO("c of shape " << shape_str(c_shape));
    check_matches(addmm(c, a, b, 0.5, -2.0), expected, 6);
    check_matches(addmm(c.to(DType::f32), a.to(DType::f32), b.to(DType::f32), 0.5, -2.0), expected,
                  6);
  }
  // Defaults beta = alpha = 1, with a transposed a.
  const Tensor c = random({4, 3}, DType::f64, 43);
  Expected expected = reference_matmul(a.t().contiguous().t(), b);
  const std::vector<double> cv = values_of(c);
  for (size_t i = 0; i < cv.size(); ++i) {
    expected.data[i] += cv[i];
    expected.magnitude[i] += std::abs(cv[i]);
  }
  check_matches(addmm(c, a.t().contiguous().t(), b), expected, 6);
  // beta == 0 ignores c, even NaN.
  const Tensor nan_c =
      full({4, 3}, std::numeric_limits<double>::quiet_NaN(), {.dtype = DType::f64});
  check_matches(addmm(nan_c, a, b, 0, 1), ab, 6);
}

TEST_CASE("matmul on meta tensors gives an empty meta result of the right shape", "[matmul]") {
  const TensorOptions meta{.dtype = DType::bf16, .device = Device::meta()};
  const Tensor r = matmul(empty({6, 1, 4, 5}, meta), empty({3, 5, 2}, meta));
  CHECK(r.device().is_meta());
  CHECK(r.dtype() == DType::bf16);
  CHECK(r.sizes() == Shape{6, 3, 4, 2});
  CHECK(matmul(empty({5}, meta), empty({5}, meta)).dim() == 0);
  CHECK(mm(empty({4, 5}, meta), empty({5, 2}, meta)).sizes() == Shape{4, 2});
  CHECK(bmm(empty({3, 4, 5}, meta), empty({3, 5, 2}, meta)).sizes() == Shape{3, 4, 2});
  CHECK(addmm(empty({2}, meta), empty({4, 5}, meta), empty({5, 2}, meta)).sizes() == Shape{4, 2});
  CHECK_THROWS_WITH(matmul(empty({4, 5}, meta), empty({4, 2}, meta)),
                    Catch::Contains("matmul: inner dims differ: a is [4, 5], b is [4, 2]"));
}

TEST_CASE("matmul results are counted under the thread's memory tag", "[matmul]") {
  MemoryTagGuard guard(MemoryTag::activation);
  CHECK(matmul(random({3, 4}), random({4, 2})).storage().tag() == MemoryTag::activation);
  CHECK(addmm(random({2}), random({3, 4}), random({4, 2})).storage().tag() ==
        MemoryTag::activation);
}

TEST_CASE("matrix product errors name the op and both shapes", "[matmul]") {
  using Catch::Contains;
  const Tensor f = random({4, 8}, DType::f32);
  CHECK_THROWS_WITH(matmul(f, random({7, 3}, DType::f32)),
                    Contains("matmul: inner dims differ: a is [4, 8], b is [7, 3]"));
  CHECK_THROWS_WITH(matmul(random({3}), random({4})),
                    Contains("matmul: inner dims differ: a is [3], b is [4]"));
  CHECK_THROWS_WITH(
      matmul(random({2, 4, 8}), random({3, 8, 5})),
      Contains("matmul: batch dims do not broadcast: a is [2, 4, 8], b is [3, 8, 5]"));
  CHECK_THROWS_WITH(
      matmul(f, random({8, 2}, DType::f64)),
      Contains("matmul: expected all operands to have dtype f32, but operand 1 has dtype f64"));
  CHECK_THROWS_WITH(
      matmul(zeros({2, 2}, {.dtype = DType::i64}), zeros({2, 2}, {.dtype = DType::i64})),
      Contains("matmul: expected a floating dtype (f32, f64, bf16, f16), got i64"));
  CHECK_THROWS_WITH(
      matmul(scalar_tensor(2.0, DType::f32), from_vector<float>({1, 2, 3})),
      Contains("matmul: both operands need at least 1 dim, got a of shape [] and b of shape [3]"));
  CHECK_THROWS_WITH(matmul(f, empty({8, 2}, {.device = Device::meta()})),
                    Contains("matmul: expected all operands on cpu, but operand 1 is on meta"));

  CHECK_THROWS_WITH(
      mm(random({2, 4, 8}), random({8, 5})),
      Contains("mm: expected 2-D tensors, got a of shape [2, 4, 8] and b of shape [8, 5]"));
  CHECK_THROWS_WITH(mm(f, random({7, 3}, DType::f32)),
                    Contains("mm: inner dims differ: a is [4, 8], b is [7, 3]"));
  CHECK_THROWS_WITH(
      bmm(f, random({8, 3}, DType::f32)),
      Contains("bmm: expected 3-D tensors, got a of shape [4, 8] and b of shape [8, 3]"));
  CHECK_THROWS_WITH(bmm(random({2, 4, 8}), random({3, 8, 5})),
                    Contains("bmm: batch sizes differ: a is [2, 4, 8], b is [3, 8, 5]"));
  CHECK_THROWS_WITH(bmm(random({2, 4, 8}), random({2, 7, 5})),
                    Contains("bmm: inner dims differ: a is [2, 4, 8], b is [2, 7, 5]"));
  CHECK_THROWS_WITH(
      bmm(zeros({1, 2, 2}, {.dtype = DType::u8}), zeros({1, 2, 2}, {.dtype = DType::u8})),
      Contains("bmm: expected a floating dtype (f32, f64, bf16, f16), got u8"));
  CHECK_THROWS_WITH(addmm(random({4, 4}), random({4, 8}), random({8, 5})),
                    Contains("addmm: shapes [4, 4] and [4, 5] cannot be broadcast"));
  CHECK_THROWS_WITH(
      addmm(random({2, 4, 5}), random({4, 8}), random({8, 5})),
      Contains("addmm: c of shape [2, 4, 5] does not broadcast to the product's shape [4, 5]"));
  CHECK_THROWS_WITH(addmm(random({4, 5}), random({4, 8}), random({9, 5})),
                    Contains("addmm: inner dims differ: a is [4, 8], b is [9, 5]"));
  CHECK_THROWS_WITH(
      addmm(random({5}, DType::f32), random({4, 8}), random({8, 5})),
      Contains("addmm: expected all operands to have dtype f32, but operand 1 has dtype f64"));
}
