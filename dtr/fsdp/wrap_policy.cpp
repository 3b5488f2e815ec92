#include "dtr/fsdp/wrap_policy.h"

#include "dtr/base/error.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/fsdp/distinct_tensors.h"
#include "dtr/nn/module.h"

#include <algorithm>

namespace dtr::fsdp {

WrapPolicy module_type_policy(std::set<std::string> type_names) {
  return [names = std::move(type_names)](const nn::Module& m, int64_t) { return names.contains(m.type_name()); };
}

WrapPolicy size_based_policy(int64_t min_num_params, std::set<std::string> exclude_types) {
  DTR_CHECK(min_num_params > 0, "size_based_policy: expected a positive min_num_params, got {}", min_num_params);
  return [min_num_params, exclude = std::move(exclude_types)](const nn::Module& m, int64_t unclaimed) {
    return unclaimed >= min_num_params && !exclude.contains(m.type_name());
  };
}

WrapPolicy predicate_policy(std::function<bool(const nn::Module&)> predicate) {
  DTR_CHECK(predicate != nullptr, "predicate_policy: got an empty predicate");
  return [p = std::move(predicate)](const nn::Module& m, int64_t) { return p(m); };
}

WrapPolicy any_of(std::vector<WrapPolicy> policies) {
  return [ps = std::move(policies)](const nn::Module& m, int64_t n) {
    return std::any_of(ps.begin(), ps.end(), [&](const WrapPolicy& p) { return p(m, n); });
  };
}

WrapPolicy all_of(std::vector<WrapPolicy> policies) {
  DTR_CHECK(!policies.empty(), "all_of: got no policies (an empty all_of would select every module)");
  return [ps = std::move(policies)](const nn::Module& m, int64_t n) {
    return std::all_of(ps.begin(), ps.end(), [&](const WrapPolicy& p) { return p(m, n); });
  };
}

namespace {

// Post-order walk: returns the parameters of `module`'s subtree no selected
// module claims, appending selected descendants to `out`.
std::vector<Tensor> walk(nn::Module& module, const std::string& path, bool is_root, const WrapPolicy& policy,
                         std::vector<std::pair<std::string, nn::Module*>>& out) {
  if (is_fully_sharded(module) && !is_root) return {};  // already its own group
  std::vector<Tensor> unclaimed;
  for (auto& [name, child] : module.named_children()) {
    for (const Tensor& t : walk(*child, nn::qualified_name(path, name), false, policy, out)) add_unique(unclaimed, t);
  }
  for (auto& [name, p] : module.named_parameters(/*recurse=*/false)) {
    if (!p.is_sharded()) add_unique(unclaimed, p.data());  // sharded: by an earlier call
  }
  if (is_root) return unclaimed;
  int64_t count = 0;
  for (const Tensor& t : unclaimed) count += t.numel();  // all unsharded
  if (policy(module, count)) {
    out.emplace_back(path, &module);
    return {};
  }
  return unclaimed;
}

}  // namespace

std::vector<std::pair<std::string, nn::Module*>> select_modules(nn::Module& root, const WrapPolicy& policy) {
  DTR_CHECK(policy != nullptr, "select_modules: got an empty policy");
  std::vector<std::pair<std::string, nn::Module*>> out;
  walk(root, "", true, policy, out);
  return out;
}

std::vector<FSDPModule> apply_fully_shard(nn::Module& root, const WrapPolicy& policy, FullyShardOptions options) {
  std::vector<FSDPModule> handles;
  for (auto& [path, m] : select_modules(root, policy)) handles.push_back(fully_shard(*m, options));
  handles.push_back(fully_shard(root, std::move(options)));
  return handles;
}

}  // namespace dtr::fsdp
