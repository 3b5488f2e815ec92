#include "nn/optim/fused_adamw.h"

#include "dtensor/error.h"
#include "kernels/cpu/adamw.h"

#ifdef DTR_WITH_CUDA
#include "dtensor/cuda/cuda_runtime.h"
#include "kernels/cuda/adamw.h"
#endif

#include <cmath>
#include <map>
#include <utility>

namespace dtr::nn::optim {

namespace {

constexpr const char* kKind = "AdamW";  // shared with AdamW: interchangeable state dicts

template <class T>
kernels::cpu::AdamWTensor<T, T> arrays_of(const Tensor& param, const Tensor& grad,
                                          const ParamState& state) {
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

// The updates of one device, by dtype.
struct DeviceArrays {
  std::vector<kernels::cpu::AdamWTensor<float, float>> f32;
  std::vector<kernels::cpu::AdamWTensor<double, double>> f64;
};

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
    DTR_CHECK(p.device().is_cpu() || p.device().is_cuda(),
              "FusedAdamW: parameter {} (shape {}) is on {}; the fused kernels run on the CPU and "
              "CUDA devices only (use AdamW for other devices)",
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
  std::map<int, DeviceArrays> by_device;  // -1: the CPU, else a CUDA device index
  for (const PendingUpdate& u : updates) {
    grads.push_back(u.grad.contiguous());
    const Device device = u.param.device();
    DeviceArrays& arrays = by_device[device.is_cuda() ? device.index : -1];
    if (u.param.dtype() == DType::f32) {
      arrays.f32.push_back(arrays_of<float>(u.param, grads.back(), *u.state));
    } else {
      arrays.f64.push_back(arrays_of<double>(u.param, grads.back(), *u.state));  // the base allows only f32 and f64
    }
  }
  for (const auto& [device, arrays] : by_device) {
    if (device < 0) {
      if (!arrays.f32.empty()) kernels::cpu::adamw(arrays.f32.data(), arrays.f32.size(), hyper);
      if (!arrays.f64.empty()) kernels::cpu::adamw(arrays.f64.data(), arrays.f64.size(), hyper);
      continue;
    }
#ifdef DTR_WITH_CUDA
    cuda::DeviceGuard guard(device);
    cudaStream_t stream = cuda::current_stream(device);
    if (!arrays.f32.empty()) kernels::cuda::adamw(arrays.f32.data(), arrays.f32.size(), hyper, stream);
    if (!arrays.f64.empty()) kernels::cuda::adamw(arrays.f64.data(), arrays.f64.size(), hyper, stream);
#else
    DTR_FAIL("FusedAdamW: parameters on cuda:{} need the CUDA backend, which this build of dtr lacks", device);
#endif
  }
}

}  // namespace dtr::nn::optim
