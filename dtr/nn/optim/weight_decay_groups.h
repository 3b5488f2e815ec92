// The usual weight-decay convention as parameter groups (dtr/nn/optim/optimizer.h):
// decay on matrices (parameters of 2 or more dims: linear and embedding weights),
// none on vectors (biases, norm weights), as GPT-2 and Llama training do.
//
//   AdamW opt(weight_decay_groups(model.parameters(), 0.1), {.lr = 3e-4});
//
// The dims counted are the global parameter's (a shard of a sharded parameter
// has the same count). A group that would be empty is left out.
#pragma once

#include "dtr/nn/optim/optimizer.h"

#include <vector>

namespace dtr::nn::optim {

std::vector<ParamGroup> weight_decay_groups(const std::vector<Parameter>& params, double weight_decay);

}  // namespace dtr::nn::optim
