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

std::vector<mesh::ProcessGroupPtr> FSDPState::process_groups() const {
  std::vector<mesh::ProcessGroupPtr> groups;
  const mesh::DeviceMesh& mesh = options_.mesh;
  for (int d = 0; d < mesh.ndim(); ++d) groups.push_back(mesh.group(d));
  for (const auto& split : {group_->host_groups().within, group_->host_groups().across,
                            reshard_after_forward_.piece_group()}) {
    if (split) groups.push_back(split);
  }
  return groups;
}

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

void FSDPState::start_iteration() {
  context_->recording.clear();
  for (FSDPState* s : context_->states) {
    s->training_state_ = TrainingState::idle;
    s->forward_calls_ = 0;
  }
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
    // It is one more call whose backward this pass must finish before the reduction.
    group_->wait_for_unshard();
    join_backward_pass();
    ++calls_awaiting_backward_;
    training_state_ = TrainingState::pre_backward;
    return arm_post_backward(std::move(inputs), cast);
  }
  if (is_root_) {
    if (!context_->graph_pending) start_iteration();
    // A piece kept after an earlier forward may predate an optimizer step.
    for (FSDPState* s : context_->states) s->group().drop_post_forward_piece();
  }
  if (autograd::is_grad_enabled()) {
    ++forward_calls_;
    context_->graph_pending = true;
  }
  group_->wait_for_unshard();
  training_state_ = TrainingState::forward;
  context_->recording.push_back(this);
  for (FSDPState* target : prefetch_targets(/*forward=*/true)) target->group().issue_all_gather();
  return arm_post_backward(std::move(inputs), cast);
}

// The module's inputs, wrapped so that this call's backward reports its end
// (when any needs a gradient at all); an empty list when the hook leaves the
// inputs as they came (`cast`: some were cast). A call without such a report is
// reduced at the end of backward.
nn::Tensors FSDPState::arm_post_backward(nn::Tensors inputs, bool cast) {
  if (autograd::is_grad_enabled() && autograd::any_requires_grad(inputs)) {
    auto self = shared_from_this();
    return autograd::call_after_backward(inputs, [self] { self->call_backward_done(); });
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

void FSDPState::join_backward_pass() {
  if (in_backward_pass_) return;
  in_backward_pass_ = true;
  calls_awaiting_backward_ = forward_calls_;
}

void FSDPState::pre_backward() {
  // Until the reduction, the first output to get a gradient has done the work
  // (the group stays unsharded until then).
  if (training_state_ == TrainingState::pre_backward) return;
  DTR_PROFILE_SCOPE("fsdp", "pre_backward");
  if (!context_->backward_queued) {
    context_->backward_queued = true;
    auto root = context_->states.front()->shared_from_this();
    autograd::queue_callback([root] { root->finish_backward(); });
  }
  join_backward_pass();
  training_state_ = TrainingState::pre_backward;
  group_->wait_for_unshard();
  for (FSDPState* target : prefetch_targets(/*forward=*/false)) target->group().issue_all_gather();
}

void FSDPState::call_backward_done() {
  join_backward_pass();
  // Another call of the module still computes with the unsharded parameters and
  // adds to their gradients.
  if (--calls_awaiting_backward_ > 0) return;
  post_backward();
}

void FSDPState::post_backward() {
  DTR_PROFILE_SCOPE("fsdp", "post_backward");
  training_state_ = TrainingState::post_backward;
  calls_awaiting_backward_ = 0;
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
  // Groups that ran forward and were not reduced in this pass (a call whose
  // inputs need no gradient, or no gradient reached them) reduce now, in backward
  // order on every rank; then any other group this pass unsharded.
  const auto& order = context_->forward_order;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const TrainingState state = (*it)->training_state_;
    if (state == TrainingState::forward || state == TrainingState::pre_backward) (*it)->post_backward();
  }
  for (FSDPState* s : context_->states) {
    if (s->training_state_ == TrainingState::pre_backward) s->post_backward();
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
  // The next backward (of the same graph, retain_graph) is a pass of its own.
  for (FSDPState* s : context_->states) {
    s->training_state_ = TrainingState::idle;
    s->in_backward_pass_ = false;
    s->calls_awaiting_backward_ = 0;
  }
  context_->backward_queued = false;
  context_->graph_pending = false;
}

}  // namespace dtr::fsdp
