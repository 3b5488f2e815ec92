// Autograd of the elementwise ops: every op's gradient against finite differences
// (testing::gradcheck, in f64) with broadcast, 0-d and non-contiguous inputs kept
// away from non-differentiable points; those points (relu and abs at 0, maximum and
// minimum ties, pow at 0) against hand-computed values; a small chain against
// gradients written out by hand; dtypes of gradients; what records no graph; and
// the lifetime of saved tensors.
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/autograd/node.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/random.h"
#include "tests/support/gradcheck.h"
#include "tests/support/values.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;
using testing::gradcheck;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

const TensorOptions kF64{.dtype = DType::f64};

// A leaf requiring grad with standard normal values.
Tensor normal_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kF64, &gen).requires_grad_();
}

// A leaf with values uniform in [lo, hi).
Tensor uniform_leaf(const Shape& shape, double lo, double hi, uint64_t seed) {
  Generator gen(seed);
  return (rand(shape, kF64, &gen) * (hi - lo) + lo).requires_grad_();
}

// A leaf with normal values pushed at least 0.2 away from 0 (for relu, abs, division).
Tensor nonzero_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor r = randn(shape, kF64, &gen);
  return where(ge(r, 0), r + 0.2, r - 0.2).requires_grad_();
}

// A transposed (non-contiguous) leaf of shape [rows, cols] with values built by `make`.
Tensor transposed_leaf(int64_t rows, int64_t cols, const std::function<Tensor(const Shape&)>& make) {
  Tensor base = make({cols, rows}).detach();
  Tensor t = base.t();
  t.requires_grad_();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

// A sliced (non-contiguous) leaf: every other row of a [2 * rows, cols] tensor.
Tensor sliced_leaf(int64_t rows, int64_t cols, const std::function<Tensor(const Shape&)>& make) {
  Tensor base = make({rows, 2 * cols}).detach();
  Tensor t = base.narrow(1, 1, cols);
  t.requires_grad_();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

Tensor grad_of(const Tensor& leaf, const Tensor& out, const Tensor& grad_out) {
  leaf.set_grad(Tensor());
  out.backward(grad_out);
  return leaf.grad();
}

}  // namespace

TEST_CASE("gradcheck of every unary op on contiguous and non-contiguous inputs", "[autograd][elementwise]") {
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> op;
    std::function<Tensor(const Shape&)> make;  // values where the op is smooth
  };
  auto normal = [](const Shape& s) { return normal_leaf(s, 11).detach(); };
  auto positive = [](const Shape& s) { return uniform_leaf(s, 0.3, 2.5, 12).detach(); };
  auto nonzero = [](const Shape& s) { return nonzero_leaf(s, 13).detach(); };
  auto wide = [](const Shape& s) { return uniform_leaf(s, -6, 6, 14).detach(); };
  std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, normal},
      {"operator-", [](const Tensor& x) { return -x; }, normal},
      {"abs", [](const Tensor& x) { return abs(x); }, nonzero},
      {"exp", [](const Tensor& x) { return exp(x); }, normal},
      {"log", [](const Tensor& x) { return log(x); }, positive},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, positive},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, positive},
      {"square", [](const Tensor& x) { return square(x); }, normal},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, nonzero},
      {"sin", [](const Tensor& x) { return sin(x); }, wide},
      {"cos", [](const Tensor& x) { return cos(x); }, wide},
      {"tanh", [](const Tensor& x) { return tanh(x); }, normal},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, wide},
      {"relu", [](const Tensor& x) { return relu(x); }, nonzero},
      {"gelu erf", [](const Tensor& x) { return gelu(x); }, wide},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, wide},
      {"silu", [](const Tensor& x) { return silu(x); }, wide},
  };
  for (const Case& c : cases) {
    Fn fn = [&](const std::vector<Tensor>& in) { return c.op(in[0]); };
    INFO(c.name);
    CHECK(gradcheck(fn, {c.make({3, 4}).requires_grad_()}) == "");
    CHECK(gradcheck(fn, {transposed_leaf(3, 4, c.make)}) == "");
    CHECK(gradcheck(fn, {sliced_leaf(3, 4, c.make)}) == "");
    CHECK(gradcheck(fn, {c.make({}).requires_grad_()}) == "");
  }
}

