// AdamW: Adam with decoupled weight decay, with PyTorch's torch.optim.AdamW
// semantics: before the Adam update (nn/optim/adam.h, without the L2 term),
//   p *= 1 - lr * weight_decay
// Default weight_decay is 0.01, as in PyTorch. State: "exp_avg", "exp_avg_sq".
// FusedAdamW (nn/optim/fused_adamw.h) gives the same results in one fused CPU pass.
#pragma once

#include "nn/optim/adam.h"

namespace dtr::nn::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW : public Adam {
 public:
  AdamW(OptimizerParams params, const AdamWOptions& options);
};

}  // namespace dtr::nn::optim
