#include "nn/optim/fused_sgd.h"

#include "base/error.h"
#include "kernels/cpu/sgd.h"
#include "nn/optim/fused_dispatch.h"

#ifdef DTR_WITH_CUDA
#include "kernels/cuda/sgd.h"
#endif

#include <utility>

namespace dtr::nn::optim {

namespace {

// FusedSGD's kernels, as detail::run_fused takes them.
struct SGDKernels {
  template <class T>
  using Arrays = kernels::cpu::SGDTensor<T>;
  kernels::cpu::SGDHyper hyper;

  template <class T>
  Arrays<T> describe(const Tensor& param, const Tensor& grad, const ParamState& state) const {
    T* buffer = nullptr;
    if (hyper.momentum != 0.0) {
      const auto it = state.tensors.find("momentum_buffer");
      DTR_CHECK(it != state.tensors.end(), "FusedSGD: a parameter of shape {} has no momentum buffer",
                shape_str(param.sizes()));
      const Tensor& b = it->second;
      DTR_CHECK(b.is_contiguous() && b.device() == param.device() && b.numel() == param.numel(),
                "FusedSGD: the momentum buffer of a parameter of shape {} is not a contiguous tensor of its size on {}",
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

FusedSGD::FusedSGD(OptimizerParams params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options) {
  check_sgd_options(options, "FusedSGD");
  check_fusable_params("FusedSGD", "SGD");
}

std::vector<std::string> FusedSGD::state_names() const { return sgd_state_names(options_); }

void FusedSGD::update(const Tensor& param, const Tensor& grad, ParamState& state) {
  update_all({PendingUpdate{.param = param, .grad = grad, .state = &state}});
}

void FusedSGD::update_all(const std::vector<PendingUpdate>& updates) {
  const kernels::cpu::SGDHyper hyper{.lr = lr(),
                                     .momentum = options_.momentum,
                                     .dampening = options_.dampening,
                                     .weight_decay = options_.weight_decay,
                                     .nesterov = options_.nesterov};
  detail::run_fused(SGDKernels{hyper}, updates, "FusedSGD");
}

}  // namespace dtr::nn::optim
