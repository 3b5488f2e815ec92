#include "train_checkpoint.h"

#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/metadata.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace dtr::train {

namespace ckpt = dtr::checkpoint;

std::vector<NonFiniteParameter> nonfinite_parameters(nn::Module& model, const mesh::ProcessGroupPtr& world) {
  autograd::NoGradGuard no_grad;
  const auto named = model.named_parameters();
  std::vector<double> counts;
  for (const auto& [name, p] : named) {
    const Tensor& x = p.data();
    // x - x is 0 for a finite value and NaN for NaN and +-inf.
    counts.push_back(x.numel() == 0 ? 0.0 : sum(ne(sub(x, x), Scalar(0))).item());
  }
  Tensor total = from_vector(counts, {static_cast<int64_t>(counts.size())});
  world->all_reduce(total, mesh::ReduceOp::sum())->wait();
  const std::vector<double> global = total.to_vector<double>();
  std::vector<NonFiniteParameter> out;
  for (size_t i = 0; i < named.size(); ++i) {
    if (global[i] > 0) out.push_back({named[i].first, static_cast<int64_t>(global[i])});
  }
  return out;
}

void save_training_checkpoint(const std::filesystem::path& dir, nn::Module& model,
                              const nn::optim::Optimizer& optimizer, int64_t step, const DistributedSampler& sampler,
                              const TrainedAs& trained_as) {
  ckpt::CheckpointState state;
  state.extra["model_config"] = trained_as.model_config;
  state.extra["run_settings"] = trained_as.run_settings;
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

std::vector<std::string> check_trained_as(const std::filesystem::path& dir, const TrainedAs& now, bool allow_changes) {
  const nlohmann::json& then = ckpt::read_metadata(dir).user;
  std::vector<std::string> changes;
  if (then.contains("model_config")) {
    for (const auto& [key, value] : now.model_config.items()) {
      const nlohmann::json& saved = then["model_config"].contains(key) ? then["model_config"][key] : nlohmann::json();
      if (saved != value) {
        throw std::invalid_argument(fmt::format(
            "--resume {}: the checkpoint is of another model: its {} is {}, this run's --model gives {}",
            dir.string(), key, saved.dump(), value.dump()));
      }
    }
  }
  if (then.contains("run_settings")) {
    std::vector<std::string> refused;
    for (const auto& [key, value] : now.run_settings.items()) {
      const nlohmann::json& saved = then["run_settings"].contains(key) ? then["run_settings"][key] : nlohmann::json();
      if (saved == value) continue;
      const std::string change = fmt::format("{} {} -> {}", key, saved.dump(), value.dump());
      if (key == "world_size" || allow_changes) {
        changes.push_back(change);
      } else {
        refused.push_back(change);
      }
    }
    if (!refused.empty()) {
      throw std::invalid_argument(fmt::format("--resume {}: this run changes settings the checkpoint was trained with "
                                              "({}); pass --allow-config-change to resume anyway",
                                              dir.string(), fmt::join(refused, "; ")));
    }
  }
  return changes;
}

}  // namespace dtr::train