TEST_CASE("gelu gradients hold at 0, near 0 and in both tails", "[autograd][elementwise]") {
  Tensor x = from_vector<double>({-9, -5, -1e-3, 0, 1e-25, 1e-3, 0.5, 5, 9}).requires_grad_();
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x}) == "");
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0], GeluApproximation::tanh); },
                  {x}) == "");
  // gelu'(0) = 0.5 for both; exact formula at 1: Phi(1) + phi(1).
  Tensor y = from_vector<double>({0, 1}).requires_grad_();
  Tensor g = grad_of(y, gelu(y), ones({2}, kF64));
  std::vector<double> gv = values_of(g);
  const double phi1 = std::exp(-0.5) / std::sqrt(2 * 3.14159265358979323846);
  const double cdf1 = 0.5 * std::erfc(-1 / std::sqrt(2.0));
  CHECK(gv[0] == Approx(0.5).margin(1e-15));
  CHECK(gv[1] == Approx(cdf1 + phi1).epsilon(1e-14));
}

TEST_CASE("gradcheck of every binary op with broadcasting and 0-d operands", "[autograd][elementwise]") {
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    double a_lo, a_hi, b_lo, b_hi;  // value ranges keeping each op smooth
  };
  std::vector<Case> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, -2, 2, -2, 2},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, -2.5); }, -2, 2, -2, 2},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, -2, 2, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, -2, 2, -2, 2},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, -2, 2, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, -2, 2, -2, 2},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, -2, 2, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, -2, 2, 0.5, 2},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, -2, 2, -2, -0.5},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.3, 2.5, -2, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -2, 2, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -2, 2, -2, 2},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{4, 1, 3}, {5, 1}}, {{5, 1}, {4, 1, 3}}, {{2, 3}, {}}, {{}, {2, 3}}, {{}, {}}};
  for (const Case& c : cases) {
    Fn fn = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = uniform_leaf(sa, c.a_lo, c.a_hi, 21);
      Tensor b = uniform_leaf(sb, c.b_lo, c.b_hi, 22);
      CHECK(gradcheck(fn, {a, b}) == "");
      // Only one operand requiring grad.
      CHECK(gradcheck(fn, {a.detach().clone().requires_grad_(), b.detach()}) == "");
    }
    INFO(c.name << " on non-contiguous operands");
    auto make_a = [&](const Shape& s) { return uniform_leaf(s, c.a_lo, c.a_hi, 23).detach(); };
    auto make_b = [&](const Shape& s) { return uniform_leaf(s, c.b_lo, c.b_hi, 24).detach(); };
    CHECK(gradcheck(fn, {transposed_leaf(3, 4, make_a), sliced_leaf(3, 4, make_b)}) == "");
  }
}

TEST_CASE("gradcheck of the Scalar-operand forms and their operators", "[autograd][elementwise]") {
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> cases = {
      {"add(x, s)", [](const Tensor& x) { return add(x, 2.5); }},
      {"add(s, x)", [](const Tensor& x) { return add(2.5, x); }},
      {"x + s", [](const Tensor& x) { return x + 2.5; }},
      {"s + x", [](const Tensor& x) { return 2.5 + x; }},
      {"sub(x, s)", [](const Tensor& x) { return sub(x, 1.5); }},
      {"s - x", [](const Tensor& x) { return 1.5 - x; }},
      {"x - s", [](const Tensor& x) { return x - 1.5; }},
      {"mul(x, s)", [](const Tensor& x) { return mul(x, -3); }},
      {"s * x", [](const Tensor& x) { return 0.75 * x; }},
      {"x * s", [](const Tensor& x) { return x * 0.75; }},
      {"div(x, s)", [](const Tensor& x) { return div(x, 4.0); }},
      {"s / x", [](const Tensor& x) { return 3.0 / x; }},
      {"x / s", [](const Tensor& x) { return x / -2; }},
      {"pow(x, s)", [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow(x, integer s)", [](const Tensor& x) { return pow(x, 3); }},
      {"pow(s, x)", [](const Tensor& x) { return pow(1.7, x); }},
      {"maximum(x, s)", [](const Tensor& x) { return maximum(x, 1.05); }},
      {"maximum(s, x)", [](const Tensor& x) { return maximum(1.05, x); }},
      {"minimum(x, s)", [](const Tensor& x) { return minimum(x, 1.05); }},
      {"minimum(s, x)", [](const Tensor& x) { return minimum(1.05, x); }},
  };
  for (const auto& [name, op] : cases) {
    INFO(name);
    Fn fn = [&op = op](const std::vector<Tensor>& in) { return op(in[0]); };
    CHECK(gradcheck(fn, {uniform_leaf({2, 3}, 0.3, 2, 31)}) == "");
    CHECK(gradcheck(fn, {transposed_leaf(2, 3, [](const Shape& s) {
                           return uniform_leaf(s, 0.3, 2, 32).detach();
                         })}) == "");
  }
  // An integer power of negative bases is smooth too.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 3); },
                  {uniform_leaf({4}, -2, -0.5, 33)}) == "");
}

