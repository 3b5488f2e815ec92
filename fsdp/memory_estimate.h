// Memory estimator: predicts one rank's bytes for a training step under
// fully_shard (AdamW) without allocating anything: from a TransformerConfig
// (every TransformerBlock its own group, then the root, as the examples and
// apply_fully_shard(module_type_policy<TransformerBlock>()) do), or from any
// module built on the meta device plus a wrapping policy.
//
//   auto e = fsdp::estimate_memory(config, /*world_size=*/8,
//                                  {.strategy = fsdp::ShardingStrategy::full_shard, .batch_size = 4, .seq_len = 2048});
//   std::cout << e.to_string();
//   std::cout << fsdp::memory_table(config, 64, {.batch_size = 1, .seq_len = 4096});  // every strategy, +-AC
//
// What is counted (per rank, matching the allocator's tags):
//   params          the shards (exact: torch.chunk rows of every parameter on this
//                   rank's shard index, in the parameters' dtype);
//   grads           the sharded gradients (same sizes and dtype);
//   optimizer_state AdamW's two moments (same sizes and dtype);
//   unsharded_peak  all-gathered parameters alive at once (tag param), each group
//                   mesh-shard-size x its padded flat size in the compute dtype
//                   (mp param_dtype): with reshard_after_forward (FULL_SHARD,
//                   HSDP) the root group (kept through forward and backward) plus
//                   the largest other group (one block is unsharded at a time: a
//                   prefetched block's all-gather output is a comm buffer until it
//                   is waited for); without it (SHARD_GRAD_OP, NO_SHARD) every
//                   group at the end of forward (NO_SHARD too: the unsharded
//                   copies are separate from the shards);
//   activations     the peak of tensors made in forward + backward run under
//                   MemoryTagGuard(activation) (see estimate_activation_bytes in
//                   memory_estimate.cpp): what forward keeps for backward (counted
//                   tensor by tensor from nn/transformer.cpp and the ops' saved
//                   tensors) plus the transient of the first block's backward (a
//                   per-row coefficient measured on this runtime's ops); with
//                   activation checkpointing each block keeps only its output and one
//                   block is recomputed at a time. Only the Transformer of
//                   nn/transformer.h is modelled: the module overload leaves
//                   activations at 0. Measured at world sizes 1-4 on the tests'
//                   llama configs (f32 and bf16, with and without checkpointing) it
//                   is within a few bytes, as for the GPT-2 style's small config
//                   (whose coefficients were fitted with H = 4 x dim only).
// Left out: communication buffers (all-gather / reduce-scatter flat buffers),
// the unsharded gradients of the groups in backward (compute dtype, transient),
// the optimizer's step temporaries, allocator rounding and caching, dropout masks
// (dropout > 0), the input token ids.
#pragma once

#include "fsdp/sharding_strategy.h"
#include "fsdp/wrap_policy.h"
#include "nn/transformer.h"

#include <cstdint>
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
  // Mixed precision (fully_shard's mp_policy): the all-gather / compute dtype.
  // Shards, gradients and optimizer state keep the parameters' dtype.
  std::optional<DType> param_dtype;
  int64_t batch_size = 1;  // sequences per rank
  int64_t seq_len = 0;     // 0: config.max_seq_len
  bool activation_checkpointing = false;  // every TransformerBlock wrapped
};

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

// The activation model alone (bytes at the peak of forward + backward).
int64_t estimate_activation_bytes(const nn::TransformerConfig& config, int64_t batch_size, int64_t seq_len,
                                  std::optional<DType> param_dtype, bool activation_checkpointing);

MemoryEstimate estimate_memory(const nn::TransformerConfig& config, int world_size,
                               const MemoryEstimateOptions& options = {});
// `model` on the meta device (or any device: only shapes and dtypes are read),
// not yet sharded; groups are those apply_fully_shard(model, policy) would make.
MemoryEstimate estimate_memory(nn::Module& model, const WrapPolicy& policy, int world_size,
                               const MemoryEstimateOptions& options = {});

// A table of estimate_memory for FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and
// HYBRID_SHARD, each without and with activation checkpointing (base supplies the
// batch, sequence, rank, mixed precision and hybrid shard size).
std::string memory_table(const nn::TransformerConfig& config, int world_size, MemoryEstimateOptions base = {});

}  // namespace dtr::fsdp
