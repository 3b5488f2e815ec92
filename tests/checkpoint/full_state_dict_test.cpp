// Full state dicts (dtr/checkpoint/full_state_dict.h) at world sizes 1-4: the
// gathered model and optimizer state equal the single-process model's bit for
// bit (rank0_only leaves the other ranks empty), and set_*_state_dict loads full
// dicts, from every rank or broadcast from rank 0 alone, into sharded models
// (FSDP, and HSDP at 4 ranks); a bad dict on rank 0 fails on every rank.
#include "dtr/checkpoint/full_state_dict.h"
#include "dtr/dtensor/dtensor.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>


using namespace dtr;
namespace ckpt = dtr::checkpoint;

using dtr::testing::make_model;
using dtr::testing::make_optimizer;
using dtr::testing::make_sharded;
using dtr::testing::prime;
using dtr::testing::tiny_config;

using dtr::testing::bytes_of;

namespace {

void require_same(const nn::StateDict& got, const nn::StateDict& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.contains(name));
    REQUIRE(got.at(name).sizes() == t.sizes());
    REQUIRE(got.at(name).dtype() == t.dtype());
    REQUIRE(bytes_of(got.at(name)) == bytes_of(t));
  }
}

void require_same(const ckpt::OptimizerStateDict& got, const ckpt::OptimizerStateDict& want) {
  REQUIRE(got.kind == want.kind);
  REQUIRE(got.lr == want.lr);
  REQUIRE(got.state.size() == want.state.size());
  for (const auto& [name, ps] : want.state) {
    INFO(name);
    REQUIRE(got.state.contains(name));
    REQUIRE(got.state.at(name).step == ps.step);
    REQUIRE(got.state.at(name).tensors.size() == ps.tensors.size());
    for (const auto& [key, t] : ps.tensors) {
      INFO(key);
      REQUIRE(bytes_of(got.state.at(name).tensors.at(key)) == bytes_of(t));
    }
  }
}

const ckpt::StateDictOptions kFull{.full_state_dict = true, .cpu_offload = true};
const ckpt::StateDictOptions kFullRank0{.full_state_dict = true, .cpu_offload = true, .rank0_only = true};
const ckpt::StateDictOptions kBroadcast{.full_state_dict = true, .broadcast_from_rank0 = true};

std::vector<mesh::DeviceMesh> meshes() {
  std::vector<mesh::DeviceMesh> out{mesh::DeviceMesh{}};
  if (distributed::world_size() == 4) {
    out.push_back(mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"}));
  }
  return out;
}

}  // namespace

TEST_CASE("full model state dict equals the single-process model bit for bit, rank0_only empties other ranks") {
  auto want = make_model(7)->state_dict();
  for (const auto& mesh : meshes()) {
    auto model = make_sharded(7, mesh);
    auto full = ckpt::get_model_state_dict(*model, kFull);
    require_same(full, want);
    for (const auto& [name, t] : full) REQUIRE(t.device().is_cpu());
    // The live shards are untouched and still sharded.
    for (auto& [name, p] : model->named_parameters()) REQUIRE(p.is_sharded());

    auto rank0 = ckpt::get_model_state_dict(*model, kFullRank0);
    if (distributed::rank() == 0) {
      require_same(rank0, want);
    } else {
      REQUIRE(rank0.empty());
    }

    // Without full_state_dict: the local shards, laid out as their parameters.
    auto sharded = ckpt::get_model_state_dict(*model);
    for (auto& [name, p] : model->named_parameters()) {
      INFO(name);
      REQUIRE(bytes_of(sharded.at(name)) == bytes_of(p));
      REQUIRE(bytes_of(DTensor(sharded.at(name), *p.sharding()).full_tensor()) == bytes_of(want.at(name)));
    }
    // ... which load into an identically sharded model without communication.
    auto copy = make_sharded(8, mesh);
    ckpt::set_model_state_dict(*copy, sharded);
    require_same(ckpt::get_model_state_dict(*copy, kFull), want);
  }
}

TEST_CASE("set_model_state_dict loads a full dict from every rank or broadcast from rank 0 alone") {
  auto want = make_model(11)->state_dict();
  for (const auto& mesh : meshes()) {
    auto model = make_sharded(12, mesh);
    ckpt::set_model_state_dict(*model, want, {.full_state_dict = true});
    require_same(ckpt::get_model_state_dict(*model, kFull), want);

    auto other = make_sharded(13, mesh);
    const nn::StateDict only_rank0 = distributed::rank() == 0 ? want : nn::StateDict{};
    ckpt::set_model_state_dict(*other, only_rank0, kBroadcast);
    require_same(ckpt::get_model_state_dict(*other, kFull), want);
  }
  // An unsharded model too (parameters broadcast whole).
  auto plain = make_model(14);
  ckpt::set_model_state_dict(*plain, distributed::rank() == 0 ? want : nn::StateDict{}, kBroadcast);
  require_same(plain->state_dict(), want);
}

