// dtr-train's checkpoints: the sharded model, the AdamW state, the step, the data
// sampler's position and the RNG state, through the distributed checkpoint API
// (checkpoint/checkpoint.h). Both calls are collective over every rank; a
// checkpoint loads at any world size.
#pragma once

#include "sampler.h"

#include "nn/module.h"
#include "nn/optim/optimizer.h"

#include <cstdint>
#include <filesystem>

namespace dtr::train {

// Saves the state after `step` optimizer steps into `dir`.
void save_training_checkpoint(const std::filesystem::path& dir, nn::Module& model,
                              const nn::optim::Optimizer& optimizer, int64_t step, const DistributedSampler& sampler);

// Loads `dir` into the model (sharded), the optimizer and the sampler; restores
// the RNG. Returns the number of steps already taken.
int64_t load_training_checkpoint(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer,
                                 DistributedSampler& sampler);

}  // namespace dtr::train
