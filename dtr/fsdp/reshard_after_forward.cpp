#include "dtr/fsdp/reshard_after_forward.h"

#include "dtr/base/error.h"
#include "dtr/mesh/distributed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <vector>

namespace dtr::fsdp {

ReshardAfterForward::ReshardAfterForward(const Setting& setting, const mesh::DeviceMesh& mesh,
                                         const std::string& what)
    : setting_(setting) {
  if (!setting_ || !std::holds_alternative<int>(*setting_)) return;
  const int k = std::get<int>(*setting_);
  const int n = static_cast<int>(mesh.size(mesh.ndim() - 1));
  DTR_CHECK(k >= 1 && k <= n && n % k == 0,
            "fully_shard({}): reshard_after_forward={} must divide the mesh size {} (1 <= k <= {})", what, k, n, n);
  if (k == 1 || k == n) return;  // keep everything, or a full reshard: no group needed
  auto& dp = mesh.group(mesh.ndim() - 1);
  piece_group_ = dp->split(dp->rank() / k, dp->rank() % k, fmt::format("post-forward {}", k));
}

int reshard_to_host_size(const mesh::DeviceMesh& mesh) {
  DTR_CHECK(mesh.defined(), "reshard_to_host_size: the mesh is not defined");
  const auto& dp = mesh.group(mesh.ndim() - 1);
  const int n = dp->size();
  if (!distributed::is_initialized()) return n;
  std::vector<int> hosts;
  std::map<int, int> ranks_on;  // host -> ranks of the shard dim on it
  for (const int rank : dp->global_ranks()) {
    hosts.push_back(distributed::host_of(rank));
    ++ranks_on[hosts.back()];
  }
  const int k = ranks_on[hosts[static_cast<size_t>(dp->rank())]];
  // Every host holds k ranks, and block i / k of k consecutive ranks is on one host.
  bool blocks = true;
  for (int i = 0; i < n; ++i) {
    const int host = hosts[static_cast<size_t>(i)];
    blocks = blocks && ranks_on[host] == k && host == hosts[static_cast<size_t>(i / k * k)];
  }
  DTR_CHECK(blocks,
            "the shard dim's hosts (reshard_to_host_size): every host must hold a block of {} consecutive "
            "ranks of the shard dim of {} (as this rank's host does); their hosts are [{}]",
            k, mesh.to_string(), fmt::join(hosts, ", "));
  return k;
}

ReshardAfterForward::Action ReshardAfterForward::action(bool is_root) const {
  if (override_) return *override_ ? Action::free : Action::keep;
  if (!setting_) return is_root ? Action::keep : Action::free;
  if (std::holds_alternative<bool>(*setting_)) return std::get<bool>(*setting_) ? Action::free : Action::keep;
  if (piece_group_) return Action::keep_piece;
  return std::get<int>(*setting_) == 1 ? Action::keep : Action::free;
}

}  // namespace dtr::fsdp
