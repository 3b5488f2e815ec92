#include "train_checkpoint.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/metadata.h"
#include "tensor/random.h"

namespace dtr::train {

namespace ckpt = dtr::checkpoint;

void save_training_checkpoint(const std::filesystem::path& dir, nn::Module& model,
                              const nn::optim::Optimizer& optimizer, int64_t step, const DistributedSampler& sampler) {
  ckpt::CheckpointState state;
  state.add_model(model);
  state.add_optimizer(optimizer, model);
  state.extra["step"] = step;
  state.extra["sampler_position"] = sampler.position();
  state.extra["rng"] = ckpt::generator_to_json(default_generator().state());
  ckpt::save(dir, state);
}

int64_t load_training_checkpoint(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer,
                                 DistributedSampler& sampler) {
  ckpt::CheckpointState state;
  state.add_model(model);
  state.add_optimizer_for_load(optimizer, model, ckpt::read_metadata(dir));
  ckpt::load(dir, state);
  state.restore_optimizer(optimizer, model);
  sampler.set_position(state.extra.at("sampler_position").get<int64_t>());
  default_generator().set_state(ckpt::generator_from_json(state.extra.at("rng")));
  return state.extra.at("step").get<int64_t>();
}

}  // namespace dtr::train
