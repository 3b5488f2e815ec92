// nn::Module: the base of every layer and model. A module owns named parameters
// (leaf tensors requiring grad), buffers and child modules, and computes
// forward(input) -> output on one tensor, or forward_multi(inputs) -> outputs on
// several (tokens and positions in, logits and an auxiliary loss out).
//
// The general mechanisms FSDP relies on (it never special-cases a layer type):
//   - named_parameters() / named_modules() with dotted names ("layers.0.weight");
//   - parameter slots (dtr/nn/parameter.h) holding the parameter's own tensor (a
//     sharded parameter: the local shard) and, while fully_shard has one
//     installed, the unsharded tensor the module computes with instead
//     (install_parameter). Modules read their parameters through the slot on
//     every forward: by name (parameter()), or through the Parameter handle
//     register_parameter returned, never through a Tensor copied out of the slot;
//   - forward pre-hooks and post-hooks that see and may replace the inputs and
//     the outputs. Call a module with operator() or call(), which run the hooks;
//     calling forward() directly bypasses them.
// Wrappers: a module may register one child with an empty name
// (register_wrapped_module); that child's parameters, buffers and descendants
// keep the names they would have without the wrapper ("layers.0.attn.wq.weight",
// not "layers.0.module.attn.wq.weight"), and named_modules() lists it under the
// wrapper's own path, right after the wrapper. checkpoint_wrapper (dtr/nn/activation_checkpoint.h)
// uses this, so a checkpointed model has the state dict of the plain one.
// A parent's child can be swapped for another module with replace_child (what
// apply_activation_checkpointing does); the parent must support it (containers do).
// Initialisation: parameters are made (or re-made on another device with
// to_empty) and then filled by reset_parameters(), which visits modules in
// named_modules() order, each filling its own parameters through the RNG.
// Memory (dtr/tensor/memory_stats.h): what a call allocates under no tag of the
// caller's (its outputs and the tensors it saves for backward) is counted as
// MemoryTag::activation, for any module, a user's too.
// Profiling (dtr/tensor/profiler.h): while the profiler records, operator() records
// a "forward" span (hooks included) and, when the output needs a gradient, a
// "backward" span from the moment an output's gradient is first ready to the moment
// the inputs' gradients are (so FSDP's pre-backward all-gather and post-backward
// reduce-scatter fall inside it); a module whose inputs need no gradient (token
// ids) ends its backward span at the end of the graph. For the backward span the
// caller then gets aliases of the outputs (same storage, one more autograd node)
// and the module aliases of its inputs. Both spans are named by profile_name():
// the type name, or "path (Type)" after name_modules_for_profiling.
// Off, operator() costs one relaxed atomic load more and changes nothing. The spans
// are built in, not a hook the profiler installs, because they must enclose every
// hook (FSDP's all-gathers included) and come before every gradient hook on the
// output, an order that one hook among others cannot guarantee.
#pragma once

#include "dtr/nn/parameter.h"
#include "dtr/tensor/tensor.h"

