// How the fused multi-tensor optimizers (FusedAdamW, FusedSGD) hand one step() to
// their kernels: the pending updates grouped by device (the CPU, each CUDA device)
// and dtype (f32 or f64, the only ones the Optimizer base takes), each grad made
// contiguous (copies of strided ones live until the kernels have been called), then
// one kernel call per group, CUDA ones on that device's current stream; then the
// version bumps the op-by-op in-place updates would make. Internal to
// nn/optim/fused_*.cpp. `Kernels` describes an optimizer's kernels:
//   template <class T> using Arrays = ...;     the kernel's descriptor of one tensor
//   template <class T> Arrays<T> describe(const Tensor& param, const Tensor& grad,
//                                         const ParamState& state) const;
//   template <class T> void run_cpu(const Arrays<T>*, size_t count) const;
//   template <class T> void run_cuda(const Arrays<T>*, size_t count, cudaStream_t) const;
//                                              (CUDA builds only)
#pragma once

#include "dtr/base/error.h"
#include "dtr/tensor/tensor.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <map>
#include <vector>

namespace dtr::nn::optim::detail {

template <class Kernels, class Update>
void run_fused(const Kernels& kernels, const std::vector<Update>& updates, const char* who) {
  struct Group {
    std::vector<typename Kernels::template Arrays<float>> f32;
    std::vector<typename Kernels::template Arrays<double>> f64;
  };
  std::vector<Tensor> grads;  // contiguous grads (copies of strided ones), kept alive
  grads.reserve(updates.size());
  std::map<int, Group> by_device;  // -1: the CPU, else a CUDA device index
  for (const Update& u : updates) {
    grads.push_back(u.grad.contiguous());
    const Device device = u.param.device();
    Group& group = by_device[device.is_cuda() ? device.index : -1];
    if (u.param.dtype() == DType::f32) {
      group.f32.push_back(kernels.template describe<float>(u.param, grads.back(), *u.state));
    } else {
      group.f64.push_back(kernels.template describe<double>(u.param, grads.back(), *u.state));
    }
  }
  for (const auto& [device, group] : by_device) {
    if (device < 0) {
      if (!group.f32.empty()) kernels.run_cpu(group.f32.data(), group.f32.size());
      if (!group.f64.empty()) kernels.run_cpu(group.f64.data(), group.f64.size());
      continue;
    }
#ifdef DTR_WITH_CUDA
    cuda::DeviceGuard guard(device);
    cudaStream_t stream = cuda::current_stream(device);
    if (!group.f32.empty()) kernels.run_cuda(group.f32.data(), group.f32.size(), stream);
    if (!group.f64.empty()) kernels.run_cuda(group.f64.data(), group.f64.size(), stream);
#else
    DTR_FAIL("{}: parameters on cuda:{} need the CUDA backend, which this build of dtr lacks", who, device);
#endif
  }
  // The kernels wrote in place, as the op-by-op update's in-place ops do: bump the
  // versions those would, so that whoever checks one (FSDP re-gathers a parameter
  // whose shard changed) sees the writes.
  for (const Update& u : updates) {
    u.param.bump_version();
    for (const auto& [name, tensor] : u.state->tensors) tensor.bump_version();
  }
}

}  // namespace dtr::nn::optim::detail
