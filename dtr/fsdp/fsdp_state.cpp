#include "dtr/fsdp/fsdp_state.h"

#include "dtr/base/error.h"
#include "dtr/fsdp/registry.h"
#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>

namespace dtr::fsdp {

namespace {

// Casts the floating tensors not already in `dtype` (differentiably: each
// gradient goes back in its tensor's own dtype); true when any was cast.
bool cast_floating(nn::Tensors& tensors, DType dtype) {
  bool cast = false;
  for (Tensor& t : tensors) {
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) {
      t = t.to(dtype);
      cast = true;
    }
  }
  return cast;
}

}  // namespace

FSDPState::FSDPState(nn::Module& module, FullyShardOptions options, std::unique_ptr<FSDPParamGroup> group,
                     ReshardAfterForward reshard_after_forward)
    : module_(module),
      options_(std::move(options)),
      group_(std::move(group)),
      reshard_after_forward_(std::move(reshard_after_forward)) {}

void FSDPState::register_hooks() {
  // The hooks own the state: it lives exactly as long as the module's hooks.
  auto self = shared_from_this();
  module_.register_forward_pre_hook(
      nn::Module::MultiForwardPreHook([self](nn::Module&, const nn::Tensors& inputs) { return self->pre_forward(inputs); }));
  module_.register_forward_hook(nn::Module::MultiForwardHook(
      [self](nn::Module&, const nn::Tensors&, const nn::Tensors& outputs) { return self->post_forward(outputs); }));
}

void FSDPState::unshard() { group_->wait_for_unshard(); }

void FSDPState::lazy_init() {
  if (profiler::enabled()) nn::name_modules_for_profiling(module_);  // "layers.0 (TransformerBlock)" in traces
  auto context = std::make_shared<FSDPContext>();
  for (auto& [path, m] : module_.named_modules()) {
    if (auto state = find_state(*m)) {
      state->context_ = context;
      state->is_root_ = state.get() == this;
      context->states.push_back(state.get());
    }
  }
  DTR_INTERNAL_ASSERT(!context->states.empty() && context->states.front() == this, "root state not first");
}

std::vector<FSDPState*> FSDPState::prefetch_targets(bool forward) {
  if (forward && forward_prefetch_) return *forward_prefetch_;
  if (!forward && backward_prefetch_) return *backward_prefetch_;
  const auto& order = context_->forward_order;
  auto it = std::find(order.begin(), order.end(), this);
  if (it == order.end()) return {};
  if (forward) return std::next(it) == order.end() ? std::vector<FSDPState*>{} : std::vector<FSDPState*>{*std::next(it)};
  return it == order.begin() ? std::vector<FSDPState*>{} : std::vector<FSDPState*>{*std::prev(it)};
}

nn::Tensors FSDPState::pre_forward(const nn::Tensors& inputs_in) {
  DTR_PROFILE_SCOPE("fsdp", "pre_forward");
  if (!context_) lazy_init();
  nn::Tensors inputs = inputs_in;
  const auto& mp = options_.mp_policy;
  const bool cast = mp.param_dtype && mp.cast_forward_inputs && cast_floating(inputs, *mp.param_dtype);
  if (autograd::in_backward()) {
    // A forward recomputed during backward (activation checkpointing): the
    // parameters are (or are made) unsharded; nothing is recorded or prefetched.
    // The recomputed graph's backward then ends with this module's post-backward.
    group_->wait_for_unshard();
    return arm_post_backward(std::move(inputs), cast);
  }
  if (is_root_) {  // a new iteration starts
    context_->recording.clear();
    for (FSDPState* s : context_->states) {
      s->training_state_ = TrainingState::idle;
      s->ran_forward_with_grad_ = false;
      s->group().drop_post_forward_piece();
    }
  }
  if (autograd::is_grad_enabled()) {
    // Each module reduces its gradients once per backward, after the first of its
    // calls' backward is done: a second call's gradients would be lost.
    DTR_CHECK(!ran_forward_with_grad_,
              "fully_shard: the {} holding '{}' ran forward twice in one forward pass with gradients on; FSDP "
              "reduces a module's gradients once per backward, so the second call's would be lost. Call it once "
              "per forward, or fully_shard a module that contains both calls instead",
              module_.type_name(), group_->empty() ? std::string("no parameters") : group_->params().front()->fqn());
    ran_forward_with_grad_ = true;
  }
  group_->wait_for_unshard();
  training_state_ = TrainingState::forward;
  context_->recording.push_back(this);
  for (FSDPState* target : prefetch_targets(/*forward=*/true)) target->group().issue_all_gather();
  return arm_post_backward(std::move(inputs), cast);
}

