// FSDPState: what fully_shard attaches to one module: its parameter group, its
// settings, and the forward/backward hooks that unshard, reshard, prefetch and
// reduce gradients. States under one root share an FSDPContext, made lazily at
// the root's first forward: the order in which groups ran forward (which drives
// implicit prefetching), and the end-of-backward work.
//
// Hook points (all general Module/autograd mechanisms, see nn/module.h):
//   forward pre-hook   unshard (waiting for a prefetch), prefetch the next group,
//                      wrap the input so that post-backward runs once the
//                      module's backward is done (autograd::call_after_backward);
//   forward hook       reshard unless reshard_after_forward is false; a gradient
//                      hook on the output runs pre-backward;
//   pre-backward       unshard again, prefetch the previous group;
//   post-backward      reduce-scatter the gradients (waiting for the previous
//                      reduce-scatter first, which bounds memory), reshard;
//   end of backward    (queued by the first pre-backward) post-backward for the
//                      groups that got no gradient, so every rank issues the same
//                      collectives; wait for the last reduce-scatters (and,
//                      with pinned CPU offload, for the asynchronous host
//                      copies); reshard.
#pragma once

#include "fsdp/fsdp_param_group.h"
#include "fsdp/fully_shard.h"

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
  FSDPState* last_reduce_scatter = nullptr;  // waited on before the next one
};

class FSDPState : public std::enable_shared_from_this<FSDPState> {
 public:
  FSDPState(nn::Module& module, FullyShardOptions options, std::unique_ptr<FSDPParamGroup> group);

  void register_hooks();

  nn::Module& module() const { return module_; }
  FSDPParamGroup& group() { return *group_; }
  const FullyShardOptions& options() const { return options_; }
  bool is_root() const { return is_root_; }

  // Controls (FSDPModule forwards to these).
  bool requires_gradient_sync = true;
  bool requires_all_reduce = true;  // HSDP
  bool reshard_after_backward = true;
  bool is_last_backward = true;
  std::optional<double> gradient_divide_factor;
  std::optional<std::vector<FSDPState*>> forward_prefetch;
  std::optional<std::vector<FSDPState*>> backward_prefetch;
  // After forward: 0 keeps the parameters, 1 frees them, k > 1 keeps 1/k of them.
  int post_forward_reshard() const;
  void set_reshard_after_forward(bool on) { reshard_after_forward_override_ = on; }

  void unshard();  // synchronous
  void reshard() { group_->reshard(); }

 private:
  Tensor pre_forward(const Tensor& input);
  Tensor post_forward(const Tensor& output);
  void pre_backward();
  void post_backward();
  void finish_backward();  // the root's end-of-backward callback
  void lazy_init();
  std::vector<FSDPState*> prefetch_targets(bool forward);

  nn::Module& module_;
  FullyShardOptions options_;
  std::unique_ptr<FSDPParamGroup> group_;
  std::shared_ptr<FSDPContext> context_;
  bool is_root_ = false;
  std::optional<bool> reshard_after_forward_override_;
  // Per iteration.
  bool ran_forward_ = false;
  bool ran_post_backward_ = false;
};

}  // namespace dtr::fsdp
