// Autograd of the matrix products (matmul, mm, bmm, addmm), the reductions (sum,
// mean, max, min) and softmax / log_softmax: finite-difference gradchecks in f64
// over odd shapes, broadcasting, 1-D promotions and non-contiguous inputs; ties of
// max/min against hand-computed gradients; a two-layer MLP against gradients
// derived by hand; argmax never requiring grad; saved tensors freed by backward.
// Only ops that are differentiable here are used on the graph: views, the matmul
// family, reductions and softmax.
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/autograd/node.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/softmax.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

using Inputs = std::vector<Tensor>;

Tensor random64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {.dtype = DType::f64}, &gen);
}

// A leaf that requires grad, with t's values and layout (t may be a strided view).
Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(); }
Tensor leaf(const Shape& shape, uint64_t seed) { return leaf(random64(shape, seed)); }

void check_grad_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

}  // namespace

// ------------------------------------------------------------------ matmul family

TEST_CASE("matmul gradients match finite differences for every rank combination", "[autograd][matmul]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},             {{3}, {3, 4}},          {{4, 3}, {3}},         {{3}, {2, 3, 4}},
      {{2, 4, 3}, {3}},       {{3, 5}, {5, 2}},       {{2, 1, 3, 4}, {3, 4, 5}},
      {{4, 3, 5}, {5, 2}},    {{3, 5}, {2, 5, 4}},    {{1, 2, 3}, {4, 3, 2}},
      {{5, 1, 2, 3}, {1, 4, 3, 2}}, {{2, 1, 3}, {3}},
  };
  uint64_t seed = 10;
  for (const auto& [sa, sb] : cases) {
    INFO("a " << shape_str(sa) << " . b " << shape_str(sb));
    Tensor a = leaf(sa, ++seed), b = leaf(sb, ++seed);
    CHECK(testing::gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b}) == "");
    CHECK(a.grad().sizes() == sa);
    CHECK(b.grad().sizes() == sb);
  }
}

TEST_CASE("matmul gradients flow through transposed, sliced and permuted operands", "[autograd][matmul]") {
  Tensor a = leaf(random64({5, 3}, 1).t());                         // [3, 5], column-major
  Tensor b = leaf(random64({5, 8}, 2).slice(1, 1, 8, 2));          // [5, 4], column stride 2
  CHECK(testing::gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b}) == "");
  Tensor batched = leaf(random64({3, 2, 4}, 3).permute({1, 2, 0}));  // [2, 4, 3]
  Tensor w = leaf(random64({6, 3}, 4).t());                         // [3, 6]
  CHECK(testing::gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {batched, w}) == "");
  Tensor v = leaf(random64({8}, 5).slice(0, 0, 8, 2));  // [4], stride 2
  Tensor m = leaf(random64({2, 4, 3}, 6).transpose(0, 2));  // [3, 4, 2]
  CHECK(testing::gradcheck([](const Inputs& in) { return matmul(in[0], in[1]); }, {v, m}) == "");
  CHECK(testing::gradcheck([](const Inputs& in) { return matmul(in[1].transpose(-1, -2), in[0]); },
                           {v, m}) == "");
}

// A Linear reads its weight [out, in] as weight.t(): the product's gradient for that
// operand must come back in the same column-major layout (so that the transpose's
// backward hands the weight a contiguous gradient), with the values of g^T x.
TEST_CASE("the gradient of a transposed matrix operand comes back in its layout", "[autograd][matmul]") {
  Tensor x = leaf({2, 3, 4}, 1), w = leaf({5, 4}, 2);
  Tensor y = matmul(x, w.t());
  Tensor g = random64({2, 3, 5}, 3);
  std::vector<Tensor> grads = y.grad_fn()->apply({g});
  REQUIRE(grads.size() == 2);
  const Tensor& gw_t = grads[1];  // the gradient of w.t(), [4, 5]
  REQUIRE(gw_t.sizes() == Shape{4, 5});
  CHECK(gw_t.strides() == Shape{1, 4});
  CHECK(gw_t.t().is_contiguous());
  const std::vector<double> xv = values_of(x), gv = values_of(g), got = values_of(gw_t);
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 5; ++o) {
      double want = 0;  // sum over the 6 rows of x[r, i] g[r, o]
      for (int r = 0; r < 6; ++r) want += xv[r * 4 + i] * gv[r * 5 + o];
      CHECK(got[i * 5 + o] == Approx(want).epsilon(1e-12));
    }
  }
  // A transposed left operand of a 2-D product likewise: grad of a = x2.t() is [3, 6] column-major.
  Tensor a = leaf(random64({6, 3}, 4).t()), b = leaf({6, 2}, 5);
  Tensor h = random64({3, 2}, 6);
  std::vector<Tensor> mm_grads = mm(a, b).grad_fn()->apply({h});
  CHECK(mm_grads[0].strides() == Shape{1, 3});
  const std::vector<double> bv = values_of(b), hv = values_of(h), ga = values_of(mm_grads[0]);
  for (int m = 0; m < 3; ++m) {
    for (int k = 0; k < 6; ++k) {
      const double want = hv[m * 2] * bv[k * 2] + hv[m * 2 + 1] * bv[k * 2 + 1];
      CHECK(ga[m * 6 + k] == Approx(want).epsilon(1e-12));
    }
  }
}