// The module's inputs, wrapped so that post-backward runs once the module's
// backward is done (when any needs a gradient at all); an empty list when the
// hook leaves the inputs as they came (`cast`: some were cast).
nn::Tensors FSDPState::arm_post_backward(nn::Tensors inputs, bool cast) {
  if (autograd::is_grad_enabled() && autograd::any_requires_grad(inputs)) {
    auto self = shared_from_this();
    return autograd::call_after_backward(inputs, [self] { self->post_backward(); });
  }
  return cast ? inputs : nn::Tensors{};
}

nn::Tensors FSDPState::post_forward(const nn::Tensors& outputs_in) {
  DTR_PROFILE_SCOPE("fsdp", "post_forward");
  nn::Tensors outputs = outputs_in;
  const auto& mp = options_.mp_policy;
  const bool cast = mp.output_dtype && cast_floating(outputs, *mp.output_dtype);
  if (autograd::in_backward()) return cast ? outputs : nn::Tensors{};  // recomputation
  if (is_root_) context_->forward_order = context_->recording;
  switch (reshard_after_forward_.action(is_root_)) {
    case ReshardAfterForward::Action::keep: break;
    case ReshardAfterForward::Action::free: group_->reshard(); break;
    case ReshardAfterForward::Action::keep_piece:  // without backward there is nothing to keep it for
      group_->reshard(autograd::is_grad_enabled() ? reshard_after_forward_.piece_group() : nullptr);
      break;
  }
  if (autograd::is_grad_enabled()) {
    for (Tensor& output : outputs) {
      if (!output.defined() || !output.requires_grad()) continue;
      auto self = shared_from_this();
      output.register_hook([self](const Tensor&) {
        self->pre_backward();
        return Tensor();
      });
    }
  }
  return cast ? outputs : nn::Tensors{};
}

void FSDPState::pre_backward() {
  // Until this module's post-backward, the first of its outputs to get a gradient
  // has done the work (the group stays unsharded until then).
  if (training_state_ == TrainingState::pre_backward) return;
  DTR_PROFILE_SCOPE("fsdp", "pre_backward");
  if (!context_->backward_queued) {
    context_->backward_queued = true;
    auto root = context_->states.front()->shared_from_this();
    autograd::queue_callback([root] { root->finish_backward(); });
  }
  if (training_state_ != TrainingState::post_backward) training_state_ = TrainingState::pre_backward;
  group_->wait_for_unshard();
  for (FSDPState* target : prefetch_targets(/*forward=*/false)) target->group().issue_all_gather();
}

void FSDPState::post_backward() {
  DTR_PROFILE_SCOPE("fsdp", "post_backward");
  if (training_state_ == TrainingState::post_backward) return;
  training_state_ = TrainingState::post_backward;
  if (requires_gradient_sync_ && !group_->empty()) {
    // At most two reduce-scatters in flight: finish the previous one first.
    if (context_->last_reduce_scatter && context_->last_reduce_scatter != this) {
      context_->last_reduce_scatter->group().wait_for_reduce_scatter();
    }
    group_->wait_for_reduce_scatter();
    group_->set_requires_all_reduce(requires_all_reduce_);
    group_->issue_reduce_scatter(gradient_divide_factor_);
    context_->last_reduce_scatter = this;
  }
  if (reshard_after_backward_) group_->reshard();
}

void FSDPState::finish_backward() {
  DTR_PROFILE_SCOPE("fsdp", "finish_backward");
  // Groups whose backward never ran (no input needing grad, or no gradient
  // reached them) still reduce, in backward order on every rank.
  const auto& order = context_->forward_order;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const TrainingState state = (*it)->training_state_;
    if (state == TrainingState::forward || state == TrainingState::pre_backward) (*it)->post_backward();
  }
  if (is_last_backward_) {
    for (FSDPState* s : context_->states) s->group().wait_for_reduce_scatter();
    context_->last_reduce_scatter = nullptr;
    // Pinned CPU offload: the gradients' copies to the host and the all-gathers'
    // reads of the shards were queued without waiting; the optimizer reads the
    // one and writes the other next. One wait covers every group (one device).
    auto offloaded = std::find_if(context_->states.begin(), context_->states.end(),
                                  [](FSDPState* s) { return s->group().copies_host_async(); });
    if (offloaded != context_->states.end()) (*offloaded)->group().wait_for_host_copies();
  }
  context_->backward_queued = false;
}

}  // namespace dtr::fsdp
