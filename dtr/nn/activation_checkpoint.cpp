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

class CheckpointBackward final : public autograd::Node {
 public:
  CheckpointBackward(ModulePtr module, const Tensor& input, GeneratorState rng)
      : module_(std::move(module)), input_(input), rng_(rng) {}
  std::string name() const override { return "CheckpointBackward(" + module_->type_name() + ")"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor x = input_.unpack(*this).detach();
    std::shared_ptr<CaptureInputGrad> capture;
    if (needs_input_grad(0)) {
      capture = std::make_shared<CaptureInputGrad>();
      autograd::set_history(capture, {}, {&x});
    }
    Tensor out;
    {
      GeneratorStateGuard replay(rng_);
      RecomputeScope recomputing;
      autograd::EnableGradGuard grad_mode;
      out = (*module_)(x);
    }
    DTR_CHECK(out.sizes() == grads[0].sizes(),
              "{}: the recomputed output has shape {}, the first forward's had {} (does the module's "
              "forward depend on something besides its input, parameters and the default generator?)",
              name(), shape_str(out.sizes()), shape_str(grads[0].sizes()));
    if (out.requires_grad()) autograd::backward({out}, {grads[0]});
    return {capture ? capture->grad : Tensor()};
  }

  void release_saved() override { input_.release(); }

 private:
  ModulePtr module_;
  autograd::SavedTensor input_;
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

Tensor CheckpointWrapper::forward(const Tensor& input) {
  const bool record = autograd::is_grad_enabled() &&
                      ((input.defined() && input.requires_grad()) || any_parameter_requires_grad(*module_));
  if (!record) return (*module_)(input);
  const GeneratorState rng = default_generator().state();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = (*module_)(input);
  }
  if (!out.defined() || !is_floating(out.dtype())) return out;  // nothing to differentiate
  // A new handle on the output's storage: the module may have returned its input
  // (or another tensor someone else holds), whose autograd state must not change.
  Tensor result = out.detach();
  autograd::set_history(std::make_shared<CheckpointBackward>(module_, input, rng), {&input}, {&result});
  return result;
}

bool in_checkpoint_recomputation() { return t_recomputing > 0; }

ModulePtr checkpoint_wrapper(ModulePtr module) { return std::make_shared<CheckpointWrapper>(std::move(module)); }

int apply_activation_checkpointing(Module& model, const std::function<bool(const Module&)>& predicate) {
  DTR_CHECK(static_cast<bool>(predicate), "apply_activation_checkpointing: the predicate is empty");
  return wrap_matching(model, predicate);
}

}  // namespace dtr::nn
