// AdamW: Adam with decoupled weight decay, with PyTorch's torch.optim.AdamW
// semantics: before the Adam update (dtr/nn/optim/adam.h, without the L2 term),
//   p *= 1 - lr * weight_decay
// Default weight_decay is 0.01, as in PyTorch. State: "exp_avg", "exp_avg_sq".
//
// step() runs one fused multi-tensor kernel for all parameters (as PyTorch's
// foreach/fused default): CPU parameters go to the multi-threaded CPU kernel
// (dtr/kernels/cpu/adamw.h), split by element count; CUDA parameters to the CUDA kernel
// (dtr/kernels/cuda/adamw.h), one launch per device and dtype, on that device's current
// stream. It reads param, grad and both moments once and writes them once, where
// the op-by-op update (Adam::update) makes about ten passes; the results are
// bitwise the same, as both kernels repeat the op-by-op operations and roundings
// in the parameter's dtype (no FMA contraction). A non-contiguous grad is copied
// to a contiguous one first.
#pragma once

#include "dtr/nn/optim/adam.h"

#include <optional>

namespace dtr::nn::optim {

struct AdamWTraits {
  static constexpr double kDefaultWeightDecay = 0.01;
  // `fused` unset: the fused kernels whenever every parameter of the step allows
  // it (contiguous, on the CPU or a CUDA device), else op by op. true: always
  // fused (other parameters are refused, naming them). false: op by op, the
  // reference the kernels are tested against.
  using Fused = std::optional<bool>;
};

// lr, beta1, beta2, eps, weight_decay (default 0.01) and fused, as in
// kernels::cpu::AdamHyperparameters (dtr/kernels/cpu/adamw.h).
using AdamWOptions = kernels::cpu::AdamHyperparameters<AdamWTraits>;

class AdamW : public Adam {
 public:
  AdamW(OptimizerParams params, const AdamWOptions& options);
  // Parameter groups (optimizer.h): a group's options override `options`; the
  // fused kernel runs once per group.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  const AdamWOptions& options() const { return options_; }

 protected:
  // `who` names the optimizer in errors.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, const char* who);
  void update_all(const std::vector<PendingUpdate>& updates) override;

 private:
  AdamWOptions options_;
  const char* who_;
};

}  // namespace dtr::nn::optim
