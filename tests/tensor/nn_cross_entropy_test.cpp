// cross_entropy (dtr/tensor/ops/nn.h) against hand-computed losses and a double
// loop: ignore_index, label smoothing, huge logits, every row ignored (NaN),
// gradcheck of the logits (also non-contiguous), bf16 within a stated
// tolerance, meta inputs, and error messages.
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace dtr;

namespace {

// Mean loss over rows whose target is not `ignore`, in double, PyTorch's formula.
double reference(const std::vector<double>& x, int64_t cols, const std::vector<int64_t>& targets,
                 int64_t ignore, double smoothing) {
  double total = 0;
  int64_t counted = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore) continue;
    const double* row = x.data() + r * cols;
    double m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, row[c]);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
    const double lse = m + std::log(s);
    double mean_neg_logp = 0;
    for (int64_t c = 0; c < cols; ++c) mean_neg_logp += (lse - row[c]) / static_cast<double>(cols);
    total += (1 - smoothing) * (lse - row[targets[r]]) + smoothing * mean_neg_logp;
    ++counted;
  }
  return total / static_cast<double>(counted);
}

}  // namespace

TEST_CASE("cross_entropy of small rows matches hand-computed losses", "[nn]") {
  Tensor logits = from_vector<float>({0, 0, /**/ 1, 2}, {2, 2});
  Tensor targets = from_vector<int64_t>({0, 1});
  Tensor loss = cross_entropy(logits, targets);
  CHECK(loss.dim() == 0);
  CHECK(loss.dtype() == DType::f32);
  // Row 0: log 2. Row 1: log(e + e^2) - 2 = log(1 + e^-1).
  const double want = (std::log(2.0) + std::log1p(std::exp(-1.0))) / 2;
  CHECK(loss.item() == Approx(want).epsilon(1e-6));
  // Label smoothing 0.1 on [1, 2, 3] with target 0: 0.9 (lse - 1) + 0.1 (lse - 2) = lse - 1.1.
  Tensor row = from_vector<float>({1, 2, 3}, {1, 3});
  const double lse = 3 + std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  CHECK(cross_entropy(row, from_vector<int64_t>({0}, {1}), -100, 0.1).item() == Approx(lse - 1.1).epsilon(1e-6));
  CHECK(cross_entropy(row, from_vector<int64_t>({0}, {1}), -100, 1.0).item() == Approx(lse - 2).epsilon(1e-6));
  // Ignored rows leave the mean: the middle row (target -100, or ignore_index 7) does not count.
  Tensor three = from_vector<float>({0, 0, /**/ 5, -5, /**/ 1, 2}, {3, 2});
  CHECK(cross_entropy(three, from_vector<int64_t>({0, -100, 1})).item() == Approx(want).epsilon(1e-6));
  CHECK(cross_entropy(three, from_vector<int64_t>({0, 7, 1}), 7).item() == Approx(want).epsilon(1e-6));
  // Huge logits do not overflow: [1000, -1000] with target 0 costs log(1 + e^-2000) = 0.
  CHECK(cross_entropy(from_vector<float>({1000, -1000, 1000, 999}, {2, 2}), from_vector<int64_t>({0, 1})).item() ==
        Approx(std::log1p(std::exp(1.0)) / 2).epsilon(1e-6));
  // Gradient of one row [0, 0], target 0: softmax - one-hot = [-0.5, 0.5].
  Tensor l = from_vector<double>({0, 0}, {1, 2}).requires_grad_();
  cross_entropy(l, from_vector<int64_t>({0}, {1})).backward();
  CHECK(l.grad().to_vector<double>() == std::vector<double>{-0.5, 0.5});
}

TEST_CASE("cross_entropy over zero counted rows is NaN with a zero gradient", "[nn]") {
  Tensor logits = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor loss = cross_entropy(logits, from_vector<int64_t>({-100, -100}));
  CHECK(std::isnan(loss.item()));
  loss.backward();
  CHECK(logits.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0});
  CHECK(std::isnan(cross_entropy(zeros({0, 5}), from_vector<int64_t>({})).item()));
}

