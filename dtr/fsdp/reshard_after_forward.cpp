#include "dtr/fsdp/reshard_after_forward.h"

#include "dtr/base/error.h"

#include <fmt/format.h>

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

ReshardAfterForward::Action ReshardAfterForward::action(bool is_root) const {
  if (override_) return *override_ ? Action::free : Action::keep;
  if (!setting_) return is_root ? Action::keep : Action::free;
  if (std::holds_alternative<bool>(*setting_)) return std::get<bool>(*setting_) ? Action::free : Action::keep;
  if (piece_group_) return Action::keep_piece;
  return std::get<int>(*setting_) == 1 ? Action::keep : Action::free;
}

}  // namespace dtr::fsdp
