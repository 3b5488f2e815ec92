#include "dtr/nn/optim/clip_grad.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/profiler.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/grad_norm.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace dtr::nn::optim {

namespace {

void check_norm_type(const char* op, double norm_type) {
  DTR_CHECK(norm_type > 0.0 && !std::isnan(norm_type),
            "{}: norm_type must be > 0 or inf, got {}", op, norm_type);
}

// The larger of a and b, NaN when either is (a NaN gradient makes the inf-norm NaN).
double nan_max(double a, double b) {
  if (std::isnan(a)) return a;
  return (std::isnan(b) || b > a) ? b : a;
}

double combine_pow(double a, double b, double norm_type) {
  return std::isinf(norm_type) ? nan_max(a, b) : a + b;
}

// The present, non-empty grads of `params` (checked to be floating).
std::vector<Tensor> present_grads(const char* op, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    DTR_CHECK(params[i].defined(), "{}: parameter {} is an undefined tensor", op, i);
    const Tensor& g = params[i].grad();
    if (!g.defined() || g.numel() == 0) continue;
    DTR_CHECK(is_floating(g.dtype()), "{}: grad of parameter {} has dtype {}", op, i, g.dtype());
    grads.push_back(g);
  }
  return grads;
}

// Sum of |g|^p (max |g| for inf) over CPU grads, in double, op by op.
double cpu_grad_norm_pow(const std::vector<Tensor>& grads, double norm_type) {
  double acc = 0.0;
  for (const Tensor& g : grads) {
    const Tensor a = abs(cast(g, DType::f64));
    if (std::isinf(norm_type)) {
      acc = nan_max(acc, max(a).item());
    } else if (norm_type == 2.0) {
      acc += sum(mul(a, a)).item();
    } else if (norm_type == 1.0) {
      acc += sum(a).item();
    } else {
      acc += sum(pow(a, norm_type)).item();
    }
  }
  return acc;
}

#ifdef DTR_WITH_CUDA
// Calls fn(TypeTag<T>{}, group) for the tensors of each floating dtype, in a fixed dtype order.
template <class Fn>
void for_each_dtype_group(const std::vector<Tensor>& tensors, const Fn& fn) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<Tensor> group;
    for (const Tensor& t : tensors) {
      if (t.dtype() == dtype) group.push_back(t);
    }
    if (!group.empty()) dispatch_floating(dtype, "grad norm", [&](auto tag) { fn(tag, group); });
  }
}

// Sum of |g|^p (max for inf) over `grads`, all on the CUDA device of `out` (one
// f64 there), written to out[0] or, with `accumulate`, combined into it. Partials
// per chunk in fixed order, then one fold: deterministic, no host sync.
void cuda_grad_norm_pow(const std::vector<Tensor>& grads, double norm_type, const Tensor& out,
                        bool accumulate) {
  const Device device = out.device();
  cuda::DeviceGuard guard(device.index);
  cudaStream_t stream = cuda::current_stream(device.index);
  std::vector<Tensor> packed;  // contiguous grads, alive until the kernels are enqueued
  int64_t partials = 0;
  for (const Tensor& g : grads) {
    DTR_INTERNAL_ASSERT(g.device() == device, "grad on {} in a norm on {}", g.device(), device);
    packed.push_back(g.contiguous());
    partials += kernels::cuda::norm_pow_partial_count(g.numel());
  }
  Tensor workspace = empty({std::max<int64_t>(partials, 1)}, {.dtype = DType::f64, .device = device});
  double* next = workspace.data<double>();
  for_each_dtype_group(packed, [&](auto tag, const std::vector<Tensor>& group) {
    using T = typename decltype(tag)::type;
    std::vector<kernels::cuda::NormTensor<T>> tensors;
    for (const Tensor& g : group) tensors.push_back({.data = g.data<T>(), .numel = g.numel()});
    kernels::cuda::norm_pow_partials(tensors.data(), tensors.size(), norm_type, next, stream);
    for (const Tensor& g : group) next += kernels::cuda::norm_pow_partial_count(g.numel());
  });
  kernels::cuda::norm_pow_fold(workspace.data<double>(), partials, norm_type, accumulate, out.data<double>(),
                               stream);
}

