// A save killed mid-way (SIGKILL, not an exception) must leave the previous
// checkpoint loadable. CTest runs, under mpirun:
//   checkpoint_kill_probe save DIR PHASE        saves model A to DIR, then starts
//                                               saving model B to DIR and kills
//                                               itself (the last rank) at PHASE
//   checkpoint_kill_probe async-save DIR PHASE  the same with B saved by
//                                               async_save while B trains on
//   checkpoint_kill_probe check DIR             loads DIR into a fresh model: it must be A
// PHASE: staged (async only), writing, written, committing (dtr/checkpoint/checkpoint.h).
// (tests/checkpoint/checkpoint_kill_test.sh runs both and checks the exit statuses).
#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/simple_model.h"
#include "dtr/tensor/random.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace {

std::shared_ptr<dtr::nn::SimpleModel> sharded_model(uint64_t seed) {
  dtr::manual_seed(seed);
  auto model = std::make_shared<dtr::nn::SimpleModel>(8, 12, 4);
  dtr::fsdp::fully_shard(*model);
  return model;
}

dtr::checkpoint::CheckpointState state_of(dtr::nn::Module& model) {
  dtr::checkpoint::CheckpointState state;
  state.add_model(model);
  return state;
}

std::optional<dtr::checkpoint::SavePhase> phase_named(const std::string& name) {
  using dtr::checkpoint::SavePhase;
  if (name == "staged") return SavePhase::staged;
  if (name == "writing") return SavePhase::writing;
  if (name == "written") return SavePhase::written;
  if (name == "committing") return SavePhase::committing;
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  namespace ckpt = dtr::checkpoint;
  const std::string mode = argc > 2 ? argv[1] : "";
  const auto kill_at = phase_named(argc > 3 ? argv[3] : "");
  if (mode != "check" && ((mode != "save" && mode != "async-save") || !kill_at)) {
    std::fprintf(stderr, "usage: checkpoint_kill_probe save|async-save DIR staged|writing|written|committing, "
                         "or checkpoint_kill_probe check DIR\n");
    return 2;
  }
  const std::string dir = argv[2];
  dtr::distributed::init();
  auto a = sharded_model(1);
  if (mode != "check") {
    ckpt::save(dir, state_of(*a));
    auto b = sharded_model(2);
    const bool killer = dtr::distributed::rank() == dtr::distributed::world_size() - 1;
    const ckpt::SaveOptions options{.at_phase = [&](ckpt::SavePhase phase) {
      if (killer && phase == *kill_at) std::raise(SIGKILL);
    }};
    if (mode == "save") {
      ckpt::save(dir, state_of(*b), options);
    } else {
      ckpt::async_save(dir, state_of(*b), options);
      b->reset_parameters();  // training goes on while the files are written
      ckpt::wait_async_save();
    }
    std::fprintf(stderr, "the second save was not interrupted: the probe is broken\n");
    return 3;
  }
  auto fresh = sharded_model(3);
  auto state = state_of(*fresh);
  ckpt::load(dir, state);
  auto expected = a->named_parameters();
  auto got = fresh->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].second->to_vector<float>() != expected[i].second->to_vector<float>()) {
      std::fprintf(stderr, "rank %d: %s differs from the first save's value\n", dtr::distributed::rank(),
                   got[i].first.c_str());
      return 1;
    }
  }
  if (dtr::distributed::rank() == 0) std::printf("PASS: the checkpoint is the one saved before the killed save\n");
  dtr::distributed::finalize();
  return 0;
}