TEST_CASE("mm and bmm gradients match finite differences, with transposed views", "[autograd][matmul]") {
  Tensor a = leaf({3, 7}, 1), b = leaf(random64({2, 7}, 2).t());
  CHECK(testing::gradcheck([](const Inputs& in) { return mm(in[0], in[1]); }, {a, b}) == "");
  Tensor x = leaf(random64({4, 3, 2}, 3).transpose(1, 2)), y = leaf({4, 3, 5}, 4);
  CHECK(testing::gradcheck([](const Inputs& in) { return bmm(in[0], in[1]); }, {x, y}) == "");
  Tensor z = leaf(random64({5, 3, 4}, 5).permute({1, 2, 0}));  // [3, 4, 5] -> bmm needs [3, 5, k]
  CHECK(testing::gradcheck([](const Inputs& in) { return bmm(in[0].transpose(1, 2), in[1]); },
                           {z, leaf({3, 4, 2}, 6)}) == "");
  CHECK(mm(a, b).grad_fn()->name() == "MmBackward");
  CHECK(bmm(x, y).grad_fn()->name() == "BmmBackward");
}

TEST_CASE("addmm gradients cover the broadcast of c and the beta and alpha scales", "[autograd][matmul]") {
  const std::vector<Shape> c_shapes = {{5}, {3, 1}, {3, 5}, {1, 1}, {}};
  uint64_t seed = 40;
  for (const Shape& cs : c_shapes) {
    INFO("c " << shape_str(cs));
    Tensor c = leaf(cs, ++seed), a = leaf({3, 4}, ++seed), b = leaf(random64({5, 4}, ++seed).t());
    CHECK(testing::gradcheck([](const Inputs& in) { return addmm(in[0], in[1], in[2]); }, {c, a, b}) == "");
    CHECK(testing::gradcheck([](const Inputs& in) { return addmm(in[0], in[1], in[2], 0.5, -2); },
                             {c, a, b}) == "");
  }
  // beta == 0: c's values are ignored, so its gradient is zero.
  Tensor c = leaf({3, 5}, 1), a = leaf({3, 4}, 2), b = leaf({4, 5}, 3);
  addmm(c, a, b, 0, 3).backward(ones({3, 5}, {.dtype = DType::f64}));
  CHECK(values_of(c.grad()) == std::vector<double>(15, 0.0));
  CHECK(a.grad().sizes() == Shape{3, 4});
}

TEST_CASE("matmul gives a gradient only to the operands that require one", "[autograd][matmul]") {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor b = from_vector<double>({5, 6, 7, 8}, {2, 2});
  Tensor out = matmul(a, b);
  REQUIRE(out.requires_grad());
  CHECK(out.grad_fn()->name() == "MatmulBackward");
  out.backward(ones({2, 2}, {.dtype = DType::f64}));
  // grad_a = g . b^T with g all ones: each row is (5 + 6, 7 + 8).
  CHECK(values_of(a.grad()) == std::vector<double>{11, 15, 11, 15});
  CHECK_FALSE(b.grad().defined());
  // 1-D . 1-D: the gradient of a dot product is the other vector.
  Tensor u = from_vector<double>({1, 2, 3}).requires_grad_(), w = from_vector<double>({4, 5, 6});
  matmul(u, w).backward();
  CHECK(values_of(u.grad()) == std::vector<double>{4, 5, 6});
  {
    NoGradGuard no_grad;
    CHECK_FALSE(matmul(a, b).requires_grad());
  }
}

// ------------------------------------------------------------------ reductions

