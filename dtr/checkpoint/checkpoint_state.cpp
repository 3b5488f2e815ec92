#include "dtr/checkpoint/checkpoint_state.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/optimizer_params.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/tensor/factory.h"

namespace dtr::checkpoint {

using nlohmann::json;

namespace {

constexpr const char* kOptimPrefix = "optim.";

// `value` laid out as `param`: a DTensor when the parameter is sharded.
std::variant<DTensor, Tensor> like_param(const nn::Parameter& param, const Tensor& value) {
  if (param.is_sharded()) return DTensor(value, *param.sharding());
  return value;
}

}  // namespace

void CheckpointState::add_model(nn::Module& module, const std::string& prefix) {
  fsdp::reshard_all(module);
  for (auto& [name, p] : module.named_parameters()) tensors[prefix + name] = like_param(p, p.data().detach());
}

void CheckpointState::add_optimizer(const nn::optim::Optimizer& optimizer, nn::Module& module) {
  auto params = optimizer_params_in(optimizer, module, "checkpoint");
  json steps = json::object();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, param] = params[i];
    const auto& st = optimizer.state(i);
    steps[name] = st.step;
    for (const auto& [key, t] : st.tensors) tensors[kOptimPrefix + name + "." + key] = like_param(param, t);
  }
  extra["optim"] = json{{"kind", optimizer.kind()}, {"lr", optimizer.lr()}, {"steps", steps}};
}

void CheckpointState::add_optimizer_for_load(const nn::optim::Optimizer& optimizer, nn::Module& module,
                                             const Metadata& metadata) {
  for (const auto& [name, p] : optimizer_params_in(optimizer, module, "checkpoint")) {
    const std::string prefix = kOptimPrefix + name + ".";
    for (auto it = metadata.tensors.lower_bound(prefix); it != metadata.tensors.end() && it->first.starts_with(prefix);
         ++it) {
      const std::string key = it->first.substr(prefix.size());
      if (key.find('.') != std::string::npos) continue;  // a deeper parameter's state
      tensors[it->first] = like_param(p, zeros_like(p.data().detach()));
    }
  }
}

void CheckpointState::restore_optimizer(nn::optim::Optimizer& optimizer, nn::Module& module) const {
  DTR_CHECK(extra.contains("optim"), "checkpoint: no optimizer state (extra[\"optim\"]) in the loaded checkpoint");
  const json& o = extra.at("optim");
  auto params = optimizer_params_in(optimizer, module, "checkpoint");
  nn::optim::OptimizerState state;
  state.kind = o.at("kind").get<std::string>();
  state.lr = o.at("lr").get<double>();
  const json& steps = o.at("steps");
  for (const auto& [name, param] : params) {
    nn::optim::ParamState ps;
    DTR_CHECK(steps.contains(name), "checkpoint: no optimizer step for parameter '{}'", name);
    ps.step = steps.at(name).get<int64_t>();
    const std::string prefix = kOptimPrefix + name + ".";
    for (auto it = tensors.lower_bound(prefix); it != tensors.end() && it->first.starts_with(prefix); ++it) {
      const std::string key = it->first.substr(prefix.size());
      if (key.find('.') != std::string::npos) continue;
      ps.tensors[key] = std::visit(
          [](const auto& v) -> Tensor {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, DTensor>) {
              return v.to_local();
            } else {
              return v;
            }
          },
          it->second);
    }
    state.params.push_back(std::move(ps));
  }
  optimizer.load_state_dict(state);
}

json generator_to_json(const GeneratorState& state) {
  return json{{"seed", state.seed}, {"offset", state.offset}};
}

GeneratorState generator_from_json(const json& j) {
  return GeneratorState{j.at("seed").get<uint64_t>(), j.at("offset").get<uint64_t>()};
}

}  // namespace dtr::checkpoint
