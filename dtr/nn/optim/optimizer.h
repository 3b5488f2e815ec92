// Optimizer: the base of dtr's optimizers (SGD, Adam, AdamW), in dtr::nn::optim.
//
// An optimizer holds a list of parameters (nn::Parameter handles, as
// model.parameters() gives them, or plain tensors; each holding a leaf tensor that
// requires grad, f32 or f64; bf16/f16 parameters are refused until mixed precision
// brings f32 master weights) and, per parameter, a step count and named state tensors
// ("momentum_buffer", "exp_avg", ...). step() updates every parameter that has a
// gradient (the others are skipped and get no state) under NoGradGuard; the math
// touches only `param` and `param.grad()` elementwise, so it works unchanged when
// a parameter holds only a local shard (FSDP). It reads each parameter's slot at
// every step, so it follows to() and load_state_dict() replacing the tensor. State tensors are created lazily on
// a parameter's first update, with the parameter's shape, dtype and device,
// counted under MemoryTag::optimizer_state. step() checks every gradient before
// it changes anything, then hands all updates to update_all() at once.
//
// Parameter groups, as PyTorch's param_groups: an optimizer built from a list of
// ParamGroup gives each group its own hyperparameters (GroupOptions; what a group
// leaves unset is the optimizer's option), e.g. weight decay on matrices only:
//
//   AdamW opt({{matrices, {.weight_decay = 0.1}}, {biases_and_norms, {.weight_decay = 0.0}}}, {.lr = 3e-4});
//
// params() lists the parameters group by group, which is the order of their state.
//
// lr() / set_lr() are what LR schedules drive (dtr/nn/optim/lr_schedule.h). A group
// that sets its own lr keeps its ratio to lr(): group_lr(g) is lr() times the
// group's lr over the optimizer's, both as constructed, so a schedule scales every
// group alike (as PyTorch's schedulers scale each group's initial lr). An optimizer
// built with lr 0 (to be set by a schedule) has no ratio: its groups, which may not
// set an lr of their own, follow lr(). The other hyperparameters are fixed at
// construction.
//
// state_dict() returns an OptimizerState: the optimizer's kind, lr, the size of
// each group, and for each parameter (by position) its step and named state
// tensors. The tensors are handles to the live state (no copy), like PyTorch.
// load_state_dict() checks the kind, the parameter count and group sizes, each
// state's names, shapes, dtypes and devices, then copies the values into the
// optimizer's own state tensors (newly allocated under MemoryTag::optimizer_state),
// so the dict can be dropped or reused afterwards.
#pragma once

#include "dtr/nn/parameter.h"
#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtr::nn::optim {

// One parameter's optimizer state. Empty `tensors` and step 0 until its first update.
struct ParamState {
  int64_t step = 0;  // number of updates this parameter has received
  std::map<std::string, Tensor> tensors;
};

// What an optimizer is built from: module parameters (model.parameters()), or
// plain tensors ({w, b}, a std::vector<Tensor>), each then in a slot of its own.
struct OptimizerParams {
  OptimizerParams(std::vector<Parameter> params) : params(std::move(params)) {}
  OptimizerParams(const std::vector<Tensor>& tensors) : params(as_parameters(tensors)) {}
  OptimizerParams(std::initializer_list<Tensor> tensors) : params(as_parameters(tensors)) {}
  std::vector<Parameter> params;
};

// The hyperparameters one parameter group sets for itself; unset ones are the
// optimizer's. A group may set only what its optimizer has: Adam and AdamW take
// lr, weight_decay, beta1, beta2, eps; SGD takes lr, weight_decay, momentum,
// dampening.
struct GroupOptions {
  std::optional<double> lr{};
  std::optional<double> weight_decay{};
  std::optional<double> beta1{};
  std::optional<double> beta2{};
  std::optional<double> eps{};
  std::optional<double> momentum{};
  std::optional<double> dampening{};
};

// One entry of an optimizer's parameter groups.
struct ParamGroup {
  OptimizerParams params;
  GroupOptions options = {};
};

// What state_dict() gives and load_state_dict() takes.
struct OptimizerState {
  std::string kind;  // "SGD", "Adam", "AdamW": must match on load
  double lr = 0.0;
  // Parameters per group, in order; must match on load. Empty: not checked (state
  // matched to parameters by name, as checkpoints do, keeps the loading optimizer's groups).
  std::vector<size_t> group_sizes;
  std::vector<ParamState> params;  // one per parameter, in construction order
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient (the grad must match the
  // parameter's shape, dtype and device).
  void step();
  // Drops every gradient (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);  // finite and >= 0

  size_t num_groups() const { return groups_.size(); }
  double group_lr(size_t group) const;
  // The group of params()[index].
  size_t group_of(size_t index) const;

  const std::string& kind() const { return kind_; }
  const std::vector<Parameter>& params() const { return params_; }
  const ParamState& state(size_t index) const;

  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 protected:
  // `kind` names the optimizer in errors and state dicts; `lr` is the optimizer's
  // lr, which groups that set none take.
  Optimizer(std::vector<ParamGroup> groups, double lr, std::string kind);

  // The options group `group` was given (for the subclass to resolve its own).
  const GroupOptions& group_options(size_t group) const;
  // Refuses, naming the group and the option, a group option outside `known`
  // (the hyperparameters this optimizer has).
  void refuse_unknown_group_options(std::initializer_list<const char*> known) const;
  // "AdamW" for a single group, "AdamW param group 2" otherwise: for errors about a group's options.
  std::string group_name(size_t group) const;

  // Names of the state tensors each parameter of `group` gets (zeros like the parameter).
  virtual std::vector<std::string> state_names(size_t group) const = 0;
  // Updates one parameter of `group` in place; `state.step` has already been
  // incremented (it is 1 on the first update). Runs under NoGradGuard.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state, size_t group) = 0;

  // One parameter's update as step() hands it over: its state exists and its step
  // has been incremented.
  struct PendingUpdate {
    Tensor param;
    Tensor grad;
    ParamState* state;
    size_t group;
  };
  // Refuses, naming the parameter, any parameter that a fused multi-tensor kernel
  // cannot take: one off the CPU and CUDA devices, or not contiguous. `who` names the
  // fused optimizer, `fallback` the op-by-op one to use instead.
  void check_fusable_params(const char* who, const char* fallback) const;
  // Whether a step's updates go to a fused multi-tensor kernel, by an optimizer's
  // `fused` option: unset, when the kernel can take every parameter (contiguous, on
  // the CPU or a CUDA device); true, always (refusing a parameter it cannot take, as
  // check_fusable_params does); false, never.
  bool use_fused(std::optional<bool> fused, const std::vector<PendingUpdate>& updates, const char* who,
                 const char* fallback) const;

  // Applies every pending update of one step() (after all grads were checked).
  // The default calls update() on each in order; the multi-tensor optimizers
  // (AdamW, SGD) override it to update each group's in one pass.
  virtual void update_all(const std::vector<PendingUpdate>& updates);
  // The updates of each group, in group order (groups without one are left out).
  static std::vector<std::vector<PendingUpdate>> by_group(const std::vector<PendingUpdate>& updates);

 private:
  struct Group {
    size_t begin = 0, end = 0;  // its parameters: params_[begin, end)
    double initial_lr = 0.0;    // its lr as constructed
    GroupOptions options;
  };
  std::vector<Parameter> params_;
  std::vector<ParamState> state_;
  std::vector<Group> groups_;
  double lr_;
  double initial_lr_;
  std::string kind_;
};

}  // namespace dtr::nn::optim
