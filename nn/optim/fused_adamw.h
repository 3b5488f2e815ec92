// FusedAdamW: AdamW (nn/optim/adamw.h) with one fused multi-tensor kernel
// instead of ~10 op-by-op passes over each parameter: one step() reads param,
// grad, exp_avg and exp_avg_sq once and writes param and both moments once, for
// all parameters together. CPU parameters go to the multi-threaded CPU kernel
// (kernels/cpu/adamw.h), split by element count; CUDA parameters to the CUDA
// kernel (kernels/cuda/adamw.h), one launch per device and dtype for all of
// them, on that device's current stream (no synchronization). The CPU kernel is
// the optimizer for CPU-offloaded FSDP, whose step runs on the CPU.
//
// Same options (AdamWOptions), same state names ("exp_avg", "exp_avg_sq", under
// MemoryTag::optimizer_state) and the same kind, "AdamW", so state_dicts and
// checkpoints move freely between AdamW and FusedAdamW (like PyTorch's
// AdamW(fused=True)). Results are bit-identical to AdamW on the CPU for f32 and
// f64 parameters, on either device: both kernels repeat the reference's
// operations and roundings in the parameter's dtype (no FMA contraction).
//
// Parameters must be contiguous CPU or CUDA tensors (checked at construction:
// anything else is refused with an error naming the parameter); a
// non-contiguous grad is copied to a contiguous one first.
#pragma once

#include "nn/optim/adamw.h"
#include "nn/optim/optimizer.h"

namespace dtr::nn::optim {

class FusedAdamW : public Optimizer {
 public:
  FusedAdamW(OptimizerParams params, const AdamWOptions& options);
  const AdamWOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_all(const std::vector<PendingUpdate>& updates) override;

 private:
  AdamWOptions options_;
};

}  // namespace dtr::nn::optim
