// Adam with L2 weight decay (added to the gradient), bias-corrected, with
// PyTorch's torch.optim.Adam semantics (amsgrad is not offered). At update t = 1, 2, ...:
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State: "exp_avg" (m) and "exp_avg_sq" (v), each the size of the parameter.
// AdamW (dtr/nn/optim/adamw.h) shares this math with decoupled weight decay instead.
#pragma once

#include "dtr/kernels/cpu/adamw.h"
#include "dtr/nn/optim/optimizer.h"

#include <string>
#include <vector>

namespace dtr::nn::optim {

struct AdamTraits {
  static constexpr double kDefaultWeightDecay = 0.0;
  using Fused = kernels::cpu::NoFusedChoice;  // Adam has no fused kernel
};

// lr, beta1, beta2, eps and weight_decay (default 0), as in
// kernels::cpu::AdamHyperparameters (dtr/kernels/cpu/adamw.h).
using AdamOptions = kernels::cpu::AdamHyperparameters<AdamTraits>;

class Adam : public Optimizer {
 public:
  Adam(OptimizerParams params, const AdamOptions& options);
  // Parameter groups (optimizer.h): a group's options override `options`.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options);
  const AdamOptions& options() const { return options_; }
  // The options group `group` runs with: options() with what the group sets
  // (lr as constructed; group_lr() is the one in use).
  const AdamOptions& options_of(size_t group) const { return group_options_.at(group); }

 protected:
  // For AdamW: `decoupled` applies weight decay as p *= 1 - lr * weight_decay.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, std::string kind, bool decoupled);

  std::vector<std::string> state_names(size_t group) const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state, size_t group) override;

 private:
  AdamOptions options_;
  std::vector<AdamOptions> group_options_;
  bool decoupled_;
};

}  // namespace dtr::nn::optim