// grads *= coef in place, coef read on the device from `coef_device` (one f64 on
// the grads' device) or given by `coef_value`. One launch per dtype for the
// contiguous grads; a strided one is scaled by the elementwise op.
void cuda_scale_grads(const std::vector<Tensor>& grads, const Tensor& coef_device, double coef_value) {
  if (grads.empty()) return;
  const int index = grads.front().device().index;
  cuda::DeviceGuard guard(index);
  cudaStream_t stream = cuda::current_stream(index);
  std::vector<Tensor> contiguous;
  for (const Tensor& g : grads) {
    if (g.is_contiguous()) {
      contiguous.push_back(g);
    } else if (coef_device.defined()) {
      mul_(g, coef_device.to(g.dtype()));  // rounded to the grad's dtype first, like a Scalar
    } else {
      mul_(g, coef_value);
    }
  }
  for_each_dtype_group(contiguous, [&](auto tag, const std::vector<Tensor>& group) {
    using T = typename decltype(tag)::type;
    std::vector<kernels::cuda::ScaleTensor<T>> tensors;
    for (const Tensor& g : group) tensors.push_back({.data = g.data<T>(), .numel = g.numel()});
    kernels::cuda::scale(tensors.data(), tensors.size(),
                         coef_device.defined() ? coef_device.data<double>() : nullptr, coef_value, stream);
  });
  for (const Tensor& g : contiguous) g.bump_version();
}
#endif

// Parameters sharded over the same process groups (mesh dims of size > 1 that
// shard them), the sets in the order the parameters first name them: the same on
// every rank, so each rank issues the all-reduces of the sets in the same order
// (an order by the groups' addresses would differ between ranks, and ranks of
// two sets, such as FSDP's over a tensor-parallel one, would wait on each other).
struct ShardedSplit {
  std::vector<Tensor> plain;
  std::vector<std::pair<std::vector<mesh::ProcessGroup*>, std::vector<Tensor>>> sharded;

  std::vector<Tensor>& sharded_over(const std::vector<mesh::ProcessGroup*>& groups) {
    auto it = std::find_if(sharded.begin(), sharded.end(), [&](const auto& set) { return set.first == groups; });
    if (it != sharded.end()) return it->second;
    return sharded.emplace_back(groups, std::vector<Tensor>()).second;
  }
};

ShardedSplit split_by_sharding(const std::vector<Parameter>& params) {
  ShardedSplit split;
  for (const Parameter& p : params) {
    const DTensorSpec* spec = p.sharding();
    std::vector<mesh::ProcessGroup*> groups;
    if (spec) {
      for (int i = 0; i < static_cast<int>(spec->placements.size()); ++i) {
        if (spec->placements[i].is_shard() && spec->mesh.size(i) > 1) groups.push_back(spec->mesh.group(i).get());
      }
    }
    (groups.empty() ? split.plain : split.sharded_over(groups)).push_back(p.defined() ? p.data() : Tensor());
  }
  return split;
}

// What the parameters' slots hold (undefined for a handle that names no slot,
// which present_grads then refuses by position).
std::vector<Tensor> tensors_of(const std::vector<Parameter>& params) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const Parameter& p : params) out.push_back(p.defined() ? p.data() : Tensor());
  return out;
}

#ifdef DTR_WITH_CUDA
// The CUDA device that holds every parameter and every present grad, if there is one:
// the norm is then computed and applied there without host round trips.
std::optional<Device> single_cuda_device(const std::vector<Tensor>& params) {
  std::optional<Device> device;
  for (const Tensor& p : params) {
    if (!p.defined()) return std::nullopt;
    const Device d = p.device();
    if (!d.is_cuda() || (device && *device != d)) return std::nullopt;
    if (p.grad().defined() && p.grad().device() != d) return std::nullopt;
    device = d;
  }
  return device;
}

// global_grad_norm_pow on `device`: the result stays there (one f64), and the
// all-reduces of sharded parts run on device tensors (as NCCL needs).
Tensor cuda_global_grad_norm_pow(const std::vector<Parameter>& params, double norm_type, Device device) {
  check_norm_type("global_grad_norm_pow", norm_type);
  NoGradGuard no_grad;
  const ShardedSplit split = split_by_sharding(params);
  const bool is_max = std::isinf(norm_type);
  const TensorOptions options{.dtype = DType::f64, .device = device};
  Tensor total = empty({1}, options);
  cuda_grad_norm_pow(present_grads("local_grad_norm_pow", split.plain), norm_type, total, false);
  for (const auto& [groups, tensors] : split.sharded) {
    Tensor part = empty({1}, options);
    cuda_grad_norm_pow(present_grads("local_grad_norm_pow", tensors), norm_type, part, false);
    for (mesh::ProcessGroup* group : groups) {
      group->all_reduce(part, is_max ? mesh::ReduceOp::max() : mesh::ReduceOp::sum())->wait();
    }
    cuda::DeviceGuard guard(device.index);
    kernels::cuda::norm_pow_fold(part.data<double>(), 1, norm_type, true, total.data<double>(),
                                 cuda::current_stream(device.index));
  }
  return total;
}
#endif

}  // namespace

