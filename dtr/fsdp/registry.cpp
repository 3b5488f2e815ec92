#include "dtr/fsdp/registry.h"

#include <map>
#include <mutex>

namespace dtr::fsdp {

namespace {

std::mutex g_mutex;
std::map<const nn::Module*, std::weak_ptr<FSDPState>>& registry() {
  static std::map<const nn::Module*, std::weak_ptr<FSDPState>> states;
  return states;
}

}  // namespace

std::shared_ptr<FSDPState> find_state(const nn::Module& module) {
  std::lock_guard lock(g_mutex);
  auto it = registry().find(&module);
  if (it == registry().end()) return nullptr;
  auto state = it->second.lock();
  if (!state) registry().erase(it);
  return state;
}

std::vector<std::shared_ptr<FSDPState>> all_states() {
  std::lock_guard lock(g_mutex);
  std::vector<std::shared_ptr<FSDPState>> states;
  for (auto& [module, weak] : registry()) {
    if (auto s = weak.lock()) states.push_back(std::move(s));
  }
  return states;
}

void register_state(const nn::Module& module, const std::shared_ptr<FSDPState>& state) {
  std::lock_guard lock(g_mutex);
  registry()[&module] = state;
}

}  // namespace dtr::fsdp
