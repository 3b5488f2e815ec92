// Wrapping policies: which modules of a model get their own fully_shard call,
// and apply_fully_shard, which makes those calls bottom-up and then shards the
// root (what FSDP1's auto_wrap_policy did, for FSDP2-style fully_shard):
//
//   fsdp::apply_fully_shard(*model, fsdp::module_type_policy<nn::TransformerBlock>(), options);
//   // == for (auto& block : model->layers()) fully_shard(*block, options); fully_shard(*model, options);
//
// A policy sees a module and the number of its parameters that no selected
// descendant claims yet ("unclaimed": its own parameters plus those of
// descendants that were not selected, counted once each even if tied; parameters
// already sharded by an earlier fully_shard count as claimed). The walk is
// post-order (children before parents, in registration order), so a size policy
// decides on what is left after the subtrees have been wrapped, as FSDP1's
// size_based_auto_wrap_policy. The root is never asked: it is always sharded
// last (its group takes whatever is left).
//
// Policies: module_type_policy<T>() (dynamic type), module_type_policy({"Name"})
// (type_name()), size_based_policy(min_num_params) (by unclaimed count; ModuleList
// is excluded by default, since a list is iterated, never called, so its hooks
// would never run), predicate_policy(fn), and any_of / all_of combinations.
// Modules already sharded (is_fully_sharded) are never selected again.
#pragma once

#include "dtr/fsdp/fully_shard.h"
#include "dtr/nn/module.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace dtr::fsdp {

// true: shard `module` as its own group. `unclaimed_params` as described above.
using WrapPolicy = std::function<bool(const nn::Module& module, int64_t unclaimed_params)>;

template <class M>
WrapPolicy module_type_policy() {
  return [](const nn::Module& m, int64_t) { return dynamic_cast<const M*>(&m) != nullptr; };
}
// Modules whose type_name() is one of `type_names`.
WrapPolicy module_type_policy(std::set<std::string> type_names);
// Modules with at least `min_num_params` unclaimed parameters, unless their
// type_name() is in `exclude_types`.
WrapPolicy size_based_policy(int64_t min_num_params, std::set<std::string> exclude_types = {"ModuleList"});
WrapPolicy predicate_policy(std::function<bool(const nn::Module&)> predicate);
WrapPolicy any_of(std::vector<WrapPolicy> policies);
WrapPolicy all_of(std::vector<WrapPolicy> policies);

// The descendants of `root` (never root itself) that `policy` selects, with their
// paths, in the order apply_fully_shard shards them (post-order). Reads only.
std::vector<std::pair<std::string, nn::Module*>> select_modules(nn::Module& root, const WrapPolicy& policy);

// fully_shard(m, options) for every selected module in select_modules order, then
// fully_shard(root, options). Collective (every rank must call it alike). Returns
// the controls in that order (the root's last).
std::vector<FSDPModule> apply_fully_shard(nn::Module& root, const WrapPolicy& policy, FullyShardOptions options = {});

}  // namespace dtr::fsdp
