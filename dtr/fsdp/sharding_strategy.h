// The familiar FSDP1 sharding strategies as presets of fully_shard's options:
//   FULL_SHARD      parameters, gradients and optimizer state sharded over all
//                   ranks; parameters freed after forward (ZeRO-3)
//   SHARD_GRAD_OP   the same, but parameters kept from forward to the end of
//                   backward (ZeRO-2: one all-gather per step instead of two)
//   NO_SHARD        every rank holds everything; gradients all-reduced (DDP)
//   HYBRID_SHARD    sharded within groups of `shard_size` consecutive ranks (a
//                   node), replicated across groups (HSDP)
//   fsdp::fully_shard(*block, fsdp::strategy_options(fsdp::ShardingStrategy::shard_grad_op));
// Meshes are made once per (device type, shape) and shared: the call is
// collective the first time.
#pragma once

#include "dtr/fsdp/fully_shard.h"

#include <optional>

namespace dtr::fsdp {

enum class ShardingStrategy { full_shard, shard_grad_op, no_shard, hybrid_shard };

// `base` supplies the other options (mixed precision, ...); its mesh and
// reshard_after_forward are set by the strategy. hybrid_shard's shard_size
// defaults to the number of ranks on this node and must divide the world size.
FullyShardOptions strategy_options(ShardingStrategy strategy, FullyShardOptions base = {},
                                   std::optional<int> shard_size = std::nullopt,
                                   DeviceType device_type = DeviceType::cpu);

}  // namespace dtr::fsdp
