#include "dtr/fsdp/fully_shard.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/fsdp/fsdp_state.h"
#include "dtr/fsdp/registry.h"
#include "dtr/mesh/distributed.h"

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <algorithm>
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
  const auto& q = options.quantized_comm;
  DTR_CHECK(q.gradient_bits == 0 || q.gradient_bits == 8 || q.gradient_bits == 4,
            "fully_shard({}): quantized_comm.gradient_bits must be 0 (off), 8 or 4, got {}", what, q.gradient_bits);
  DTR_CHECK(q.block_size > 0 && q.block_size % 2 == 0,
            "fully_shard({}): quantized_comm.block_size must be even and positive, got {}", what, q.block_size);
  DTR_CHECK(q.host_size >= 0, "fully_shard({}): quantized_comm.host_size must be 0 (the job's hosts) or positive, got {}",
            what, q.host_size);
  if (options.offload_policy.offload_params && device_type == DeviceType::cpu) {
    static std::once_flag once;
    std::call_once(once, [] {
      DTR_LOG_INFO("fully_shard: offload_policy on a CPU model is a no-op (the parameters already live in host memory)");
    });
  }
}

FSDPState& state_of(const std::shared_ptr<FSDPState>& state) {
  DTR_CHECK(state != nullptr, "FSDPModule: the module is gone");
  return *state;
}

// fully_shard applies once per module, bottom-up: not twice, not inside a module
// already sharded.
void check_can_shard(nn::Module& module, const std::string& what) {
  DTR_CHECK(!find_state(module), "fully_shard({}): this module is already sharded (fully_shard called twice)", what);
  for (auto& other : all_states()) {
    for (auto& [path, m] : other->module().named_modules()) {
      DTR_CHECK(m != &module,
                "fully_shard({}): it sits inside '{}' ({}), which is already sharded; apply fully_shard bottom-up "
                "(each block first, then the root)",
                what, path, other->module().type_name());
    }
  }
}

// A parameter this call manages, with every slot holding it (tied weights).
struct FoundParam {
  std::string fqn;
  std::vector<ParamSlot> slots;
  Tensor tensor;
};

// True when an earlier fully_shard call manages `t`: its shard, or its original
// tensor still held by a slot outside that call's modules (a tied weight). A
// parameter a tensor-parallel plan sharded is neither.
bool sharded_by_another_call(const Tensor& t) {
  for (const auto& state : all_states()) {
    for (const auto& param : state->group().params()) {
      if (param->was_sharded_from(t) || param->sharded().is_same(t)) return true;
    }
  }
  return false;
}

// The parameters of `module`'s tree that no inner fully_shard call manages.
std::vector<FoundParam> collect_parameters(nn::Module& module, const std::string& what) {
  auto modules = module.named_modules();
  std::set<const nn::Module*> managed;  // inside inner sharded modules
  for (auto& [path, m] : modules) {
    if (m == &module || managed.contains(m)) continue;
    if (find_state(*m)) {
      for (auto& [sub_path, sub] : m->named_modules()) managed.insert(sub);
    }
  }
  std::vector<FoundParam> found;
  for (auto& [path, m] : modules) {
    if (managed.contains(m)) continue;
    for (auto& [name, param] : m->named_parameters(/*recurse=*/false)) {
      const std::string fqn = nn::qualified_name(path, name);
      const Tensor& t = param.data();
      DTR_CHECK(!sharded_by_another_call(t),
                "fully_shard({}): parameter '{}' is already sharded by another fully_shard call: a parameter shared "
                "between groups (e.g. tied weights split across groups) must live in one group; shard the module "
                "that holds both uses instead",
                what, fqn);
      auto same = std::find_if(found.begin(), found.end(), [&](const FoundParam& f) { return f.tensor.is_same(t); });
      if (same != found.end()) {
        same->slots.push_back({m, name});
      } else {
        found.push_back({fqn, {{m, name}}, t});
      }
    }
  }
  return found;
}

// Where the group computes and where its shards live. CPU offload keeps the shards
// in host memory and computes on the current CUDA device; a meta model is offloaded
// when this process has a GPU (it is then materialised on the CPU).
GroupPlacement decide_placement(const std::vector<FoundParam>& found, const OffloadPolicy& policy) {
  GroupPlacement placement;
  bool on_meta = false;
  for (auto& f : found) {
    if (f.tensor.device().is_cuda()) placement.device_type = DeviceType::cuda;
    on_meta = on_meta || f.tensor.device().is_meta();
  }
  if (policy.offload_params) {
#ifdef DTR_WITH_CUDA
    if (on_meta && placement.device_type == DeviceType::cpu && cuda::device_count() > 0) {
      placement.device_type = DeviceType::cuda;
    }
#endif
    placement.offload = placement.device_type == DeviceType::cuda;
  }
  placement.pin_memory = placement.offload && policy.pin_memory;
  return placement;
}

