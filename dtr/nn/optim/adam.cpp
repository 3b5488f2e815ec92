#include "dtr/nn/optim/adam.h"

#include "dtr/base/error.h"
#include "dtr/tensor/ops/elementwise.h"

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

Adam::Adam(OptimizerParams params, const AdamOptions& options)
    : Adam({ParamGroup{std::move(params)}}, options, "Adam", false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam(std::move(groups), options, "Adam", false) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, std::string kind, bool decoupled)
    : Optimizer(std::move(groups), options.lr, kind), options_(options), decoupled_(decoupled) {
  refuse_unknown_group_options({"lr", "weight_decay", "beta1", "beta2", "eps"});
  for (size_t g = 0; g < num_groups(); ++g) {
    const GroupOptions& own = group_options(g);
    AdamOptions o = options;
    o.lr = own.lr.value_or(o.lr);
    o.weight_decay = own.weight_decay.value_or(o.weight_decay);
    o.beta1 = own.beta1.value_or(o.beta1);
    o.beta2 = own.beta2.value_or(o.beta2);
    o.eps = own.eps.value_or(o.eps);
    const std::string who = group_name(g);
    DTR_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "{}: beta1 must be in [0, 1), got {}", who, o.beta1);
    DTR_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "{}: beta2 must be in [0, 1), got {}", who, o.beta2);
    DTR_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, "{}: eps must be finite and >= 0, got {}", who, o.eps);
    DTR_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0,
              "{}: weight_decay must be finite and >= 0, got {}", who, o.weight_decay);
    group_options_.push_back(o);
  }
}

std::vector<std::string> Adam::state_names(size_t) const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::update(const Tensor& param, const Tensor& grad, ParamState& state, size_t group) {
  const double lr = group_lr(group);
  const AdamOptions& o = group_options_[group];
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
