// The activations of the model's MLPs on cuda tensors, forward and backward,
// against the same ops on the cpu: gelu (erf and tanh forms), silu, and SwiGLU
// as the Transformer computes it (silu(gate) * up); tanh, sigmoid and relu, whose
// gradients come from the forward's output. The forwards are single elementwise
// kernels (dtr/kernels/cuda/elementwise_unary.cu), and so are the activations'
// gradients (dtr/kernels/cuda/elementwise_grad.cu; SwiGLU's product adds a mul).
// Tolerance: |gpu - cpu| <= atol * (1 + |cpu|) + k * out_rtol * |cpu| with atol
// 1e-5 (f32, bf16, f16: the f32 transcendentals differ by a few ulp and the
// gradient formulas chain several of them) or 1e-12 (f64), and k = 3 roundings of
// the output type (2^-7 bf16, 2^-10 f16; 0 for f32 and f64).
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

// got (a cuda tensor of `dtype`) against reference values `w` in row-major order.
void check_close_to(const std::string& what, const Tensor& got, DType dtype, const std::vector<double>& w) {
  REQUIRE(got.defined());
  CHECK(got.device() == kGpu);
  CHECK(got.dtype() == dtype);
  const std::vector<double> g = values_of(got);
  REQUIRE(g.size() == w.size());
  const double atol = dtype == DType::f64 ? 1e-12 : 1e-5;
  const double rtol = 3 * out_rtol(dtype);
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < w.size(); ++i) {
    const double allowed = atol * (1 + std::fabs(w[i])) + rtol * std::fabs(w[i]);
    if (!(std::fabs(g[i] - w[i]) <= allowed) && bad++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": gpu " << g[i] << ", cpu " << w[i] << " (allowed " << allowed << ")";
      first = os.str();
    }
  }
  INFO(what << ": " << bad << " mismatches; first at " << first);
  CHECK(bad == 0);
}

void check_close(const std::string& what, const Tensor& got, const Tensor& want) {
  check_close_to(what, got, want.dtype(), values_of(want));
}

struct Activation {
  std::string name;
  int inputs;  // 1, or 2 for SwiGLU (gate, up)
  std::function<Tensor(const std::vector<Tensor>&)> f;
};

}  // namespace

TEST_CASE("cuda gelu, silu and SwiGLU forward and backward match the cpu", "[gpu][activations]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const std::vector<Activation> activations = {
      {"gelu (erf)", 1, [](const std::vector<Tensor>& t) { return gelu(t[0]); }},
      {"gelu (tanh)", 1,
       [](const std::vector<Tensor>& t) { return gelu(t[0], GeluApproximation::tanh); }},
      {"silu", 1, [](const std::vector<Tensor>& t) { return silu(t[0]); }},
      {"SwiGLU silu(gate) * up", 2, [](const std::vector<Tensor>& t) { return silu(t[0]) * t[1]; }},
  };
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const Shape& shape : std::vector<Shape>{{1}, {33}, {7, 4097}}) {
      for (const Activation& a : activations) {
        CAPTURE(a.name, std::string(dtype_name(dtype)), shape);
        std::vector<Tensor> cpu_in, gpu_in;
        for (int i = 0; i < a.inputs; ++i) {
          const Tensor t = random_cpu(shape, dtype, gen, -6, 6);
          cpu_in.push_back(t.detach().requires_grad_());
          gpu_in.push_back(t.to(kGpu).requires_grad_());
        }
        const Tensor dy = random_cpu(shape, dtype, gen, -1, 1);
        const Tensor want = a.f(cpu_in);
        const Tensor got = a.f(gpu_in);
        check_close("forward", got, want);
        want.backward(dy);
        got.backward(dy.to(kGpu));
        for (int i = 0; i < a.inputs; ++i) {
          check_close("gradient of input " + std::to_string(i), gpu_in[i].grad(), cpu_in[i].grad());
        }
      }
    }
  }
}

// tanh, sigmoid and relu take their gradient from the forward's output y in one kernel
// (dtr/kernels/elementwise_functors.h). The cpu's y may differ from the gpu's by a rounding,
// and 1 - y² magnifies that near |y| = 1, so the reference is the gradient's formula in
// double on the gpu's own y and the upstream gradient. Contiguous inputs run the
// vectorised loop; a transposed input and upstream gradient run the strided ones.
TEST_CASE("cuda tanh, sigmoid and relu: forwards match the cpu, gradients their formulas", "[gpu][activations]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  struct OutputGradActivation {
    std::string name;
    std::function<Tensor(const Tensor&)> f;
    std::function<double(double dy, double y)> grad;
  };
  const std::vector<OutputGradActivation> activations = {
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double dy, double y) { return dy * (1 - y * y); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double dy, double y) { return dy * y * (1 - y); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double dy, double y) { return y > 0 ? dy : 0.0; }},
  };
  for (DType dtype : kFloating) {
    for (const Shape& shape : std::vector<Shape>{{1}, {33}, {7, 4097}}) {
      for (bool transposed : {false, true}) {
        if (transposed && shape.size() != 2) continue;
        for (const OutputGradActivation& a : activations) {
          CAPTURE(a.name, name_of(dtype), shape, transposed);
          const Shape stored = transposed ? Shape{shape[1], shape[0]} : shape;
          const Tensor x = random_cpu(stored, dtype, gen, -6, 6), dy_stored = random_cpu(stored, dtype, gen, -1, 1);
          const Tensor cpu_x = (transposed ? x.t() : x).detach().requires_grad_();
          const Tensor gpu_x = (transposed ? x.to(kGpu).t() : x.to(kGpu)).detach().requires_grad_();
          const Tensor dy = transposed ? dy_stored.to(kGpu).t() : dy_stored.to(kGpu);
          CHECK(gpu_x.is_contiguous() == !transposed);
          const Tensor want = a.f(cpu_x), got = a.f(gpu_x);
          check_close("forward", got, want);
          got.backward(dy);
          const std::vector<double> y = values_of(got), g = values_of(dy);
          std::vector<double> grad(y.size());
          for (size_t i = 0; i < y.size(); ++i) grad[i] = a.grad(g[i], y[i]);
          check_close_to("gradient", gpu_x.grad(), dtype, grad);
        }
      }
    }
  }
}
