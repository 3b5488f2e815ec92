// Linear: y = x · Wᵀ + b over the last dim of x (any leading dims), optionally
// followed by an activation computed in the same pass (GELU, as GPT-2's feed-forward
// has it): y = gelu(x · Wᵀ + b). weight is [out_features, in_features]; bias is
// [out_features] (optional).
// Initialisation: by default PyTorch's (W and b uniform on ±1/sqrt(in_features));
// with init_std > 0, W ~ normal(0, init_std) and b = 0 (the transformer init).
#pragma once

#include "dtr/nn/module.h"
#include "dtr/tensor/ops/matmul.h"

namespace dtr::nn {

struct LinearOptions {
  bool bias = true;
  double init_std = 0;  // > 0: normal(0, init_std) weights and zero bias
  DType dtype = DType::f32;
  Device device = default_device();
  LinearActivation activation = LinearActivation::none;  // applied to x · Wᵀ + b
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});
  std::string type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& input) override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  LinearActivation activation() const { return activation_; }

 protected:
  void reset_own_parameters() override;

 private:
  int64_t in_, out_;
  double init_std_;
  LinearActivation activation_;
  Parameter weight_;
  Parameter bias_;  // undefined without a bias
};

}  // namespace dtr::nn
