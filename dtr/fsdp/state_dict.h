// Sharded state dicts of fully_shard modules: every parameter as the DTensor it
// is (its local shard and spec; no communication), for checkpoints and for
// moving state between identically sharded models. full_tensor() of an entry
// gives the unsharded value.
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/nn/module.h"

#include <map>
#include <string>

namespace dtr::fsdp {

using ShardedStateDict = std::map<std::string, DTensor>;

// Parameters by dotted name (resharding first: see reshard_all). Call between
// steps, not inside forward/backward.
ShardedStateDict get_sharded_state_dict(nn::Module& module);

// Copies each entry's local part into the parameter of the same name. Entries
// must have the parameter's global shape, dtype and placements on a mesh of the
// same shape. strict: no missing and no unexpected keys. Errors list every problem.
void load_sharded_state_dict(nn::Module& module, const ShardedStateDict& state, bool strict = true);

}  // namespace dtr::fsdp
