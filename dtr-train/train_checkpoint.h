// dtr-train's checkpoints: the sharded model, the AdamW state, the step, the data
// sampler's position and the RNG state, through the distributed checkpoint API
// (dtr/checkpoint/checkpoint.h), and what they were trained as: the model config and
// the run settings a resume must keep (run_settings). Both calls are collective
// over every rank; a checkpoint loads at any world size.
#pragma once

#include "sampler.h"

#include "dtr/mesh/process_group.h"
#include "dtr/nn/module.h"
#include "dtr/nn/optim/optimizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dtr::train {

// What a checkpoint records about the run besides its state.
struct TrainedAs {
  nlohmann::json model_config;  // to_json(nn::TransformerConfig)
  nlohmann::json run_settings;  // batch, sequence length, seed, data, dtype policy, world size
};

// The parameters holding NaN or infinite values, with how many elements each, over
// every rank's shards (collective over `world`; the same list on every rank).
struct NonFiniteParameter {
  std::string name;
  int64_t count = 0;
};
std::vector<NonFiniteParameter> nonfinite_parameters(nn::Module& model, const mesh::ProcessGroupPtr& world);

// Saves the state after `step` optimizer steps into `dir`; with `background`,
// returns once the state is copied and leaves the write in flight
// (dtr/checkpoint/async_save.h: poll_async_save or wait_async_save commits it).
// The data position is recorded in global samples (steps x global batch).
void save_training_checkpoint(const std::filesystem::path& dir, nn::Module& model,
                              const nn::optim::Optimizer& optimizer, int64_t step, const DistributedSampler& sampler,
                              const TrainedAs& trained_as, bool background = false);

// Compares what checkpoint `dir` was trained as with this run (read from its
// metadata, no collective). A different model is an error naming the field; a
// changed run setting (the world size aside: checkpoints reshard) is an error
// unless `allow_changes`. Returns the changes allowed ("global_batch 8 -> 16"),
// empty when none. A checkpoint that records nothing is not checked.
std::vector<std::string> check_trained_as(const std::filesystem::path& dir, const TrainedAs& now, bool allow_changes);

// Loads `dir` into the model (sharded), the optimizer and the sampler; restores
// the RNG. Returns the number of steps already taken. The sampler continues at
// the checkpoint's global sample, whatever the world size: the same samples in
// the same order as an uninterrupted run (an error when a changed global batch
// does not divide the samples already seen).

int64_t load_training_checkpoint(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer,
                                 DistributedSampler& sampler);

// --keep-last: after checkpoint `step` of `checkpoints` (<out>/checkpoints) is
// complete, removes the older checkpoints beyond the newest `keep_last` (it
// included), and older unfinished ones (step_<n>.tmp). Checkpoints of later steps
// (left by an earlier run that went further) are kept. Returns what it removed.
// Not collective: one rank calls it.
std::vector<std::filesystem::path> remove_old_checkpoints(const std::filesystem::path& checkpoints, int64_t step,
                                                         int64_t keep_last);

}  // namespace dtr::train
