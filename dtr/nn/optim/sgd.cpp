#include "dtr/nn/optim/sgd.h"

#include "dtr/base/error.h"
#include "dtr/kernels/cpu/sgd.h"
#include "dtr/nn/optim/fused_dispatch.h"
#include "dtr/tensor/ops/elementwise.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/sgd.h"
#endif

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

namespace {

// SGD's fused kernels, as detail::run_fused takes them.
struct SGDKernels {
  template <class T>
  using Arrays = kernels::cpu::SGDTensor<T>;
  kernels::cpu::SGDHyper hyper;

  template <class T>
  Arrays<T> describe(const Tensor& param, const Tensor& grad, const ParamState& state) const {
    T* buffer = nullptr;
    if (hyper.momentum != 0.0) {
      const auto it = state.tensors.find("momentum_buffer");
      DTR_CHECK(it != state.tensors.end(), "SGD: a parameter of shape {} has no momentum buffer",
                shape_str(param.sizes()));
      const Tensor& b = it->second;
      DTR_CHECK(b.is_contiguous() && b.device() == param.device() && b.numel() == param.numel(),
                "SGD: the momentum buffer of a parameter of shape {} is not a contiguous tensor of its size on {}",
                shape_str(param.sizes()), param.device().str());
      buffer = b.data<T>();
    }
    return {.param = param.data<T>(),
            .grad = grad.data<T>(),
            .momentum_buffer = buffer,
            .numel = param.numel(),
            .step = state.step};
  }
  template <class T>
  void run_cpu(const Arrays<T>* arrays, size_t count) const {
    kernels::cpu::sgd(arrays, count, hyper);
  }
#ifdef DTR_WITH_CUDA
  template <class T>
  void run_cuda(const Arrays<T>* arrays, size_t count, cudaStream_t stream) const {
    kernels::cuda::sgd(arrays, count, hyper, stream);
  }
#endif
};

}  // namespace

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

SGD::SGD(OptimizerParams params, const SGDOptions& options) : SGD({ParamGroup{std::move(params)}}, options, "SGD") {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : SGD(std::move(groups), options, "SGD") {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options, const char* who)
    : Optimizer(std::move(groups), options.lr, "SGD"), options_(options), who_(who) {
  refuse_unknown_group_options({"lr", "weight_decay", "momentum", "dampening"});
  for (size_t g = 0; g < num_groups(); ++g) {
    const GroupOptions& own = group_options(g);
    SGDOptions o = options;
    o.lr = own.lr.value_or(o.lr);
    o.weight_decay = own.weight_decay.value_or(o.weight_decay);
    o.momentum = own.momentum.value_or(o.momentum);
    o.dampening = own.dampening.value_or(o.dampening);
    check_sgd_options(o, num_groups() == 1 ? who : group_name(g).c_str());
    group_options_.push_back(o);
  }
  if (options.fused == true) check_fusable_params(who, "SGD with .fused = false");
}

void SGD::update_all(const std::vector<PendingUpdate>& updates) {
  if (!use_fused(options_.fused, updates, who_, "SGD with .fused = false")) {
    Optimizer::update_all(updates);  // op by op
    return;
  }
  for (const std::vector<PendingUpdate>& group : by_group(updates)) {
    const size_t g = group.front().group;
    const SGDOptions& o = group_options_[g];
    const kernels::cpu::SGDHyper hyper{.lr = group_lr(g),
                                       .momentum = o.momentum,
                                       .dampening = o.dampening,
                                       .weight_decay = o.weight_decay,
                                       .nesterov = o.nesterov};
    detail::run_fused(SGDKernels{hyper}, group, who_);
  }
}

std::vector<std::string> SGD::state_names(size_t group) const { return sgd_state_names(group_options_.at(group)); }

void SGD::update(const Tensor& param, const Tensor& grad, ParamState& state, size_t group) {
  const SGDOptions& o = group_options_[group];
  Tensor g = grad;
  if (o.weight_decay != 0.0) g = add(g, param, o.weight_decay);
  if (o.momentum != 0.0) {
    Tensor& buf = state.tensors.at("momentum_buffer");
    if (state.step == 1) {
      buf.copy_(g);
    } else {
      mul_(buf, o.momentum);
      add_(buf, g, 1.0 - o.dampening);
    }
    g = o.nesterov ? add(g, buf, o.momentum) : buf;
  }
  add_(param, g, -group_lr(group));
}

}  // namespace dtr::nn::optim
