#include "dtr/nn/module.h"

#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>
#include <optional>
#include <set>

namespace dtr::nn {

namespace {

void check_local_name(const Module& m, const std::string& kind, const std::string& name) {
  DTR_CHECK(!name.empty() && name.find('.') == std::string::npos,
            "{}: {} name '{}' must be non-empty and contain no '.'", m.type_name(), kind, name);
}

// A parameter tensor: a leaf counted under MemoryTag::param, requiring grad if asked.
Tensor as_parameter(Tensor t, bool requires_grad) {
  if (!t.device().is_meta() && t.storage().tag() != MemoryTag::param) t.storage().set_tag(MemoryTag::param);
  if (requires_grad && is_floating(t.dtype())) t.requires_grad_(true);
  return t;
}

}  // namespace

namespace detail {

// One profiled call's backward span: begun by a node on an output's alias (the
// first to get its gradient), ended after the inputs' gradients
// (call_after_backward) or, when no input needs one, at the end of the graph.
struct ModuleBackwardSpan : std::enable_shared_from_this<ModuleBackwardSpan> {
  const char* name = nullptr;
  bool input_needs_grad = false;
  bool began = false, ended = false;
  int64_t begin_ns = 0;

  void begin() {
    if (began) return;
    began = true;
    begin_ns = profiler::now_ns();
    if (!input_needs_grad) close_at_graph_end();
  }
  void end(int64_t t) {
    if (!began || ended) return;
    ended = true;
    profiler::record("backward", name, begin_ns, t);
  }
  void close_at_graph_end();
};

namespace {

// Spans of this thread waiting for the end of the graph. Each is closed by the
// first end-of-backward callback after it began, all at the same instant and
// innermost first, so that they nest.
thread_local std::vector<std::shared_ptr<ModuleBackwardSpan>> t_open_until_graph_end;

}  // namespace

void ModuleBackwardSpan::close_at_graph_end() {
  t_open_until_graph_end.push_back(shared_from_this());
  autograd::queue_callback([] {
    const int64_t t = profiler::now_ns();
    auto open = std::move(t_open_until_graph_end);
    t_open_until_graph_end.clear();
    for (auto it = open.rbegin(); it != open.rend(); ++it) (*it)->end(t);
  });
}

}  // namespace detail

Tensor Module::forward(const Tensor&) {
  DTR_FAIL("{}: has no forward; a module overrides forward(const Tensor&) (one tensor in, one out) or "
           "forward_multi(const Tensors&) (several)",
           type_name());
}

Tensors Module::forward_multi(const Tensors& inputs) {
  DTR_CHECK(inputs.size() == 1,
            "{}: called with {} inputs, but it takes one (it overrides forward(const Tensor&)); a module "
            "taking several overrides forward_multi(const Tensors&)",
            type_name(), inputs.size());
  return {forward(inputs[0])};
}

Tensor Module::operator()(const Tensor& input) {
  Tensors out = call(Tensors{input});
  DTR_CHECK(out.size() == 1,
            "{}: returned {} tensors where one was expected; call a module returning several with "
            "call({{...}}) or module(a, b, ...)",
            type_name(), out.size());
  return std::move(out[0]);
}

Tensors Module::call(const Tensors& inputs) {
  // What a forward allocates without a tag of its own (its outputs, the tensors it
  // saves for backward) is counted as activations; a caller that set a tag keeps it.
  std::optional<MemoryTagGuard> activations;
  if (current_memory_tag() == MemoryTag::other) activations.emplace(MemoryTag::activation);
  if (!profiler::enabled()) [[likely]] return call_with_hooks(inputs, nullptr);
  const int64_t start = profiler::now_ns();
  std::shared_ptr<detail::ModuleBackwardSpan> backward;
  if (autograd::is_grad_enabled()) {
    backward = std::make_shared<detail::ModuleBackwardSpan>();
    backward->name = profile_name();
  }
  Tensors out = call_with_hooks(inputs, backward);
  profiler::record("forward", profile_name(), start, profiler::now_ns());
  return out;
}

Tensors Module::call_with_hooks(Tensors x, const std::shared_ptr<detail::ModuleBackwardSpan>& backward) {
  if (backward && autograd::any_requires_grad(x)) {
    // Before the pre-hooks: FSDP's post-backward (installed by its pre-hook the
    // same way) runs before this, inside the span.
    backward->input_needs_grad = true;
    x = autograd::call_after_backward(x, [backward] { backward->end(profiler::now_ns()); });
  }
  for (auto& [handle, hook] : pre_hooks_) {
    Tensors replaced = hook(*this, x);
    if (!replaced.empty()) x = std::move(replaced);
  }
  Tensors out = forward_multi(x);
  for (auto& [handle, hook] : post_hooks_) {
    Tensors replaced = hook(*this, x, out);
    if (!replaced.empty()) out = std::move(replaced);
  }
  if (backward) {
    for (Tensor& o : out) {
      if (!o.defined() || !o.requires_grad()) continue;
      // The caller gets an alias whose backward node begins the span: the gradient
      // passes it before any hook on `o` (FSDP's pre-backward) and before the
      // backward of a child module that returned the same tensor (a Sequential's
      // last layer), so the spans nest. (A gradient hook on `o` would run after
      // the hooks registered before it, the child's among them.)
      o = autograd::record_unary(o, o.detach(), "ModuleBackwardBegin", [backward](const Tensor& grad) {
        backward->begin();
        return grad;
      });
    }
  }
  return out;
}

const char* Module::profile_name() {
  if (profile_name_ == nullptr) profile_name_ = profiler::intern(type_name());
  return profile_name_;
}

void Module::set_profile_name(std::string_view name) { profile_name_ = profiler::intern(name); }

std::string qualified_name(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}

void name_modules_for_profiling(Module& root) {
  for (auto& [path, m] : root.named_modules()) {
    m->set_profile_name(path.empty() ? m->type_name() : path + " (" + m->type_name() + ")");
  }
}

std::vector<std::pair<std::string, Parameter>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Parameter>> out = parameters_;
  if (!recurse) return out;
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, p] : child->named_parameters(true)) out.emplace_back(qualified_name(child_name, name), p);
  }
  return out;
}