double local_grad_norm_pow(const std::vector<Tensor>& params, double norm_type) {
  check_norm_type("local_grad_norm_pow", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> on_cpu;
  std::map<int, std::vector<Tensor>> on_cuda;  // by device index
  for (const Tensor& g : present_grads("local_grad_norm_pow", params)) {
    if (g.device().is_cuda()) {
      on_cuda[g.device().index].push_back(g);
    } else {
      on_cpu.push_back(g);
    }
  }
  double acc = cpu_grad_norm_pow(on_cpu, norm_type);
#ifdef DTR_WITH_CUDA
  for (const auto& [index, grads] : on_cuda) {
    Tensor out = empty({1}, {.dtype = DType::f64, .device = Device::cuda(index)});
    cuda_grad_norm_pow(grads, norm_type, out, false);
    acc = combine_pow(acc, out.item<double>(), norm_type);
  }
#else
  DTR_CHECK(on_cuda.empty(), "local_grad_norm_pow: CUDA grads need the CUDA backend, which this build lacks");
#endif
  return acc;
}

double total_norm_from_pow(double pow_sum, double norm_type) {
  check_norm_type("total_norm_from_pow", norm_type);
  if (std::isinf(norm_type)) return pow_sum;
  return std::pow(pow_sum, 1.0 / norm_type);
}

void scale_grads_(const std::vector<Tensor>& params, double coef) {
  NoGradGuard no_grad;
  std::map<int, std::vector<Tensor>> on_cuda;  // by device index
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (g.device().is_cuda() && g.numel() > 0) {
      on_cuda[g.device().index].push_back(g);
    } else {
      mul_(g, coef);
    }
  }
#ifdef DTR_WITH_CUDA
  for (const auto& [index, grads] : on_cuda) cuda_scale_grads(grads, Tensor(), coef);
#endif
}

double global_grad_norm_pow(const std::vector<Parameter>& params, double norm_type) {
#ifdef DTR_WITH_CUDA
  if (const std::optional<Device> device = single_cuda_device(tensors_of(params))) {
    return cuda_global_grad_norm_pow(params, norm_type, *device).item<double>();
  }
#endif
  const ShardedSplit split = split_by_sharding(params);
  const bool is_max = std::isinf(norm_type);
  double total = local_grad_norm_pow(split.plain, norm_type);
  for (const auto& [groups, tensors] : split.sharded) {
    Tensor part = full({1}, local_grad_norm_pow(tensors, norm_type), {.dtype = DType::f64, .device = Device::cpu()});
    for (mesh::ProcessGroup* group : groups) {
      group->all_reduce(part, is_max ? mesh::ReduceOp::max() : mesh::ReduceOp::sum())->wait();
    }
    total = combine_pow(total, part.item<double>(), norm_type);
  }
  return total;
}

namespace {

// The norm is the global one, the same on every rank, so every rank throws or none.
double checked_norm(double total, double norm_type, bool error_if_nonfinite) {
  DTR_CHECK(!error_if_nonfinite || std::isfinite(total),
            "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they cannot be clipped; they "
            "were left unchanged (pass error_if_nonfinite = false to get the norm back and decide, e.g. skip the step)",
            norm_type, total);
  return total;
}

}  // namespace

double global_grad_norm_pow(const std::vector<Tensor>& params, double norm_type) {
  return global_grad_norm_pow(as_parameters(params), norm_type);
}

double clip_grad_norm_(const std::vector<Parameter>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  DTR_PROFILE_SCOPE("optim", "clip_grad_norm");
  DTR_CHECK(max_norm >= 0.0 && !std::isnan(max_norm),
            "clip_grad_norm_: max_norm must be >= 0, got {}", max_norm);
  const std::vector<Tensor> tensors = tensors_of(params);
#ifdef DTR_WITH_CUDA
  if (const std::optional<Device> device = single_cuda_device(tensors)) {
    // On the device: the norm, the clip coefficient and the scaling, with one
    // read-back of the norm at the end (the return value).
    const Tensor total = cuda_global_grad_norm_pow(params, norm_type, *device);
    NoGradGuard no_grad;
    Tensor norm_and_coef = empty({2}, {.dtype = DType::f64, .device = *device});
    {
      cuda::DeviceGuard guard(device->index);
      kernels::cuda::clip_coefficient(total.data<double>(), norm_type, max_norm, norm_and_coef.data<double>(),
                                      norm_and_coef.data<double>() + 1, cuda::current_stream(device->index));
    }
    std::vector<Tensor> grads;
    for (const Tensor& p : tensors) {
      if (p.grad().defined() && p.grad().numel() > 0) grads.push_back(p.grad());
    }
    cuda_scale_grads(grads, norm_and_coef.narrow(0, 1, 1), 1.0);
    return checked_norm(norm_and_coef.narrow(0, 0, 1).item<double>(), norm_type, error_if_nonfinite);
  }
#endif
  const double total = total_norm_from_pow(global_grad_norm_pow(params, norm_type), norm_type);
  if (std::isfinite(total) && total > max_norm) scale_grads_(tensors, max_norm / (total + 1e-6));
  return checked_norm(total, norm_type, error_if_nonfinite);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(as_parameters(params), max_norm, norm_type, error_if_nonfinite);
}

}  // namespace dtr::nn::optim