TEST_CASE("sum and mean gradients over the whole tensor and dim lists, keepdim both ways", "[autograd][reduce]") {
  Tensor x = leaf(random64({4, 3, 5}, 7).slice(0, 0, 4, 2));  // [2, 3, 5], non-contiguous
  CHECK(testing::gradcheck([](const Inputs& in) { return sum(in[0]); }, {x}) == "");
  CHECK(testing::gradcheck([](const Inputs& in) { return mean(in[0]); }, {x}) == "");
  const std::vector<std::vector<int64_t>> dim_lists = {{}, {0}, {-1}, {0, 2}, {2, 1}, {0, 1, 2}};
  for (bool keepdim : {false, true}) {
    for (const auto& dims : dim_lists) {
      INFO("dims " << shape_str(dims) << " keepdim " << keepdim);
      CHECK(testing::gradcheck([&](const Inputs& in) { return sum(in[0], dims, keepdim); }, {x}) == "");
      CHECK(testing::gradcheck([&](const Inputs& in) { return mean(in[0], dims, keepdim); }, {x}) == "");
    }
  }
  // Hand-checked: mean over dim 1 of a [2, 3] spreads g / 3 along each row.
  Tensor y = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  mean(y, {1}).backward(from_vector<double>({3, 6}));
  CHECK(values_of(y.grad()) == std::vector<double>{1, 1, 1, 2, 2, 2});
  Tensor s = scalar_tensor(2.5, DType::f64).requires_grad_();  // 0-d, dim 0 reduces nothing
  sum(s, {0}).backward();
  CHECK(s.grad().item() == 1.0);
}

TEST_CASE("max and min over a dim match finite differences for each dim and keepdim", "[autograd][reduce]") {
  Tensor x = leaf(random64({2, 4, 3}, 8).permute({2, 1, 0}));  // [3, 4, 2], distinct values
  for (bool keepdim : {false, true}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      INFO("dim " << dim << " keepdim " << keepdim);
      CHECK(testing::gradcheck([&](const Inputs& in) { return max(in[0], dim, keepdim); }, {x}) == "");
      CHECK(testing::gradcheck([&](const Inputs& in) { return min(in[0], dim, keepdim); }, {x}) == "");
    }
  }
}

TEST_CASE("max and min over a dim send the gradient to the first tied extreme", "[autograd][reduce]") {
  Tensor t = from_vector<double>({1, 3, 3, 2, 2, 1}, {2, 3}).requires_grad_();
  Tensor m = max(t, 1);
  CHECK(m.grad_fn()->name() == "MaxDimBackward");
  m.backward(from_vector<double>({10, 20}));
  CHECK(values_of(t.grad()) == std::vector<double>{0, 10, 0, 20, 0, 0});
  t.set_grad(Tensor());
  // Column minima: col 0 -> row 0 (1 < 2), col 1 -> row 1 (2 < 3), col 2 -> row 1 (1 < 3).
  min(t, 0, /*keepdim=*/true).backward(from_vector<double>({1, 2, 3}, {1, 3}));
  CHECK(values_of(t.grad()) == std::vector<double>{1, 0, 0, 0, 2, 3});
  Tensor ties = from_vector<double>({4, 1, 4, 1}, {2, 2}).requires_grad_();
  min(ties, 0).backward(from_vector<double>({5, 7}));
  CHECK(values_of(ties.grad()) == std::vector<double>{5, 7, 0, 0});
  ties.set_grad(Tensor());
  max(ties, -1, true).backward(from_vector<double>({5, 7}, {2, 1}));
  CHECK(values_of(ties.grad()) == std::vector<double>{5, 0, 7, 0});
}

TEST_CASE("whole-tensor max and min split the gradient evenly among ties", "[autograd][reduce]") {
  Tensor t = from_vector<double>({1, 5, 5, 2, 5}).requires_grad_();
  max(t).backward();
  check_grad_close(values_of(t.grad()), {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3});
  Tensor u = from_vector<double>({2, 1, 1, 3}, {2, 2}).requires_grad_();
  Tensor m = min(u);
  CHECK(m.grad_fn()->name() == "MinBackward");
  m.backward(scalar_tensor(6.0, DType::f64));
  CHECK(values_of(u.grad()) == std::vector<double>{0, 3, 3, 0});
  // A NaN maximum: the gradient goes to the NaNs.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor v = from_vector<double>({1, nan, 3, nan}).requires_grad_();
  max(v).backward();
  CHECK(values_of(v.grad()) == std::vector<double>{0, 0.5, 0, 0.5});
  Tensor x = leaf(random64({4, 3}, 9).t());
  CHECK(testing::gradcheck([](const Inputs& in) { return max(in[0]); }, {x}) == "");
  CHECK(testing::gradcheck([](const Inputs& in) { return min(in[0]); }, {x}) == "");
}

