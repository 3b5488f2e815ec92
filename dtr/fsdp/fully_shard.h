// fully_shard: FSDP2-style per-parameter sharding of any nn::Module.
//
//   for (auto& block : model->blocks) fsdp::fully_shard(*block);   // bottom-up
//   fsdp::fully_shard(*model);                                      // then the root
//   AdamW opt(model->parameters(), ...);                            // sees the local shards
//
// Each call makes one parameter group of the module's parameters not already
// managed by an inner call: every parameter becomes the local shard of a DTensor
// with Shard(0) over the mesh (torch.chunk rows; the parameter slot holds the
// shard, which carries its DTensorSpec). The module keeps its type and code.
// Before the module computes, the group's shards are all-gathered as one
// collective into per-parameter unsharded tensors installed in the slots (through
// a flat buffer with a copy-in and a copy-out on CUDA or when casting; on the CPU
// straight from shard to unsharded tensor); after forward they are
// freed unless reshard_after_forward is false (the root keeps them by default).
// In backward the group is all-gathered again when its outputs' gradient
// arrives, and once its backward is done the unsharded gradients are
// reduce-scattered as one collective into the shards' .grad (averaged over the
// ranks unless a divide factor is set). Prefetching issues the next group's
// all-gather (forward order; reverse in backward) before the current one computes.
//
// Mixed precision (mp_policy): shards keep their dtype (f32 master weights and
// optimizer state); the all-gather and compute run in param_dtype, gradients are
// reduced in reduce_dtype (default: param_dtype) and land in the shards' dtype;
// outputs are cast to output_dtype; floating inputs to param_dtype when
// cast_forward_inputs. HSDP: a 2-D (replicate, shard) mesh shards over its last
// dim and all-reduces the reduced gradients over the first.
//
// With tensor parallelism (2-D: FSDP x TP; 3-D: HSDP x TP): parallelize the model
// over mesh["tp"] first, then fully_shard over the data-parallel dims of the same
// mesh. Each TP shard is sharded as a parameter would be: the all-gather gives the
// module its TP shard, gradients reduce over the data-parallel ranks only, and the
// parameter's layout records both (dtr/fsdp/fsdp_param.h).
//
//   auto mesh = mesh::init_device_mesh(DeviceType::cpu, {dp, tp}, {"dp", "tp"});
//   tensor_parallel::parallelize_transformer(*model, mesh["tp"]);
//   for (auto& block : model->layers()) fsdp::fully_shard(*block, {.mesh = mesh["dp"]});
//   fsdp::fully_shard(*model, {.mesh = mesh["dp"]});
//
// CPU offload (offload_policy.offload_params) of a CUDA model: the shards and
// their gradients live in host memory, so the optimizer steps on the CPU; each
// all-gather copies the shards to the current CUDA device first and each
// reduced gradient is copied back. A meta model is offloaded when a GPU is
// present (materialise it with to_empty(Device::cpu())). On a CPU model the
// policy is a no-op. With pin_memory (the default, as FSDP2's CPUOffloadPolicy)
// shards and gradients are in pinned host memory and both copies run without
// waiting, overlapping compute. Shards the user replaced (to_empty, or another
// tensor set into the slot) are pinned in place before their next all-gather.
// The end of the (last) backward waits for every queued copy, so the optimizer
// then reads complete gradients and may write the shards; reshard_all (state
// dicts, checkpoints) waits too. After a forward without backward, synchronize
// the device before writing the shards yourself. A gradient accumulated into an
// existing .grad is copied back waiting (the sum is taken on the host).
// pin_memory = false: pageable memory, and every copy waits.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/nn/module.h"

#include <functional>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

namespace dtr::fsdp {

struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype{};
  std::optional<DType> reduce_dtype{};
  std::optional<DType> output_dtype{};
  bool cast_forward_inputs = true;
};

struct OffloadPolicy {
  bool offload_params = false;  // shards, gradients and optimizer state in host memory
  bool pin_memory = true;       // shards and gradients pinned: asynchronous copies
};

// ZeRO++'s quantized communication between hosts, for slow links between them
// (dtr/fsdp/quantized_collectives.h). The shard dim's ranks are taken as hosts of
// host_size consecutive ranks; what moves within a host stays exact. The shards,
// the optimizer and the gradients' .grad are never quantized.
struct QuantizedCommPolicy {
  // qwZ: each all-gather sends its shards between hosts as int8 codes in blocks
  // (dequantized into the compute dtype), then gathers within the host exactly.
  bool weights = false;
  // qgZ, 8 or 4: gradients are reduce-scattered exactly within each host, then the
  // hosts' partial sums go to the others as int8 or int4 codes (one all-to-all)
  // and are summed in f32. 0: off.
  int gradient_bits = 0;
  // qgZ with error feedback: what the codes leave out of a partial sum is kept (f32,
  // as much memory as a gradient shard per other host) and sent with the next
  // step's, so small components are delayed rather than lost. Not checkpointed: a
  // resumed run starts it at zero.
  bool error_feedback = true;
  // Ranks of the shard dim per host; 0: the hosts the job runs on
  // (reshard_to_host_size). A single host quantizes nothing.
  int host_size = 0;
  int64_t block_size = 256;  // values per scale (their largest magnitude)
};

