// SGD: stochastic gradient descent with optional momentum, dampening, Nesterov
// momentum and L2 weight decay, with PyTorch's torch.optim.SGD semantics:
//   g = grad + weight_decay * p
//   buf = g on the first update, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf        (when momentum != 0)
//   p -= lr * g
// State: "momentum_buffer" when momentum != 0, nothing otherwise.
#pragma once

#include "nn/optim/optimizer.h"

namespace dtr::nn::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

// Checks the options as SGD and FusedSGD take them (`who` names the optimizer in the error).
void check_sgd_options(const SGDOptions& options, const char* who);

// The per-parameter state SGD and FusedSGD keep: a momentum buffer when momentum != 0.
std::vector<std::string> sgd_state_names(const SGDOptions& options);

class SGD : public Optimizer {
 public:
  SGD(OptimizerParams params, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state) override;

 private:
  SGDOptions options_;
};

}  // namespace dtr::nn::optim
