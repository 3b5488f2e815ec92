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
// lr() / set_lr() are what LR schedules drive (nn/optim/lr_schedule.h). The other
// hyperparameters are fixed at construction.
//
// state_dict() returns an OptimizerState: the optimizer's kind, lr, and for each
// parameter (by position) its step and named state tensors. The tensors are
// handles to the live state (no copy), like PyTorch. load_state_dict() checks the
// kind, the parameter count, each state's names, shapes, dtypes and devices, then
// copies the values into the optimizer's own state tensors (newly allocated under
// MemoryTag::optimizer_state), so the dict can be dropped or reused afterwards.
#pragma once

#include "nn/parameter.h"
#include "tensor/tensor.h"

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

// What state_dict() gives and load_state_dict() takes.
struct OptimizerState {
  std::string kind;  // "SGD", "Adam", "AdamW": must match on load
  double lr = 0.0;
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

  const std::string& kind() const { return kind_; }
  const std::vector<Parameter>& params() const { return params_; }
  const ParamState& state(size_t index) const;

  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 protected:
  // `kind` names the optimizer in errors and state dicts.
  Optimizer(OptimizerParams params, double lr, std::string kind);

  // Names of the state tensors each parameter gets (zeros like the parameter).
  virtual std::vector<std::string> state_names() const = 0;
  // Updates one parameter in place; `state.step` has already been incremented
  // (it is 1 on the first update). Runs under NoGradGuard.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state) = 0;

  // One parameter's update as step() hands it over: its state exists and its step
  // has been incremented.
  struct PendingUpdate {
    Tensor param;
    Tensor grad;
    ParamState* state;
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
  // (AdamW, SGD) override it to update them all in one pass.
  virtual void update_all(const std::vector<PendingUpdate>& updates);

 private:
  std::vector<Parameter> params_;
  std::vector<ParamState> state_;
  double lr_;
  std::string kind_;
};

}  // namespace dtr::nn::optim