TEST_CASE("set_model_state_dict with a bad dict on rank 0 fails on every rank naming the key, loading nothing") {
  auto model = make_sharded(21);
  auto before = ckpt::get_model_state_dict(*model, kFull);
  nn::StateDict bad = make_model(22)->state_dict();
  const std::string key = bad.begin()->first;
  bad[key] = zeros({3, 5});
  try {
    ckpt::set_model_state_dict(*model, distributed::rank() == 0 ? bad : nn::StateDict{}, kBroadcast);
    FAIL("expected an error");
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find(key) != std::string::npos);
    REQUIRE(std::string(e.what()).find("[3, 5]") != std::string::npos);
  }
  nn::StateDict missing = make_model(22)->state_dict();
  missing.erase(key);
  REQUIRE_THROWS_WITH(
      ckpt::set_model_state_dict(*model, distributed::rank() == 0 ? missing : nn::StateDict{}, kBroadcast),
      Catch::Contains("missing keys [" + key));
  require_same(ckpt::get_model_state_dict(*model, kFull), before);
}

TEST_CASE("full optimizer state dict by fqn equals the single-process optimizer and loads back by broadcast") {
  auto plain = make_model(31);
  auto plain_opt = make_optimizer(*plain);
  prime(*plain, *plain_opt);
  prime(*plain, *plain_opt);
  const auto want_model = plain->state_dict();
  const auto want = ckpt::get_optimizer_state_dict(*plain, *plain_opt, kFull);
  REQUIRE(want.state.size() == plain->named_parameters().size());
  REQUIRE(want.state.begin()->second.tensors.contains("exp_avg"));

  for (const auto& mesh : meshes()) {
    auto model = make_sharded(31, mesh);
    auto opt = make_optimizer(*model);
    prime(*model, *opt);
    prime(*model, *opt);
    require_same(ckpt::get_optimizer_state_dict(*model, *opt, kFull), want);
    auto rank0 = ckpt::get_optimizer_state_dict(*model, *opt, kFullRank0);
    if (distributed::rank() == 0) {
      require_same(rank0, want);
    } else {
      REQUIRE(rank0.state.empty());
    }

    // A fresh model and optimizer, state only on rank 0.
    auto fresh = make_sharded(32, mesh);
    auto fresh_opt = make_optimizer(*fresh);
    ckpt::set_model_state_dict(*fresh, distributed::rank() == 0 ? want_model : nn::StateDict{}, kBroadcast);
    ckpt::set_optimizer_state_dict(*fresh, *fresh_opt,
                                   distributed::rank() == 0 ? want : ckpt::OptimizerStateDict{}, kBroadcast);
    require_same(ckpt::get_model_state_dict(*fresh, kFull), want_model);
    require_same(ckpt::get_optimizer_state_dict(*fresh, *fresh_opt, kFull), want);

    // One more step on both gives the same values (the state really is live).
    prime(*fresh, *fresh_opt);
    prime(*model, *opt);
    require_same(ckpt::get_model_state_dict(*fresh, kFull), ckpt::get_model_state_dict(*model, kFull));

    // Every rank holding the full dict works too.
    auto fresh2 = make_sharded(33, mesh);
    auto fresh2_opt = make_optimizer(*fresh2);
    ckpt::set_model_state_dict(*fresh2, want_model, {.full_state_dict = true});
    ckpt::set_optimizer_state_dict(*fresh2, *fresh2_opt, want, {.full_state_dict = true});
    require_same(ckpt::get_optimizer_state_dict(*fresh2, *fresh2_opt, kFull), want);
  }
}

TEST_CASE("full model state dict gathers one parameter at a time: ranks other than 0 never hold the whole model") {
  if (distributed::world_size() < 2) return;  // one rank keeps everything by definition
  auto model = make_sharded(41);
  int64_t largest = 0, whole = 0;
  for (auto& [name, p] : model->named_parameters()) {
    const int64_t bytes = p.global_numel() * static_cast<int64_t>(element_size(p->dtype()));
    largest = std::max(largest, bytes);
    whole += bytes;
  }
  reset_peak_memory_stats(Device::cpu());
  const int64_t before = memory_stats(Device::cpu()).total.current_bytes;
  auto sd = ckpt::get_model_state_dict(*model, kFullRank0);
  const auto after = memory_stats(Device::cpu());
  const int64_t in_flight = after.total.peak_bytes - before;
  INFO("peak extra bytes " << in_flight << ", largest parameter " << largest << ", whole model " << whole);
  if (distributed::rank() != 0) {
    REQUIRE(sd.empty());
    REQUIRE(after.total.current_bytes == before);  // nothing kept
    // The gather of one parameter (its full tensor and the collective's
    // buffers), never the whole model.
    REQUIRE(in_flight <= 3 * largest);
    REQUIRE(3 * largest < whole);
  } else {
    REQUIRE(in_flight >= whole);  // rank 0 keeps every full tensor
  }
}
