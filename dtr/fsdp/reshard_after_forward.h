// ReshardAfterForward: what one fully_shard group does with its unsharded
// parameters at the end of forward. The one owner of the reshard_after_forward
// option (fully_shard.h): it validates the setting, makes the post-forward group
// for an integer setting, resolves the default (the root keeps its parameters,
// every other group frees them, as FSDP2) and set_reshard_after_forward's override.
//
//   true   free them; backward all-gathers again over the whole mesh
//   false  keep them until the end of backward (one all-gather per step)
//   k      keep this rank's 1/k of them; backward all-gathers over the k
//          consecutive ranks of its post-forward group only (1 < k < mesh size;
//          k = 1 is false, k = the mesh size is true)
//
// With k = reshard_to_host_size(mesh), the ranks of the shard dim on one host,
// the post-forward groups are the hosts: after forward each rank keeps a
// host-local secondary shard and backward's all-gathers never leave the host
// (ZeRO++'s hpZ). The forward all-gather and the reduce-scatter still span the
// hosts.
#pragma once

#include "dtr/mesh/device_mesh.h"

#include <optional>
#include <string>
#include <variant>

namespace dtr::fsdp {

// The ranks of the mesh's shard dim (its last) that share this rank's host: the
// reshard_after_forward that keeps a host-local shard. Errors unless every host
// holds the same number of consecutive ranks of that dim (the post-forward groups
// are blocks of consecutive ranks), naming each rank's host. The whole dim when
// distributed::init did not start the job (one host).
int reshard_to_host_size(const mesh::DeviceMesh& mesh);

class ReshardAfterForward {
 public:
  enum class Action { keep, free, keep_piece };
  using Setting = std::optional<std::variant<bool, int>>;

  ReshardAfterForward() = default;
  // Checks `setting` against the mesh's shard dim (an error names `what`) and, for
  // an integer k, splits that dim into groups of k ranks: collective over the mesh.
  ReshardAfterForward(const Setting& setting, const mesh::DeviceMesh& mesh, const std::string& what);

  Action action(bool is_root) const;
  // set_reshard_after_forward: replaces the setting (and its post-forward group).
  void override_with(bool on) { override_ = on; }
  // The ranks a kept piece is gathered over (Action::keep_piece only).
  const mesh::ProcessGroupPtr& piece_group() const { return piece_group_; }

 private:
  Setting setting_;
  std::optional<bool> override_;
  mesh::ProcessGroupPtr piece_group_;
};

}  // namespace dtr::fsdp
