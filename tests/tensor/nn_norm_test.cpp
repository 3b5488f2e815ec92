// layer_norm and rms_norm (dtr/tensor/ops/nn.h) against double loops written
// here: hand-computed rows, random inputs with and without weight and bias,
// non-contiguous inputs, bf16/f16 within a stated tolerance, gradcheck of every
// differentiable input, backward reductions that do not depend on the thread
// count, meta inputs, and error messages.
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;
using dtr::testing::check_close;
using dtr::testing::ThreadCount;

namespace {

// Layer norm (layer = true) or RMS norm of the rows of x ([rows, cols] row-major), in double.
std::vector<double> reference(bool layer, const std::vector<double>& x, int64_t cols,
                              const std::vector<double>& w, const std::vector<double>& b,
                              double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* row = x.data() + r * cols;
    double mean = 0, var = 0;
    if (layer) {
      for (int64_t c = 0; c < cols; ++c) mean += row[c];
      mean /= static_cast<double>(cols);
    }
    for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (row[c] - mean) * rstd;
      if (!w.empty()) v *= w[c];
      if (!b.empty()) v += b[c];
      y[r * cols + c] = v;
    }
  }
  return y;
}

}  // namespace

TEST_CASE("layer_norm and rms_norm of small rows match hand-computed values", "[nn]") {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {1, 4});
  // mean 2.5, biased var 1.25.
  const double s = 1.0 / std::sqrt(1.25);
  check_close(values_of(layer_norm(x, 4, {}, {}, 0.0)), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s},
              1e-6);
  Tensor w = from_vector<float>({1, 2, 3, 4});
  Tensor b = from_vector<float>({0, 0, 1, 1});
  check_close(values_of(layer_norm(x, 4, w, b, 0.0)),
              {-1.5 * s, -2 * 0.5 * s, 3 * 0.5 * s + 1, 4 * 1.5 * s + 1}, 1e-6);
  // rms of [3, 4] is sqrt(12.5).
  Tensor r = from_vector<float>({3, 4}, {1, 2});
  const double rms = std::sqrt(12.5);
  check_close(values_of(rms_norm(r, {}, 0.0)), {3 / rms, 4 / rms}, 1e-6);
  check_close(values_of(rms_norm(r, from_vector<float>({2, -1}), 0.0)), {6 / rms, -4 / rms}, 1e-6);
  // eps enters under the square root: a constant row gives 0, and rms of zeros stays 0.
  check_close(values_of(layer_norm(full({2, 3}, 5.0f), 3)), std::vector<double>(6, 0.0), 0);
  check_close(values_of(rms_norm(zeros({1, 3}))), std::vector<double>(3, 0.0), 0);
  // No rows: an empty output, and zero gradients for weight and bias.
  Tensor none = zeros({0, 4}).requires_grad_();
  Tensor w4 = ones({4}).requires_grad_();
  Tensor b4 = ones({4}).requires_grad_();
  Tensor y0 = layer_norm(none, 4, w4, b4);
  CHECK(y0.sizes() == Shape{0, 4});
  y0.backward(zeros({0, 4}));
  CHECK(w4.grad().to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(b4.grad().to_vector<float>() == std::vector<float>(4, 0.0f));
}

TEST_CASE("layer_norm and rms_norm match a double reference on random and non-contiguous input", "[nn]") {
  Generator gen(7);
  for (bool layer : {true, false}) {
    for (bool affine : {false, true}) {
      CAPTURE(layer, affine);
      // [3, 40, 33] transposed to [3, 33, 40]: normalised over a strided last dim.
      Tensor base = randn({3, 40, 33}, {.dtype = DType::f32}, &gen);
      Tensor x = base.transpose(1, 2);
      Tensor w = affine ? randn({40}, {}, &gen) : Tensor();
      Tensor b = affine && layer ? randn({40}, {}, &gen) : Tensor();
      Tensor y = layer ? layer_norm(x, 40, w, b, 1e-5) : rms_norm(x, w, 1e-6);
      CHECK(y.sizes() == Shape{3, 33, 40});
      CHECK(y.is_contiguous());
      const auto want = reference(layer, values_of(x), 40, w.defined() ? values_of(w) : std::vector<double>{},
                                  b.defined() ? values_of(b) : std::vector<double>{}, layer ? 1e-5 : 1e-6);
      check_close(values_of(y), want, 1e-5);
    }
  }
  // Many rows: the forward runs across threads and agrees with one thread bitwise.
  Tensor big = randn({300, 257}, {}, &gen);
  Tensor y2, y1;
  {
    ThreadCount two(2);
    y2 = layer_norm(big, 257);
  }
  {
    ThreadCount one(1);
    y1 = layer_norm(big, 257);
  }
  CHECK(y1.to_vector<float>() == y2.to_vector<float>());
  check_close(values_of(y2), reference(true, values_of(big), 257, {}, {}, 1e-5), 1e-5);
}