std::vector<Parameter> Module::parameters(bool recurse) const {
  std::vector<Parameter> out;
  for (auto& [name, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out = buffers_;
  if (!recurse) return out;
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, b] : child->named_buffers(true)) out.emplace_back(qualified_name(child_name, name), b);
  }
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [child_name, child] : children_) {
    for (auto& [name, m] : child->named_modules()) out.emplace_back(qualified_name(child_name, name), m);
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Parameter& p : parameters()) n += p.global_numel();
  return n;
}

int64_t Module::num_local_parameters() const {
  int64_t n = 0;
  for (const Parameter& p : parameters()) n += p.data().numel();
  return n;
}

const Parameter* Module::find_parameter(const std::string& name) const {
  for (const auto& [n, p] : parameters_) {
    if (n == name) return &p;
  }
  return nullptr;
}

bool Module::has_parameter(const std::string& name) const {
  return std::any_of(parameters_.begin(), parameters_.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& Module::parameter(const std::string& name) const { return parameter_handle(name).in_use(); }

Parameter Module::parameter_handle(const std::string& name) const {
  if (const Parameter* p = find_parameter(name)) return *p;
  std::vector<std::string> names;
  for (const auto& [n, p] : parameters_) names.push_back(n);
  DTR_FAIL("{}: no parameter named '{}' (it has: {})", type_name(), name, fmt::join(names, ", "));
}

void Module::set_parameter(const std::string& name, Tensor value) {
  const Parameter* p = find_parameter(name);
  DTR_CHECK(p != nullptr, "{}: no parameter named '{}' to replace", type_name(), name);
  const DTensorSpec* sharding = p->sharding();
  DTR_CHECK(sharding == nullptr || (value.defined() && value.sizes() == sharding->local_shape()),
            "{}: parameter '{}' is sharded ({}), so its tensor must be this rank's shard of shape {}, got {}",
            type_name(), name, sharding ? sharding->to_string() : "",
            sharding ? shape_str(sharding->local_shape()) : "",
            value.defined() ? shape_str(value.sizes()) : std::string("an undefined tensor"));
  p->slot().value = std::move(value);
}

void Module::install_parameter(const std::string& name, std::optional<Tensor> tensor) {
  const Parameter* p = find_parameter(name);
  DTR_CHECK(p != nullptr, "{}: no parameter named '{}' to install a tensor for", type_name(), name);
  p->slot().installed = std::move(tensor);
}

std::optional<Tensor> Module::installed_parameter(const std::string& name) const {
  const Parameter* p = find_parameter(name);
  DTR_CHECK(p != nullptr, "{}: no parameter named '{}'", type_name(), name);
  return p->slot().installed;
}

void Module::set_sharded_parameter(const std::string& name, Tensor local_shard,
                                   std::shared_ptr<const DTensorSpec> sharding) {
  const Parameter* p = find_parameter(name);
  DTR_CHECK(p != nullptr, "{}: no parameter named '{}' to shard", type_name(), name);
  DTR_CHECK(sharding != nullptr && local_shard.sizes() == sharding->local_shape(),
            "{}: parameter '{}': the local shard has shape {}, its layout {} wants {}", type_name(), name,
            shape_str(local_shard.sizes()), sharding ? sharding->to_string() : std::string("(none)"),
            sharding ? shape_str(sharding->local_shape()) : std::string("-"));
  p->slot() = Parameter::Slot{std::move(local_shard), std::nullopt, std::move(sharding)};
}

Parameter Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_local_name(*this, "parameter", name);
  DTR_CHECK(value.defined(), "{}: parameter '{}' is undefined", type_name(), name);
  DTR_CHECK(!has_parameter(name), "{}: parameter '{}' is registered twice", type_name(), name);
  parameters_.emplace_back(
      name, Parameter(std::make_shared<Parameter::Slot>(
                Parameter::Slot{as_parameter(std::move(value), requires_grad), std::nullopt, nullptr})));
  return parameters_.back().second;
}

void Module::register_buffer(const std::string& name, Tensor value) {
  check_local_name(*this, "buffer", name);
  buffers_.emplace_back(name, std::move(value));
}

void Module::add_child(const std::string& name, ModulePtr module) {
  if (!name.empty()) check_local_name(*this, "child module", name);  // "": the wrapped child
  DTR_CHECK(module != nullptr, "{}: child module '{}' is null", type_name(), name);
  for (const auto& [n, c] : children_) {
    DTR_CHECK(n != name, "{}: child module '{}' is registered twice", type_name(), name);
  }
  children_.emplace_back(name, std::move(module));
}

void Module::replace_child(const std::string& name, ModulePtr module) {
  DTR_CHECK(module != nullptr, "{}.replace_child: the new module for '{}' is null", type_name(), name);
  for (auto& [n, child] : children_) {
    if (n != name) continue;
    on_replace_child(name, child, module);
    child = std::move(module);
    return;
  }
  std::vector<std::string> names;
  for (const auto& [n, c] : children_) names.push_back(n.empty() ? "\"\"" : n);
  DTR_FAIL("{}.replace_child: no child named '{}' (it has: {})", type_name(), name, fmt::join(names, ", "));
}

void Module::on_replace_child(const std::string& name, const ModulePtr& old_module, const ModulePtr&) {
  DTR_FAIL("{}: cannot replace its child '{}' ({}): it may call the child through a member of its own; only "
           "modules that override on_replace_child (Sequential, ModuleList) allow replacing children",
           type_name(), name, old_module->type_name());
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, param] : parameters_) {
    Tensor& p = param.slot().value;  // a shard stays a shard: the slot keeps its sharding
    if (p.device() == device) continue;
    bool wants_grad = p.requires_grad();
    MemoryTagGuard tag(MemoryTag::param);
    p = as_parameter(p.to(device), wants_grad);
  }
  for (auto& [name, b] : buffers_) b = b.to(device);
  for (auto& [name, child] : children_) child->to(device);
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for (auto& [name, param] : parameters_) {
    Tensor& p = param.slot().value;
    if (!is_floating(p.dtype()) || p.dtype() == dtype) continue;
    bool wants_grad = p.requires_grad();
    MemoryTagGuard tag(MemoryTag::param);
    p = as_parameter(p.to(dtype), wants_grad);
  }
  for (auto& [name, b] : buffers_) {
    if (is_floating(b.dtype())) b = b.to(dtype);
  }
  for (auto& [name, child] : children_) child->to(dtype);
}

