// FSDPParamGroup: the parameters of one fully_shard call and their two
// collectives. Unshard: copy every shard into one flat buffer (padded rows
// zeroed), one all_gather_into_tensor, copy each parameter's rows out into its
// unsharded tensor. Gradient reduction: copy every unsharded gradient into one
// flat buffer laid out rank by rank, one reduce_scatter_tensor, then each rank's
// rows are added to its shards' .grad. Both collectives are issued
// asynchronously and waited on later, so they overlap compute. Each of those
// per-parameter copy loops is one copy_batch (fsdp/copy_batch.h): one kernel
// launch on CUDA, copy_ per parameter on the CPU.
//
// Mixed precision: the all-gather runs in the compute dtype (shards are cast in
// the copy-in), the reduce-scatter in the reduce dtype, and the result is cast to
// the shards' dtype. HSDP (2-D mesh): both run over the shard group (the mesh's
// last dim), then the reduced shard is all-reduced over the replicate group.
//
// CPU offload: shards and their .grad live in host memory. With pinned memory
// the copy-in reads the shards without waiting, and the reduced gradients are
// cast and scaled on the device and copied into new pinned .grad tensors without
// waiting; wait_for_host_copies (finish_backward) waits for both.
#pragma once

#include "fsdp/fsdp_param.h"
#include "mesh/device_mesh.h"
#include "mesh/work.h"

#include <memory>
#include <optional>
#include <vector>

namespace dtr::fsdp {

class FSDPParamGroup {
 public:
  // With `offload`, the shards live in host memory and the group computes on the
  // current CUDA device: shards are copied in for the all-gather, and reduced
  // gradients copied back to the shards' .grad on the CPU; with `pin_memory` both
  // in pinned memory, copied asynchronously.
  FSDPParamGroup(std::vector<std::unique_ptr<FSDPParam>> params, mesh::DeviceMesh mesh, DType reduce_dtype,
                 bool offload = false, bool pin_memory = false);

  bool empty() const { return params_.empty(); }
  const std::vector<std::unique_ptr<FSDPParam>>& params() const { return params_; }
  const mesh::DeviceMesh& mesh() const { return mesh_; }
  int64_t flat_numel() const { return flat_numel_; }  // per rank, padding included

  // Starts the all-gather (no-op when unsharded or already started).
  void issue_all_gather();
  // Finishes it (starting it if needed): unsharded tensors filled and installed.
  void wait_for_unshard();
  bool is_unsharded() const { return unsharded_; }
  bool has_pending_all_gather() const { return all_gather_.work != nullptr; }
  // Frees the unsharded parameters and puts the shards back in the slots. With
  // keep_piece and a post-forward group of k ranks, first keeps this rank's
  // 1/k of the unsharded flat buffer; the next all-gather then runs over the
  // k ranks only.
  void reshard(bool keep_piece = false);
  // The group of k consecutive ranks that reshard(true) keeps pieces for.
  void set_post_forward_group(mesh::ProcessGroupPtr group);
  // Forgets a kept piece (a new forward gathers from the shards, which the
  // optimizer may have changed).
  void drop_post_forward_piece() { post_forward_piece_ = Tensor(); }

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
  bool copies_host_async() const { return offload_ && pin_memory_; }
  // Waits for them (a synchronize of the device, so for every group's at once):
  // afterwards the .grad tensors hold their values and the shards may be written.
  void wait_for_host_copies();

 private:
  struct Pending {
    mesh::WorkPtr work;
    Tensor input;
    Tensor output;
  };
  Device device() const;  // where the group computes and communicates
  void copy_out_pinned(const Tensor& reduced);  // reduced rows into pinned .grad
  int64_t shard_size() const { return mesh_.size(mesh_.ndim() - 1); }
  const mesh::ProcessGroupPtr& shard_group() const { return mesh_.group(mesh_.ndim() - 1); }

  std::vector<std::unique_ptr<FSDPParam>> params_;
  mesh::DeviceMesh mesh_;
  int64_t flat_numel_ = 0;
  DType compute_dtype_;
  DType reduce_dtype_;
  bool offload_ = false;
  bool pin_memory_ = false;
  bool requires_all_reduce_ = true;
  double post_divide_ = 1.0;   // applied after the reduction (f16: the part not applied before)
  mesh::ReduceOp reduce_op_;   // of the pending reduce-scatter
  Tensor partial_reduce_;      // HSDP gradients not yet all-reduced
  bool unsharded_ = false;
  Pending all_gather_;
  mesh::ProcessGroupPtr post_forward_group_;
  Tensor post_forward_piece_;
  Pending reduce_scatter_;
  // Versions of the shards when they were last gathered: a change (an optimizer
  // step while unsharded) makes the unsharded copies stale, so they are re-gathered.
  std::vector<uint64_t> gathered_versions_;
};

}  // namespace dtr::fsdp