TEST_CASE("argmax results never require grad while the values do", "[autograd][reduce]") {
  Tensor x = leaf({3, 4}, 11);
  Tensor flat = argmax(x), per_row = argmax(x, 1), kept = argmax(x, 0, true);
  for (const Tensor& idx : {flat, per_row, kept}) {
    CHECK(idx.dtype() == DType::i64);
    CHECK_FALSE(idx.requires_grad());
    CHECK(idx.grad_fn() == nullptr);
  }
  CHECK(max(x, 1).requires_grad());
  CHECK(sum(x).grad_fn()->name() == "SumBackward");
  CHECK(mean(x, {0}).grad_fn()->name() == "MeanBackward");
  Tensor ints = arange(6, {.dtype = DType::i64}).view({2, 3});
  CHECK_FALSE(sum(ints, {1}).requires_grad());
}

// ------------------------------------------------------------------ softmax

TEST_CASE("softmax and log_softmax gradients along every dim of a non-contiguous input", "[autograd][softmax]") {
  Tensor x = leaf(random64({4, 3, 5}, 12).permute({2, 0, 1}));  // [5, 4, 3]
  for (int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    CHECK(testing::gradcheck([&](const Inputs& in) { return softmax(in[0], dim); }, {x}) == "");
    CHECK(testing::gradcheck([&](const Inputs& in) { return log_softmax(in[0], dim); }, {x}) == "");
  }
  CHECK(softmax(x, 1).grad_fn()->name() == "SoftmaxBackward");
  CHECK(log_softmax(x).grad_fn()->name() == "LogSoftmaxBackward");
  // A 0-d input: softmax is the constant 1 and log_softmax 0, so the gradient is 0.
  Tensor s = scalar_tensor(3.0, DType::f64).requires_grad_();
  softmax(s).backward();
  CHECK(s.grad().item() == 0.0);
  s.set_grad(Tensor());
  log_softmax(s, 0).backward();
  CHECK(s.grad().item() == 0.0);
}

// ------------------------------------------------------------------ together

TEST_CASE("a two-layer MLP log-likelihood has the hand-derived gradients", "[autograd][matmul][softmax]") {
  // h = softmax(x W1 + b1), lp = log_softmax(h W2 + b2), L = mean_i lp[i, y_i]; the
  // biases broadcast over rows through addmm, and lp[i, y_i] is a batched dot
  // product of lp's row i with a one-hot row.
  const int64_t n = 4, d = 3, hidden = 5, classes = 3;
  const std::vector<int> label = {0, 2, 1, 2};
  Tensor x = random64({n, d}, 20);
  Tensor w1 = leaf({d, hidden}, 21), b1 = leaf({hidden}, 22);
  Tensor w2 = leaf({hidden, classes}, 23), b2 = leaf({classes}, 24);
  std::vector<double> onehot_v(n * classes, 0.0);
  for (int64_t i = 0; i < n; ++i) onehot_v[i * classes + label[i]] = 1;
  Tensor onehot = from_vector<double>(onehot_v, {n, classes});

  Tensor h = softmax(addmm(b1, x, w1), 1);
  Tensor lp = log_softmax(addmm(b2, h, w2), 1);
  Tensor loss = mean(matmul(lp.unsqueeze(1), onehot.unsqueeze(2)));
  loss.backward();

  // The same by hand, in plain loops.
  const std::vector<double> X = values_of(x), W1 = values_of(w1), B1 = values_of(b1), W2 = values_of(w2), B2 = values_of(b2);
  std::vector<double> H(n * hidden), P(n * classes);
  double L = 0;
  for (int64_t i = 0; i < n; ++i) {
    double hmax = -INFINITY, hsum = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      double z = B1[j];
      for (int64_t k = 0; k < d; ++k) z += X[i * d + k] * W1[k * hidden + j];
      H[i * hidden + j] = z;
      hmax = std::max(hmax, z);
    }
    for (int64_t j = 0; j < hidden; ++j) hsum += H[i * hidden + j] = std::exp(H[i * hidden + j] - hmax);
    for (int64_t j = 0; j < hidden; ++j) H[i * hidden + j] /= hsum;
    double zmax = -INFINITY, zsum = 0;
    std::vector<double> z(classes);
    for (int64_t c = 0; c < classes; ++c) {
      z[c] = B2[c];
      for (int64_t j = 0; j < hidden; ++j) z[c] += H[i * hidden + j] * W2[j * classes + c];
      zmax = std::max(zmax, z[c]);
    }
    for (int64_t c = 0; c < classes; ++c) zsum += std::exp(z[c] - zmax);
    for (int64_t c = 0; c < classes; ++c) P[i * classes + c] = std::exp(z[c] - zmax) / zsum;
    L += (z[label[i]] - zmax - std::log(zsum)) / n;
  }
  std::vector<double> dW2(hidden * classes, 0.0), dB2(classes, 0.0), dW1(d * hidden, 0.0), dB1(hidden, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> dz2(classes), dh(hidden, 0.0), dz1(hidden);
    for (int64_t c = 0; c < classes; ++c) dz2[c] = (onehot_v[i * classes + c] - P[i * classes + c]) / n;
    for (int64_t c = 0; c < classes; ++c) {
      dB2[c] += dz2[c];
      for (int64_t j = 0; j < hidden; ++j) {
        dW2[j * classes + c] += H[i * hidden + j] * dz2[c];
        dh[j] += dz2[c] * W2[j * classes + c];
      }
    }
    double dot = 0;
    for (int64_t j = 0; j < hidden; ++j) dot += dh[j] * H[i * hidden + j];
    for (int64_t j = 0; j < hidden; ++j) {
      dz1[j] = H[i * hidden + j] * (dh[j] - dot);
      dB1[j] += dz1[j];
      for (int64_t k = 0; k < d; ++k) dW1[k * hidden + j] += X[i * d + k] * dz1[j];
    }
  }
  CHECK(loss.item() == Approx(L).epsilon(1e-12));
  check_grad_close(values_of(w1.grad()), dW1);
  check_grad_close(values_of(b1.grad()), dB1);
  check_grad_close(values_of(w2.grad()), dW2);
  check_grad_close(values_of(b2.grad()), dB2);
}

