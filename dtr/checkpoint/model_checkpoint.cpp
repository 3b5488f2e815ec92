#include "dtr/checkpoint/model_checkpoint.h"

#include "dtr/base/error.h"

namespace dtr::checkpoint {

namespace {

// `extra` is the user's object; "optim" is the optimizer's scalars' key.
void require_object(const nlohmann::json& extra) {
  DTR_CHECK(extra.is_object(), "checkpoint::save: `extra` must be a JSON object (named values), found {}",
            extra.type_name());
  DTR_CHECK(!extra.contains("optim"),
            "checkpoint::save: `extra` has a key \"optim\", which holds the optimizer's settings; rename it");
}

// The model's parameters (and the optimizer's state) with the user's `extra`.
CheckpointState state_of(nn::Module& model, const nn::optim::Optimizer* optimizer, const nlohmann::json& extra) {
  require_object(extra);
  CheckpointState state;
  state.add_model(model);
  state.extra = extra;
  if (optimizer) state.add_optimizer(*optimizer, model);  // adds extra["optim"]
  return state;
}

}  // namespace

void save(const std::filesystem::path& dir, nn::Module& model, const nn::optim::Optimizer& optimizer,
          const nlohmann::json& extra, const SaveOptions& options) {
  save(dir, state_of(model, &optimizer, extra), options);
}

void save(const std::filesystem::path& dir, nn::Module& model, const nlohmann::json& extra,
          const SaveOptions& options) {
  save(dir, state_of(model, nullptr, extra), options);
}

void async_save(const std::filesystem::path& dir, nn::Module& model, const nn::optim::Optimizer& optimizer,
                const nlohmann::json& extra, const SaveOptions& options) {
  async_save(dir, state_of(model, &optimizer, extra), options);
}

void async_save(const std::filesystem::path& dir, nn::Module& model, const nlohmann::json& extra,
                const SaveOptions& options) {
  async_save(dir, state_of(model, nullptr, extra), options);
}

nlohmann::json load(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer) {
  CheckpointState state;
  state.add_model(model);
  state.add_optimizer_for_load(optimizer, model, read_metadata(dir));
  load(dir, state);
  state.restore_optimizer(optimizer, model);
  state.extra.erase("optim");
  return state.extra;
}

nlohmann::json load(const std::filesystem::path& dir, nn::Module& model) {
  CheckpointState state;
  state.add_model(model);
  load(dir, state);
  state.extra.erase("optim");
  return state.extra;
}

}  // namespace dtr::checkpoint
