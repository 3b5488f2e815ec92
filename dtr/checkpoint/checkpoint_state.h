// CheckpointState: what save() writes and load() fills. Named tensors, each a
// DTensor (a sharded or replicated parameter or optimizer state: this rank's
// local part plus its spec) or a plain Tensor (the same whole value on every
// rank: an unsharded model), and a JSON object for everything else (user
// metadata such as step and tokens seen, the LR schedule's step, RNG state, the
// data loader's position, the optimizer's scalars).
//
// Helpers fill it from a model and an optimizer and put loaded optimizer state
// back:
//
//   CheckpointState s;
//   s.add_model(model);                       // "layers.0.attn.wq.weight", ...
//   s.add_optimizer(opt, model);              // "optim.<fqn>.exp_avg", ... + extra["optim"]
//   s.extra["step"] = step;
//   s.extra["rng"] = generator_to_json(default_generator().state());
//   checkpoint::save(dir, s);
//
//   CheckpointState r;                        // on a fresh model and optimizer
//   r.add_model(model);
//   r.add_optimizer_for_load(opt, model, checkpoint::read_metadata(dir));
//   checkpoint::load(dir, r);                 // fills the tensors and r.extra
//   r.restore_optimizer(opt, model);
//
// Parameters are named by module.named_parameters(); an optimizer's parameters
// are matched to those names by identity (the same Tensor handles), so build
// the optimizer from model.parameters() after fully_shard. Optimizer state is
// keyed "optim.<fqn>.<state name>" with the parameter's spec (FSDP state is the
// local shard of a tensor shaped like the parameter); extra["optim"] holds
// {"kind", "lr", "steps": {fqn: step}}. LR schedules are pure functions of the
// step (dtr/nn/optim/lr_schedule.h), so the step in extra is their whole state.
#pragma once

#include "dtr/checkpoint/metadata.h"
#include "dtr/dtensor/dtensor.h"
#include "dtr/nn/module.h"
#include "dtr/nn/optim/optimizer.h"
#include "dtr/tensor/random.h"
#include "dtr/tensor/tensor.h"

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

namespace dtr::checkpoint {

struct CheckpointState {
  // DTensor: sharded or replicated over its mesh; Tensor: the whole value.
  std::map<std::string, std::variant<DTensor, Tensor>> tensors;
  // Saved as given; replaced by the checkpoint's object on load.
  nlohmann::json extra = nlohmann::json::object();

  // Every parameter: a DTensor when it carries a spec (fully_shard), else the
  // Tensor. Keys are prefix + fqn. Handles to the live parameters (no copy).
  void add_model(nn::Module& module, const std::string& prefix = "");

  // Save: the optimizer's live state tensors and its scalars (extra["optim"]).
  void add_optimizer(const nn::optim::Optimizer& optimizer, nn::Module& module);
  // Load into a fresh optimizer (which has no state yet): zero tensors, shaped
  // and sharded like their parameters, for every "optim.<fqn>.<name>" entry the
  // checkpoint's metadata has for the module's parameters.
  void add_optimizer_for_load(const nn::optim::Optimizer& optimizer, nn::Module& module, const Metadata& metadata);
  // After load: gives the loaded tensors and extra["optim"] to
  // optimizer.load_state_dict (which checks kind and state names).
  void restore_optimizer(nn::optim::Optimizer& optimizer, nn::Module& module) const;
};

nlohmann::json generator_to_json(const GeneratorState& state);
GeneratorState generator_from_json(const nlohmann::json& j);

}  // namespace dtr::checkpoint
