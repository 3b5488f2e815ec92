#include "fsdp/fully_shard.h"

#include "base/error.h"
#include "base/log.h"
#include "fsdp/fsdp_state.h"
#include "fsdp/registry.h"
#include "mesh/distributed.h"

#ifdef DTR_WITH_CUDA
#include "tensor/cuda/cuda_runtime.h"
#endif

#include <map>
#include <mutex>
#include <set>

namespace dtr::fsdp {

namespace {

// One default 1-D mesh per device type (making a mesh is collective; do it once).
mesh::DeviceMesh default_mesh(DeviceType type) {
  static std::mutex mutex;
  static std::map<DeviceType, mesh::DeviceMesh> meshes;
  std::lock_guard lock(mutex);
  auto it = meshes.find(type);
  if (it != meshes.end()) return it->second;
  auto mesh = mesh::init_device_mesh(type, {distributed::world_size()}, {"dp"});
  meshes[type] = mesh;
  return mesh;
}

void check_options(const FullyShardOptions& options, const std::string& what, DeviceType device_type) {
  DTR_CHECK(options.mesh.ndim() == 1 || options.mesh.ndim() == 2,
            "fully_shard({}): expected a 1-D mesh (FSDP) or a 2-D (replicate, shard) mesh (HSDP), got {}", what,
            options.mesh.to_string());
  const auto& mp = options.mp_policy;
  for (const auto& dtype : {mp.param_dtype, mp.reduce_dtype, mp.output_dtype}) {
    DTR_CHECK(!dtype || is_floating(*dtype), "fully_shard({}): mixed precision dtypes must be floating, got {}",
              what, dtype_name(*dtype));
  }
  if (options.offload_policy.offload_params && device_type == DeviceType::cpu) {
    static std::once_flag once;
    std::call_once(once, [] {
      DTR_LOG_INFO("fully_shard: offload_policy on a CPU model is a no-op (the parameters already live in host memory)");
    });
  }
}

std::string describe(nn::Module& module) { return module.type_name(); }

FSDPState& state_of(const std::shared_ptr<FSDPState>& state) {
  DTR_CHECK(state != nullptr, "FSDPModule: the module is gone");
  return *state;
}

}  // namespace

void UnshardHandle::wait() {
  if (wait_) wait_();
  wait_ = nullptr;
}

FSDPModule fully_shard(nn::Module& module, FullyShardOptions options) {
  const std::string what = describe(module);
  DTR_CHECK(!find_state(module), "fully_shard({}): this module is already sharded (fully_shard called twice)", what);
  for (auto& other : all_states()) {
    for (auto& [path, m] : other->module().named_modules()) {
      DTR_CHECK(m != &module,
                "fully_shard({}): it sits inside '{}' ({}), which is already sharded; apply fully_shard bottom-up "
                "(each block first, then the root)",
                what, path, other->module().type_name());
    }
  }
  auto modules = module.named_modules();
  // Inner modules already sharded keep their parameters; anything sharded above us is an error.
  std::set<const nn::Module*> managed;
  for (auto& [path, m] : modules) {
    if (m == &module || managed.contains(m)) continue;
    if (find_state(*m)) {
      for (auto& [sub_path, sub] : m->named_modules()) managed.insert(sub);
    }
  }
  // Tied weights within the group: one FSDPParam with several slots.
  std::vector<std::pair<std::string, std::vector<ParamSlot>>> found;
  std::vector<Tensor> tensors;
  for (auto& [path, m] : modules) {
    if (managed.contains(m)) continue;
    for (auto& [name, t] : m->named_parameters(/*recurse=*/false)) {
      const std::string fqn = path.empty() ? name : path + "." + name;
      DTR_CHECK(!t.dtensor_spec(),
                "fully_shard({}): parameter '{}' is already sharded by another fully_shard call: a parameter shared "
                "between groups (e.g. tied weights split across groups) must live in one group; shard the module "
                "that holds both uses instead",
                what, fqn);
      auto same = std::find_if(tensors.begin(), tensors.end(), [&](const Tensor& o) { return o.is_same(t); });
      if (same != tensors.end()) {
        found[same - tensors.begin()].second.push_back({m, name});
      } else {
        tensors.push_back(t);
        found.push_back({fqn, {{m, name}}});
      }
    }
  }
  DeviceType type = DeviceType::cpu;
  bool on_meta = false;
  for (auto& t : tensors) {
    if (t.device().is_cuda()) type = DeviceType::cuda;
    on_meta = on_meta || t.device().is_meta();
  }
  // CPU offload: shards in host memory, compute on the current CUDA device. A meta
  // model is offloaded when this process has a GPU (materialise it on the CPU).
  bool offload = false;
  if (options.offload_policy.offload_params) {
#ifdef DTR_WITH_CUDA
    if (on_meta && type == DeviceType::cpu && cuda::device_count() > 0) type = DeviceType::cuda;
#endif
    offload = type == DeviceType::cuda;
  }
  const bool pin = offload && options.offload_policy.pin_memory;
  if (!options.mesh.defined()) options.mesh = default_mesh(type);
  check_options(options, what, type);
  const auto& mp = options.mp_policy;
  std::vector<std::unique_ptr<FSDPParam>> params;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (options.shard_placement_fn) {
      auto placement = options.shard_placement_fn(tensors[i]);
      DTR_CHECK(!placement || placement->is_shard(0),
                "fully_shard({}): shard_placement_fn gave {} for '{}'; only Shard(0) is implemented", what,
                placement->to_string(), found[i].first);
    }
    const DType compute = mp.param_dtype && is_floating(tensors[i].dtype()) ? *mp.param_dtype : tensors[i].dtype();
    params.push_back(std::make_unique<FSDPParam>(found[i].first, found[i].second, tensors[i], options.mesh, compute,
                                                 offload, pin));
  }
  // Gradients are reduced in reduce_dtype, else in the compute dtype (as FSDP2).
  const DType compute = params.empty() ? DType::f32 : params.front()->compute_dtype();
  auto group = std::make_unique<FSDPParamGroup>(std::move(params), options.mesh, mp.reduce_dtype.value_or(compute),
                                                offload, pin);
  if (options.reshard_after_forward && std::holds_alternative<int>(*options.reshard_after_forward)) {
    const int k = std::get<int>(*options.reshard_after_forward);
    const int n = static_cast<int>(options.mesh.size(options.mesh.ndim() - 1));
    DTR_CHECK(k >= 1 && k <= n && n % k == 0,
              "fully_shard({}): reshard_after_forward={} must divide the mesh size {} (1 <= k <= {})", what, k, n, n);
    // Collective over the mesh: blocks of k consecutive ranks.
    auto& dp = options.mesh.group(options.mesh.ndim() - 1);
    if (k > 1 && k < n) {
      group->set_post_forward_group(dp->split(dp->rank() / k, dp->rank() % k, fmt::format("post-forward {}", k)));
    } else {
      options.reshard_after_forward = k == 1 ? false : true;  // k = 1 keeps all; k = n is a full reshard
    }
  }
  auto state = std::make_shared<FSDPState>(module, std::move(options), std::move(group));
  state->register_hooks();
  register_state(module, state);
  return FSDPModule(state);
}

