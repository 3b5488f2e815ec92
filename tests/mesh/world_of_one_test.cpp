// A program of one process needs no distributed::init(): the APIs that use the
// world (safetensors, state dicts, fully_shard, the mesh) form a world of one
// themselves. Under a launcher that started several processes the same call is
// an error that names the API. CTest runs each case in a process of its own,
// started without mpirun, which these cases rely on.
#include "dtr/checkpoint/full_state_dict.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

using namespace dtr;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path scratch_file(const std::string& name) {
  fs::path dir = fs::current_path() / "world_of_one_tests";
  fs::create_directories(dir);
  return dir / name;
}

// Each case starts in a fresh process; a leftover world would make it test nothing.
void require_fresh_process() {
  REQUIRE_FALSE(distributed::is_initialized());
  REQUIRE(std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr);
}

}  // namespace

TEST_CASE("safetensors save and load a plain model without distributed init") {
  require_fresh_process();
  manual_seed(1);
  nn::Linear saved(5, 3);
  const auto want = saved.state_dict();
  const fs::path file = scratch_file("linear.safetensors");
  checkpoint::save_safetensors(saved, file);

  manual_seed(2);
  nn::Linear loaded(5, 3);
  REQUIRE(loaded.state_dict().at("weight").to_vector<float>() != want.at("weight").to_vector<float>());
  checkpoint::load_safetensors(loaded, file);
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(loaded.state_dict().at(name).to_vector<float>() == t.to_vector<float>());
  }
  CHECK(distributed::is_initialized());
  CHECK(distributed::world_size() == 1);
  CHECK(distributed::rank() == 0);
}

TEST_CASE("fully_shard and the full state dict work without distributed init") {
  require_fresh_process();
  manual_seed(3);
  nn::Linear plain(4, 2);
  manual_seed(3);
  nn::Linear sharded(4, 2);
  fsdp::fully_shard(sharded);
  Tensor x = randn({6, 4});
  sum(plain(x)).backward();
  sum(sharded(x)).backward();
  // The world of one holds every row: the sharded gradient is the plain one.
  const auto plain_params = plain.named_parameters();
  const auto sharded_params = sharded.named_parameters();
  REQUIRE(plain_params.size() == sharded_params.size());
  for (size_t i = 0; i < plain_params.size(); ++i) {
    INFO(plain_params[i].first);
    const auto want = plain_params[i].second.data().grad().to_vector<float>();
    const auto got = sharded_params[i].second.data().grad().to_vector<float>();
    REQUIRE(got == want);
  }
  const auto full = checkpoint::get_model_state_dict(sharded, {.full_state_dict = true});
  REQUIRE(full.at("weight").to_vector<float>() == plain.state_dict().at("weight").to_vector<float>());
}

TEST_CASE("under a launcher of several processes a missing init is an error naming the API") {
  require_fresh_process();
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  nn::Linear model(2, 2);
  REQUIRE_THROWS_WITH(checkpoint::save_safetensors(model, scratch_file("never.safetensors")),
                      Contains("dtr::checkpoint::save_safetensors") && Contains("one of 3") &&
                          Contains("dtr::distributed::init()"));
  REQUIRE_THROWS_WITH(fsdp::fully_shard(model), Contains("dtr::fsdp::fully_shard"));
  REQUIRE_THROWS_WITH(distributed::world_size(), Contains("dtr::distributed::world_size"));
  CHECK_FALSE(distributed::is_initialized());
  CHECK_FALSE(fs::exists(scratch_file("never.safetensors")));
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST_CASE("after finalize the world cannot start again and the error names the API") {
  require_fresh_process();
  REQUIRE(distributed::world_size() == 1);
  distributed::finalize();
  nn::Linear model(2, 2);
  REQUIRE_THROWS_WITH(checkpoint::save_safetensors(model, scratch_file("late.safetensors")),
                      Contains("dtr::checkpoint::save_safetensors") && Contains("finalized"));
}
