#include "nn/optim/fused_adamw.h"

#include "base/error.h"
#include "kernels/cpu/adamw.h"
#include "nn/optim/fused_dispatch.h"

#ifdef DTR_WITH_CUDA
#include "kernels/cuda/adamw.h"
#endif

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

namespace {

constexpr const char* kKind = "AdamW";  // shared with AdamW: interchangeable state dicts

// FusedAdamW's kernels, as detail::run_fused takes them.
struct AdamWKernels {
  template <class T>
  using Arrays = kernels::cpu::AdamWTensor<T, T>;
  kernels::cpu::AdamWHyper hyper;

  template <class T>
  Arrays<T> describe(const Tensor& param, const Tensor& grad, const ParamState& state) const {
    const Tensor& m = state.tensors.at("exp_avg");
    const Tensor& v = state.tensors.at("exp_avg_sq");
    DTR_CHECK(m.is_contiguous() && v.is_contiguous() && m.device() == param.device() &&
                  v.device() == param.device(),
              "FusedAdamW: the state of a parameter of shape {} is not contiguous on its device {}",
              shape_str(param.sizes()), param.device().str());
    return {.param = param.data<T>(),
            .grad = grad.data<T>(),
            .exp_avg = m.data<T>(),
            .exp_avg_sq = v.data<T>(),
            .numel = param.numel(),
            .step = state.step};
  }
  template <class T>
  void run_cpu(const Arrays<T>* arrays, size_t count) const {
    kernels::cpu::adamw(arrays, count, hyper);
  }
#ifdef DTR_WITH_CUDA
  template <class T>
  void run_cuda(const Arrays<T>* arrays, size_t count, cudaStream_t stream) const {
    kernels::cuda::adamw(arrays, count, hyper, stream);
  }
#endif
};

}  // namespace

FusedAdamW::FusedAdamW(OptimizerParams params, const AdamWOptions& options)
    : Optimizer(std::move(params), options.lr, kKind), options_(options) {
  DTR_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0,
            "FusedAdamW: beta1 must be in [0, 1), got {}", options.beta1);
  DTR_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0,
            "FusedAdamW: beta2 must be in [0, 1), got {}", options.beta2);
  DTR_CHECK(std::isfinite(options.eps) && options.eps >= 0.0,
            "FusedAdamW: eps must be finite and >= 0, got {}", options.eps);
  DTR_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0,
            "FusedAdamW: weight_decay must be finite and >= 0, got {}", options.weight_decay);
  check_fusable_params("FusedAdamW", "AdamW");
}

std::vector<std::string> FusedAdamW::state_names() const { return {"exp_avg", "exp_avg_sq"}; }

void FusedAdamW::update(const Tensor& param, const Tensor& grad, ParamState& state) {
  update_all({PendingUpdate{.param = param, .grad = grad, .state = &state}});
}

void FusedAdamW::update_all(const std::vector<PendingUpdate>& updates) {
  const kernels::cpu::AdamWHyper hyper{.lr = lr(),
                                       .beta1 = options_.beta1,
                                       .beta2 = options_.beta2,
                                       .eps = options_.eps,
                                       .weight_decay = options_.weight_decay};
  detail::run_fused(AdamWKernels{hyper}, updates, "FusedAdamW");
}

}  // namespace dtr::nn::optim
