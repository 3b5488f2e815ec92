// Which module parameter each of an optimizer's parameters is, with its dotted
// name: optimizer state is saved and loaded by parameter name, and shaped and
// sharded like its parameter.
#pragma once

#include "dtr/nn/module.h"
#include "dtr/nn/optim/optimizer.h"

#include <string>
#include <utility>
#include <vector>

namespace dtr::checkpoint {

// In the optimizer's order. A match is the same slot, or the same tensor (an
// optimizer built from the parameters' tensors). Reshards the module first, so the
// slots hold the shards the optimizer steps. `what` names the caller in the error
// for a parameter that is not the module's.
std::vector<std::pair<std::string, nn::Parameter>> optimizer_params_in(const nn::optim::Optimizer& optimizer,
                                                                       nn::Module& module, const char* what);

}  // namespace dtr::checkpoint
