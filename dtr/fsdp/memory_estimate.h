// Memory estimator: predicts one rank's bytes for a training step under
// fully_shard (AdamW) without allocating anything, for any module built on the
// meta device (or any device: only shapes and dtypes are read), not yet sharded,
// and the wrapping policy that will shard it. It knows no concrete layer: a
// model's activations come from an activation model the caller passes
// (nn::Transformer's is nn::estimate_activation_bytes, dtr/nn/transformer_memory.h).
//
//   nn::TransformerConfig meta_config = config;
//   meta_config.device = Device::meta();
//   nn::Transformer model(meta_config);
//   auto policy = fsdp::module_type_policy<nn::TransformerBlock>();
//   auto activations = std::bind_front(nn::estimate_activation_bytes, config);
//   auto e = fsdp::estimate_memory(model, policy, /*world_size=*/8,
//                                  {.strategy = fsdp::ShardingStrategy::full_shard, .batch_size = 4,
//                                   .seq_len = 2048}, activations);
//   std::cout << e.to_string();
//   std::cout << fsdp::memory_table(model, policy, 64, {.batch_size = 1, .seq_len = 4096}, activations);
//
// What is counted (per rank, matching the allocator's tags):
//   params          the shards (exact: torch.chunk rows of every parameter, or of
//                   its tensor-parallel split, on this rank's shard index, in the
//                   parameters' dtype);
//   grads           the sharded gradients (same sizes and dtype);
//   optimizer_state AdamW's two moments (same sizes and dtype);
//   unsharded_peak  all-gathered parameters alive at once (tag param), each group
//                   mesh-shard-size x its padded flat size in the compute dtype
//                   (mp param_dtype): with reshard_after_forward (FULL_SHARD,
//                   HSDP) the root group (kept through forward and backward) plus
//                   the largest other group (one block is unsharded at a time: a
//                   prefetched block's all-gather output is a comm buffer until it
//                   is waited for), plus with reshard_after_forward_ranks = k the
//                   1/k every block keeps after forward (the block being gathered
//                   holds its piece until the all-gather is done); without it
//                   (SHARD_GRAD_OP, NO_SHARD) every group at the end of forward (NO_SHARD too: the unsharded
//                   copies are separate from the shards); none over one
//                   rank without a param_dtype cast (the groups compute on
//                   the shards);
//   activations     what the activation model says for the options' batch,
//                   sequence length, compute dtype and activation checkpointing
//                   (tensors made in forward + backward under
//                   MemoryTagGuard(activation)); 0 without a model.
// Left out: communication buffers (all-gather / reduce-scatter flat buffers),
// the unsharded gradients of the groups in backward (compute dtype, transient),
// the optimizer's step temporaries, allocator rounding and caching.
#pragma once

#include "dtr/fsdp/sharding_strategy.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/nn/module.h"
#include "dtr/tensor/dtype.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtr::fsdp {

struct MemoryEstimateOptions {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  // hybrid_shard: ranks per shard group (must divide the world size); 0: 2 when
  // the world size is even, else 1.
  int hybrid_shard_size = 0;
  int rank = 0;  // whose shards (uneven splits: low ranks hold more)
  // FULL_SHARD and HYBRID_SHARD with reshard_after_forward = k (1 < k < the shard
  // ranks; fsdp::reshard_to_host_size for a host-local shard): every block keeps
  // 1/k of its unsharded parameters from forward until its backward. 0: none.
  int reshard_after_forward_ranks = 0;
  // Mixed precision (fully_shard's mp_policy): the all-gather / compute dtype.
  // Shards, gradients and optimizer state keep the parameters' dtype.
  std::optional<DType> param_dtype{};
  // The step's shape, handed to the activation model.
  int64_t batch_size = 1;  // sequences per rank
  int64_t seq_len = 0;     // 0: the model's longest
  bool activation_checkpointing = false;  // every block the policy selects wrapped
  // FSDP over tensor parallelism: the shape this rank's tensor-parallel split of a
  // parameter has (dotted name -> shape; tensor_parallel::local_parameter_shapes),
  // which fully_shard then shards. world_size and rank then count the
  // data-parallel ranks (the mesh fully_shard is given), and the activation model
  // is the split model's.
  std::map<std::string, Shape> tensor_parallel_shapes{};
};

// A model's activation bytes at the peak of one step's forward + backward, for
// `batch_size` sequences of `seq_len` tokens computed in `compute_dtype` (none: the
// model's dtype), with or without activation checkpointing.
using ActivationModel = std::function<int64_t(int64_t batch_size, int64_t seq_len,
                                              std::optional<DType> compute_dtype, bool activation_checkpointing)>;

struct GroupEstimate {
  std::string path;            // "" for the root
  int64_t numel = 0;           // global elements of its parameters
  int64_t shard_numel = 0;     // held by this rank
  int64_t flat_numel = 0;      // padded, per rank (FSDPModule::shard_numel_padded)
  int64_t unsharded_bytes = 0; // shard ranks x flat_numel x compute dtype size
};

struct MemoryEstimate {
  std::string strategy;
  int world_size = 1;
  int shard_ranks = 1;  // ranks one parameter is split over
  int64_t num_params = 0;
  int64_t params = 0, grads = 0, optimizer_state = 0;
  int64_t unsharded_peak = 0;
  int64_t activations = 0;               // with options.activation_checkpointing as given
  int64_t activations_no_ckpt = 0;       // both variants, for tables
  int64_t activations_ckpt = 0;
  std::vector<GroupEstimate> groups;  // in fully_shard order, root last
  int64_t state() const { return params + grads + optimizer_state; }
  int64_t total() const { return state() + unsharded_peak + activations; }
  std::string to_string() const;
};

// `model` not yet sharded; groups are those apply_fully_shard(model, policy) would
// make. `activations` may be empty (activations then count 0).
MemoryEstimate estimate_memory(nn::Module& model, const WrapPolicy& policy, int world_size,
                               const MemoryEstimateOptions& options = {}, const ActivationModel& activations = {});

// A table of estimate_memory for FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and
// HYBRID_SHARD, each without and with activation checkpointing (base supplies the
// batch, sequence, rank, mixed precision and hybrid shard size).
std::string memory_table(nn::Module& model, const WrapPolicy& policy, int world_size, MemoryEstimateOptions base = {},
                         const ActivationModel& activations = {});

}  // namespace dtr::fsdp