#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtr::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
namespace detail {
struct ModuleBackwardSpan;
}
using StateDict = std::map<std::string, Tensor>;
// The inputs or outputs of a module that takes or returns several tensors.
using Tensors = std::vector<Tensor>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer's name in summaries and errors ("Linear", "Sequential", ...).
  virtual std::string type_name() const = 0;
  // One tensor in, one out: what most layers override. A module taking or
  // returning several tensors overrides forward_multi instead.
  virtual Tensor forward(const Tensor& input);
  // Any number of tensors in and out, in an order the module documents. The
  // default passes a single input to forward(). Hooks, fully_shard, activation
  // checkpointing and the profiler see every input and output.
  virtual Tensors forward_multi(const Tensors& inputs);
  // Runs the forward pre-hooks, the forward and the forward hooks. This form
  // needs a module that returns one tensor.
  Tensor operator()(const Tensor& input);
  // The same for any number of inputs and outputs: module.call({tokens, positions}),
  // or module(tokens, positions).
  Tensors call(const Tensors& inputs);
  template <class... More>
    requires(std::convertible_to<const More&, const Tensor&> && ...)
  Tensors operator()(const Tensor& first, const Tensor& second, const More&... more) {
    return call(Tensors{first, second, more...});
  }

  // --- parameters, buffers, children ---
  // Handles to the parameter slots (dtr/nn/parameter.h), by dotted name.
  std::vector<std::pair<std::string, Parameter>> named_parameters(bool recurse = true) const;
  std::vector<Parameter> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  // Replaces child `name` (a name named_children() gives) by `module`, in the same
  // place among the children. Only modules that allow it (override
  // on_replace_child: Sequential, ModuleList) accept; others refuse with an error,
  // because they may call the old child through a member of their own.
  void replace_child(const std::string& name, ModulePtr module);
  // This module ("") and every descendant, parents before children, in registration order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Elements of every parameter, tied ones once: of the global parameters where
  // sharded (fully_shard, tensor parallel), so the count is the unsharded model's
  // at any world size, as PyTorch's sum of p.numel() over DTensor parameters.
  int64_t num_parameters() const;
  // Elements this rank holds: the local shards of sharded parameters.
  int64_t num_local_parameters() const;

  // What this module's own parameter `name` (not a child's) computes with now
  // (Parameter::in_use()), and the handle to its slot.
  const Tensor& parameter(const std::string& name) const;
  Parameter parameter_handle(const std::string& name) const;
  // Replaces parameter `name`'s own tensor (tying it to another module's tensor,
  // say). A sharded parameter keeps its layout, so the tensor must have its local
  // shape.
  void set_parameter(const std::string& name, Tensor value);
  // Makes parameter `name` a sharded one: its own tensor is this rank's local
  // shard of the DTensor laid out by `sharding` (what fully_shard and
  // tensor-parallel plans do). The shard must have the layout's local shape.
  void set_sharded_parameter(const std::string& name, Tensor local_shard,
                             std::shared_ptr<const DTensorSpec> sharding);
  // Makes the module compute with `tensor` in place of parameter `name` (an
  // undefined tensor: without it) until it is called again with nullopt. The
  // parameter's own tensor, which optimizers step, is untouched: fully_shard
  // installs the unsharded tensor for a forward and backward this way.
  void install_parameter(const std::string& name, std::optional<Tensor> tensor);
  // What install_parameter put in place of parameter `name`, or nullopt: a hook
  // that installs a tensor of its own puts this back after.
  std::optional<Tensor> installed_parameter(const std::string& name) const;
  bool has_parameter(const std::string& name) const;

  // --- devices, dtypes, initialisation ---
  void to(Device device);        // copies parameters and buffers (they stay leaves)
  void to(DType dtype);          // floating parameters and buffers only
  void to_empty(Device device);  // re-allocates without copying (meta -> real device)
  // Fills every parameter of this module and its descendants.
  void reset_parameters();

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // --- state ---
  // Parameters and buffers by dotted name (detached: same storage, no grad).
  StateDict state_dict() const;
  // Copies values in. strict: every key of the module must be present and no extra
  // key may be; errors list the missing, unexpected and mismatched keys. A sharded
  // parameter (fully_shard, tensor parallel) takes a value of its global shape, of
  // which each rank keeps its own rows (so every rank loads the same full dict, as
  // with set_model_state_dict's full_state_dict), or a local shard of the same layout.
  void load_state_dict(const StateDict& state, bool strict = true);
  void zero_grad(bool set_to_none = true);

  // --- hooks ---
  // Pre-hook: sees the input; returning a defined tensor replaces it.
  using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
  // Hook: sees input and output; returning a defined tensor replaces the output.
  using ForwardHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
  // The forms for any number of inputs and outputs: returning a non-empty list
  // replaces all the inputs (outputs). A one-tensor hook on a module called with
  // several inputs, or returning several outputs, is an error that says so.
  using MultiForwardPreHook = std::function<Tensors(Module& module, const Tensors& inputs)>;
  using MultiForwardHook =
      std::function<Tensors(Module& module, const Tensors& inputs, const Tensors& outputs)>;
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  int register_forward_pre_hook(MultiForwardPreHook hook);
  int register_forward_hook(MultiForwardHook hook);
  void remove_hook(int handle);

  // --- profiling ---
  // The name of this module's spans (interned; type_name() until set).
  const char* profile_name();
  void set_profile_name(std::string_view name);

 protected:
  // Registers a parameter (made a leaf requiring grad if floating) and returns the
  // handle to its slot, which a module may keep in a member.
  Parameter register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  void register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Registers `module` as this module's wrapped child: a child with the empty name,
  // whose names are not prefixed (see the header comment). At most one per module.
  template <class M>
  std::shared_ptr<M> register_wrapped_module(std::shared_ptr<M> module) {
    add_child("", module);
    return module;
  }
  // replace_child calls this first: a module that holds its children (also) in its
  // own members updates them here. The default refuses the replacement.
  virtual void on_replace_child(const std::string& name, const ModulePtr& old_module,
                                const ModulePtr& new_module);
  // Fills this module's own parameters (default: nothing to fill).
  virtual void reset_own_parameters() {}

 private:
  void add_child(const std::string& name, ModulePtr module);
  // Hooks and forward; `backward` (profiling only) times this call's backward.
  Tensors call_with_hooks(Tensors inputs, const std::shared_ptr<detail::ModuleBackwardSpan>& backward);
  const Parameter* find_parameter(const std::string& name) const;

  std::vector<std::pair<std::string, Parameter>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::vector<std::pair<int, MultiForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int, MultiForwardHook>> post_hooks_;
  int next_hook_handle_ = 0;
  bool training_ = true;
  const char* profile_name_ = nullptr;
};

// The dotted name of `name` under the module path `prefix` ("layers.0" + "weight" is
// "layers.0.weight"); either may be empty (the root's path, or the module itself).
std::string qualified_name(const std::string& prefix, const std::string& name);

// Names every module's profiler spans "path (Type)" ("layers.0 (TransformerBlock)";
// the root: its type). fully_shard's lazy init does this for the root's tree
// when the profiler is on.
void name_modules_for_profiling(Module& root);

}  // namespace dtr::nn
