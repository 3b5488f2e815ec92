// FSDPState: what fully_shard attaches to one module: its parameter group, its
// settings, and the forward/backward hooks that unshard, reshard, prefetch and
// reduce gradients. States under one root share an FSDPContext, made lazily at
// the root's first forward: the order in which groups ran forward (which drives
// implicit prefetching), and the end-of-backward work.
//
// Hook points (all general Module/autograd mechanisms, see dtr/nn/module.h):
//   forward pre-hook   unshard (waiting for a prefetch), prefetch the next group,
//                      wrap the inputs so that post-backward runs once this
//                      call's backward is done (autograd::call_after_backward,
//                      one node over every input needing a gradient);
//   forward hook       reshard unless reshard_after_forward is false; a gradient
//                      hook on each output runs pre-backward (the first to fire
//                      does the work);
//   pre-backward       unshard again, prefetch the previous group;
//   post-backward      once every call of the module in this forward has finished
//                      its backward: reduce-scatter the gradients (waiting for the
//                      previous reduce-scatter first, which bounds memory), reshard;
//   end of backward    (queued by the first pre-backward) post-backward for the
//                      groups whose calls did not all report (inputs that need no
//                      gradient, or no gradient reached them), so every rank issues
//                      the same collectives; wait for the last reduce-scatters
//                      (and, with pinned CPU offload, for the asynchronous host
//                      copies); reshard.
//
// Eager semantics. A module may run several times in one forward (the root as
// lin(lin(x)), a block at two depths, a recomputation under activation
// checkpointing): its gradients are reduced once all of its calls' backward is
// done, so none is lost and the group stays unsharded while any call still needs
// it. Each backward pass reduces what it produced and adds it to the shards'
// .grad, so two losses from one forward, or one loss backpropagated twice
// (retain_graph), accumulate as eager autograd does. A forward of the root starts
// a new iteration (a new count of calls) unless a forward with gradients awaits
// its backward: the root called twice is one iteration.
#pragma once

#include "dtr/fsdp/fsdp_param_group.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/reshard_after_forward.h"

#include <memory>
#include <optional>
#include <vector>

namespace dtr::fsdp {

class FSDPState;

struct FSDPContext {
  std::vector<FSDPState*> states;         // every state under the root, root first
  std::vector<FSDPState*> forward_order;  // as the last forward ran them
  std::vector<FSDPState*> recording;      // this forward, so far
  bool backward_queued = false;
  // A forward with gradients ran in this iteration and no backward has finished
  // since: the root's next forward continues the iteration instead of starting one.
  bool graph_pending = false;
  FSDPState* last_reduce_scatter = nullptr;  // waited on before the next one
};

// How far a group got in the current forward or backward pass. Post-backward
// (the reduction) runs once per backward pass and module, after the last of the
// module's calls; at the end of the pass every state is idle again.
enum class TrainingState { idle, forward, pre_backward, post_backward };

class FSDPState : public std::enable_shared_from_this<FSDPState> {
 public:
  FSDPState(nn::Module& module, FullyShardOptions options, std::unique_ptr<FSDPParamGroup> group,
            ReshardAfterForward reshard_after_forward);

  void register_hooks();

  nn::Module& module() const { return module_; }
  FSDPParamGroup& group() { return *group_; }
  const FullyShardOptions& options() const { return options_; }
  bool is_root() const { return is_root_; }
  TrainingState training_state() const { return training_state_; }

  // The controls FSDPModule forwards to (fully_shard.h says what each does).
  void set_requires_gradient_sync(bool on) { requires_gradient_sync_ = on; }
  void set_requires_all_reduce(bool on) { requires_all_reduce_ = on; }
  void set_reshard_after_backward(bool on) { reshard_after_backward_ = on; }
  void set_reshard_after_forward(bool on) { reshard_after_forward_.override_with(on); }
  void set_is_last_backward(bool on) { is_last_backward_ = on; }
  void set_gradient_divide_factor(double factor) { gradient_divide_factor_ = factor; }
  void set_forward_prefetch(std::vector<FSDPState*> states) { forward_prefetch_ = std::move(states); }
  void set_backward_prefetch(std::vector<FSDPState*> states) { backward_prefetch_ = std::move(states); }
  // The explicit prefetch lists (nullopt: the implicit next / previous group).
  const std::optional<std::vector<FSDPState*>>& forward_prefetch() const { return forward_prefetch_; }
  const std::optional<std::vector<FSDPState*>>& backward_prefetch() const { return backward_prefetch_; }

  void unshard();  // synchronous
  void reshard() { group_->reshard(); }
  // The mesh dims' groups and those split off for quantized_comm and an integer
  // reshard_after_forward.
  std::vector<mesh::ProcessGroupPtr> process_groups() const;

 private:
  // The hooks' bodies: the replaced inputs (outputs), or an empty list for none.
  nn::Tensors pre_forward(const nn::Tensors& inputs);
  nn::Tensors post_forward(const nn::Tensors& outputs);
  void pre_backward();
  void call_backward_done();  // one call's backward is complete
  void post_backward();        // reduce and reshard
  void finish_backward();      // the root's end-of-backward callback
  void start_iteration();
  void join_backward_pass();   // the first time this backward pass reaches the module
  void lazy_init();
  std::vector<FSDPState*> prefetch_targets(bool forward);
  nn::Tensors arm_post_backward(nn::Tensors inputs, bool cast);

  nn::Module& module_;
  FullyShardOptions options_;
  std::unique_ptr<FSDPParamGroup> group_;
  ReshardAfterForward reshard_after_forward_;
  std::shared_ptr<FSDPContext> context_;
  bool is_root_ = false;
  TrainingState training_state_ = TrainingState::idle;
  int forward_calls_ = 0;        // with gradients on, in this iteration
  bool in_backward_pass_ = false;  // the current backward pass has reached the module
  int calls_awaiting_backward_ = 0;  // of this pass: calls whose backward has not finished
  // Controls.
  bool requires_gradient_sync_ = true;
  bool requires_all_reduce_ = true;  // HSDP
  bool reshard_after_backward_ = true;
  bool is_last_backward_ = true;
  std::optional<double> gradient_divide_factor_;
  std::optional<std::vector<FSDPState*>> forward_prefetch_;
  std::optional<std::vector<FSDPState*>> backward_prefetch_;
};

}  // namespace dtr::fsdp
