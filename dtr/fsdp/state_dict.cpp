#include "dtr/fsdp/state_dict.h"

#include "dtr/base/error.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/tensor/autograd/grad_mode.h"

#include <set>

namespace dtr::fsdp {

ShardedStateDict get_sharded_state_dict(nn::Module& module) {
  reshard_all(module);
  ShardedStateDict out;
  for (auto& [name, p] : module.named_parameters()) {
    DTR_CHECK(p.is_sharded(),
              "get_sharded_state_dict: parameter '{}' is not sharded (apply fully_shard to the root first), or "
              "the call is inside a forward/backward where the slots hold unsharded tensors",
              name);
    out.emplace(name, p.as_dtensor().detach());
  }
  return out;
}

void load_sharded_state_dict(nn::Module& module, const ShardedStateDict& state, bool strict) {
  reshard_all(module);
  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  autograd::NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (auto& [name, p] : module.named_parameters()) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    const DTensorSpec* spec = p.sharding();
    const DTensor& value = it->second;
    if (!spec || value.shape() != spec->shape || value.dtype() != spec->dtype ||
        value.placements() != spec->placements || value.device_mesh().shape() != spec->mesh.shape() ||
        value.to_local().sizes() != p.data().sizes()) {
      mismatched.push_back(fmt::format("{} (parameter {}, given {})", name,
                                       spec ? spec->to_string() : std::string("not sharded"), value.to_string()));
      continue;
    }
    copies.emplace_back(p.data(), value.to_local());
  }
  std::vector<std::string> unexpected;
  for (auto& [name, value] : state) {
    if (!known.contains(name)) unexpected.push_back(name);
  }
  DTR_CHECK(mismatched.empty() && (!strict || (missing.empty() && unexpected.empty())),
            "load_sharded_state_dict: missing keys [{}], unexpected keys [{}], mismatched [{}]",
            fmt::join(missing, ", "), fmt::join(unexpected, ", "), fmt::join(mismatched, "; "));
  for (auto& [param, local] : copies) param.copy_(local);
}

}  // namespace dtr::fsdp
