#include "nn/optim/clip_grad.h"

#include "dtensor/autograd/grad_mode.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/factory.h"
#include "dtensor/error.h"
#include "dtensor/ops/elementwise.h"
#include "dtensor/ops/reduce.h"
#include "dtensor/profiler.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace dtr::nn::optim {

namespace {

void check_norm_type(const char* op, double norm_type) {
  DTR_CHECK(norm_type > 0.0 && !std::isnan(norm_type),
            "{}: norm_type must be > 0 or inf, got {}", op, norm_type);
}

}  // namespace

double local_grad_norm_pow(const std::vector<Tensor>& params, double norm_type) {
  check_norm_type("local_grad_norm_pow", norm_type);
  NoGradGuard no_grad;
  double acc = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    DTR_CHECK(params[i].defined(), "local_grad_norm_pow: parameter {} is an undefined tensor", i);
    const Tensor& g = params[i].grad();
    if (!g.defined() || g.numel() == 0) continue;
    DTR_CHECK(is_floating(g.dtype()), "local_grad_norm_pow: grad of parameter {} has dtype {}", i,
              g.dtype());
    const Tensor a = abs(cast(g, DType::f64));
    if (std::isinf(norm_type)) {
      acc = std::max(acc, max(a).item());
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

double total_norm_from_pow(double pow_sum, double norm_type) {
  check_norm_type("total_norm_from_pow", norm_type);
  if (std::isinf(norm_type)) return pow_sum;
  return std::pow(pow_sum, 1.0 / norm_type);
}

void scale_grads_(const std::vector<Tensor>& params, double coef) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (g.defined()) mul_(g, coef);
  }
}

double global_grad_norm_pow(const std::vector<Tensor>& params, double norm_type) {
  // Parameters sharded over the same groups are combined together.
  std::map<std::vector<mesh::ProcessGroup*>, std::vector<Tensor>> sharded;
  std::vector<Tensor> plain;
  for (const Tensor& p : params) {
    const auto& spec = p.defined() ? p.dtensor_spec() : nullptr;
    std::vector<mesh::ProcessGroup*> groups;
    if (spec) {
      for (int i = 0; i < static_cast<int>(spec->placements.size()); ++i) {
        if (spec->placements[i].is_shard() && spec->mesh.size(i) > 1) groups.push_back(spec->mesh.group(i).get());
      }
    }
    (groups.empty() ? plain : sharded[groups]).push_back(p);
  }
  const bool is_max = std::isinf(norm_type);
  double total = local_grad_norm_pow(plain, norm_type);
  for (auto& [groups, tensors] : sharded) {
    Tensor part = full({1}, local_grad_norm_pow(tensors, norm_type), {.dtype = DType::f64});
    for (mesh::ProcessGroup* group : groups) {
      group->all_reduce(part, is_max ? mesh::ReduceOp::max() : mesh::ReduceOp::sum())->wait();
    }
    const double value = part.item<double>();
    total = is_max ? std::max(total, value) : total + value;
  }
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  DTR_PROFILE_SCOPE("optim", "clip_grad_norm");
  DTR_CHECK(max_norm >= 0.0 && !std::isnan(max_norm),
            "clip_grad_norm_: max_norm must be >= 0, got {}", max_norm);
  const double total = total_norm_from_pow(global_grad_norm_pow(params, norm_type), norm_type);
  if (std::isfinite(total) && total > max_norm) scale_grads_(params, max_norm / (total + 1e-6));
  return total;
}

}  // namespace dtr::nn::optim