bool is_fully_sharded(const nn::Module& module) { return find_state(module) != nullptr; }

void reshard_all(nn::Module& module) {
  FSDPParamGroup* pinned = nullptr;
  for (auto& [path, m] : module.named_modules()) {
    if (auto state = find_state(*m)) {
      state->reshard();
      if (state->group().copies_host_async()) pinned = &state->group();
    }
  }
  // Pinned CPU offload: the caller (a state dict, a checkpoint) reads or writes
  // the shards next, so queued copies of them finish first.
  if (pinned) pinned->wait_for_host_copies();
}

FSDPModule fsdp_module(nn::Module& module) {
  auto state = find_state(module);
  DTR_CHECK(state != nullptr, "fsdp_module: fully_shard was not applied to this {}", module.type_name());
  return FSDPModule(state);
}

UnshardHandle FSDPModule::unshard(bool async) {
  auto state = state_;
  state_of(state).group().issue_all_gather();
  if (!async) {
    state->unshard();
    return UnshardHandle();
  }
  return UnshardHandle([state] { state->unshard(); });
}

void FSDPModule::reshard() { state_of(state_).reshard(); }

namespace {

template <class Fn>
void for_each_state(FSDPState& root, bool recurse, Fn fn) {
  if (!recurse) {
    fn(root);
    return;
  }
  for (auto& [path, m] : root.module().named_modules()) {
    if (auto s = find_state(*m)) fn(*s);
  }
}

std::vector<FSDPState*> states_of(const std::vector<nn::Module*>& modules, const char* what) {
  std::vector<FSDPState*> states;
  for (nn::Module* m : modules) {
    auto s = find_state(*m);
    DTR_CHECK(s != nullptr, "{}: a {} in the list is not a fully_shard module", what, m->type_name());
    states.push_back(s.get());
  }
  return states;
}

}  // namespace

