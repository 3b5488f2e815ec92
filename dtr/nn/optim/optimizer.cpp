#include "dtr/nn/optim/optimizer.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

namespace dtr::nn::optim {

namespace {

void check_lr(const std::string& kind, double lr) {
  DTR_CHECK(std::isfinite(lr) && lr >= 0.0, "{}: lr must be finite and >= 0, got {}", kind, lr);
}

Tensor new_state_like(const Tensor& param) {
  MemoryTagGuard guard(MemoryTag::optimizer_state);
  return zeros_like(param);
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, std::string kind)
    : lr_(lr), initial_lr_(lr), kind_(std::move(kind)) {
  check_lr(kind_, lr_);
  DTR_CHECK(!groups.empty(), "{}: got no parameter groups", kind_);
  for (size_t g = 0; g < groups.size(); ++g) {
    Group group{.begin = params_.size(), .end = 0, .initial_lr = lr, .options = groups[g].options};
    const std::string name = groups.size() == 1 ? kind_ : fmt::format("{} param group {}", kind_, g);  // group_name()
    DTR_CHECK(!groups[g].params.params.empty(), "{}: got an empty parameter list", name);
    if (group.options.lr) {
      check_lr(name, *group.options.lr);
      DTR_CHECK(lr != 0.0 || *group.options.lr == 0.0,
                "{}: sets lr {} while the optimizer's lr is 0; a group's lr keeps its ratio to the optimizer's "
                "(which schedules set), so give the optimizer a nonzero lr",
                name, *group.options.lr);
      group.initial_lr = *group.options.lr;
    }
    for (Parameter& param : groups[g].params.params) params_.push_back(std::move(param));
    group.end = params_.size();
    groups_.push_back(std::move(group));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    DTR_CHECK(params_[i].defined() && params_[i].data().defined(), "{}: parameter {} is an undefined tensor", kind_, i);
    const Tensor& p = params_[i].data();
    DTR_CHECK(p.requires_grad(), "{}: parameter {} (shape {}) does not require grad", kind_, i,
              shape_str(p.sizes()));
    DTR_CHECK(p.is_leaf(), "{}: parameter {} (shape {}) is not a leaf tensor (it has a grad_fn)",
              kind_, i, shape_str(p.sizes()));
    DTR_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64,
              "{}: parameter {} has dtype {}; only f32 and f64 parameters are supported (bf16/f16 "
              "need f32 master weights, which come with mixed precision)",
              kind_, i, p.dtype());
    DTR_CHECK(!p.device().is_meta(), "{}: parameter {} is on the meta device (it has no data)",
              kind_, i);
    for (size_t j = 0; j < i; ++j) {
      DTR_CHECK(!params_[j].data().is_same(p), "{}: parameter {} appears twice (also at {}){}", kind_, i, j,
                group_of(i) != group_of(j) ? fmt::format(", in groups {} and {}", group_of(j), group_of(i)) : "");
    }
  }
  state_.resize(params_.size());
}

void Optimizer::set_lr(double lr) {
  check_lr(kind_, lr);
  lr_ = lr;
}

double Optimizer::group_lr(size_t group) const {
  DTR_CHECK(group < groups_.size(), "{}: group {} out of range for {} groups", kind_, group, groups_.size());
  const Group& g = groups_[group];
  if (lr_ == initial_lr_) return g.initial_lr;  // exactly as constructed
  // Built with lr 0 (a schedule sets it later), where no group has an lr of its
  // own (the constructor refuses one): every group follows lr().
  if (initial_lr_ == 0) return lr_;
  return g.initial_lr * (lr_ / initial_lr_);
}

size_t Optimizer::group_of(size_t index) const {
  DTR_CHECK(index < params_.size(), "{}: parameter index {} out of range for {} parameters", kind_, index,
            params_.size());
  size_t g = 0;
  while (index >= groups_[g].end) ++g;  // the last group ends at params_.size()
  return g;
}

const GroupOptions& Optimizer::group_options(size_t group) const {
  DTR_INTERNAL_ASSERT(group < groups_.size());
  return groups_[group].options;
}

std::string Optimizer::group_name(size_t group) const {
  return groups_.size() == 1 ? kind_ : fmt::format("{} param group {}", kind_, group);
}

void Optimizer::refuse_unknown_group_options(std::initializer_list<const char*> known) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupOptions& o = groups_[g].options;
    const std::pair<const char*, const std::optional<double>*> fields[] = {
        {"lr", &o.lr},     {"weight_decay", &o.weight_decay}, {"beta1", &o.beta1},        {"beta2", &o.beta2},
        {"eps", &o.eps}, {"momentum", &o.momentum},         {"dampening", &o.dampening}};
    for (const auto& entry : fields) {
      const std::string_view field = entry.first;
      if (!entry.second->has_value()) continue;
      const bool ok = std::any_of(known.begin(), known.end(), [field](const char* k) { return field == k; });
      DTR_CHECK(ok, "{}: sets {}, which {} does not have (it takes {})", group_name(g), field, kind_,
                fmt::join(known, ", "));
    }
  }
}

const ParamState& Optimizer::state(size_t index) const {
  DTR_CHECK(index < state_.size(), "{}: state index {} out of range for {} parameters", kind_,
            index, state_.size());
  return state_[index];
}

