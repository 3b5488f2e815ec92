// FusedSGD: SGD (nn/optim/sgd.h) with one fused multi-tensor kernel instead of up
// to five op-by-op passes over each parameter: one step() reads param, grad and the
// momentum buffer once and writes param and the buffer once, for all parameters
// together. CPU parameters go to the multi-threaded CPU kernel (kernels/cpu/sgd.h),
// CUDA parameters to the CUDA kernel (kernels/cuda/sgd.h), one launch per device and
// dtype for all of them, on that device's current stream (no synchronization).
//
// Same options (SGDOptions), the same state ("momentum_buffer" when momentum != 0,
// under MemoryTag::optimizer_state) and the same kind, "SGD", so state_dicts and
// checkpoints move freely between SGD and FusedSGD (like PyTorch's SGD(fused=True)).
// Results are bit-identical to SGD for f32 and f64 parameters, on either device:
// both kernels repeat the reference's operations and roundings in the parameter's
// dtype (no FMA contraction).
//
// Parameters must be contiguous CPU or CUDA tensors (checked at construction:
// anything else is refused with an error naming the parameter); a non-contiguous
// grad is copied to a contiguous one first.
#pragma once

#include "nn/optim/optimizer.h"
#include "nn/optim/sgd.h"

namespace dtr::nn::optim {

class FusedSGD : public Optimizer {
 public:
  FusedSGD(OptimizerParams params, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_all(const std::vector<PendingUpdate>& updates) override;

 private:
  SGDOptions options_;
};

}  // namespace dtr::nn::optim