TEST_CASE("gradcheck of where with broadcasting, and cond gets no edge", "[autograd][elementwise]") {
  Generator gen(41);
  Tensor cond = gt(rand({4, 5, 3}, kF64, &gen), 0.5);
  Fn fn = [&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); };
  CHECK(gradcheck(fn, {normal_leaf({5, 1}, 42), normal_leaf({4, 1, 3}, 43)}) == "");
  CHECK(gradcheck(fn, {normal_leaf({}, 44), normal_leaf({4, 5, 3}, 45)}) == "");
  Fn fn2 = [&](const std::vector<Tensor>& in) { return where(cond.select(0, 1), in[0], in[1]); };
  CHECK(gradcheck(fn2, {transposed_leaf(5, 3, [](const Shape& s) { return normal_leaf(s, 46).detach(); }),
                        normal_leaf({3}, 47)}) == "");

  // Hand-computed: cond [1, 0, 1] routes the gradient [1, 2, 3].
  Tensor a = from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor b = zeros({}, kF64).requires_grad_();
  Tensor y = where(from_vector<uint8_t>({1, 0, 1}), a, b);
  REQUIRE(y.grad_fn()->next_edges().size() == 2);
  y.backward(from_vector<double>({1, 2, 3}));
  CHECK(values_of(a.grad()) == std::vector<double>{1, 0, 3});
  CHECK(values_of(b.grad()) == std::vector<double>{2});
}

TEST_CASE("non-differentiable points follow PyTorch: relu and abs at 0, pow at 0", "[autograd][elementwise]") {
  Tensor x = from_vector<double>({-2, 0, 3}).requires_grad_();
  Tensor g = from_vector<double>({1, 1, 1});
  CHECK(values_of(grad_of(x, relu(x), g)) == std::vector<double>{0, 0, 1});
  CHECK(values_of(grad_of(x, abs(x), g)) == std::vector<double>{-1, 0, 1});
  // d/dx x^2 at 0 is 0; d/dx x^0 is 0 everywhere (even at 0).
  CHECK(values_of(grad_of(x, pow(x, 2), g)) == std::vector<double>{-4, 0, 6});
  CHECK(values_of(grad_of(x, pow(x, 0), g)) == std::vector<double>{0, 0, 0});
  // d/db 0^b is 0 for b >= 0 (not NaN from 0 * log 0); 2^b gives 2^b log 2.
  Tensor base = from_vector<double>({0, 0, 2}).requires_grad_();
  Tensor expo = from_vector<double>({0, 1.5, 3}).requires_grad_();
  pow(base, expo).backward(g);
  CHECK(values_of(expo.grad()) == std::vector<double>{0, 0, 8 * std::log(2.0)});
  CHECK(values_of(base.grad()) == std::vector<double>{0, 0, 12});
}

TEST_CASE("maximum and minimum split the gradient evenly between tied inputs", "[autograd][elementwise]") {
  Tensor a = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  Tensor b = from_vector<double>({1, 5, 0, 4}).requires_grad_();
  Tensor g = from_vector<double>({2, 4, 6, 8});
  maximum(a, b).backward(g);
  CHECK(values_of(a.grad()) == std::vector<double>{1, 0, 6, 4});
  CHECK(values_of(b.grad()) == std::vector<double>{1, 4, 0, 4});
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  minimum(a, b).backward(g);
  CHECK(values_of(a.grad()) == std::vector<double>{1, 4, 0, 4});
  CHECK(values_of(b.grad()) == std::vector<double>{1, 0, 6, 4});
  // The same tensor on both sides: the halves add up to the whole gradient.
  CHECK(values_of(grad_of(a, maximum(a, a), g)) == std::vector<double>{2, 4, 6, 8});
  // A tie with a broadcast scalar: the scalar gets the sum of its halves.
  Tensor s = from_vector<double>({2}).view({}).requires_grad_();
  a.set_grad(Tensor());
  maximum(a, s).backward(g);
  CHECK(values_of(a.grad()) == std::vector<double>{0, 2, 6, 8});
  CHECK(values_of(s.grad()) == std::vector<double>{2 + 4 * 0.5});
}

