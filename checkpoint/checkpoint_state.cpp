#include "checkpoint/checkpoint_state.h"

#include "base/error.h"
#include "fsdp/fully_shard.h"
#include "tensor/factory.h"

namespace dtr::checkpoint {

using nlohmann::json;

namespace {

constexpr const char* kOptimPrefix = "optim.";

// The module's name for each optimizer parameter, by identity.
std::vector<std::string> optimizer_param_names(const nn::optim::Optimizer& optimizer, nn::Module& module) {
  fsdp::reshard_all(module);  // the slots must hold the shards the optimizer steps
  auto named = module.named_parameters();
  std::vector<std::string> names;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    const Tensor& p = optimizer.params()[i];
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& np) { return np.second.is_same(p); });
    DTR_CHECK(it != named.end(),
              "checkpoint: optimizer parameter {} (shape [{}]) is not a parameter of the module (build the "
              "optimizer from module.parameters() after fully_shard)",
              i, fmt::join(p.sizes(), ", "));
    names.push_back(it->first);
  }
  return names;
}

std::variant<DTensor, Tensor> like_param(const Tensor& param, const Tensor& value) {
  if (param.dtensor_spec()) return DTensor(value, *param.dtensor_spec());
  return value;
}

}  // namespace

void CheckpointState::add_model(nn::Module& module, const std::string& prefix) {
  fsdp::reshard_all(module);
  for (auto& [name, p] : module.named_parameters()) tensors[prefix + name] = like_param(p, p.detach());
}

void CheckpointState::add_optimizer(const nn::optim::Optimizer& optimizer, nn::Module& module) {
  auto names = optimizer_param_names(optimizer, module);
  json steps = json::object();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& st = optimizer.state(i);
    steps[names[i]] = st.step;
    for (const auto& [key, t] : st.tensors) {
      tensors[kOptimPrefix + names[i] + "." + key] = like_param(optimizer.params()[i], t);
    }
  }
  extra["optim"] = json{{"kind", optimizer.kind()}, {"lr", optimizer.lr()}, {"steps", steps}};
}

void CheckpointState::add_optimizer_for_load(const nn::optim::Optimizer& optimizer, nn::Module& module,
                                             const Metadata& metadata) {
  auto names = optimizer_param_names(optimizer, module);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string prefix = kOptimPrefix + names[i] + ".";
    const Tensor& p = optimizer.params()[i];
    for (auto it = metadata.tensors.lower_bound(prefix); it != metadata.tensors.end() && it->first.starts_with(prefix);
         ++it) {
      const std::string key = it->first.substr(prefix.size());
      if (key.find('.') != std::string::npos) continue;  // a deeper parameter's state
      tensors[it->first] = like_param(p, zeros_like(p.detach()));
    }
  }
}

void CheckpointState::restore_optimizer(nn::optim::Optimizer& optimizer, nn::Module& module) const {
  DTR_CHECK(extra.contains("optim"), "checkpoint: no optimizer state (extra[\"optim\"]) in the loaded checkpoint");
  const json& o = extra.at("optim");
  auto names = optimizer_param_names(optimizer, module);
  nn::optim::OptimizerState state;
  state.kind = o.at("kind").get<std::string>();
  state.lr = o.at("lr").get<double>();
  const json& steps = o.at("steps");
  for (const auto& name : names) {
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