void FSDPModule::set_requires_gradient_sync(bool on, bool recurse) {
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.requires_gradient_sync = on; });
}

void FSDPModule::set_reshard_after_backward(bool on, bool recurse) {
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.reshard_after_backward = on; });
}

void FSDPModule::set_requires_all_reduce(bool on, bool recurse) {
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.requires_all_reduce = on; });
}

void FSDPModule::set_reshard_after_forward(bool on) { state_of(state_).set_reshard_after_forward(on); }

void FSDPModule::set_modules_to_forward_prefetch(const std::vector<nn::Module*>& modules) {
  state_of(state_).forward_prefetch = states_of(modules, "set_modules_to_forward_prefetch");
}

void FSDPModule::set_modules_to_backward_prefetch(const std::vector<nn::Module*>& modules) {
  state_of(state_).backward_prefetch = states_of(modules, "set_modules_to_backward_prefetch");
}

void FSDPModule::set_is_last_backward(bool on) {
  for_each_state(state_of(state_), true, [&](FSDPState& s) { s.is_last_backward = on; });
}

void FSDPModule::set_gradient_divide_factor(double factor) {
  DTR_CHECK(factor > 0, "set_gradient_divide_factor: expected a positive factor, got {}", factor);
  state_of(state_).gradient_divide_factor = factor;
}

nn::Module& FSDPModule::module() const { return state_of(state_).module(); }
const mesh::DeviceMesh& FSDPModule::mesh() const { return state_of(state_).options().mesh; }

std::vector<std::pair<std::string, DTensor>> FSDPModule::sharded_parameters() const {
  std::vector<std::pair<std::string, DTensor>> out;
  for (auto& p : state_of(state_).group().params()) out.emplace_back(p->fqn(), DTensor(p->sharded(), *p->spec()));
  return out;
}

int64_t FSDPModule::shard_numel_padded() const { return state_of(state_).group().flat_numel(); }

const FullyShardOptions& FSDPModule::options() const { return state_of(state_).options(); }

namespace {

std::optional<std::vector<nn::Module*>> modules_of(const std::optional<std::vector<FSDPState*>>& states) {
  if (!states) return std::nullopt;
  std::vector<nn::Module*> out;
  for (FSDPState* s : *states) out.push_back(&s->module());
  return out;
}

}  // namespace

std::optional<std::vector<nn::Module*>> FSDPModule::modules_to_forward_prefetch() const {
  return modules_of(state_of(state_).forward_prefetch);
}

std::optional<std::vector<nn::Module*>> FSDPModule::modules_to_backward_prefetch() const {
  return modules_of(state_of(state_).backward_prefetch);
}

}  // namespace dtr::fsdp
