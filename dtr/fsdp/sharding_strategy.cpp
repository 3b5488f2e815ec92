#include "dtr/fsdp/sharding_strategy.h"

#include "dtr/base/error.h"
#include "dtr/mesh/distributed.h"

#include <map>
#include <mutex>
#include <tuple>

namespace dtr::fsdp {

namespace {

mesh::DeviceMesh shared_mesh(DeviceType type, std::vector<int64_t> shape) {
  static std::mutex mutex;
  static std::map<std::pair<DeviceType, std::vector<int64_t>>, mesh::DeviceMesh> meshes;
  std::lock_guard lock(mutex);
  auto key = std::make_pair(type, shape);
  auto it = meshes.find(key);
  if (it != meshes.end()) return it->second;
  std::vector<std::string> names = shape.size() == 1 ? std::vector<std::string>{"shard"}
                                                     : std::vector<std::string>{"replicate", "shard"};
  auto mesh = mesh::init_device_mesh(type, shape, names);
  meshes.emplace(key, mesh);
  return mesh;
}

}  // namespace

FullyShardOptions strategy_options(ShardingStrategy strategy, FullyShardOptions base, std::optional<int> shard_size,
                                   DeviceType device_type) {
  const int n = distributed::world_size();
  switch (strategy) {
    case ShardingStrategy::full_shard:
      base.mesh = shared_mesh(device_type, {n});
      base.reshard_after_forward = true;
      break;
    case ShardingStrategy::shard_grad_op:
      base.mesh = shared_mesh(device_type, {n});
      base.reshard_after_forward = false;
      break;
    case ShardingStrategy::no_shard:
      base.mesh = shared_mesh(device_type, {n, 1});
      base.reshard_after_forward = false;
      break;
    case ShardingStrategy::hybrid_shard: {
      const int size = shard_size.value_or(distributed::local_world_size());
      DTR_CHECK(size >= 1 && n % size == 0, "hybrid_shard: shard size {} must divide the world size {}", size, n);
      base.mesh = shared_mesh(device_type, {n / size, size});
      base.reshard_after_forward = true;
      break;
    }
  }
  return base;
}

}  // namespace dtr::fsdp