struct FullyShardOptions {
  // The data-parallel ranks: a 1-D mesh (FSDP) or a 2-D (replicate, shard) mesh
  // (HSDP), possibly dims of a larger mesh whose other dims tensor parallelism
  // uses. Default: a 1-D mesh of all ranks on the parameters' device type.
  mesh::DeviceMesh mesh{};
  // After forward: true frees the unsharded parameters (all-gather again in
  // backward); false keeps them; an integer k (dividing the mesh size) keeps a
  // 1/k-sized copy, so the backward all-gather spans only k ranks (groups of k
  // consecutive ranks, e.g. the GPUs of a node). Default: true for every module
  // but the root, which keeps them (as FSDP2).
  std::optional<std::variant<bool, int>> reshard_after_forward{};
  // Which placement a parameter is sharded with; only Shard(0) is supported.
  std::function<std::optional<Placement>(const Tensor& param)> shard_placement_fn{};
  MixedPrecisionPolicy mp_policy{};
  OffloadPolicy offload_policy{};
  QuantizedCommPolicy quantized_comm{};
};

// A handle to wait for an asynchronous unshard.
class UnshardHandle {
 public:
  UnshardHandle() = default;
  explicit UnshardHandle(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait();

 private:
  std::function<void()> wait_;
};

class FSDPState;

// The controls of a sharded module (what FSDP2's FSDPModule methods do).
class FSDPModule {
 public:
  explicit FSDPModule(std::shared_ptr<FSDPState> state) : state_(std::move(state)) {}

  // All-gathers the parameters now; with async, returns before the collective ends.
  UnshardHandle unshard(bool async = false);
  void reshard();
  // false: backward accumulates unsharded gradients without communicating
  // (gradient accumulation); the next backward with true reduce-scatters the sum.
  void set_requires_gradient_sync(bool on, bool recurse = true);
  // false keeps the unsharded parameters after backward (between micro-batches:
  // no all-gather before the next forward). Should the shards change meanwhile
  // (an optimizer step), the next use gathers them again.
  void set_reshard_after_backward(bool on, bool recurse = true);
  void set_reshard_after_forward(bool on);
  void set_modules_to_forward_prefetch(const std::vector<nn::Module*>& modules);
  void set_modules_to_backward_prefetch(const std::vector<nn::Module*>& modules);
  // false: the end of the next backward does not wait for the last reduce-scatters.
  void set_is_last_backward(bool on);
  // Gradients are divided by this instead of the number of ranks.
  void set_gradient_divide_factor(double factor);
  // HSDP: false skips the all-reduce over replicas (gradient accumulation); the
  // next reduction with true all-reduces the accumulated sum.
  void set_requires_all_reduce(bool on, bool recurse = true);

  nn::Module& module() const;
  const mesh::DeviceMesh& mesh() const;
  // The sharded parameters of this group, by fully qualified name within the module.
  std::vector<std::pair<std::string, DTensor>> sharded_parameters() const;
  // Elements (not bytes) of the flat all-gather buffer of this group on this rank
  // (padding included).
  int64_t shard_numel_padded() const;
  // Read-only views (for summaries, dtr/fsdp/summary.h): the options fully_shard was
  // called with (its mesh filled in; reshard_after_forward as given, unset meaning
  // the default), and the explicit prefetch lists (nullopt: none set, so the
  // implicit next / previous group in forward order is prefetched).
  const FullyShardOptions& options() const;
  std::optional<std::vector<nn::Module*>> modules_to_forward_prefetch() const;
  std::optional<std::vector<nn::Module*>> modules_to_backward_prefetch() const;

 private:
  std::shared_ptr<FSDPState> state_;
};

// Shards `module` (collective over the mesh: every rank calls it the same way).
// Errors: called twice on a module, on a module inside one already sharded
// (apply bottom-up), or on a module whose parameter is shared with another group.
FSDPModule fully_shard(nn::Module& module, FullyShardOptions options = {});

// Reshards every fully_shard module in `module`'s tree, so that every parameter
// slot holds its shard again (after an eval forward the root keeps its unsharded
// parameters until the next backward), and waits for pinned CPU offload's queued
// copies of the shards. State dicts and checkpoints call it.
void reshard_all(nn::Module& module);

// Every process group the fully_shard modules in `module`'s tree run collectives on:
// their meshes' dims, and the groups quantized_comm and an integer
// reshard_after_forward split off them (for byte counts: mesh::sent_by_link).
std::vector<mesh::ProcessGroupPtr> process_groups(nn::Module& module);

// The controls of a module fully_shard was applied to (an error otherwise).
FSDPModule fsdp_module(nn::Module& module);
bool is_fully_sharded(const nn::Module& module);

}  // namespace dtr::fsdp