void Module::to_empty(Device device) {
  for (auto& [name, param] : parameters_) {
    Tensor& p = param.slot().value;  // a shard stays a shard: the slot keeps its sharding
    bool wants_grad = p.requires_grad();
    p = as_parameter(empty(p.sizes(), {.dtype = p.dtype(), .device = device, .tag = MemoryTag::param}), wants_grad);
  }
  for (auto& [name, b] : buffers_) b = empty(b.sizes(), {.dtype = b.dtype(), .device = device});
  for (auto& [name, child] : children_) child->to_empty(device);
}

void Module::reset_parameters() {
  NoGradGuard no_grad;
  for (auto& [name, m] : named_modules()) m->reset_own_parameters();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, p] : named_parameters()) out[name] = p.data().detach();
  for (auto& [name, b] : named_buffers()) out[name] = b.detach();
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  // Each target: where the value goes, and for a sharded parameter its layout.
  struct Target {
    std::string name;
    Tensor local;
    const DTensorSpec* sharding = nullptr;
  };
  std::vector<Target> targets;
  for (auto& [name, p] : named_parameters()) targets.push_back({name, p.data(), p.sharding()});
  for (auto& [name, b] : named_buffers()) targets.push_back({name, b});
  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  // What is copied into each target: the value itself, or this rank's rows of a
  // full (global) value of a sharded parameter.
  std::vector<Tensor> sources(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    known.insert(t.name);
    auto it = state.find(t.name);
    if (it == state.end()) {
      missing.push_back(t.name);
      continue;
    }
    const Tensor& value = it->second;
    if (t.sharding && value.sizes() == t.sharding->shape) {
      Tensor rows = value;
      const Shape offset = t.sharding->local_offset();
      for (int64_t d = 0; d < rows.dim(); ++d) rows = rows.narrow(d, offset[d], t.local.size(d));
      sources[i] = rows;
    } else if (value.sizes() == t.local.sizes()) {
      sources[i] = value;  // a shard saved from the same layout, or a plain tensor
    } else if (t.sharding) {  // the message is the same on every rank: global shapes only
      mismatched.push_back(fmt::format("{} (checkpoint {}, sharded parameter of global shape {})", t.name,
                                       shape_str(value.sizes()), shape_str(t.sharding->shape)));
    } else {
      mismatched.push_back(
          fmt::format("{} (checkpoint {}, module {})", t.name, shape_str(value.sizes()), shape_str(t.local.sizes())));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  DTR_CHECK(mismatched.empty(), "{}.load_state_dict: shape mismatch for {}", type_name(),
            fmt::join(mismatched, "; "));
  DTR_CHECK(!strict || (missing.empty() && unexpected.empty()),
            "{}.load_state_dict: missing keys [{}], unexpected keys [{}]", type_name(),
            fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (sources[i].defined()) Tensor(targets[i].local).copy_(sources[i]);
  }
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Parameter& param : parameters()) {
    const Tensor& p = param.data();
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor(p.grad()).zero_();
    }
  }
}

