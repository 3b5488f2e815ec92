// SGD: stochastic gradient descent with optional momentum, dampening, Nesterov
// momentum and L2 weight decay, with PyTorch's torch.optim.SGD semantics:
//   g = grad + weight_decay * p
//   buf = g on the first update, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf        (when momentum != 0)
//   p -= lr * g
// State: "momentum_buffer" when momentum != 0, nothing otherwise.
//
// step() runs one fused multi-tensor kernel for all parameters (as PyTorch's
// foreach/fused default): CPU parameters go to the multi-threaded CPU kernel
// (dtr/kernels/cpu/sgd.h), CUDA parameters to the CUDA kernel (dtr/kernels/cuda/sgd.h), one
// launch per device and dtype, on that device's current stream. It reads param,
// grad and the buffer once and writes param and the buffer once, where the
// op-by-op update makes up to five passes; the results are bitwise the same (no
// FMA contraction). A non-contiguous grad is copied to a contiguous one first.
#pragma once

#include "dtr/nn/optim/optimizer.h"

#include <optional>

namespace dtr::nn::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  // Unset: the fused kernels whenever every parameter of the step allows it
  // (contiguous, on the CPU or a CUDA device), else op by op. true: always fused
  // (other parameters are refused, naming them). false: op by op, the reference
  // the kernels are tested against.
  std::optional<bool> fused{};
};

// Checks the options as SGD takes them (`who` names the optimizer in the error).
void check_sgd_options(const SGDOptions& options, const char* who);

// The per-parameter state SGD keeps: a momentum buffer when momentum != 0.
std::vector<std::string> sgd_state_names(const SGDOptions& options);

class SGD : public Optimizer {
 public:
  SGD(OptimizerParams params, const SGDOptions& options);
  // Parameter groups (optimizer.h): a group's options override `options`; the
  // fused kernel runs once per group.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }
  // The options group `group` runs with: options() with what the group sets
  // (lr as constructed; group_lr() is the one in use).
  const SGDOptions& options_of(size_t group) const { return group_options_.at(group); }

 protected:
  // `who` names the optimizer in errors.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options, const char* who);
  std::vector<std::string> state_names(size_t group) const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state, size_t group) override;
  void update_all(const std::vector<PendingUpdate>& updates) override;

 private:
  SGDOptions options_;
  std::vector<SGDOptions> group_options_;
  const char* who_;
};

}  // namespace dtr::nn::optim
