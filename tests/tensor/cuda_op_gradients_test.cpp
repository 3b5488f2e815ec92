// Gradients on cuda against the cpu for the ops whose backward the other gpu tests do not
// reach: the unary math ops, the binary ops with broadcast operands (the gradient of the
// broadcast side is a reduction), where, the reductions mean, max and min (whole tensor
// and over a dim), softmax over the last and a middle dim, and bmm and addmm in every
// floating dtype cuda's GEMMs take. Each runs forward and
// backward through autograd on both devices from the same inputs and upstream gradient.
// The backward formulas are op-layer code shared by both devices, run on each device's
// kernels, so the devices differ only by the kernels' rounding: the gradients are
// compared as ||gpu - cpu|| / ||cpu|| within 1e-5 (f32), 1e-12 (f64), 2e-2 (bf16) and
// 4e-3 (f16), a few roundings of the element type for the half types (every op of a
// backward formula rounds its result), in norm so that a value that rounds the other way
// at a tie on one device does not decide.
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/softmax.h"

#include <catch2/catch.hpp>

#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

double gradient_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::bf16: return 2e-2;
    case DType::f16: return 4e-3;
    default: return 1e-5;
  }
}

struct GradCase {
  std::string name;
  std::vector<Shape> shapes;  // of the inputs (broadcast against each other)
  double lo, hi;              // the inputs' range
  std::function<Tensor(const std::vector<Tensor>&)> f;
  bool f64_on_cuda = true;  // false: the op refuses f64 on cuda (the GEMMs)
};

// f on leaves holding `inputs` on `device`, backward with `upstream`; the gradients.
std::vector<Tensor> gradients_on(const Device& device, const GradCase& c, const std::vector<Tensor>& inputs,
                                 const Tensor& upstream, Tensor& out) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) leaves.push_back(x.to(device).detach().requires_grad_());
  out = c.f(leaves);
  out.backward(upstream.to(device));
  std::vector<Tensor> grads;
  for (const Tensor& leaf : leaves) grads.push_back(leaf.grad());
  return grads;
}

}  // namespace

TEST_CASE("cuda gradients of the math, binary, where, reduction and softmax ops match the cpu",
          "[gpu][autograd]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  using V = std::vector<Tensor>;
  const Shape m = {37, 129};
  const std::vector<GradCase> cases = {
      {"exp", {m}, -2, 2, [](const V& t) { return exp(t[0]); }},
      {"log", {m}, 0.5, 2, [](const V& t) { return log(t[0]); }},
      {"sqrt", {m}, 0.5, 2, [](const V& t) { return sqrt(t[0]); }},
      {"rsqrt", {m}, 0.5, 2, [](const V& t) { return rsqrt(t[0]); }},
      {"reciprocal", {m}, 0.5, 2, [](const V& t) { return reciprocal(t[0]); }},
      {"sin", {m}, -3, 3, [](const V& t) { return sin(t[0]); }},
      {"cos", {m}, -3, 3, [](const V& t) { return cos(t[0]); }},
      {"abs", {m}, -2, 2, [](const V& t) { return abs(t[0]); }},
      {"square", {m}, -2, 2, [](const V& t) { return square(t[0]); }},
      {"neg", {m}, -2, 2, [](const V& t) { return neg(t[0]); }},
      {"sub, b broadcast over rows", {m, {129}}, -2, 2, [](const V& t) { return sub(t[0], t[1]); }},
      {"div, a broadcast over columns", {{37, 1}, m}, 0.5, 2, [](const V& t) { return div(t[0], t[1]); }},
      {"pow", {m, m}, 0.5, 2, [](const V& t) { return pow(t[0], t[1]); }},
      {"pow by a scalar", {m}, 0.5, 2, [](const V& t) { return pow(t[0], 2.5); }},
      {"maximum, b broadcast", {m, {129}}, -2, 2, [](const V& t) { return maximum(t[0], t[1]); }},
      {"minimum", {m, m}, -2, 2, [](const V& t) { return minimum(t[0], t[1]); }},
      {"where", {m, m}, -2, 2, [](const V& t) { return where(gt(t[0], 0.0), t[0], t[1]); }},
      {"mean over dim 0", {m}, -2, 2, [](const V& t) { return mean(t[0], {0}); }},
      {"mean", {m}, -2, 2, [](const V& t) { return mean(t[0]); }},
      {"max over dim 1", {m}, -2, 2, [](const V& t) { return max(t[0], 1); }},
      {"min over dim 0", {m}, -2, 2, [](const V& t) { return min(t[0], 0); }},
      {"max", {m}, -2, 2, [](const V& t) { return max(t[0]); }},
      {"min", {m}, -2, 2, [](const V& t) { return min(t[0]); }},
      {"softmax over the last dim", {{5, 7, 129}}, -3, 3, [](const V& t) { return softmax(t[0], -1); }},
      {"softmax over a middle dim", {{5, 7, 129}}, -3, 3, [](const V& t) { return softmax(t[0], 1); }},
      {"bmm", {{3, 17, 24}, {3, 24, 40}}, -1, 1, [](const V& t) { return bmm(t[0], t[1]); }, false},
      {"addmm, c broadcast", {{40}, {17, 24}, {24, 40}}, -1, 1,
       [](const V& t) { return addmm(t[0], t[1], t[2], 0.5, 2.0); }, false},
  };
  for (DType dtype : kFloating) {
    for (const GradCase& c : cases) {
      if (dtype == DType::f64 && !c.f64_on_cuda) continue;
      CAPTURE(c.name, name_of(dtype));
      std::vector<Tensor> inputs;
      for (const Shape& shape : c.shapes) inputs.push_back(random_cpu(shape, dtype, gen, c.lo, c.hi));
      const Tensor upstream = random_cpu(c.f(inputs).sizes(), dtype, gen, -1, 1);
      Tensor want_out, got_out;
      const std::vector<Tensor> want = gradients_on(kCpu, c, inputs, upstream, want_out);
      const std::vector<Tensor> got = gradients_on(kGpu, c, inputs, upstream, got_out);
      REQUIRE(got_out.device() == kGpu);
      CHECK(relative_error(got_out, want_out) <= gradient_tolerance(dtype));
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        REQUIRE(got[i].defined());
        CHECK(got[i].device() == kGpu);
        CHECK(got[i].sizes() == want[i].sizes());
        CHECK(relative_error(got[i], want[i]) <= gradient_tolerance(dtype));
      }
    }
  }
}
