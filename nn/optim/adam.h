// Adam with L2 weight decay (added to the gradient), bias-corrected, with
// PyTorch's torch.optim.Adam semantics (amsgrad is not offered). At update t = 1, 2, ...:
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State: "exp_avg" (m) and "exp_avg_sq" (v), each the size of the parameter.
// AdamW (nn/optim/adamw.h) shares this math with decoupled weight decay instead.
#pragma once

#include "nn/optim/optimizer.h"

namespace dtr::nn::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class Adam : public Optimizer {
 public:
  Adam(OptimizerParams params, const AdamOptions& options);
  const AdamOptions& options() const { return options_; }

 protected:
  // For AdamW: `decoupled` applies weight decay as p *= 1 - lr * weight_decay.
  Adam(OptimizerParams params, const AdamOptions& options, std::string kind, bool decoupled);

  std::vector<std::string> state_names() const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state) override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

}  // namespace dtr::nn::optim