int Module::register_forward_pre_hook(MultiForwardPreHook hook) {
  pre_hooks_.emplace_back(next_hook_handle_, std::move(hook));
  return next_hook_handle_++;
}

int Module::register_forward_hook(MultiForwardHook hook) {
  post_hooks_.emplace_back(next_hook_handle_, std::move(hook));
  return next_hook_handle_++;
}

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  return register_forward_pre_hook(MultiForwardPreHook([hook = std::move(hook)](Module& m, const Tensors& inputs) {
    DTR_CHECK(inputs.size() == 1,
              "{}: a one-tensor forward pre-hook is registered, but the module was called with {} inputs; "
              "register a hook taking Tensors (MultiForwardPreHook)",
              m.type_name(), inputs.size());
    Tensor replaced = hook(m, inputs[0]);
    return replaced.defined() ? Tensors{std::move(replaced)} : Tensors{};
  }));
}

int Module::register_forward_hook(ForwardHook hook) {
  return register_forward_hook(
      MultiForwardHook([hook = std::move(hook)](Module& m, const Tensors& inputs, const Tensors& outputs) {
        DTR_CHECK(inputs.size() == 1 && outputs.size() == 1,
                  "{}: a one-tensor forward hook is registered, but the module took {} inputs and returned {} "
                  "outputs; register a hook taking Tensors (MultiForwardHook)",
                  m.type_name(), inputs.size(), outputs.size());
        Tensor replaced = hook(m, inputs[0], outputs[0]);
        return replaced.defined() ? Tensors{std::move(replaced)} : Tensors{};
      }));
}

void Module::remove_hook(int handle) {
  std::erase_if(pre_hooks_, [&](const auto& h) { return h.first == handle; });
  std::erase_if(post_hooks_, [&](const auto& h) { return h.first == handle; });
}

}  // namespace dtr::nn
