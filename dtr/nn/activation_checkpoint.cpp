#include "dtr/nn/activation_checkpoint.h"

#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/random.h"

namespace dtr::nn {

namespace {

// The grad_fn of the recomputation's input copy: it has no inputs of its own and
// keeps the gradient that reaches it (all uses summed by the engine), so the
// input gradient is passed on without a copy into a leaf's .grad.
class CaptureInputGrad final : public autograd::Node {
 public:
  std::string name() const override { return "CheckpointCaptureInputGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    grad = std::move(grads[0]);
    return {};
  }
  Tensor grad;
};

thread_local int t_recomputing = 0;

// Marks the recomputation for in_checkpoint_recomputation() (nested wrappers count).
class RecomputeScope {
 public:
  RecomputeScope() { ++t_recomputing; }
  ~RecomputeScope() { --t_recomputing; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

// Restores the default generator's state when the scope ends (also on errors).
class GeneratorStateGuard {
 public:
  explicit GeneratorStateGuard(const GeneratorState& replay) : previous_(default_generator().state()) {
    default_generator().set_state(replay);
  }
  ~GeneratorStateGuard() { default_generator().set_state(previous_); }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  GeneratorState previous_;
};

// The backward of a checkpointed call: one gradient per differentiable output
// (floating, in the order the module returned them), one per input.
class CheckpointBackward final : public autograd::Node {
 public:
  CheckpointBackward(ModulePtr module, const Tensors& inputs, std::vector<size_t> differentiable_outputs,
                     GeneratorState rng)
      : module_(std::move(module)), differentiable_outputs_(std::move(differentiable_outputs)), rng_(rng) {
    for (const Tensor& x : inputs) inputs_.emplace_back(x);
  }
  std::string name() const override { return "CheckpointBackward(" + module_->type_name() + ")"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensors xs;
    std::vector<std::shared_ptr<CaptureInputGrad>> captures(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Tensor x = inputs_[i].unpack(*this);
      xs.push_back(x.defined() ? x.detach() : x);
      if (needs_input_grad(i)) {
        captures[i] = std::make_shared<CaptureInputGrad>();
        autograd::set_history(captures[i], {}, {&xs[i]});
      }
    }
    Tensors outs;
    {
      GeneratorStateGuard replay(rng_);
      RecomputeScope recomputing;
      autograd::EnableGradGuard grad_mode;
      outs = module_->call(xs);
    }
    Tensors roots, root_grads;
    for (size_t k = 0; k < differentiable_outputs_.size(); ++k) {
      const size_t index = differentiable_outputs_[k];
      const Tensor recomputed = index < outs.size() ? outs[index] : Tensor();
      DTR_CHECK(recomputed.defined() && recomputed.sizes() == grads[k].sizes(),
                "{}: the recomputed output {} has shape {}, the first forward's had {} (does the module's "
                "forward depend on something besides its inputs, parameters and the default generator?)",
                name(), index, recomputed.defined() ? shape_str(recomputed.sizes()) : "(none)",
                shape_str(grads[k].sizes()));
      if (recomputed.requires_grad()) {
        roots.push_back(recomputed);
        root_grads.push_back(grads[k]);
      }
    }
    if (!roots.empty()) autograd::backward(roots, root_grads);
    std::vector<Tensor> input_grads;
    for (const auto& capture : captures) input_grads.push_back(capture ? capture->grad : Tensor());
    return input_grads;
  }

  void release_saved() override {
    for (auto& x : inputs_) x.release();
  }

 private:
  ModulePtr module_;
  std::vector<autograd::SavedTensor> inputs_;
  std::vector<size_t> differentiable_outputs_;
  GeneratorState rng_;
};

bool any_parameter_requires_grad(const Module& m) {
  for (const Tensor& p : m.parameters()) {
    if (p.requires_grad()) return true;
  }
  return false;
}

int wrap_matching(Module& parent, const std::function<bool(const Module&)>& predicate) {
  int wrapped = 0;
  for (auto& [name, child] : parent.named_children()) {
    if (dynamic_cast<const CheckpointWrapper*>(child.get()) != nullptr) continue;
    if (predicate(*child)) {
      parent.replace_child(name, checkpoint_wrapper(child));
      ++wrapped;
    } else {
      wrapped += wrap_matching(*child, predicate);
    }
  }
  return wrapped;
}

}  // namespace

CheckpointWrapper::CheckpointWrapper(ModulePtr module) : module_(std::move(module)) {
  DTR_CHECK(module_ != nullptr, "CheckpointWrapper: the module to wrap is null");
  register_wrapped_module(module_);
  train(module_->is_training());
}

std::string CheckpointWrapper::type_name() const { return "CheckpointWrapper(" + module_->type_name() + ")"; }

Tensors CheckpointWrapper::forward_multi(const Tensors& inputs) {
  const bool record = autograd::is_grad_enabled() &&
                      (autograd::any_requires_grad(inputs) || any_parameter_requires_grad(*module_));
  if (!record) return module_->call(inputs);
  const GeneratorState rng = default_generator().state();
  Tensors outs;
  {
    NoGradGuard no_grad;
    outs = module_->call(inputs);
  }
  // New handles on the outputs' storage: the module may have returned an input
  // (or another tensor someone else holds), whose autograd state must not change.
  std::vector<size_t> differentiable;
  std::vector<const Tensor*> results;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined() || !is_floating(outs[i].dtype())) continue;  // nothing to differentiate
    outs[i] = outs[i].detach();
    differentiable.push_back(i);
    results.push_back(&outs[i]);
  }
  if (results.empty()) return outs;
  std::vector<const Tensor*> input_ptrs;
  for (const Tensor& x : inputs) input_ptrs.push_back(&x);
  autograd::set_history(std::make_shared<CheckpointBackward>(module_, inputs, std::move(differentiable), rng),
                        input_ptrs, results);
  return outs;
}

bool in_checkpoint_recomputation() { return t_recomputing > 0; }

ModulePtr checkpoint_wrapper(ModulePtr module) { return std::make_shared<CheckpointWrapper>(std::move(module)); }

int apply_activation_checkpointing(Module& model, const std::function<bool(const Module&)>& predicate) {
  DTR_CHECK(static_cast<bool>(predicate), "apply_activation_checkpointing: the predicate is empty");
  return wrap_matching(model, predicate);
}

}  // namespace dtr::nn
