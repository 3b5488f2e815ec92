#include "nn/optim/fused_adamw.h"

#include "dtensor/error.h"
#include "kernels/cpu/adamw.h"

#include <cmath>
#include <utility>

namespace dtr::nn::optim {

namespace {

constexpr const char* kKind = "AdamW";  // shared with AdamW: interchangeable state dicts

template <class T>
kernels::cpu::AdamWTensor<T, T> arrays_of(const Tensor& param, const Tensor& grad,
                                          const ParamState& state) {
  const Tensor& m = state.tensors.at("exp_avg");
  const Tensor& v = state.tensors.at("exp_avg_sq");
  DTR_CHECK(m.is_contiguous() && v.is_contiguous() && m.device().is_cpu() && v.device().is_cpu(),
            "FusedAdamW: the state of a parameter of shape {} is not contiguous on the CPU",
            shape_str(param.sizes()));
  return {.param = param.data<T>(),
          .grad = grad.data<T>(),
          .exp_avg = m.data<T>(),
          .exp_avg_sq = v.data<T>(),
          .numel = param.numel(),
          .step = state.step};
}

}  // namespace

FusedAdamW::FusedAdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Optimizer(std::move(params), options.lr, kKind), options_(options) {
  DTR_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0,
            "FusedAdamW: beta1 must be in [0, 1), got {}", options.beta1);
  DTR_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0,
            "FusedAdamW: beta2 must be in [0, 1), got {}", options.beta2);
  DTR_CHECK(std::isfinite(options.eps) && options.eps >= 0.0,
            "FusedAdamW: eps must be finite and >= 0, got {}", options.eps);
  DTR_CHECK(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0,
            "FusedAdamW: weight_decay must be finite and >= 0, got {}", options.weight_decay);
  for (size_t i = 0; i < this->params().size(); ++i) {
    const Tensor& p = this->params()[i];
    DTR_CHECK(p.device().is_cpu(),
              "FusedAdamW: parameter {} (shape {}) is on {}; the fused kernel runs on the CPU "
              "only (use AdamW for other devices)",
              i, shape_str(p.sizes()), p.device().str());
    DTR_CHECK(p.is_contiguous(),
              "FusedAdamW: parameter {} (shape {}, strides {}) is not contiguous; the fused "
              "kernel needs contiguous parameters (use AdamW)",
              i, shape_str(p.sizes()), shape_str(p.strides()));
  }
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
  std::vector<Tensor> grads;  // contiguous grads (copies of strided ones), kept alive
  grads.reserve(updates.size());
  std::vector<kernels::cpu::AdamWTensor<float, float>> f32;
  std::vector<kernels::cpu::AdamWTensor<double, double>> f64;
  for (const PendingUpdate& u : updates) {
    grads.push_back(u.grad.contiguous());
    if (u.param.dtype() == DType::f32) {
      f32.push_back(arrays_of<float>(u.param, grads.back(), *u.state));
    } else {
      f64.push_back(arrays_of<double>(u.param, grads.back(), *u.state));  // the base allows only f32 and f64
    }
  }
  if (!f32.empty()) kernels::cpu::adamw(f32.data(), f32.size(), hyper);
  if (!f64.empty()) kernels::cpu::adamw(f64.data(), f64.size(), hyper);
}

}  // namespace dtr::nn::optim
