// The cache of sharding propagation decisions: one OpSharding per (op, op
// arguments, input specs). A rule runs once for a given combination; later calls
// with the same specs reuse its decision. Thread-safe. The counters let tests and
// users see that the cache is used.
#pragma once

#include "dtr/dtensor/sharding/op_sharding.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::dtensor {

struct RuleCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t entries = 0;
};

// The decision for `op` (with `args`, a string form of the op's non-tensor
// arguments) on `inputs`: from the cache, or computed by `rule` and stored.
OpSharding cached_sharding(std::string_view op, const std::string& args, const std::vector<const DTensorSpec*>& inputs,
                           const std::function<OpSharding()>& rule);

RuleCacheStats rule_cache_stats();
void clear_rule_cache();

}  // namespace dtr::dtensor
