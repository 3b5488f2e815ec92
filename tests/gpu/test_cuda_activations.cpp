// The activations of the model's MLPs on cuda tensors, forward and backward,
// against the same ops on the cpu: gelu (erf and tanh forms), silu, and SwiGLU
// as the Transformer computes it (silu(gate) * up). The forwards are single
// elementwise kernels (kernels/cuda/elementwise_unary.cu); the backwards are
// compositions of elementwise ops (dtensor/ops/elementwise_backward.cpp), so this
// checks that every op they use runs on cuda and gives the cpu's gradient.
// Tolerance: |gpu - cpu| <= atol * (1 + |cpu|) + k * out_rtol * |cpu| with atol
// 1e-5 (f32, bf16, f16: the f32 transcendentals differ by a few ulp and the
// gradient formulas chain several of them) or 1e-12 (f64), and k = 3 roundings of
// the output type (2^-7 bf16, 2^-10 f16; 0 for f32 and f64).
#include "dtensor/factory.h"
#include "dtensor/ops/elementwise.h"
#include "gpu_test_support.h"

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

void check_close(const std::string& what, const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  CHECK(got.device() == kGpu);
  CHECK(got.dtype() == want.dtype());
  const std::vector<double> g = values_of(got), w = values_of(want);
  REQUIRE(g.size() == w.size());
  const double atol = want.dtype() == DType::f64 ? 1e-12 : 1e-5;
  const double rtol = 3 * out_rtol(want.dtype());
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