TEST_CASE("a chain silu(x * w + b) matches gradients written out by hand", "[autograd][elementwise]") {
  const std::vector<double> xv = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75};  // [2, 3]
  const std::vector<double> wv = {0.3, -0.8, 1.2};                   // [3], broadcast over rows
  const double bv = 0.1;                                              // 0-d
  Tensor x = from_vector<double>(xv, {2, 3}).requires_grad_();
  Tensor w = from_vector<double>(wv).requires_grad_();
  Tensor b = scalar_tensor(bv, DType::f64).requires_grad_();
  Tensor y = silu(x * w + b);
  y.backward(ones({2, 3}, kF64));  // the gradient of sum(y)

  std::vector<double> gx(6), gw(3, 0.0);
  double gb = 0;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      const double z = xv[3 * i + j] * wv[j] + bv;
      const double s = 1 / (1 + std::exp(-z));
      const double dz = s * (1 + z * (1 - s));  // silu'(z)
      gx[3 * i + j] = dz * wv[j];
      gw[j] += dz * xv[3 * i + j];
      gb += dz;
    }
  }
  auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-13));
  };
  close(values_of(x.grad()), gx);
  close(values_of(w.grad()), gw);
  close(values_of(b.grad()), {gb});
  CHECK(w.grad().sizes() == Shape{3});
  CHECK(b.grad().sizes() == Shape{});
}

