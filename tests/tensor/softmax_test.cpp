// softmax / log_softmax on Tensors (dtr/tensor/ops/softmax.h) against plain
// double loops: huge inputs without overflow, each dim of a 3-D tensor,
// non-contiguous inputs, bf16/f64, long rows split across threads, 0-d and
// meta inputs, and error messages.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/softmax.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

enum class SoftmaxKind { softmax, log_softmax };

// Uniform in [-scale, scale], from `seed`.
Tensor random_logits(const Shape& shape, unsigned seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(numel_of(shape));
  for (float& x : v) x = dist(gen);
  return from_vector(v, shape);
}

// softmax / log_softmax of `x` (row-major, of `shape`) along `dim`, in double.
std::vector<double> reference(SoftmaxKind kind, const std::vector<double>& x, const Shape& shape,
                              int64_t dim) {
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  const int64_t n = shape[dim];
  std::vector<double> out(x.size());
  for (int64_t first = 0; first < static_cast<int64_t>(x.size()); ++first) {
    if ((first / stride) % n != 0) continue;  // not the first element of a line along dim
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[first + j * stride]);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[first + j * stride] - m);
    for (int64_t j = 0; j < n; ++j) {
      const double v = x[first + j * stride];
      out[first + j * stride] = kind == SoftmaxKind::softmax ? std::exp(v - m) / s : v - m - std::log(s);
    }
  }
  return out;
}

Tensor run(SoftmaxKind kind, const Tensor& t, int64_t dim) {
  return kind == SoftmaxKind::softmax ? softmax(t, dim) : log_softmax(t, dim);
}

void check_close_rel_abs(const std::vector<double>& got, const std::vector<double>& want, double rel,
                 double abs) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == Approx(want[i]).epsilon(rel).margin(abs));
  }
}

}  // namespace

TEST_CASE("softmax and log_softmax of huge values do not overflow", "[softmax]") {
  Tensor t = from_vector<float>({1000, -1000, 0, 999, /**/ -1000, -1000, -1001, -1000}, {2, 4});
  const std::vector<double> x = values_of(t);
  auto sm = values_of(softmax(t));
  auto lsm = values_of(log_softmax(t));
  check_close_rel_abs(sm, reference(SoftmaxKind::softmax, x, {2, 4}, 1), 1e-6, 1e-7);
  check_close_rel_abs(lsm, reference(SoftmaxKind::log_softmax, x, {2, 4}, 1), 1e-6, 1e-5);
  // Hand-checked: row 0 is [1/(1+e^-1), 0, 0, e^-1/(1+e^-1)].
  CHECK(sm[0] == Approx(1.0 / (1.0 + std::exp(-1.0))));
  CHECK(sm[3] == Approx(std::exp(-1.0) / (1.0 + std::exp(-1.0))));
  CHECK(sm[1] == 0.0);
  CHECK(lsm[1] == Approx(-2000.0 - std::log1p(std::exp(-1.0))));
  for (double v : sm) CHECK(std::isfinite(v));
  for (double v : lsm) CHECK(std::isfinite(v));
}

TEST_CASE("softmax and log_softmax along each dim of a 3-D tensor match double loops",
          "[softmax]") {
  const Shape shape = {3, 4, 5};
  Tensor t = random_logits(shape, 1);
  const std::vector<double> x = values_of(t);
  for (SoftmaxKind kind : {SoftmaxKind::softmax, SoftmaxKind::log_softmax}) {
    for (int64_t d = 0; d < 3; ++d) {
      for (int64_t dim : {d, d - 3}) {
        CAPTURE(static_cast<int>(kind), dim);
        Tensor out = run(kind, t, dim);
        CHECK(out.sizes() == shape);
        CHECK(out.dtype() == DType::f32);
        CHECK(out.is_contiguous());
        check_close_rel_abs(values_of(out), reference(kind, x, shape, d), 1e-5, 1e-6);
      }
    }
  }
  // The default dim is the last.
  check_close_rel_abs(values_of(softmax(t)), reference(SoftmaxKind::softmax, x, shape, 2), 1e-5, 1e-6);
}

TEST_CASE("softmax of non-contiguous views uses the logical elements", "[softmax]") {
  Tensor base = random_logits({6, 7, 4}, 2);
  Tensor transposed = base.transpose(0, 2);                // [4, 7, 6]
  Tensor sliced = base.slice(1, 0, 7, 2).narrow(0, 1, 3);  // [3, 4, 4], strided
  for (const Tensor& v : {transposed, sliced}) {
    CHECK_FALSE(v.is_contiguous());
    const std::vector<double> x = values_of(v);
    for (int64_t d = 0; d < 3; ++d) {
      CAPTURE(v.sizes(), d);
      check_close_rel_abs(values_of(softmax(v, d)), reference(SoftmaxKind::softmax, x, v.sizes(), d), 1e-5, 1e-6);
      check_close_rel_abs(values_of(log_softmax(v, d)), reference(SoftmaxKind::log_softmax, x, v.sizes(), d), 1e-5,
                  1e-6);
    }
  }
}