// One FSDPParam per parameter (each in its compute dtype: mixed precision's
// param_dtype for floating parameters), and their group, which reduces gradients
// in reduce_dtype, else in the compute dtype (as FSDP2).
std::unique_ptr<FSDPParamGroup> make_group(const std::vector<FoundParam>& found, const FullyShardOptions& options,
                                           const GroupPlacement& placement, const std::string& what) {
  const auto& mp = options.mp_policy;
  std::vector<std::unique_ptr<FSDPParam>> params;
  for (const FoundParam& f : found) {
    if (options.shard_placement_fn) {
      auto shard_placement = options.shard_placement_fn(f.tensor);
      DTR_CHECK(!shard_placement || shard_placement->is_shard(0),
                "fully_shard({}): shard_placement_fn gave {} for '{}'; only Shard(0) is implemented", what,
                shard_placement->to_string(), f.fqn);
    }
    const DType compute = mp.param_dtype && is_floating(f.tensor.dtype()) ? *mp.param_dtype : f.tensor.dtype();
    params.push_back(std::make_unique<FSDPParam>(f.fqn, f.slots, f.tensor, options.mesh, compute, placement));
  }
  const DType compute = params.empty() ? DType::f32 : params.front()->compute_dtype();
  HostGroups hosts = make_host_groups(options.quantized_comm, options.mesh, what);  // collective
  return std::make_unique<FSDPParamGroup>(std::move(params), options.mesh, placement, mp.reduce_dtype.value_or(compute),
                                          options.quantized_comm, std::move(hosts));
}

}  // namespace

void UnshardHandle::wait() {
  if (wait_) wait_();
  wait_ = nullptr;
}

FSDPModule fully_shard(nn::Module& module, FullyShardOptions options) {
  distributed::ensure_initialized("dtr::fsdp::fully_shard");
  const std::string what = module.type_name();
  check_can_shard(module, what);
  const std::vector<FoundParam> found = collect_parameters(module, what);
  const GroupPlacement placement = decide_placement(found, options.offload_policy);
  if (!options.mesh.defined()) options.mesh = default_mesh(placement.device_type);
  check_options(options, what, placement.device_type);
  auto group = make_group(found, options, placement, what);
  ReshardAfterForward reshard_after_forward(options.reshard_after_forward, options.mesh, what);  // collective
  auto state = std::make_shared<FSDPState>(module, std::move(options), std::move(group),
                                           std::move(reshard_after_forward));
  state->register_hooks();
  register_state(module, state);
  return FSDPModule(state);
}

bool is_fully_sharded(const nn::Module& module) { return find_state(module) != nullptr; }

std::vector<mesh::ProcessGroupPtr> process_groups(nn::Module& module) {
  std::vector<mesh::ProcessGroupPtr> groups;
  for (auto& [path, m] : module.named_modules()) {
    if (auto state = find_state(*m)) {
      for (auto& group : state->process_groups()) {
        if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
      }
    }
  }
  return groups;
}

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
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.set_requires_gradient_sync(on); });
}

void FSDPModule::set_reshard_after_backward(bool on, bool recurse) {
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.set_reshard_after_backward(on); });
}

void FSDPModule::set_requires_all_reduce(bool on, bool recurse) {
  for_each_state(state_of(state_), recurse, [&](FSDPState& s) { s.set_requires_all_reduce(on); });
}

void FSDPModule::set_reshard_after_forward(bool on) { state_of(state_).set_reshard_after_forward(on); }

void FSDPModule::set_modules_to_forward_prefetch(const std::vector<nn::Module*>& modules) {
  state_of(state_).set_forward_prefetch(states_of(modules, "set_modules_to_forward_prefetch"));
}

void FSDPModule::set_modules_to_backward_prefetch(const std::vector<nn::Module*>& modules) {
  state_of(state_).set_backward_prefetch(states_of(modules, "set_modules_to_backward_prefetch"));
}

void FSDPModule::set_is_last_backward(bool on) {
  for_each_state(state_of(state_), true, [&](FSDPState& s) { s.set_is_last_backward(on); });
}

void FSDPModule::set_gradient_divide_factor(double factor) {
  DTR_CHECK(factor > 0, "set_gradient_divide_factor: expected a positive factor, got {}", factor);
  state_of(state_).set_gradient_divide_factor(factor);
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
  return modules_of(state_of(state_).forward_prefetch());
}

std::optional<std::vector<nn::Module*>> FSDPModule::modules_to_backward_prefetch() const {
  return modules_of(state_of(state_).backward_prefetch());
}

}  // namespace dtr::fsdp