TEST_CASE("saved tensors are freed by backward and a second backward is a clear error", "[autograd][matmul][softmax]") {
  const Device cpu = Device::cpu();
  Tensor x = leaf({64, 32}, 30), w = leaf({32, 16}, 31);
  const int64_t before = memory_stats(cpu)[MemoryTag::activation].current_bytes;
  Tensor loss;
  {
    MemoryTagGuard tag(MemoryTag::activation);
    // softmax's output is held only by the graph: saved by SoftmaxBackward and,
    // as matmul's a, by MatmulBackward. matmul's own output is saved by nobody.
    loss = sum(matmul(softmax(x, 1), w));
  }
  const int64_t softmax_bytes = 64 * 32 * 8, loss_bytes = 8;
  CHECK(memory_stats(cpu)[MemoryTag::activation].current_bytes - before == softmax_bytes + loss_bytes);
  loss.backward();
  CHECK(memory_stats(cpu)[MemoryTag::activation].current_bytes - before == loss_bytes);
  CHECK(x.grad().sizes() == Shape{64, 32});
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("backward through the graph a second time"));
  // retain_graph keeps them for a second pass, which accumulates.
  Tensor y = leaf({3, 4}, 32);
  Tensor out = max(log_softmax(y, 0), 1);
  out.backward(ones({3}, {.dtype = DType::f64}), /*retain_graph=*/true);
  const std::vector<double> first = values_of(y.grad());
  out.backward(ones({3}, {.dtype = DType::f64}));
  std::vector<double> doubled = first;
  for (double& v : doubled) v *= 2;
  check_grad_close(values_of(y.grad()), doubled);
}

