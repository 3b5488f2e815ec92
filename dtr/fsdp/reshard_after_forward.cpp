#include "dtr/fsdp/reshard_after_forward.h"

#include "dtr/base/error.h"
#include "dtr/mesh/distributed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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
  for (const int rank : dp->global_ranks()) hosts.push_back(distributed::host_of(rank));
  const int k = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[static_cast<size_t>(dp->rank())]));
  bool blocks = n % k == 0;
  for (int i = 0; blocks && i < n; ++i) {
    blocks = hosts[static_cast<size_t>(i)] == hosts[static_cast<size_t>(i / k * k)] &&
             (i % k != 0 || i == 0 || hosts[static_cast<size_t>(i)] != hosts[static_cast<size_t>(i - 1)]);
  }
  DTR_CHECK(blocks,
            "reshard after forward to the host: the {} ranks of the shard dim of {} must be blocks of {} consecutive "
            "ranks per host (this rank's host holds {}); their hosts are [{}]",
            n, mesh.to_string(), k, k, fmt::join(hosts, ", "));
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
