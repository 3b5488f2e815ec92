// FSDPParamGroup: the parameters of one fully_shard call, and when and how their
// two collectives (dtr/fsdp/flat_collectives.h) run. Unshard: all-gather the shards
// as one collective into each parameter's unsharded tensor, installed in the
// module's slots. Gradient reduction: reduce-scatter the unsharded gradients as
// one collective, then add this rank's rows to its shards' .grad. Both are issued
// asynchronously and waited on later, so they overlap compute.
//
// Mixed precision: the all-gather runs in the compute dtype (shards are cast in
// the copy-in), the reduce-scatter in the reduce dtype, and the result is cast to
// the shards' dtype. HSDP (2-D mesh): both run over the shard group (the mesh's
// last dim), then the reduced shard is all-reduced over the replicate group.
// On the CPU, with no cast, both collectives skip the flat buffers: the shards are
// gathered straight into the unsharded tensors (allocated when the all-gather is
// issued) and the gradients reduce-scattered straight from where autograd left
// them (FlatCollectives' direct forms).
//
// One rank: when the mesh has a single rank, the shards are already in the
// compute and reduce dtype and the group computes where they live, there is
// nothing to gather or scatter. The module computes on each shard's memory
// (FSDPParam::alias_shard) and the reduction is the scaling alone, so FSDP over
// one rank costs what the unsharded model costs.
//
// CPU offload: shards and their .grad live in host memory. With pinned memory
// the copy-in reads the shards without waiting, and the reduced gradients are
// cast and scaled on the device and copied into new pinned .grad tensors without
// waiting; wait_for_host_copies (finish_backward) waits for both.
//
// Quantized communication (QuantizedCommPolicy, over the shard dim's hosts): the
// all-gather and the reduce-scatter are dtr/fsdp/quantized_collectives.h's when
// the policy asks and the shard dim spans more than one host.
#pragma once

#include "dtr/fsdp/flat_collectives.h"
#include "dtr/fsdp/fsdp_param.h"
#include "dtr/fsdp/quantized_collectives.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/work.h"

#include <memory>
#include <optional>
#include <vector>

namespace dtr::fsdp {

class FSDPParamGroup {
 public:
  // The parameters must share one compute dtype. With an offloading placement the
  // group computes on the current CUDA device: shards are copied in for the
  // all-gather, and reduced gradients copied back to the shards' .grad on the CPU.
  // `hosts` are the shard dim's hosts for `quantized` (make_host_groups).
  FSDPParamGroup(std::vector<std::unique_ptr<FSDPParam>> params, mesh::DeviceMesh mesh, GroupPlacement placement,
                 DType reduce_dtype, QuantizedCommPolicy quantized = {}, HostGroups hosts = {});
  FSDPParamGroup(const FSDPParamGroup&) = delete;  // its collectives refer to its parameters
  FSDPParamGroup& operator=(const FSDPParamGroup&) = delete;

  bool empty() const { return params_.empty(); }
  const std::vector<std::unique_ptr<FSDPParam>>& params() const { return params_; }
  const mesh::DeviceMesh& mesh() const { return mesh_; }
  int64_t flat_numel() const { return collectives_.numel(); }  // per rank, padding included
  // Whether the all-gather (qwZ) and the reduce-scatter (qgZ) are quantized between hosts.
  bool quantizes_weights() const { return quantized_.weights && hosts_.hosts > 1; }
  bool quantizes_gradients() const { return quantized_.gradient_bits != 0 && hosts_.hosts > 1; }
  const HostGroups& host_groups() const { return hosts_; }

  // Starts the all-gather (no-op when unsharded or already started).
  void issue_all_gather();
  // Finishes it (starting it if needed): unsharded tensors filled and installed.
  void wait_for_unshard();
  bool is_unsharded() const { return unsharded_; }
  bool has_pending_all_gather() const { return all_gather_.work != nullptr; }
  // Frees the unsharded parameters and puts the shards back in the slots. Given a
  // post-forward group of k ranks (reshard_after_forward=k), first keeps this
  // rank's part of the unsharded flat buffer for them; the next all-gather then
  // runs over those k ranks only.
  void reshard(const mesh::ProcessGroupPtr& keep_piece_for = nullptr);
  // Forgets a kept piece (a new forward gathers from the shards, which the
  // optimizer may have changed).
  void drop_post_forward_piece() {
    post_forward_piece_ = Tensor();
    post_forward_group_ = nullptr;
  }

  // Starts the reduce-scatter of the unsharded gradients (zeros for parameters
  // without one) and frees them. Gradients are divided by `divide_factor`
  // (default: the number of data-parallel ranks, i.e. averaged).
  void issue_reduce_scatter(std::optional<double> divide_factor);
  // Finishes it (and, on a 2-D mesh, the all-reduce over replicas unless turned
  // off): adds this rank's rows to the shards' .grad.
  void wait_for_reduce_scatter();
  // HSDP: false keeps reduce-scattered gradients un-all-reduced (accumulating
  // them) until a later reduction with true, which all-reduces the sum.
  void set_requires_all_reduce(bool on) { requires_all_reduce_ = on; }
  bool has_pending_reduce_scatter() const { return reduce_scatter_.work != nullptr; }

  // Pinned CPU offload: host<->device copies of the shards and gradients are
  // queued without waiting.
  bool copies_host_async() const { return placement_.offload && placement_.pin_memory; }
  // Waits for them (a synchronize of the device, so for every group's at once):
  // afterwards the .grad tensors hold their values and the shards may be written.
  void wait_for_host_copies();

 private:
  Device device() const;  // where the group computes and communicates
  bool can_compute_on_shards() const;
  std::vector<uint64_t> shard_versions() const;
  void reduce_on_shards(mesh::ReduceOp op);  // the one-rank reduction
  void copy_out_pinned(const Tensor& reduced);  // reduced rows into pinned .grad
  int64_t shard_size() const { return mesh_.size(mesh_.ndim() - 1); }
  const mesh::ProcessGroupPtr& shard_group() const { return mesh_.group(mesh_.ndim() - 1); }

  std::vector<std::unique_ptr<FSDPParam>> params_;
  mesh::DeviceMesh mesh_;
  FlatCollectives collectives_;
  GroupPlacement placement_;
  DType compute_dtype_;
  DType reduce_dtype_;
  QuantizedCommPolicy quantized_;
  HostGroups hosts_;
  Tensor gradient_residual_;  // qgZ's error feedback: what the codes sent so far left out
  bool requires_all_reduce_ = true;
  double post_divide_ = 1.0;   // applied after the reduction (f16: the part not applied before)
  mesh::ReduceOp reduce_op_;   // of the pending reduce-scatter
  Tensor partial_reduce_;      // HSDP gradients not yet all-reduced
  bool unsharded_ = false;
  bool on_shards_ = false;  // the unsharded tensors alias the shards (one rank)
  PendingCollective all_gather_;
  mesh::ProcessGroupPtr post_forward_group_;  // with the piece kept for it
  Tensor post_forward_piece_;
  PendingCollective reduce_scatter_;
  // Versions of the shards when the unsharded tensors were gathered (issued): a
  // change (an optimizer step while unsharded) makes those stale, so they are
  // gathered again.
  std::vector<uint64_t> gathered_versions_;
  std::vector<uint64_t> issued_versions_;  // of the pending all-gather
};

}  // namespace dtr::fsdp