TEST_CASE("cross_entropy matches a double reference with ignore_index and label smoothing", "[nn]") {
  Generator gen(21);
  const std::vector<int64_t> targets = {3, -100, 0, 6, 6, 2, -100, 1, 5};
  for (double smoothing : {0.0, 0.2}) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      CAPTURE(smoothing, dtype_name(dtype));
      Tensor logits = (randn({9, 7}, {.dtype = DType::f32}, &gen)).to(dtype);
      const double want = reference(logits.to(DType::f64).to_vector<double>(), 7, targets, -100, smoothing);
      Tensor loss = cross_entropy(logits, from_vector<int64_t>(targets), -100, smoothing);
      CHECK(loss.dtype() == dtype);
      // Tolerance: computed in float (double for f64) and rounded once to the
      // output dtype: bf16 keeps 8 significant bits, so 1 percent.
      const double tol = dtype == DType::bf16 ? 1e-2 : dtype == DType::f16 ? 2e-3 : 1e-6;
      CHECK(loss.item() == Approx(want).epsilon(tol));
    }
  }
  // Non-contiguous logits ([C, N] transposed) give the same loss.
  Tensor cn = randn({7, 9}, {.dtype = DType::f64}, &gen);
  CHECK(cross_entropy(cn.t(), from_vector<int64_t>(targets), -100, 0.2).item() ==
        Approx(reference(cn.t().contiguous().to_vector<double>(), 7, targets, -100, 0.2)).epsilon(1e-12));
}

TEST_CASE("gradcheck of cross_entropy for the logits", "[nn]") {
  Generator gen(23);
  Tensor logits = randn({5, 4}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor targets = from_vector<int64_t>({3, 0, -100, 1, 3});
  for (double smoothing : {0.0, 0.3}) {
    CAPTURE(smoothing);
    CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets, -100, smoothing); },
                             {logits}) == "");
  }
  Tensor strided = randn({4, 5}, {.dtype = DType::f64}, &gen).t().detach().requires_grad_();  // [5, 4]
  Tensor targets1 = from_vector<int64_t>({3, 0, 2, 1, 3});  // ignore_index 1: row 3 is left out
  CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets1, 1, 0.1); },
                           {strided}) == "");
}

TEST_CASE("cross_entropy on meta gives a meta loss, and bad input gives clear errors", "[nn]") {
  Tensor meta_loss = cross_entropy(empty({4, 3}, {.device = Device::meta()}),
                                   empty({4}, {.dtype = DType::i64, .device = Device::meta()}));
  CHECK(meta_loss.device().is_meta());
  CHECK(meta_loss.dim() == 0);

  Tensor logits = zeros({2, 3});
  Tensor targets = from_vector<int64_t>({0, 2});
  CHECK_THROWS_WITH(cross_entropy(zeros({2, 3}, {.dtype = DType::i64}), targets),
                    Catch::Contains("cross_entropy: logits must have a floating dtype (f32, f64, bf16, f16), got i64"));
  CHECK_THROWS_WITH(cross_entropy(logits, from_vector<float>({0, 2})),
                    Catch::Contains("cross_entropy: targets must be class indices of dtype i64, got f32"));
  CHECK_THROWS_WITH(cross_entropy(logits, from_vector<int64_t>({0, 1, 2})),
                    Catch::Contains("cross_entropy: targets must have shape [2] (one class index per row of "
                                    "logits [2, 3]), got [3]"));
  CHECK_THROWS_WITH(cross_entropy(zeros({3}), from_vector<int64_t>({0}, {1})),
                    Catch::Contains("cross_entropy: logits must be 2-D [N, C], got shape [3]"));
  CHECK_THROWS_WITH(cross_entropy(logits, from_vector<int64_t>({0, 3})),
                    Catch::Contains("cross_entropy: target 3 at row 1 is out of range for 3 classes "
                                    "(expected 0 <= target < 3, or ignore_index -100)"));
  CHECK_THROWS_WITH(cross_entropy(logits, from_vector<int64_t>({-1, 0})),
                    Catch::Contains("cross_entropy: target -1 at row 0 is out of range"));
  CHECK_THROWS_WITH(cross_entropy(logits, targets, -100, 1.5),
                    Catch::Contains("cross_entropy: label_smoothing must be in [0, 1], got 1.5"));
}
