#include "dtr/dtensor/sharding/rule_cache.h"

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

namespace dtr::dtensor {

namespace {

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::string, OpSharding> decisions;
  int64_t hits = 0;
  int64_t misses = 0;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::string make_key(std::string_view op, const std::string& args, const std::vector<const DTensorSpec*>& inputs) {
  std::string key = fmt::format("{}({})", op, args);
  for (const DTensorSpec* spec : inputs) {
    key += '|';
    key += spec->to_string();
  }
  return key;
}

}  // namespace

OpSharding replicate_everything(const std::vector<const DTensorSpec*>& inputs, Shape shape) {
  OpSharding s;
  for (const DTensorSpec* spec : inputs) s.inputs.emplace_back(spec->placements.size(), Replicate());
  s.output = Placements(inputs.empty() ? 0 : inputs.front()->placements.size(), Replicate());
  s.shape = std::move(shape);
  s.fallback = true;
  return s;
}

OpSharding cached_sharding(std::string_view op, const std::string& args, const std::vector<const DTensorSpec*>& inputs,
                           const std::function<OpSharding()>& rule) {
  const std::string key = make_key(op, args, inputs);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.decisions.find(key);
    if (it != c.decisions.end()) {
      ++c.hits;
      return it->second;
    }
  }
  OpSharding decision = rule();  // outside the lock: rules may throw on bad input
  std::lock_guard<std::mutex> lock(c.mutex);
  ++c.misses;
  c.decisions.emplace(key, decision);
  return decision;
}

RuleCacheStats rule_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.hits, c.misses, static_cast<int64_t>(c.decisions.size())};
}

void clear_rule_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.decisions.clear();
  c.hits = c.misses = 0;
}

}  // namespace dtr::dtensor
