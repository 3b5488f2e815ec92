// Asynchronous checkpoints (dtr/checkpoint/async_save.h) at world sizes 1-4:
// the files equal a synchronous save's byte for byte; the checkpoint holds the
// values at the call although training changes them before the write ends; the
// staging copies are tagged and reused; at most one save is in flight; a failure
// on any rank, in the background or at the commit (and in each step of save()),
// is the same error on every rank and leaves the previous checkpoint. Kills at each phase:
// tests/checkpoint/checkpoint_kill_test.sh.
#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/model_checkpoint.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/memory_stats.h"

#include "tests/support/mpi_test_util.h"
#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

using namespace dtr;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;
using dtr::testing::bytes_of;
using dtr::testing::fresh_shared_dir;
using dtr::testing::make_optimizer;
using dtr::testing::make_sharded;
using dtr::testing::prime;
using dtr::testing::world;

namespace {

// Every file of a checkpoint directory, by name, with its bytes.
std::map<std::string, std::string> files_in(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    std::ifstream in(f.path(), std::ios::binary);
    out[f.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// This rank's parameter and optimizer-state bytes, in order.
std::vector<std::vector<uint8_t>> training_bytes(nn::Module& model, nn::optim::Optimizer& opt) {
  std::vector<std::vector<uint8_t>> out;
  const auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    out.push_back(bytes_of(params[i]));
    for (const auto& [name, t] : opt.state(i).tensors) out.push_back(bytes_of(t));
  }
  return out;
}

// The parameter and optimizer-state bytes this rank's shards hold after loading `dir`.
std::vector<std::vector<uint8_t>> loaded_bytes(const fs::path& dir, uint64_t seed) {
  auto model = make_sharded(seed);
  auto opt = make_optimizer(*model);
  ckpt::load(dir, *model, *opt);
  return training_bytes(*model, *opt);
}

void throw_at(ckpt::SavePhase phase, ckpt::SavePhase when, bool on_this_rank) {
  if (phase == when && on_this_rank) throw std::runtime_error("simulated failure");
}

}  // namespace

TEST_CASE("async_save writes the files save writes, byte for byte", "[checkpoint][async]") {
  const fs::path root = fresh_shared_dir("ckpt_async_tests", "same_files");
  auto model = make_sharded(51);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  ckpt::save(root / "sync", *model, *opt, {{"step", 1}});
  ckpt::async_save(root / "async", *model, *opt, {{"step", 1}});
  CHECK(ckpt::async_save_in_flight() == root / "async");
  CHECK(ckpt::wait_async_save() == root / "async");
  CHECK_FALSE(ckpt::async_save_in_flight());
  CHECK_FALSE(ckpt::wait_async_save());  // nothing left in flight
  if (distributed::rank() == 0) {
    const auto sync = files_in(root / "sync"), async = files_in(root / "async");
    REQUIRE(sync.size() == static_cast<size_t>(distributed::world_size()) + 1);  // rank files and metadata.json
    for (const auto& [name, bytes] : sync) {
      INFO(name);
      REQUIRE(async.count(name) == 1);
      CHECK(async.at(name) == bytes);
    }
    CHECK(async.size() == sync.size());
  }
}

TEST_CASE("async_save keeps the values of its call while training goes on", "[checkpoint][async]") {
  const fs::path root = fresh_shared_dir("ckpt_async_tests", "values_at_call");
  auto model = make_sharded(52);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  const auto at_call = training_bytes(*model, *opt);
  ckpt::async_save(root / "step_1", *model, *opt);
  // Every shard this rank writes is copied once, into tagged staging memory (the
  // buffers of the process's earlier saves are reused or freed).
  int64_t shard_bytes = 0;
  for (const auto& b : at_call) shard_bytes += static_cast<int64_t>(b.size());
  const MemoryCounter staged = memory_stats(Device::cpu())[MemoryTag::checkpoint_staging];
  CHECK(staged.current_bytes == shard_bytes);
  prime(*model, *opt);  // the next steps change every parameter and state
  prime(*model, *opt);
  REQUIRE(training_bytes(*model, *opt) != at_call);
  std::optional<fs::path> committed;
  for (int i = 0; i < 2000 && !committed; ++i) {
    committed = ckpt::poll_async_save();  // the same answer on every rank
    if (!committed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(committed == root / "step_1");
  CHECK(loaded_bytes(root / "step_1", 53) == at_call);

  // The next save reuses the staging buffers: no new allocation.
  ckpt::async_save(root / "step_3", *model, *opt);
  const MemoryCounter reused = memory_stats(Device::cpu())[MemoryTag::checkpoint_staging];
  CHECK(reused.current_bytes == shard_bytes);
  CHECK(reused.num_allocations == staged.num_allocations);
  ckpt::wait_async_save();
  CHECK(loaded_bytes(root / "step_3", 54) == training_bytes(*model, *opt));
}

TEST_CASE("at most one async_save is in flight, and save() commits it first", "[checkpoint][async]") {
  const fs::path root = fresh_shared_dir("ckpt_async_tests", "one_in_flight");
  auto model = make_sharded(55);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  const auto first = training_bytes(*model, *opt);
  ckpt::async_save(root / "a", *model, *opt);
  prime(*model, *opt);
  const auto second = training_bytes(*model, *opt);
  ckpt::async_save(root / "b", *model, *opt);
  // Starting b committed a on every rank.
  CHECK(fs::exists(root / "a" / "metadata.json"));
  CHECK(ckpt::async_save_in_flight() == root / "b");
  prime(*model, *opt);
  ckpt::save(root / "c", *model, *opt);
  CHECK_FALSE(ckpt::async_save_in_flight());
  CHECK(loaded_bytes(root / "a", 56) == first);
  CHECK(loaded_bytes(root / "b", 57) == second);
  CHECK(loaded_bytes(root / "c", 58) == training_bytes(*model, *opt));
}

TEST_CASE("a failed async_save is the same error on every rank and keeps the previous checkpoint",
          "[checkpoint][async]") {
  const fs::path root = fresh_shared_dir("ckpt_async_tests", "failure");
  const fs::path dir = root / "latest";
  auto model = make_sharded(59);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  ckpt::save(dir, *model, *opt);
  const auto kept = training_bytes(*model, *opt);
  prime(*model, *opt);
  const int last = distributed::world_size() - 1;
  // One rank fails: in its background write, after its file, at the commit; and
  // when staging the copy.
  for (const ckpt::SavePhase when : {ckpt::SavePhase::staged, ckpt::SavePhase::writing, ckpt::SavePhase::written,
                                     ckpt::SavePhase::committing}) {
    INFO("failing at phase " << static_cast<int>(when));
    ckpt::async_save(dir, *model, *opt, nlohmann::json::object(),
                     {.at_phase = [&](ckpt::SavePhase phase) { throw_at(phase, when, distributed::rank() == last); }});
    try {
      ckpt::wait_async_save();
      FAIL("the failed save was committed");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(fmt::format("rank {}: simulated failure", last)) &&
                               Catch::Contains("asynchronous checkpoint save to " + dir.string()));
    }
    CHECK_FALSE(ckpt::async_save_in_flight());
    CHECK_FALSE(fs::exists(ckpt::staging_directory(dir)));
    CHECK(loaded_bytes(dir, 60) == kept);
    if (when == ckpt::SavePhase::staged) continue;  // save() has no staging copy
    // The same failure of a synchronous save.
    CHECK_THROWS_WITH(
        ckpt::save(dir, *model, *opt, nlohmann::json::object(),
                   {.at_phase = [&](ckpt::SavePhase phase) { throw_at(phase, when, distributed::rank() == last); }}),
        Catch::Contains(fmt::format("rank {}: simulated failure", last)));
    CHECK_FALSE(fs::exists(ckpt::staging_directory(dir)));
    CHECK(loaded_bytes(dir, 61) == kept);
  }
}
