#include "dtr/nn/optim/adamw.h"

#include "dtr/base/error.h"
#include "dtr/kernels/cpu/adamw.h"
#include "dtr/nn/optim/fused_dispatch.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/adamw.h"
#endif

#include <string>
#include <utility>

namespace dtr::nn::optim {

namespace {

// AdamW's fused kernels, as detail::run_fused takes them.
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
              "AdamW: the state of a parameter of shape {} is not contiguous on its device {}",
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

AdamOptions adam_options(const AdamWOptions& options) {
  return {.lr = options.lr,
          .beta1 = options.beta1,
          .beta2 = options.beta2,
          .eps = options.eps,
          .weight_decay = options.weight_decay};
}

}  // namespace

AdamW::AdamW(OptimizerParams params, const AdamWOptions& options)
    : AdamW({ParamGroup{std::move(params)}}, options, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : AdamW(std::move(groups), options, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, const char* who)
    : Adam(std::move(groups), adam_options(options), "AdamW", true), options_(options), who_(who) {
  if (options.fused == true) check_fusable_params(who, "AdamW with .fused = false");
}

void AdamW::update_all(const std::vector<PendingUpdate>& updates) {
  if (!use_fused(options_.fused, updates, who_, "AdamW with .fused = false")) {
    Adam::update_all(updates);  // op by op
    return;
  }
  for (const std::vector<PendingUpdate>& group : by_group(updates)) {
    const size_t g = group.front().group;
    const AdamOptions& o = options_of(g);
    const kernels::cpu::AdamWHyper hyper{
        .lr = group_lr(g), .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
    detail::run_fused(AdamWKernels{hyper}, group, who_);
  }
}

}  // namespace dtr::nn::optim
