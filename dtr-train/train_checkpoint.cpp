#include "train_checkpoint.h"

#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/metadata.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>

namespace dtr::train {

namespace ckpt = dtr::checkpoint;

std::vector<NonFiniteParameter> nonfinite_parameters(nn::Module& model, const mesh::ProcessGroupPtr& world) {
  DTR_PROFILE_SCOPE("checkpoint", "check parameters are finite");
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
                              const TrainedAs& trained_as, bool background) {
  ckpt::CheckpointState state;
  state.extra["model_config"] = trained_as.model_config;
  state.extra["run_settings"] = trained_as.run_settings;
  state.add_model(model);
  state.add_optimizer(optimizer, model);
  state.extra["step"] = step;
  state.extra["samples_seen"] = sampler.position() * sampler.global_batch();
  state.extra["sampler_position"] = sampler.position();  // what earlier versions read
  state.extra["rng"] = ckpt::generator_to_json(default_generator().state());
  if (background) {
    ckpt::async_save(dir, state);
  } else {
    ckpt::save(dir, state);
  }
}

namespace {

// The global batch a resumed sampler continues at.
int64_t sampler_position(const std::filesystem::path& dir, const nlohmann::json& extra, int64_t global_batch) {
  if (!extra.contains("samples_seen")) return extra.at("sampler_position").get<int64_t>();
  const auto seen = extra.at("samples_seen").get<int64_t>();
  if (seen % global_batch != 0) {
    throw std::invalid_argument(fmt::format(
        "--resume {}: the checkpoint's run trained on {} samples, which is not a whole number of global batches "
        "of {}; resume with a --global-batch that divides {}",
        dir.string(), seen, global_batch, seen));
  }
  return seen / global_batch;
}

// The step of a checkpoint directory's name: step_<n> (done) or step_<n>.tmp (unfinished).
std::optional<std::pair<int64_t, bool>> checkpoint_step(const std::string& name) {
  int64_t step = 0;
  size_t used = 0;
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || !std::isdigit(static_cast<unsigned char>(name[5]))) {
    return std::nullopt;
  }
  try {
    step = std::stoll(name.substr(5), &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string rest = name.substr(5 + used);
  if (rest.empty()) return std::make_pair(step, true);
  if (rest == ".tmp") return std::make_pair(step, false);
  return std::nullopt;
}

}  // namespace

std::vector<std::filesystem::path> remove_old_checkpoints(const std::filesystem::path& checkpoints, int64_t step,
                                                         int64_t keep_last) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, fs::path>> older_done;
  std::vector<fs::path> removed;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(checkpoints, error)) {
    const auto parsed = checkpoint_step(entry.path().filename().string());
    if (!parsed || parsed->first >= step || !entry.is_directory()) continue;
    if (!parsed->second) {
      removed.push_back(entry.path());
    } else if (fs::exists(entry.path() / ckpt::kMetadataFile)) {
      older_done.emplace_back(parsed->first, entry.path());
    }
  }
  std::sort(older_done.begin(), older_done.end(), std::greater<>());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep_last - 1, 0)); i < older_done.size(); ++i) {
    removed.push_back(older_done[i].second);
  }
  for (const fs::path& dir : removed) fs::remove_all(dir);
  return removed;
}

int64_t load_training_checkpoint(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer,
                                 DistributedSampler& sampler) {
  ckpt::CheckpointState state;
  state.add_model(model);
  state.add_optimizer_for_load(optimizer, model, ckpt::read_metadata(dir));
  ckpt::load(dir, state);
  state.restore_optimizer(optimizer, model);
  sampler.set_position(sampler_position(dir, state.extra, sampler.global_batch()));
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
      if (key == "world_size" || key == "tp" || allow_changes) {
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
