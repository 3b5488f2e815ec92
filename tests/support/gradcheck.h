// gradcheck: compares the gradients autograd computes for a function against
// central finite differences, in f64. Shared by every op's tests.
//
//   auto x = randn({3, 4}, {.dtype = DType::f64}).requires_grad_();
//   CHECK(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}) == "");
//
// The output is projected onto fixed random weights w (out.backward(w)), so one
// backward checks every output element; each input element is then perturbed
// by +-eps and the change of sum(w * out) compared with the analytic gradient.
// Returns "" when all match, otherwise a message naming the input, the element,
// and both values. Inputs may be non-contiguous views; they must be f64 leaves.
#pragma once

#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace dtr::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  uint64_t seed = 1234;
};

namespace detail {

// Element offsets (in elements from data<double>()) of t in row-major logical order.
inline std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets;
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += index[d] * t.stride(d);
    offsets.push_back(off);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
  }
  return offsets;
}

inline double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.contiguous().to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace detail

inline std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                             const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {}) {
  for (const Tensor& x : inputs) {
    if (x.dtype() != DType::f64 || !x.is_leaf()) return "gradcheck: inputs must be f64 leaves";
    x.set_grad(Tensor());
  }
  Generator gen(opt.seed);
  Tensor out = fn(inputs);
  Tensor w = randn(out.sizes(), {.dtype = DType::f64}, &gen);
  const std::vector<double> weights = w.to_vector<double>();
  out.backward(w);

  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
    const Tensor& g = x.grad();
    std::vector<double> analytic =
        g.defined() ? g.contiguous().to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    std::vector<int64_t> offsets = detail::element_offsets(x);
    double* data = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      double saved = data[offsets[j]];
      double plus, minus;
      {
        NoGradGuard no_grad;
        data[offsets[j]] = saved + opt.eps;
        plus = detail::weighted_sum(fn(inputs), weights);
        data[offsets[j]] = saved - opt.eps;
        minus = detail::weighted_sum(fn(inputs), weights);
        data[offsets[j]] = saved;
      }
      double numeric = (plus - minus) / (2 * opt.eps);
      if (!(std::abs(analytic[j] - numeric) <= opt.atol + opt.rtol * std::abs(numeric))) {
        return fmt::format("gradcheck: input {} (shape {}), element {}: analytic {:.10g}, numeric {:.10g}",
                           i, shape_str(x.sizes()), j, analytic[j], numeric);
      }
    }
  }
  return "";
}

}  // namespace dtr::testing