void Optimizer::step() {
  DTR_PROFILE_SCOPE("optim", "optimizer step");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].data();
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    DTR_CHECK(g.sizes() == p.sizes() && g.dtype() == p.dtype() && g.device() == p.device(),
              "{}: parameter {} is {} {} on {} but its grad is {} {} on {}", kind_, i,
              shape_str(p.sizes()), p.dtype(), p.device().str(), shape_str(g.sizes()), g.dtype(),
              g.device().str());
  }
  std::vector<PendingUpdate> updates;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<std::string> names = state_names(g);
    for (size_t i = groups_[g].begin; i < groups_[g].end; ++i) {
      const Tensor& p = params_[i].data();
      if (!p.grad().defined()) continue;
      ParamState& st = state_[i];
      if (st.tensors.empty()) {
        for (const std::string& name : names) st.tensors[name] = new_state_like(p);
      }
      ++st.step;
      updates.push_back({.param = p, .grad = p.grad(), .state = &st, .group = g});
    }
  }
  update_all(updates);
}

void Optimizer::update_all(const std::vector<PendingUpdate>& updates) {
  for (const PendingUpdate& u : updates) update(u.param, u.grad, *u.state, u.group);
}

std::vector<std::vector<Optimizer::PendingUpdate>> Optimizer::by_group(const std::vector<PendingUpdate>& updates) {
  std::vector<std::vector<PendingUpdate>> out;
  for (const PendingUpdate& u : updates) {
    if (out.empty() || out.back().front().group != u.group) out.emplace_back();
    out.back().push_back(u);
  }
  return out;
}

void Optimizer::check_fusable_params(const char* who, const char* fallback) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].data();
    DTR_CHECK(p.device().is_cpu() || p.device().is_cuda(),
              "{}: parameter {} (shape {}) is on {}; the fused kernels run on the CPU and CUDA devices only "
              "(use {} for other devices)",
              who, i, shape_str(p.sizes()), p.device().str(), fallback);
    DTR_CHECK(p.is_contiguous(),
              "{}: parameter {} (shape {}, strides {}) is not contiguous; the fused kernel needs contiguous "
              "parameters (use {})",
              who, i, shape_str(p.sizes()), shape_str(p.strides()), fallback);
  }
}

bool Optimizer::use_fused(std::optional<bool> fused, const std::vector<PendingUpdate>& updates, const char* who,
                          const char* fallback) const {
  if (fused == false) return false;
  for (const PendingUpdate& u : updates) {
    const Device device = u.param.device();
    if ((device.is_cpu() || device.is_cuda()) && u.param.is_contiguous()) continue;
    if (fused == true) check_fusable_params(who, fallback);  // throws, naming the parameter
    return false;
  }
  return true;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Parameter& param : params_) {
    const Tensor& p = param.data();
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad({});
    } else {
      Tensor g = p.grad();  // a handle to the same data
      g.zero_();
    }
  }
}

OptimizerState Optimizer::state_dict() const {
  std::vector<size_t> sizes;
  for (const Group& g : groups_) sizes.push_back(g.end - g.begin);
  return {.kind = kind_, .lr = lr_, .group_sizes = std::move(sizes), .params = state_};
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  DTR_CHECK(state.kind == kind_, "{}: load_state_dict got the state of a {} optimizer", kind_,
            state.kind);
  DTR_CHECK(state.params.size() == params_.size(),
            "{}: load_state_dict got state for {} parameters, the optimizer has {}", kind_,
            state.params.size(), params_.size());
  check_lr(kind_, state.lr);
  if (!state.group_sizes.empty()) {
    std::vector<size_t> sizes;
    for (const Group& g : groups_) sizes.push_back(g.end - g.begin);
    DTR_CHECK(state.group_sizes == sizes,
              "{}: load_state_dict got param groups of [{}] parameters, the optimizer has [{}]", kind_,
              fmt::join(state.group_sizes, ", "), fmt::join(sizes, ", "));
  }
  // Check everything before changing anything.
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::vector<std::string> names = state_names(group_of(i));
    const Tensor& p = params_[i].data();
    const ParamState& src = state.params[i];
    DTR_CHECK(src.step >= 0, "{}: load_state_dict: parameter {} has a negative step {}", kind_, i,
              src.step);
    if (src.tensors.empty()) continue;  // not updated yet
    DTR_CHECK(src.tensors.size() == names.size(),
              "{}: load_state_dict: parameter {} has {} state tensors, expected {} ({})", kind_, i,
              src.tensors.size(), names.size(), fmt::join(names, ", "));
    for (const std::string& name : names) {
      auto it = src.tensors.find(name);
      DTR_CHECK(it != src.tensors.end(), "{}: load_state_dict: parameter {} lacks state '{}'",
                kind_, i, name);
      const Tensor& t = it->second;
      DTR_CHECK(t.defined(), "{}: load_state_dict: state '{}' of parameter {} is undefined", kind_,
                name, i);
      DTR_CHECK(t.sizes() == p.sizes() && t.dtype() == p.dtype() && t.device() == p.device(),
                "{}: load_state_dict: state '{}' of parameter {} is {} {} on {}, expected {} {} "
                "on {} (like the parameter)",
                kind_, name, i, shape_str(t.sizes()), t.dtype(), t.device().str(),
                shape_str(p.sizes()), p.dtype(), p.device().str());
    }
  }
  NoGradGuard no_grad;
  std::vector<ParamState> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    loaded[i].step = state.params[i].step;
    for (const auto& [name, t] : state.params[i].tensors) {
      Tensor own = new_state_like(params_[i].data());
      own.copy_(t);
      loaded[i].tensors[name] = own;
    }
  }
  state_ = std::move(loaded);
  lr_ = state.lr;
}

}  // namespace dtr::nn::optim