TEST_CASE("linear matches x W^T + b and passes gradcheck", "[autograd][matmul]") {
  dtr::manual_seed(9);
  Tensor x = randn({2, 3, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor w = randn({5, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({5}, {.dtype = DType::f64}).requires_grad_();
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> y = linear(x, w, b).to_vector<double>();
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      double ref = bv[o];
      for (int i = 0; i < 4; ++i) ref += xv[r * 4 + i] * wv[o * 4 + i];
      CHECK(y[r * 5 + o] == Approx(ref).epsilon(1e-12));
    }
  CHECK(testing::gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}) == "");
  CHECK_THROWS_WITH(linear(x, w.t()), Catch::Contains("input's last dim must be in_features 5"));
}

TEST_CASE("linear with a GELU epilogue is gelu of the linear, and passes gradcheck", "[autograd][matmul]") {
  dtr::manual_seed(10);
  Tensor x = randn({2, 3, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor w = randn({5, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({5}, {.dtype = DType::f64}).requires_grad_();
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (LinearActivation act : {LinearActivation::gelu_tanh, LinearActivation::gelu_erf}) {
    INFO("activation " << static_cast<int>(act));
    std::vector<double> y = linear(x, w, b, act).to_vector<double>();
    for (int r = 0; r < 6; ++r) {
      for (int o = 0; o < 5; ++o) {
        double v = bv[o];
        for (int i = 0; i < 4; ++i) v += xv[r * 4 + i] * wv[o * 4 + i];
        const double ref = act == LinearActivation::gelu_tanh
                               ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                               : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        CHECK(y[r * 5 + o] == Approx(ref).epsilon(1e-12).margin(1e-14));
      }
    }
    auto f = [act](const Inputs& in) { return linear(in[0], in[1], in[2], act); };
    CHECK(testing::gradcheck(f, {x, w, b}) == "");
    // No bias, a 1-D input, and an input read through strides.
    CHECK(testing::gradcheck([act](const Inputs& in) { return linear(in[0], in[1], Tensor(), act); }, {x, w}) == "");
    Tensor x1 = randn({4}, {.dtype = DType::f64}).requires_grad_();
    CHECK(testing::gradcheck(f, {x1, w, b}) == "");
    Tensor xt = randn({4, 3}, {.dtype = DType::f64}).requires_grad_();
    CHECK(testing::gradcheck([act](const Inputs& in) { return linear(in[0].t(), in[1], in[2], act); }, {xt, w, b}) ==
          "");
  }
}

TEST_CASE("linear's fused GELU equals the gelu op on its rounded pre-activation, bit for bit", "[autograd][matmul]") {
  dtr::manual_seed(11);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    // Enough rows, columns and depth for the threaded and tiled GEMM paths.
    Tensor x = randn({3, 70, 96}).to(dtype);
    Tensor w = (randn({300, 96}) * 0.2).to(dtype);
    Tensor b = randn({300}).to(dtype);
    const Tensor pre = linear(x, w, b);
    const Tensor fused = linear(x, w, b, LinearActivation::gelu_tanh);
    const Tensor separate = gelu(pre, GeluApproximation::tanh);
    REQUIRE(fused.sizes() == Shape{3, 70, 300});
    CHECK(std::memcmp(fused.raw_data(), separate.raw_data(), fused.nbytes()) == 0);
    const Tensor fused_erf = linear(x, w, b, LinearActivation::gelu_erf);
    const Tensor separate_erf = gelu(pre);
    CHECK(std::memcmp(fused_erf.raw_data(), separate_erf.raw_data(), fused.nbytes()) == 0);
  }
}

TEST_CASE("linear with no output features or no input features (a tensor-parallel rank's share)",
          "[autograd][matmul]") {
  Tensor x = randn({2, 3, 4}).requires_grad_();
  Tensor w0 = randn({0, 4}).requires_grad_();
  Tensor y0 = linear(x, w0, Tensor(), LinearActivation::gelu_tanh);
  CHECK(y0.sizes() == Shape{2, 3, 0});
  sum(y0).backward();
  CHECK(x.grad().sizes() == x.sizes());
  CHECK(sum(abs(x.grad())).item<float>() == 0);
  CHECK(w0.grad().sizes() == Shape{0, 4});
  // No inputs: the result is the activation of the bias alone.
  Tensor e = randn({2, 0});
  Tensor w = randn({3, 0}), b = from_vector(std::vector<float>{-1, 0, 2}, {3});
  const std::vector<float> y = linear(e, w, b, LinearActivation::gelu_erf).to_vector<float>();
  const std::vector<float> want = gelu(b).to_vector<float>();
  REQUIRE(y.size() == 6);
  for (int i = 0; i < 6; ++i) CHECK(y[i] == want[i % 3]);
}

TEST_CASE("linear's weight gradient comes out contiguous in the weight's layout", "[autograd][matmul]") {
  dtr::manual_seed(12);
  Tensor x = randn({2, 3, 4}).requires_grad_();
  Tensor w = randn({5, 4}).requires_grad_();
  Tensor b = randn({5}).requires_grad_();
  sum(linear(x, w, b, LinearActivation::gelu_tanh)).backward();
  CHECK(w.grad().is_contiguous());
  CHECK(x.grad().sizes() == x.sizes());
  CHECK(b.grad().sizes() == b.sizes());
}
