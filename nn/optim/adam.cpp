#include "nn/optim/adam.h"

#include "base/error.h"
#include "tensor/ops/elementwise.h"

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

Adam::Adam(OptimizerParams params, const AdamOptions& options)
    : Adam(std::move(params), options, "Adam", false) {}

Adam::Adam(OptimizerParams params, const AdamOptions& options, std::string kind,
           bool decoupled)
    : Optimizer(std::move(params), options.lr, kind), options_(options), decoupled_(decoupled) {
  DTR_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0, "{}: beta1 must be in [0, 1), got {}",
            kind, options.beta1);
  DTR_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0, "{}: beta2 must be in [0, 1), got {}",
            kind, options.beta2);
  DTR_CHECK(std::isfinite(options.eps) && options.eps >= 0.0,
            "{}: eps must be finite and >= 0, got {}", kind, options.eps);
  DTR_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0,
            "{}: weight_decay must be finite and >= 0, got {}", kind, options.weight_decay);
}

std::vector<std::string> Adam::state_names() const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::update(const Tensor& param, const Tensor& grad, ParamState& state) {
  const double lr = this->lr();
  const AdamOptions& o = options_;
  Tensor g = grad;
  if (o.weight_decay != 0.0) {
    if (decoupled_) {
      mul_(param, 1.0 - lr * o.weight_decay);
    } else {
      g = add(g, param, o.weight_decay);
    }
  }
  const Tensor& m = state.tensors.at("exp_avg");
  const Tensor& v = state.tensors.at("exp_avg_sq");
  mul_(m, o.beta1);
  add_(m, g, 1.0 - o.beta1);
  mul_(v, o.beta2);
  add_(v, mul(g, g), 1.0 - o.beta2);

  const auto t = static_cast<double>(state.step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  Tensor denom = add(div(sqrt(v), std::sqrt(bias_correction2)), o.eps);
  add_(param, div(m, denom), -lr / bias_correction1);
}

}  // namespace dtr::nn::optim