TEST_CASE("softmax keeps bf16 and f64 inputs in their dtype", "[softmax]") {
  Tensor b = random_logits({5, 33}, 3).to(DType::bf16);
  const std::vector<double> xb = values_of(b);  // the bf16-rounded inputs
  Tensor sb = softmax(b, 1);
  CHECK(sb.dtype() == DType::bf16);
  // Computed in float, rounded once to bf16: relative error within 2^-8.
  check_close_rel_abs(values_of(sb), reference(SoftmaxKind::softmax, xb, {5, 33}, 1), 1.0 / 256, 1e-6);
  check_close_rel_abs(values_of(log_softmax(b, 0)), reference(SoftmaxKind::log_softmax, xb, {5, 33}, 0), 1.0 / 128,
              1e-3);

  Tensor d = random_logits({4, 9}, 4).to(DType::f64);
  const std::vector<double> xd = values_of(d);
  Tensor sd = log_softmax(d, 0);
  CHECK(sd.dtype() == DType::f64);
  check_close_rel_abs(sd.to_vector<double>(), reference(SoftmaxKind::log_softmax, xd, {4, 9}, 0), 1e-12, 1e-14);
}

TEST_CASE("softmax over many long rows sums to 1 per row", "[softmax]") {
  // 64 x 4096 elements: rows are split across threads.
  Tensor t = random_logits({64, 4096}, 5, 20.0f);
  const std::vector<double> x = values_of(t);
  auto sm = values_of(softmax(t));
  check_close_rel_abs(sm, reference(SoftmaxKind::softmax, x, {64, 4096}, 1), 1e-4, 1e-9);
  for (int64_t r = 0; r < 64; ++r) {
    double s = 0;
    for (int64_t j = 0; j < 4096; ++j) s += sm[r * 4096 + j];
    CHECK(s == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("masked (-inf) entries get exactly 0 probability", "[softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t = from_vector<float>({0, -inf, 1, -inf, /**/ 5, -200, -inf, 4}, {2, 4});
  auto sm = softmax(t).to_vector<float>();
  const double e = std::exp(-1.0);
  CHECK(sm[0] == Approx(e / (1 + e)));
  CHECK(sm[1] == 0.0f);
  CHECK(sm[2] == Approx(1 / (1 + e)));
  CHECK(sm[3] == 0.0f);
  CHECK(sm[5] == 0.0f);  // exp(-205) underflows to 0 in double too
  CHECK(sm[6] == 0.0f);
  auto lsm = log_softmax(t).to_vector<float>();
  CHECK(lsm[1] == -inf);
  CHECK(lsm[5] == Approx(-205 - std::log1p(e)));
  // f64: exp(-800) is 0 in double.
  auto sd = softmax(from_vector<double>({0, -800})).to_vector<double>();
  CHECK(sd[0] == 1.0);
  CHECK(sd[1] == 0.0);
}

TEST_CASE("softmax edge cases: NaN rows, 0-d, empty and meta inputs", "[softmax]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto v = softmax(from_vector<float>({1, nan, 2, /**/ 1, 2, 3}, {2, 3})).to_vector<float>();
  for (int j = 0; j < 3; ++j) CHECK(std::isnan(v[j]));
  CHECK(v[5] == Approx(std::exp(0.0) / (std::exp(-2.0) + std::exp(-1.0) + 1.0)));

  CHECK(softmax(scalar_tensor(3.0, DType::f32)).item() == 1.0);
  CHECK(log_softmax(scalar_tensor(3.0, DType::f32), 0).item() == 0.0);
  CHECK(softmax(scalar_tensor(3.0, DType::f32)).dim() == 0);

  CHECK(softmax(empty({3, 0})).sizes() == Shape{3, 0});
  CHECK(softmax(empty({0, 4}), 0).sizes() == Shape{0, 4});

  Tensor m = softmax(empty({2, 3, 4}, {.dtype = DType::bf16, .device = Device::meta()}), 1);
  CHECK(m.device().is_meta());
  CHECK(m.sizes() == Shape{2, 3, 4});
  CHECK(m.dtype() == DType::bf16);
}

TEST_CASE("softmax errors name the op, the dim and the dtype", "[softmax]") {
  CHECK_THROWS_WITH(
      softmax(zeros({2, 3}), 2),
      Catch::Contains("softmax: dim 2 is out of range for a 2-d tensor of shape [2, 3]"));
  CHECK_THROWS_WITH(log_softmax(zeros({2, 3}), -3),
                    Catch::Contains("log_softmax: dim -3 is out of range"));
  CHECK_THROWS_WITH(
      softmax(zeros({2, 3}, {.dtype = DType::i32})),
      Catch::Contains("softmax: expected a floating dtype") && Catch::Contains("i32"));
  CHECK_THROWS_WITH(softmax(scalar_tensor(1.0, DType::f32), 1),
                    Catch::Contains("softmax: dim 1 is out of range for a 0-d tensor"));
}