TEST_CASE("gradients of bf16 and f32 forwards have the input dtype and close values", "[autograd][elementwise]") {
  const std::vector<double> xv = {-2.0, -0.5, 0.25, 1.0, 3.0};
  // f64 reference of d/dx sum(gelu(x) * x + sigmoid(x) / 3 + silu(x) * x).
  Tensor ref = from_vector<double>(xv).requires_grad_();
  (gelu(ref) * ref + sigmoid(ref) / 3 + silu(ref) * ref).backward(ones({5}, kF64));
  const std::vector<double> want = values_of(ref.grad());
  for (DType dtype : {DType::bf16, DType::f32, DType::f16}) {
    INFO(fmt::format("{}", dtype));
    Tensor x = from_vector<double>(xv).to(dtype).detach().requires_grad_();
    Tensor y = gelu(x) * x + sigmoid(x) / 3 + silu(x) * x;
    REQUIRE(y.dtype() == dtype);
    y.backward(ones({5}, {.dtype = dtype}));
    REQUIRE(x.grad().dtype() == dtype);
    const double tol = dtype == DType::f32 ? 1e-5 : 3e-2;
    std::vector<double> got = values_of(x.grad().to(DType::f64));
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

TEST_CASE("cast records a backward that returns the gradient in the source dtype", "[autograd][elementwise]") {
  Tensor x = from_vector<float>({0.5F, -1.0F, 2.0F}).requires_grad_();
  Tensor y = exp(cast(x, DType::f64));
  REQUIRE(y.dtype() == DType::f64);
  y.backward(ones({3}, kF64));
  REQUIRE(x.grad().dtype() == DType::f32);
  std::vector<float> g = x.grad().to_vector<float>();
  CHECK(g[0] == Approx(std::exp(0.5)));
  CHECK(g[1] == Approx(std::exp(-1.0)));
  CHECK(g[2] == Approx(std::exp(2.0)));
  // bf16 -> f32 -> bf16.
  Tensor h = from_vector<float>({1.0F, 2.0F}).to(DType::bf16).detach().requires_grad_();
  square(cast(h, DType::f32)).backward(ones({2}));
  REQUIRE(h.grad().dtype() == DType::bf16);
  CHECK(values_of(h.grad().to(DType::f64)) == std::vector<double>{2, 4});
  // A cast to an integer dtype gives a tensor that does not require grad.
  Tensor n = cast(x, DType::i64);
  CHECK_FALSE(n.requires_grad());
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>{0, -1, 2});
  // A cast to its own dtype is the tensor itself, not a recorded copy.
  CHECK(cast(x, DType::f32).storage().is_same(x.storage()));
}

TEST_CASE("comparisons never require grad and plain inputs record nothing", "[autograd][elementwise]") {
  Tensor x = normal_leaf({2, 3}, 51);
  Tensor y = normal_leaf({2, 3}, 52);
  for (const Tensor& c : {eq(x, y), ne(x, 0), lt(x, y), le(x, 1), gt(x, y), ge(y, 0.5)}) {
    CHECK(c.dtype() == DType::u8);
    CHECK_FALSE(c.requires_grad());
    CHECK(c.grad_fn() == nullptr);
  }
  Tensor p = x.detach();
  for (const Tensor& t : {exp(p), p * p, where(gt(p, 0), p, p), pow(2.0, p), gelu(p)}) {
    CHECK_FALSE(t.requires_grad());
    CHECK(t.grad_fn() == nullptr);
  }
  // Integer tensors never require grad, through any op.
  Tensor i = arange(6, {.dtype = DType::i64});
  CHECK(abs(i * i - 3).grad_fn() == nullptr);
  {
    NoGradGuard no_grad;
    CHECK(exp(x).grad_fn() == nullptr);
    CHECK_FALSE((x * y + 1).requires_grad());
  }
  // With grad mode on, nodes carry op names and edges only to differentiable inputs.
  CHECK(exp(x).grad_fn()->name() == "ExpBackward");
  CHECK(gelu(x, GeluApproximation::tanh).grad_fn()->name() == "GeluTanhBackward");
  auto node = mul(x, p).grad_fn();
  REQUIRE(node->name() == "MulBackward");
  CHECK(node->next_edges()[0].valid());
  CHECK_FALSE(node->next_edges()[1].valid());
}

TEST_CASE("saved tensors are freed after backward and guarded against in-place writes", "[autograd][elementwise]") {
  Tensor x = uniform_leaf({3}, 0.5, 2, 61);
  Tensor g = ones({3}, kF64);
  for (const auto& y : {exp(x), x * x, pow(x, x), maximum(x, x * 2), gelu(x), sqrt(x) / x}) {
    y.backward(g, /*retain_graph=*/true);
    y.backward(g);
    CHECK_THROWS_WITH(y.backward(g), Catch::Contains("backward through the graph a second time"));
  }
  // exp saves its output: writing into it (without grad mode) is caught at backward.
  Tensor y = exp(x);
  {
    NoGradGuard no_grad;
    mul_(y, 2);
  }
  CHECK_THROWS_WITH(y.backward(g), Catch::Contains("modified by an in-place op after it was saved"));
  // add saves nothing, so it can run backward again.
  Tensor z = x + 1;
  z.backward(g);
  x.set_grad(Tensor());
  z.backward(g);
  CHECK(values_of(x.grad()) == std::vector<double>{1, 1, 1});
}

TEST_CASE("in-place ops refuse tensors that require grad on either side", "[autograd][elementwise]") {
  Tensor x = normal_leaf({3}, 71);
  Tensor plain = zeros({3}, kF64);
  CHECK_THROWS_WITH(add_(x, 1), Catch::Contains("add_: in-place write to a tensor that requires grad"));
  CHECK_THROWS_WITH(mul_(x * 2, plain), Catch::Contains("mul_: in-place write to a tensor that requires grad"));
  CHECK_THROWS_WITH(add_(plain, x), Catch::Contains("add_: the operand of shape [3] requires grad"));
  CHECK(values_of(plain) == std::vector<double>{0, 0, 0});
  NoGradGuard no_grad;
  add_(plain, x, 2);  // fine without grad mode (an optimizer step)
  CHECK(values_of(plain) == values_of(x * 2));
}

// The activations' one-pass gradient kernels against their derivatives written out
// in f64, in the tails too, for an upstream gradient read through strides (a
// transposed view): f32 within a few ulp, bf16 and f16 rounded once (within half an
// ulp of the f64 value, plus the f32 error).
TEST_CASE("activation gradients match f64 derivatives in every dtype, in the tails, with a strided upstream gradient",
          "[autograd][elementwise]") {
  const double pi = 3.14159265358979323846, k = std::sqrt(2 / pi), c = 0.044715;
  auto sigmoid64 = [](double z) { return 1 / (1 + std::exp(-z)); };
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    std::function<double(double)> derivative;
    bool from_output = false;  // the kernel reads y = f(x) as stored, not x
  };
  const std::vector<Case> cases = {
      {"tanh", [](const Tensor& x) { return tanh(x); },
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, true},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [&](double x) { return sigmoid64(x) * sigmoid64(-x); }, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? 1.0 : 0.0; }, true},
      {"silu", [](const Tensor& x) { return silu(x); },
       [&](double x) { return sigmoid64(x) * (1 + x * sigmoid64(-x)); }},
      {"gelu erf", [](const Tensor& x) { return gelu(x); },
       [&](double x) {
         return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * pi);
       }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); },
       [&](double x) {  // d/dx x (1 + tanh u) / 2 with (1 + tanh u) / 2 = sigmoid(2u)
         const double u = k * (x + c * x * x * x);
         return sigmoid64(2 * u) + 2 * x * sigmoid64(2 * u) * sigmoid64(-2 * u) * k * (1 + 3 * c * x * x);
       }},
  };
  // Rows: inputs from the far negative tail to the far positive one; columns: upstream scales.
  const std::vector<double> xs = {-30, -9, -3, -0.75, -1e-3, 0, 2e-3, 0.5, 1, 4, 9, 30};
  const std::vector<double> scales = {1.0, -0.75, 3.0};
  const auto n = static_cast<int64_t>(xs.size()), m = static_cast<int64_t>(scales.size());
  std::vector<double> x_rows, g_cols;  // x [n, m] row-major; upstream stored [m, n], read transposed
  for (double x : xs) {
    for (int64_t j = 0; j < m; ++j) x_rows.push_back(x);
  }
  for (double s : scales) {
    for (int64_t i = 0; i < n; ++i) g_cols.push_back(s);
  }
  for (const Case& cs : cases) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      INFO(cs.name << " " << fmt::format("{}", dtype));
      Tensor x = from_vector<double>(x_rows, {n, m}).to(dtype).detach().requires_grad_();
      Tensor upstream = from_vector<double>(g_cols, {m, n}).to(dtype).t();
      REQUIRE_FALSE(upstream.is_contiguous());
      cs.f(x).backward(upstream);
      REQUIRE(x.grad().dtype() == dtype);
      const std::vector<double> got = values_of(x.grad().to(DType::f64));
      const std::vector<double> x_stored = values_of(x.detach().to(DType::f64));  // x as rounded to dtype
      // Relative error: the f32 math (a few ulp, more where tanh or the exp of the
      // gelus amplify it) plus half an ulp of the stored dtype. A gradient read from
      // the stored output (1 - y² for tanh, y (1 - y) for sigmoid) also carries y's
      // rounding, up to about twice the unit roundoff of 1, absolutely. Where the
      // derivative's terms (each at most about 1) cancel, as near gelu's minimum at
      // x = -0.75, a few f32 roundings of 1 remain, absolutely.
      const double unit_roundoff = dtype == DType::f32 ? 0x1p-24 : dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
      const double tol = (dtype == DType::f32 ? 0.0 : unit_roundoff) + 2e-6;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) {
          const double want = scales[static_cast<size_t>(j)] * cs.derivative(x_stored[static_cast<size_t>(i * m + j)]);
          const double have = got[static_cast<size_t>(i * m + j)];
          INFO("x " << xs[static_cast<size_t>(i)] << " scale " << scales[static_cast<size_t>(j)] << ": " << have
                    << " vs " << want);
          // f16's smallest normal is 2^-14: below it the stored value is absolutely rounded.
          double floor = (dtype == DType::f16 ? 0x1p-24 : 0.0) + 4 * 0x1p-24 * std::abs(scales[static_cast<size_t>(j)]);
          if (cs.from_output) floor += 2 * unit_roundoff * std::abs(scales[static_cast<size_t>(j)]);
          CHECK(std::abs(have - want) <= tol * std::abs(want) + floor);
        }
      }
    }
  }
}
