// reshard_after_forward to the host (ZeRO++'s hpZ): reshard_to_host_size is the
// number of ranks on this rank's host (counted here from distributed::host_of),
// the whole world on one host and 2 on the simulated 2 hosts x 2 ranks
// (cluster_fsdp_2hosts_np4). Blocks sharded with it train bit for bit like a full
// reshard, and their backward all-gathers leave the world group: one all-gather
// per block and step on it instead of two, where the hosts are more than one.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/reshard_after_forward.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <variant>
#include <vector>

using namespace dtr;

namespace {

struct HostReshardRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> parameters;
  int64_t all_gathers_per_step = 0;  // on the world group
};

// 3 AdamW steps of a 2-block llama, every rank on its own rows.
HostReshardRun train_with_reshard(std::optional<std::variant<bool, int>> reshard, const mesh::DeviceMesh& world) {
  manual_seed(9);
  nn::Transformer model({.vocab_size = 32, .dim = 16, .n_layers = 2, .n_heads = 2, .max_seq_len = 8});
  for (auto& layer : model.layers()) fsdp::fully_shard(*layer, {.mesh = world, .reshard_after_forward = reshard});
  fsdp::fully_shard(model, {.mesh = world});
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  HostReshardRun run;
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 2 * 9; ++i) ids.push_back((i * 5 + step * 3 + distributed::rank() * 7) % 32);
    const Tensor batch = from_vector(ids, {2, 9});
    const int64_t before = world.group(0)->stats().calls_of(mesh::CollectiveKind::all_gather);
    Tensor loss = cross_entropy(model(batch.narrow(1, 0, 8).contiguous()).reshape({-1, 32}),
                                batch.narrow(1, 1, 8).contiguous().reshape({-1}));
    loss.backward();
    run.all_gathers_per_step = world.group(0)->stats().calls_of(mesh::CollectiveKind::all_gather) - before;
    opt.step();
    opt.zero_grad();
    run.losses.push_back(loss.item());
  }
  for (const nn::Parameter& p : model.parameters()) run.parameters.push_back(p.data().to(DType::f64).to_vector<double>());
  return run;
}

}  // namespace

TEST_CASE("reshard_after_forward to the host keeps a host-local shard and trains like a full reshard",
          "[fsdp][reshard]") {
  const int n = distributed::world_size();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  int on_my_host = 0;
  for (int r = 0; r < n; ++r) on_my_host += distributed::host_of(r) == distributed::host_of(distributed::rank());
  const int k = fsdp::reshard_to_host_size(world);
  CHECK(k == on_my_host);
  if (distributed::num_hosts() == 1) CHECK(k == n);

  const HostReshardRun full = train_with_reshard(true, world);
  const HostReshardRun host = train_with_reshard(k, world);
  CHECK(host.losses == full.losses);
  CHECK(host.parameters == full.parameters);
  // Per step on the world group: each block forward and backward, the root once
  // (it keeps its parameters); with a host-local shard, below the whole world,
  // the blocks' backward all-gathers run within the host instead. One rank
  // computes on its shards: no all-gather at all.
  if (n == 1) {
    CHECK(full.all_gathers_per_step == 0);
  } else {
    CHECK(full.all_gathers_per_step == 2 * 2 + 1);
    CHECK(host.all_gathers_per_step == (k < n ? 2 + 1 : 2 * 2 + 1));
  }
}
