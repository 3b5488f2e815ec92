// Which modules fully_shard was applied to: a map from module to its FSDPState
// (held weakly: the module's hooks own the state, so a destroyed module's entry
// simply expires).
#pragma once

#include "dtr/nn/module.h"

#include <memory>
#include <vector>

namespace dtr::fsdp {

class FSDPState;

std::shared_ptr<FSDPState> find_state(const nn::Module& module);
// Every live state.
std::vector<std::shared_ptr<FSDPState>> all_states();
void register_state(const nn::Module& module, const std::shared_ptr<FSDPState>& state);

}  // namespace dtr::fsdp