TEST_CASE("layer_norm and rms_norm in bf16 and f16 stay within 2 percent of the f64 reference", "[nn]") {
  // Tolerance: inputs are rounded to the half type first (the reference sees the
  // same rounded values); the output is rounded once from float, a relative error
  // of 2^-9 (bf16) or 2^-12 (f16); 0.02 relative plus 0.02 absolute is ample.
  Generator gen(11);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor x = randn({16, 96}, {.dtype = dtype}, &gen);
    Tensor w = randn({96}, {.dtype = dtype}, &gen);
    Tensor b = randn({96}, {.dtype = dtype}, &gen);
    Tensor y = layer_norm(x, 96, w, b);
    CHECK(y.dtype() == dtype);
    check_close(values_of(y), reference(true, values_of(x), 96, values_of(w), values_of(b), 1e-5), 0.02);
    Tensor z = rms_norm(x, w);
    check_close(values_of(z), reference(false, values_of(x), 96, values_of(w), {}, 1e-6), 0.02);
  }
}

TEST_CASE("gradcheck of layer_norm and rms_norm for x, weight and bias", "[nn]") {
  Generator gen(3);
  auto f64 = TensorOptions{.dtype = DType::f64};
  Tensor x = randn({2, 3, 5}, f64, &gen).requires_grad_();
  Tensor w = randn({5}, f64, &gen).requires_grad_();
  Tensor b = randn({5}, f64, &gen).requires_grad_();
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], 5, in[1], in[2]); },
                           {x, w, b}) == "");
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], 5); }, {x}) == "");
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }, {x, w}) == "");
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0]); }, {x}) == "");
  // Non-contiguous x, and only the parameters requiring grad.
  Tensor xt = randn({6, 4}, f64, &gen).t().detach().requires_grad_();  // [4, 6], strided
  Tensor w6 = randn({6}, f64, &gen).requires_grad_();
  Tensor b6 = randn({6}, f64, &gen).requires_grad_();
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], 6, in[1], in[2]); },
                           {xt, w6, b6}) == "");
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }, {xt, w6}) == "");
  Tensor frozen = randn({4, 6}, f64, &gen);
  CHECK(testing::gradcheck([&](const std::vector<Tensor>& in) { return layer_norm(frozen, 6, in[0], in[1]); },
                           {w6, b6}) == "");
}

TEST_CASE("layer_norm backward reductions are bitwise the same for 1 and 2 threads", "[nn]") {
  Generator gen(5);
  Tensor x = randn({512, 160}, {}, &gen);
  Tensor w = randn({160}, {}, &gen);
  Tensor b = randn({160}, {}, &gen);
  Tensor dy = randn({512, 160}, {}, &gen);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(), bl = b.detach().requires_grad_();
    layer_norm(xl, 160, wl, bl).backward(dy);
    Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
    rms_norm(xr, wr).backward(dy);
    return std::vector<std::vector<float>>{xl.grad().to_vector<float>(), wl.grad().to_vector<float>(),
                                           bl.grad().to_vector<float>(), xr.grad().to_vector<float>(),
                                           wr.grad().to_vector<float>()};
  };
  const auto one = run(1);
  CHECK(one == run(2));
  // dbias is the column sum of dy.
  const std::vector<double> d = values_of(dy);
  for (int64_t c = 0; c < 160; c += 37) {
    double s = 0;
    for (int64_t r = 0; r < 512; ++r) s += d[r * 160 + c];
    CHECK(one[2][c] == Approx(s).epsilon(1e-5).margin(1e-4));
  }
}

TEST_CASE("layer_norm and rms_norm on meta give meta outputs, and bad input gives clear errors", "[nn]") {
  Tensor m = empty({4, 8}, {.device = Device::meta()});
  Tensor y = layer_norm(m, 8, empty({8}, {.device = Device::meta()}));
  CHECK(y.device().is_meta());
  CHECK(y.sizes() == Shape{4, 8});
  CHECK(rms_norm(m).sizes() == Shape{4, 8});

  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(layer_norm(x, 4),
                    Catch::Contains("layer_norm: normalized_size is 4 but the last dim of x (shape [2, 3]) has size 3"));
  CHECK_THROWS_WITH(layer_norm(x, 3, zeros({4})),
                    Catch::Contains("layer_norm: weight must have shape [3] (the size of the last dim of x, "
                                    "which is [2, 3]), got [4]"));
  CHECK_THROWS_WITH(layer_norm(x, 3, zeros({3}), zeros({1, 3})),
                    Catch::Contains("layer_norm: bias must have shape [3]"));
  CHECK_THROWS_WITH(rms_norm(x, zeros({2})), Catch::Contains("rms_norm: weight must have shape [3]"));
  CHECK_THROWS_WITH(rms_norm(x, zeros({3}, {.dtype = DType::f64})),
                    Catch::Contains("rms_norm: weight has dtype f64, expected x's dtype f32"));
  CHECK_THROWS_WITH(layer_norm(zeros({2, 3}, {.dtype = DType::i64}), 3),
                    Catch::Contains("layer_norm: expected x of a floating dtype (f32, f64, bf16, f16), got i64"));
  CHECK_THROWS_WITH(rms_norm(zeros({})), Catch::Contains("rms_norm: expected x with at least 1 dim"));
  CHECK_THROWS_WITH(rms_norm(x, zeros({3}, {.device = Device::meta()})),
                    Catch::Contains("rms_norm: weight is on meta, expected x's device cpu"));
}
