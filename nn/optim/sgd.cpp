#include "nn/optim/sgd.h"

#include "base/error.h"
#include "tensor/ops/elementwise.h"

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

void check_sgd_options(const SGDOptions& options, const char* who) {
  DTR_CHECK(std::isfinite(options.momentum) && options.momentum >= 0.0,
            "{}: momentum must be finite and >= 0, got {}", who, options.momentum);
  DTR_CHECK(std::isfinite(options.dampening), "{}: dampening must be finite, got {}", who, options.dampening);
  DTR_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0,
            "{}: weight_decay must be finite and >= 0, got {}", who, options.weight_decay);
  DTR_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
            "{}: nesterov needs momentum > 0 and dampening == 0, got momentum {} and dampening {}", who,
            options.momentum, options.dampening);
}

std::vector<std::string> sgd_state_names(const SGDOptions& options) {
  if (options.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

SGD::SGD(OptimizerParams params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  check_sgd_options(options, "SGD");
}

std::vector<std::string> SGD::state_names() const { return sgd_state_names(options_); }

void SGD::update(const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor g = grad;
  if (options_.weight_decay != 0.0) g = add(g, param, options_.weight_decay);
  if (options_.momentum != 0.0) {
    Tensor& buf = state.tensors.at("momentum_buffer");
    if (state.step == 1) {
      buf.copy_(g);
    } else {
      mul_(buf, options_.momentum);
      add_(buf, g, 1.0 - options_.dampening);
    }
    g = options_.nesterov ? add(g, buf, options_.momentum) : buf;
  }
  add_(param, g, -lr());
}

}  // namespace dtr::nn::optim
