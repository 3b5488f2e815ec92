// FSDPParamGroup: the parameters of one fully_shard call and their two
// collectives. Unshard: copy every shard into one flat buffer (padded rows
// zeroed), one all_gather_into_tensor, copy each parameter's rows out into its
// unsharded tensor. Gradient reduction: copy every unsharded gradient into one
// flat buffer laid out rank by rank, one reduce_scatter_tensor, then each rank's
// rows are added to its shards' .grad. Both collectives are issued
// asynchronously and waited on later, so they overlap compute.
#pragma once

#include "fsdp/fsdp_param.h"
#include "mesh/device_mesh.h"
#include "mesh/work.h"

#include <memory>
#include <vector>

namespace dtr::fsdp {

class FSDPParamGroup {
 public:
  FSDPParamGroup(std::vector<std::unique_ptr<FSDPParam>> params, mesh::DeviceMesh mesh);

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
  // without one) and frees them.
  void issue_reduce_scatter(mesh::ReduceOp op);
  // Finishes it: adds this rank's rows to the shards' .grad.
  void wait_for_reduce_scatter();
  bool has_pending_reduce_scatter() const { return reduce_scatter_.work != nullptr; }

 private:
  struct Pending {
    mesh::WorkPtr work;
    Tensor input;
    Tensor output;
  };
  Device device() const;

  std::vector<std::unique_ptr<FSDPParam>> params_;
  mesh::DeviceMesh mesh_;
  int64_t flat_numel_ = 0;
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
